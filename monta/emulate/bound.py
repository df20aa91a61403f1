"""The most MoNTA's exchange can gain over legacy's on the emulated testbed, computed from a record's own
bytes, link rates and chunk split: the pipeline bound of the split as cut (``monta.chunking.pipeline_span``)
with the NIC's token bucket, which passes its first ``burst_bytes`` unshaped once per exchange that starts
on an idle NIC (docs/testbed.md#the-nics-bucket-why-legacys-tp-x-bytes-take-more-than-tp-x-the-time).

Legacy sends TP x the bytes of MoNTA's AllToAll and takes TP A - b; MoNTA's pipeline takes A s - b, with A
the 1/TP AllToAll's link time, s the span of its chunk pipeline in units of A (r = the AllGather's link time
over A) and b the bucket's time at the NIC's rate, so the bound is (TP A - b) / (A s - b). A real NIC has no
bucket: there the bound is TP / s (``monta.chunking.pipeline_bound``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monta.chunking import capacity_slice, monta_split, pipeline_span
from monta.dtypes import DTYPE_BYTES
from monta.emulate.shaping import PAYLOAD_SHARE, burst_bytes


def bucket_bound(tp: int, a2a_s: float, ag_s: float, shares: list[float], bucket_s: float) -> float:
    """(TP A - b) / (A s - b): ``a2a_s`` = A, the 1/TP AllToAll's link time, ``ag_s`` the AllGather's,
    ``shares`` the chunks' sizes (any unit), ``bucket_s`` = b, the NIC's bucket at its rate."""
    if not (a2a_s > 0 and ag_s >= 0 and bucket_s >= 0):
        raise ValueError(f"link times A={a2a_s!r} s, G={ag_s!r} s, b={bucket_s!r} s: give A > 0, G >= 0, b >= 0")
    span = pipeline_span(shares, ag_s / a2a_s)
    if not a2a_s * span > bucket_s:
        raise ValueError(f"bucket {bucket_s} s not shorter than the exchange's span {a2a_s * span} s")
    return (tp * a2a_s - bucket_s) / (a2a_s * span - bucket_s)


def _gather_bytes(params: Mapping[str, Any], metrics: Mapping[str, Any]) -> float:
    """The AllGather's part of the intra-node bytes one rank sent per call: where an EP group has several ranks on
    a node (TP below the node, EP the DP degree: 2 x 4 at TP2 has 2 of its EP4 group per node), the AllToAll
    sends to those on the node's loopback too, during the AllToAll, in proportion to its inter-node bytes:
    (members on the node - 1) / (members off it)."""
    from monta.parallel import ParallelLayout

    nodes, gpn, tp = int(params.get("nodes") or 2), int(params["gpus_per_node"]), int(params["tp"])
    ep = int(params.get("ep") or nodes * gpn // tp)
    on_node = ParallelLayout(nodes, gpn, tp=tp, ep=ep).shape("ep").ranks_per_node
    a2a_intra = float(metrics["inter_bytes"]) * (on_node - 1) / (ep - on_node) if ep > on_node else 0.0
    return float(metrics["intra_bytes"]) - a2a_intra


def record_bound(params: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, float] | None:
    """The testbed bound of one emulated MoNTA record (``monta bench alltoall``): its link times from the bytes
    one rank sent per call (a node's ranks send alike) at the shaped rates (the NIC's payload share of its
    frames), its chunk split from its buffer's capacity slice, the bucket at its NIC's rate.
    None where the record does not say all of it (no shaped rates, no bytes, a token-level exchange)."""
    need = ("tp", "gpus_per_node", "inter_gbps", "intra_gbps", "size_bytes", "experts", "hidden", "chunks")
    if any(not params.get(k) for k in need) or not metrics.get("inter_bytes") or not metrics.get("intra_bytes"):
        return None
    gpn, inter, intra = int(params["gpus_per_node"]), float(params["inter_gbps"]), float(params["intra_gbps"])
    a2a_s = gpn * float(metrics["inter_bytes"]) / (inter * 1e9 / 8 * PAYLOAD_SHARE)
    ag_s = gpn * _gather_bytes(params, metrics) / (intra * 1e9 / 8)
    bucket_s = burst_bytes(inter) / (inter * 1e9 / 8)
    row = int(params["experts"]) * int(params["hidden"]) * DTYPE_BYTES.get(str(params.get("dtype", "float32")), 4)
    slots = capacity_slice(int(params["size_bytes"]) // row, int(params["tp"]))
    chunks = min(int(params["chunks"]), slots)
    shares = [float(x) for x in monta_split(slots, chunks)]
    return {
        "value": bucket_bound(int(params["tp"]), a2a_s, ag_s, shares, bucket_s),
        "a2a_ms": 1e3 * a2a_s,
        "r": ag_s / a2a_s,
        "bucket_ms": 1e3 * bucket_s,
        "chunks": chunks,
        "span": pipeline_span(shares, ag_s / a2a_s),
    }


def legacy_as_measured(bound: dict[str, float], legacy_ms: float) -> dict[str, float]:
    """A record's bounds (``record_bound``) with legacy's time as measured in the same run instead of TP A - b
    (legacy's own host work, 0.2-0.8% over its link time on the pipeline's sweeps, is legacy's, not the
    testbed's): ``chunks`` = L / (A s - b), what MoNTA's split can reach if each chunk's AllToAll ends at once
    on every rank; ``bytes`` = L / (A - b), what no exchange sending MoNTA's inter-node bytes can pass
    (its AllGathers all hidden). Between the two lies the drain: the last chunk's AllGather, which on the
    emulator partly runs while a node's last ranks still receive (docs/testbed.md, the chunk pipeline's drain)."""
    a, b = bound["a2a_ms"], bound["bucket_ms"]
    return {"chunks": legacy_ms / (a * bound["span"] - b), "bytes": legacy_ms / (a - b)}
