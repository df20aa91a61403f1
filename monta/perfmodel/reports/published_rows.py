"""Published measurements as rows, and one row priced blind: the data model and the per-row price that
``monta predict published`` (:mod:`monta.perfmodel.reports.published`) and its calibration
(:mod:`monta.perfmodel.reports.published_calibration`) share. Below both, so neither imports the other's caller.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path

from monta.hardware.gpus import arch_of, cluster_of_gpu
from monta.hardware.links import Cluster
from monta.parallel import axis_shapes
from monta.perfmodel.network import collectives

EXPLAIN_ABOVE = 0.25  # a blind error above this must name its reason
PLATEAU_BYTES = 8 * 2**30  # a row without a size is a plateau figure "for large messages": priced at 8 GiB

# The nccl-tests binaries the model prices, and the model's name for each.
NCCL_TESTS = {
    "all_reduce_perf": "allreduce",
    "all_gather_perf": "allgather",
    "reduce_scatter_perf": "reducescatter",
    "alltoall_perf": "alltoall",
}

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
    return read_table(p, ("id", "collective"))


def read_table(p: Path, required: tuple[str, ...]) -> list[Row]:
    """The rows of a published CSV (collectives or training steps): each required column present, ids unique."""
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{p}: column {missing[0]!r} is missing (columns as in data/published/README.md)")
        rows = [Row(r) for r in reader]
    ids = [r.id for r in rows]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup is not None:
        raise ValueError(f"{p}: id {dup!r} appears twice; ids must be unique")
    return rows


def gpu_file(gpu: str) -> str | None:
    """The cluster file that holds the row's GPU's NVLink (``monta.hardware.gpus``), where NCCL's constants for
    its generation are known (Blackwell's are not: such a row is priced through a ``cluster`` column)."""
    name = cluster_of_gpu(gpu, links_only=True)
    return name if name and arch_of(gpu) else None


# A stated NIC at this fraction of its line rate: what NVIDIA's engineers say nccl-tests reaches (an NDR 400 Gb/s
# NIC 46-48 GB/s of 50, an HDR 200 Gb/s one ~24 of 25: data/published/claims.csv C01, C03). Taken for every
# stated NIC, whatever its kind: a fabric that reaches less (EFA) shows as the model's error, not a fitted rate.
NIC_LINE_RATE_FRACTION = 0.94


# The network plugin a row's hardware description names (its gpu, nvlink and notes cells, as a source states the
# hardware: "EFA", an EC2 instance with EFA). NCCL's tuner adds that plugin's stated latency and protocol limits
# (nccl_tuning.NET_PLUGINS); anything else is NCCL's own InfiniBand/RoCE transport, which states none.
# (An instance only with its size suffix, "p4de.24xlarge": a bare "P5" is as likely a row id in a note.)
NET_PLUGIN_PATTERNS: tuple[tuple[str, str], ...] = ((r"\bEFA\b|\b(p3dn|p4de?|p5(e|en)?)\.\d*xlarge", "efa"),)


def net_plugin(row: Row) -> str:
    text = " ".join(row.text(k) for k in ("gpu", "nvlink", "notes"))
    return next((name for pattern, name in NET_PLUGIN_PATTERNS if re.search(pattern, text, re.IGNORECASE)), "")


def blind_cluster(row: Row) -> tuple[Cluster | None, str | None]:
    """The cluster a row's hardware columns describe, or (None, why not)."""
    from monta.hardware.profile import get_cluster

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
        c = replace(c, net_plugin=net_plugin(row))
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
    g = axis_shapes(cluster.gpus_per_node, lanes=n)["dp"]  # the whole world: one DP group of TP 1
    t = {
        "allreduce": lambda: collectives.allreduce(S, g, cluster),
        "allgather": lambda: collectives.allgather(S / n, g, cluster),  # nccl-tests' size is the gathered output
        "reducescatter": lambda: collectives.reducescatter(S, g, cluster),
        "alltoall": lambda: collectives.alltoall(S, g, cluster),
    }[op]().time_us
    if col == "time_us":
        return t, None
    if col == "algbw_GBps":
        return collectives.algbw_GBps(S, t), None
    return collectives.busbw_GBps(op, S, t, n), None
