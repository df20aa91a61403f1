"""Fit a cluster's link rates to the pipeline's own AllToAll records (``monta calibrate --records``).

Every measured exchange record (``monta bench alltoall``: legacy, deepspeed, monta at its chunk counts) is
priced by the model (``exchange_time``, what ``monta predict accuracy`` prices) on a base cluster whose
link classes are scaled: the intra-node class (the plain link and every collective's intra curve) by one
factor, the inter-node class by another. The two factors minimise the squared relative error of the
times; the efficiency curves' shapes and the latencies stay the base's. A class no record's time depends
on (the model's time moves by under 1% when that class is twice as fast) keeps the base's figure.

The base: ``--cluster`` (a cluster name or file: a GPU cluster, whose records carry no link rate; or
``emulator:PROFILE.json``), or, for records the emulator made and no ``--cluster``, the emulator's
structure with its rates unknown (one shaped NIC per node, a loopback the node's ranks share, no host
terms). The records' own rate params are never read: what is fitted comes from their times alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from monta.chunking import is_auto
from monta.hardware.links import Cluster, Link
from monta.perfmodel.network.alltoall import make_layout
from monta.perfmodel.network.exchange import exchange_time
from monta.perfmodel.reports.accuracy import MEASURED_SOURCES, _has_model, _routing

CLASSES = ("intra", "inter")
SENSITIVE = 0.01  # a class "has data" where doubling its rate moves some record's time by more than this
_BRACKET = (1e-4, 1e4)  # the scale factors searched (x the base's rate; the unknown base starts at 1 GB/s)
# The bench's component rows (under TP): DeepSpeed's exchange in halves, each timed alone -> its Breakdown field.
COMPONENTS = {"a2a": "a2a_us", "ag": "ag_us"}


@dataclass(frozen=True)
class RecordPoint:
    variant: str
    size_bytes: int
    chunks: int | str
    nodes: int
    gpus_per_node: int
    tp: int
    ep: int | None
    routing: tuple
    time_us: float
    where: str


@dataclass
class RecordFit:
    """The scaled cluster, each class's factor (None: no record depends on it) and the points' errors."""

    cluster: Cluster
    scales: dict[str, float | None]
    base_rates: dict[str, float]
    points: list[RecordPoint]
    errors: list[float]
    left_out: dict[str, int]

    @property
    def mape(self) -> float:
        return sum(abs(e) for e in self.errors) / len(self.errors)

    @property
    def worst(self) -> float:
        return max(abs(e) for e in self.errors)


def record_points(records: list[dict]) -> tuple[list[RecordPoint], dict[str, int]]:
    """The measured exchange records the model prices, and what was left out (and why, counted)."""
    pts, left = [], {}

    def skip(why: str) -> None:
        left[why] = left.get(why, 0) + 1

    networks = set()
    for i, rec in enumerate(records):
        if rec.get("kind") != "alltoall" or rec.get("source") not in MEASURED_SOURCES:
            continue
        p, where = rec.get("params") or {}, f"record {i + 1} ({rec.get('run_id', '?')})"
        variant = str(p.get("variant"))
        if variant not in COMPONENTS and not _has_model(variant):
            skip(f"{variant}: no performance model")
            continue
        if (rec.get("metrics") or {}).get("cpu_bound"):
            skip("CPU-bound timings (the cores, not the links, set them)")
            continue
        missing = [k for k in ("size_bytes", "chunks", "nodes", "gpus_per_node", "tp") if k not in p]
        if missing:
            raise ValueError(f"{where}: params.{missing[0]} is missing (a `monta bench alltoall` record has it)")
        # Only compared for equality: one fit is one network (the rates themselves are never read).
        networks.add((p.get("inter_gbps"), p.get("intra_gbps"), p.get("dilation", 1.0)))
        pts.append(
            RecordPoint(
                variant, int(p["size_bytes"]), p["chunks"], int(p["nodes"]), int(p["gpus_per_node"]), int(p["tp"]),
                p.get("ep"), tuple(sorted(_routing(rec).items())), float(rec["metrics"]["time_us"]), where,
            )
        )  # fmt: skip
    if len(networks) > 1:
        raise ValueError(
            f"the records ran on {len(networks)} different networks (rates or clocks): calibrate one at a time"
        )
    if not pts:
        raise ValueError(
            "no measured exchange records (kind alltoall, source measured/emulated, variant legacy, deepspeed, "
            "monta...) in --records: write them with `monta bench alltoall --out FILE.jsonl`"
        )
    return pts, left


def predict(cluster: Cluster, pt: RecordPoint) -> float:
    """The model's time of a record: its exchange's, or for a component row the half of DeepSpeed's
    exchange it times alone (the bench's a2a and ag rows: deepspeed's inter-node AllToAll, its TP AllGather)."""
    layout = make_layout(pt.nodes, pt.gpus_per_node, pt.tp, pt.ep)
    cl = cluster.with_nodes(pt.nodes, pt.gpus_per_node)
    if pt.variant in COMPONENTS:
        b = exchange_time("deepspeed", pt.size_bytes, layout, cl, 1, **dict(pt.routing))
        return getattr(b, COMPONENTS[pt.variant])
    chunks = pt.chunks if is_auto(pt.chunks) else int(pt.chunks)
    return exchange_time(pt.variant, pt.size_bytes, layout, cl, chunks, **dict(pt.routing)).total_us


def scaled(base: Cluster, scales: dict[str, float | None]) -> Cluster:
    """``base`` with every link of a class (the plain one and each collective's) ``scales[cls]`` x as fast."""

    def fast(link: Link, cls: str) -> Link:
        s = scales.get(cls)
        return link if s is None or s == 1 else replace(link, bandwidth_GBps=link.bandwidth_GBps * s)

    return replace(
        base,
        intra=fast(base.intra, "intra"),
        inter=fast(base.inter, "inter"),
        collective_links=tuple((key, fast(link, key[1])) for key, link in base.collective_links),
    )


def _sse(base: Cluster, scales: dict, pts: list[RecordPoint]) -> float:
    cl = scaled(base, scales)
    return sum((predict(cl, p) / p.time_us - 1.0) ** 2 for p in pts)


def _golden(f, lo: float, hi: float, iters: int = 48) -> float:
    """Minimum of a unimodal ``f`` on [lo, hi], searched in log space."""
    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(math.exp(d))
    return math.exp((a + b) / 2)


def _depends(base: Cluster, cls: str, pts: list[RecordPoint]) -> bool:
    """Whether some record's modelled time moves with ``cls``'s rate (else the records say nothing of it)."""
    fast = scaled(base, {cls: 2.0})
    return any(abs(predict(fast, p) / predict(base, p) - 1) > SENSITIVE for p in pts)


def fit_records(base: Cluster, records: list[dict], rounds: int = 8) -> RecordFit:
    """Each class's rate that best reproduces the records' times (coordinate descent: a golden-section
    search per class over the whole bracket, the other classes held, until no factor moves)."""
    pts, left = record_points(records)
    free = [c for c in CLASSES if _depends(base, c, pts)]
    scales: dict[str, float | None] = {c: (1.0 if c in free else None) for c in CLASSES}
    for r in range(rounds):
        before = dict(scales)
        for cls in free:
            scales[cls] = _golden(lambda s, c=cls: _sse(base, {**scales, c: s}, pts), *_BRACKET)
        if r and all(abs(scales[c] / before[c] - 1) < 1e-4 for c in free):
            break
    cluster = scaled(base, scales)
    errors = [predict(cluster, p) / p.time_us - 1 for p in pts]
    rates = {"intra": base.intra.bandwidth_GBps, "inter": base.inter.bandwidth_GBps}
    return RecordFit(cluster, scales, rates, pts, errors, left)


def emulator_base(records: list[dict]) -> Cluster:
    """The emulated cluster as a GPU cluster of unknown rates (1 GB/s each, to be scaled): the records'
    ranks per node, one NIC per node (an emulated node has one shaped veth), a per-rank intra link (the
    emulator shapes a node's loopback at the real node's per-GPU ratio x its ranks, so a rank's share of
    it is one GPU's NVLink slowed down), flat efficiency and no latency (the shaping adds none)."""
    shapes = {(int(r["params"]["gpus_per_node"]), int(r["params"]["nodes"])) for r in records if r.get("params")}
    gpn, nodes = max(shapes) if shapes else (4, 2)
    flat = Link(1.0, 0.0, ((float(2**20), 1.0),))  # one point: a flat curve a cluster file can hold
    return Cluster(
        "unknown (1 GB/s placeholders)",
        flat,
        flat,
        gpus_per_node=gpn,
        nodes=nodes,
        nics_per_node=1,
        source="monta calibrate --records: rates fitted to the records' times",
    )
