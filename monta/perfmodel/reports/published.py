"""``monta predict published``: price measurements made elsewhere, row by row, blind and calibrated.

Input: a CSV with the columns of ``data/published/collectives.csv`` (``data/published/README.md``): ``id``,
``collective`` (an nccl-tests binary name or a MoE library's kernel), the hardware as the source states it
(``gpu``, ``nodes``, ``gpus_per_node``, ``nic_per_node``, ``nic_gbps``; optional ``cluster``: a cluster file name
or path that replaces them) and the measurement (``busbw_GBps``, ``algbw_GBps`` or ``time_us``; ``metric`` names
which one when several are filled; ``size_bytes``). Nothing here is keyed to a row id or a source: the command
is the interface, so a file the project has never seen is priced the same way.

- **blind**: the model on a cluster built from the row's hardware alone: the cluster file of its GPU
  (:data:`GPU_FILES`; NVLink, compute), its nodes and GPUs per node, its NICs and their rate (each NIC at
  :data:`NIC_LINE_RATE_FRACTION` of its line rate).
- **calibrated**: the same cluster with its link curves fitted (``monta calibrate``'s fit,
  :mod:`monta.perfmodel.network.nccl_fit`) on the OTHER rows of the same hardware and node count (same GPU
  file, GPUs per node, NICs and rate; single-node rows fit NVLink, multi-node rows the NICs) that their
  sources call healthy (:data:`CALIBRATE_FROM`); null where there is no such row.

Every null prediction, and every row whose blind error is above :data:`EXPLAIN_ABOVE`, carries a ``reason``
derived from the row itself (its health, notes, hardware columns, size), never from its id.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from monta.perfmodel.network import collectives as C
from monta.perfmodel.network.collectives import GroupShape
from monta.perfmodel.network.links import Cluster

EXPLAIN_ABOVE = 0.25  # a blind error above this must name its reason
PLATEAU_BYTES = 8 * 2**30  # a row without a size is a plateau figure "for large messages": priced at 8 GiB

# The nccl-tests binaries the model prices, and the model's name for each.
NCCL_TESTS = {
    "all_reduce_perf": "allreduce",
    "all_gather_perf": "allgather",
    "reduce_scatter_perf": "reducescatter",
    "alltoall_perf": "alltoall",
}

# A GPU as sources name it -> the cluster file that holds its NVLink and compute. First match wins, so the
# narrower names come first (H800 before H100, A800 before A100). A GPU missing here is priced only through a
# ``cluster`` column.
GPU_FILES: tuple[tuple[str, str], ...] = (
    (r"\bH800\b", "h800"),
    (r"\bH20\b", "h100"),  # NVLink4 at 900 GB/s bidirectional, as the H100 (its compute is not used here)
    (r"\bH100\b|\bH200\b|\bGH200\b", "h100"),
    (r"\bA800\b", "a800-4nic"),
    (r"\bA100\b", "a100"),
    (r"\bV100\b", "p3dn"),
)

HEALTHY = ("healthy", "")


@dataclass
class Row:
    """One published measurement, as read (strings stripped; numbers parsed, None when empty)."""

    raw: dict[str, str]

    def text(self, key: str) -> str:
        return (self.raw.get(key) or "").strip()

    def num(self, key: str) -> float | None:
        s = self.text(key).lstrip("~=").replace(",", "")
        if not s:
            return None
        try:
            return float(s)
        except ValueError:
            return None

    def int(self, key: str) -> int | None:
        v = self.num(key)
        return int(v) if v is not None and v == int(v) and v > 0 else None

    @property
    def id(self) -> str:
        return self.text("id")

    @property
    def source(self) -> str:
        return self.text("source") or self.text("source_url")

    @property
    def health(self) -> str:
        h = self.text("health").lower()
        if h:
            return h
        notes = self.text("notes").lower()
        for word in ("misconfigured", "degraded", "suspect", "approximate"):
            if word in notes:
                return word
        return "healthy" if "healthy" in notes else "unknown"

    def metric(self) -> tuple[str, float] | None:
        """(metric column, measured value): the ``metric`` column's choice, else busbw, algbw, time."""
        named = self.text("metric")
        order = ([named] if named else []) + ["busbw_GBps", "algbw_GBps", "time_us"]
        for col in order:
            col = "busbw_GBps" if col == "bottleneck_GBps" else col
            v = self.num(col)
            if v is not None and v > 0:
                return col, v
        return None


def read_rows(path: str | Path) -> list[Row]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"published data {p} not found (the project's table: data/published/collectives.csv)")
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("id", "collective") if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{p}: column {missing[0]!r} is missing (columns as in data/published/README.md)")
        rows = [Row(r) for r in reader]
    ids = [r.id for r in rows]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup is not None:
        raise ValueError(f"{p}: id {dup!r} appears twice; ids must be unique")
    return rows


def gpu_file(gpu: str) -> str | None:
    for pattern, name in GPU_FILES:
        if re.search(pattern, gpu, re.IGNORECASE):
            return name
    return None


# A stated NIC at this fraction of its line rate: what NVIDIA's engineers say nccl-tests reaches (an NDR 400 Gb/s
# NIC 46-48 GB/s of 50, an HDR 200 Gb/s one ~24 of 25: data/published/claims.csv C01, C03). Taken for every
# stated NIC, whatever its kind: a fabric that reaches less (EFA) shows as the model's error, not a fitted rate.
NIC_LINE_RATE_FRACTION = 0.94


def blind_cluster(row: Row) -> tuple[Cluster | None, str | None]:
    """The cluster a row's hardware columns describe, or (None, why not)."""
    from monta.perfmodel.network.profile import get_cluster

    nodes, gpn = row.int("nodes"), row.int("gpus_per_node")
    named = row.text("cluster")
    if named:
        base = get_cluster(named)
        return base.with_nodes(nodes or base.nodes, gpn or base.gpus_per_node), None
    name = gpu_file(row.text("gpu"))
    if name is None:
        return None, f"no cluster file for GPU {row.text('gpu') or '(not stated)'!r}: add a `cluster` column"
    if gpn is None:
        return None, "GPUs per node not stated"
    if nodes is None:
        return None, "node count not stated"
    base = get_cluster(name)
    c = base.with_nodes(nodes, gpn)
    if nodes > 1:
        nics, gbps = row.int("nic_per_node"), row.num("nic_gbps")
        if not nics or not gbps:
            return None, "NICs per node or their rate not stated: the inter-node link cannot be built"
        c = replace(c, nics_per_node=nics, inter=replace(c.inter, bandwidth_GBps=gbps / 8 * NIC_LINE_RATE_FRACTION))
    return c, None


def kernel_kind(collective: str) -> str | None:
    """``nccl`` for an nccl-tests binary, ``moe-normal`` for a MoE library's bandwidth-bound dispatch/combine
    kernel (DeepEP / UCCL-EP "normal"), ``moe-ll`` for their low-latency kernels, None otherwise."""
    c = collective.strip().lower()
    if c in NCCL_TESTS:
        return "nccl"
    if re.match(r"(deepep|uccl_ep)\w*_(dispatch|combine)", c):
        return "moe-ll" if re.search(r"_ll|low_latency", c) else "moe-normal"
    return None


def predict_row(row: Row, cluster: Cluster) -> tuple[float | None, str | None]:
    """The model's value of the row's metric on ``cluster``, or (None, why not)."""
    m = row.metric()
    if m is None:
        return None, "no measurement in busbw_GBps, algbw_GBps or time_us"
    col, _ = m
    kind = kernel_kind(row.text("collective"))
    if kind == "moe-ll":
        return None, "low-latency MoE kernel: latency-bound, the model prices bandwidth-bound exchanges"
    if kind == "moe-normal":
        if col == "time_us":
            return None, "MoE kernel time without its token count and hidden size: priced only as bandwidth"
        # DeepEP's "bottleneck bandwidth" = bytes over the bottleneck link / kernel time: NVLink inside a
        # node, the GPU's NIC share across nodes. The model's figure is that link's effective rate.
        nvlink, nic_share = cluster.per_gpu_GBps
        return (nvlink if cluster.nodes == 1 else nic_share), None
    if kind is None:
        return None, f"collective {row.text('collective')!r}: not an nccl-tests binary or a MoE dispatch kernel"
    op = NCCL_TESTS[row.text("collective").strip().lower()]
    S = row.num("size_bytes") or PLATEAU_BYTES
    n = cluster.world_size
    if n < 2:
        return None, "a collective of one rank"
    g = GroupShape(n, cluster.gpus_per_node, cluster.gpus_per_node)
    t = {
        "allreduce": lambda: C.allreduce(S, g, cluster),
        "allgather": lambda: C.allgather(S / n, g, cluster),  # nccl-tests' size is the gathered output
        "reducescatter": lambda: C.reducescatter(S, g, cluster),
        "alltoall": lambda: C.alltoall(S, g, cluster),
    }[op]().time_us
    if col == "time_us":
        return t, None
    if col == "algbw_GBps":
        return C.algbw_GBps(S, t), None
    return C.busbw_GBps(op, S, t, n), None


def explain(row: Row, cluster: Cluster | None, measured: float, predicted: float) -> str:
    """Why a row's blind prediction is off by more than EXPLAIN_ABOVE, from what the row says."""
    notes = row.text("notes")
    low = (notes + " " + row.text("nvlink")).lower()
    err = (predicted - measured) / measured
    health = row.health
    if health not in HEALTHY:
        return f"the source marks it {health}" + (f": {notes[:120]}" if notes else "")
    size = row.num("size_bytes")
    if size is not None and size < 64 * 2**20 and err > 0:
        return (
            "below 64 MiB NCCL's latencies set much of the time: the model's are NCCL's own tuner constants (made for "
            "InfiniBand), and a fabric or setup that posts more slowly shows here (calibrate on this cluster's logs)"
        )
    if "nvls" in low or "sharp" in low:
        return "NVLS / SHARP reduces in the switch: its busbw is not a wire rate (where the model has no NVLS: a ring)"
    kind = kernel_kind(row.text("collective"))
    if kind == "moe-normal" and cluster is not None and cluster.nodes > 2 and err < 0:
        return "node-deduplicated RDMA (DeepEP): bytes counted per GPU exceed its NIC share"
    if kind == "moe-normal":
        return "a MoE kernel's bottleneck bandwidth: the kernel's own efficiency is not in the model"
    if size is not None and size < 2**20:
        return "below 1 MiB: latency-bound; the model has NCCL's tuner latencies, not this cluster's own"
    if size is None:
        return "a plateau figure without its size: priced at 8 GiB"
    if cluster is not None and cluster.nodes > 1 and row.text("collective").lower() == "all_reduce_perf":
        wire = cluster.nics_per_node * (row.num("nic_gbps") or 0) / 8
        if err < 0 and wire and measured > wire:
            return f"busbw {measured:g} GB/s above the stated NICs' line rate ({wire:g} GB/s): not a ring over them"
    if err > 0:
        return "the model over-predicts: this setup reaches less than its NICs at 94% of line rate and its GPU's NVLink"
    return "the model under-predicts: this setup beats its NICs at 94% of line rate and its GPU's NVLink"


def price(rows: list[Row]) -> list[dict[str, Any]]:
    """One record per row: measured, blind and calibrated predictions (leave one row out, leave its source out),
    errors, reasons, and the row's ``seen`` mark when the file has one (it changes no prediction)."""
    from monta.perfmodel.reports.published_calibration import Calibrations

    built = [(r, *blind_cluster(r)) for r in rows]
    cal = Calibrations(built)
    out = []
    for r, c, why in built:
        m = r.metric()
        rec: dict[str, Any] = {
            "id": r.id,
            "source": r.source,
            "collective": r.text("collective"),
            "health": r.health,
            "seen": r.text("seen"),
            "metric": m[0] if m else None,
            "measured": m[1] if m else None,
            "size_bytes": r.num("size_bytes"),
            "nodes": c.nodes if c is not None else r.int("nodes"),
            "cluster": c.name if c is not None else None,
            "predicted_blind": None,
            "predicted_calibrated": None,
            "predicted_calibrated_loso": None,
            "error_blind": None,
            "error_calibrated": None,
            "error_calibrated_loso": None,
            "reason": why,
        }
        if c is not None:
            blind, why = predict_row(r, c)
            rec["predicted_blind"], rec["reason"] = blind, why
            if blind is not None:
                rec.update(cal.predict(r, c))
        if rec["measured"] and rec["predicted_blind"] is not None:
            rec["error_blind"] = (rec["predicted_blind"] - rec["measured"]) / rec["measured"]
            if abs(rec["error_blind"]) > EXPLAIN_ABOVE:
                rec["reason"] = explain(r, c, rec["measured"], rec["predicted_blind"])
        for k in ("", "_loso"):
            if rec["measured"] and rec[f"predicted_calibrated{k}"] is not None:
                rec[f"error_calibrated{k}"] = (rec[f"predicted_calibrated{k}"] - rec["measured"]) / rec["measured"]
        out.append(rec)
    return out


def summary(recs: list[dict]) -> dict[str, Any]:
    """The scores (``published_scores``): blind and calibrated, seen and unseen rows, small multi-node rows."""
    from monta.perfmodel.reports.published_scores import summary as _summary

    return _summary(recs)


def healthy_nccl(rec: dict) -> bool:
    from monta.perfmodel.reports.published_scores import healthy_nccl as _healthy

    return _healthy(rec)
