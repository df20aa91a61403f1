"""Predicted TP AllToAll sweep (sizes x variants x chunk counts): one row of the benchmark's own
quantities per point. ``monta.perfmodel.reports.sweep`` prints the rows as a table and as records."""

from __future__ import annotations

from typing import Any

from monta.chunking import parse_chunks
from monta.hardware.links import Cluster
from monta.perfmodel.network.collectives import algbw_GBps, busbw_GBps
from monta.perfmodel.network.exchange import exchange_time, layout_shapes, takes_chunks


def make_layout(nodes: int, gpus_per_node: int, tp: int, ep: int | None = None):
    from monta.parallel import ParallelLayout

    probe = ParallelLayout(nodes, gpus_per_node, tp=tp)  # validates nodes/gpus/tp first
    return ParallelLayout(nodes, gpus_per_node, tp=tp, ep=ep or probe.dp)


def parse_exchanges(spec: str) -> list[str]:
    """A comma list of exchanges, ``all`` for every registered one (``monta.variants.exchanges``: the
    core's legacy, deepspeed and monta, the baselines' token-level exchanges, and plugins')."""
    from monta import variants as registry

    known = list(registry.exchanges())
    out = known if str(spec).strip() == "all" else [v.strip() for v in str(spec).split(",") if v.strip()]
    bad = [v for v in out if v not in known]
    if bad or not out:
        raise ValueError(f"--exchanges {spec}: choose from {', '.join(known)} (or all)")
    return out


def sweep(cluster: Cluster, layout, sizes: list[int], exchanges: list[str], chunks: list) -> list[dict[str, Any]]:
    """One row per (size, exchange, chunk count); chunk counts (``monta.chunking.parse_chunks_list``'s,
    or anything ``parse_chunks`` reads) apply to the chunked exchanges only (``takes_chunks``)."""
    ep, _ = layout_shapes(layout)
    asked = [parse_chunks(c) for c in chunks]
    rows = []
    for size in sizes:
        legacy_t = exchange_time("legacy", size, layout, cluster).total_us
        for v in exchanges:
            for request in asked if takes_chunks(v) else [parse_chunks(1)]:
                b = exchange_time(v, size, layout, cluster, request)
                rows.append(
                    {
                        "size_bytes": size,
                        "variant": v,
                        "chunks": b.chunks,
                        "chunks_requested": request.as_json(),
                        "time_us": b.total_us,
                        "algbw_GBps": algbw_GBps(size, b.total_us),
                        "busbw_GBps": busbw_GBps("alltoall", size, b.total_us, ep.size),
                        "inter_bytes": b.inter_bytes,
                        "intra_bytes": b.intra_bytes,
                        "a2a_us": b.a2a_us,
                        "ag_us": b.ag_us,
                        "copy_us": b.copy_us,
                        "pack_us": b.pack_us,
                        "speedup": legacy_t / b.total_us if b.total_us else float("nan"),
                    }
                )
    return rows
