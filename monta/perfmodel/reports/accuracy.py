"""Predicted vs measured TP AllToAll times: per-point error, MAPE, and whether the chunk count the
model picks is within 5% of the best measured one (the checks docs/results/performance-model.md reports)."""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from monta.chunking import is_auto
from monta.hardware.links import Cluster
from monta.hardware.profile import LinkProfile
from monta.perfmodel.network.alltoall import make_layout
from monta.perfmodel.network.chunks import choose_chunks
from monta.perfmodel.network.exchange import exchange_time
from monta.units import format_bytes, format_duration
from monta.variants import is_chunked

CHUNK_TOLERANCE = 0.05
MEASURED_SOURCES = ("measured", "emulated")


@dataclass(frozen=True)
class Point:
    size_bytes: int
    variant: str
    chunks: int
    nodes: int
    gpus_per_node: int
    tp: int
    ep: int
    measured_us: float
    predicted_us: float
    cpu_bound: bool | None = None  # the measurement's ranks waited for cores (monta.bench.hostload)
    clock_factor: float = 1.0  # the record's links ran this many times slower than the profile's calibration

    @property
    def error(self) -> float:
        return (self.predicted_us - self.measured_us) / self.measured_us


@dataclass(frozen=True)
class ChunkCheck:
    setup: tuple[int, int, int, int, int]  # size, nodes, gpus_per_node, tp, ep
    best_measured: int
    chosen: int
    loss: float  # measured time at the chosen count / best measured - 1
    cpu_bound: bool = False  # the timing of the pick or of the best was CPU-bound: the cores decided it

    @property
    def ok(self) -> bool:
        return self.loss <= CHUNK_TOLERANCE


def _param(rec: dict, key: str, where: str) -> Any:
    try:
        return rec["params"][key]
    except KeyError:
        raise ValueError(
            f"{where}: params.{key} is missing (need size_bytes, variant, chunks, nodes, gpus_per_node, tp)"
        ) from None


# Two links slowed by one factor agree to this share (the emulator rounds the loopback's rate to 4 digits).
_SAME_FACTOR = 1e-3


def clock_factor(rec: dict, profile: LinkProfile) -> float | None:
    """How many times slower than the profile's calibration a record's links ran, where both ran slower by
    one factor (a cluster's profile at another NIC rate: ``NAME@GBPS``, ``--dilation``); None where they
    differ otherwise (another intra:inter ratio, e.g. a bandwidth-ratio ablation point; one side unshaped)."""
    topo = profile.extra.get("topology") or {}
    factors = []
    for key in ("inter_gbps", "intra_gbps"):
        if key not in topo or key not in rec["params"]:
            continue
        want, got = topo[key], rec["params"][key]
        if (want is None) != (got is None):
            return None
        if want is not None:
            factors.append(float(want) / float(got))
    if not factors:
        return 1.0
    if max(factors) > min(factors) * (1 + _SAME_FACTOR):
        return None
    return 1.0 if abs(factors[0] - 1) <= _SAME_FACTOR else factors[0]


def _routing(rec: dict) -> dict[str, Any]:
    """The routing a record's exchange ran with (what the token-level exchanges' models read; the core
    models ignore it): top-k (``topk``, 1 when absent), the experts (None: one per EP member) and a
    token row's bytes (hidden x the dtype's size), from its params or else its config."""
    from monta.dtypes import DTYPE_BYTES

    cfg = {**(rec.get("config") or {}), **{k: v for k, v in rec["params"].items() if v is not None}}
    experts, hidden, dtype = cfg.get("experts"), cfg.get("hidden"), cfg.get("dtype")
    return {
        "top_k": int(cfg.get("topk") or 1),
        "experts": int(experts) if experts is not None else None,
        "row_bytes": float(int(hidden) * DTYPE_BYTES[dtype]) if hidden and dtype in DTYPE_BYTES else None,
    }


_UNMODELLED: set[str] = set()


def _has_model(variant: str) -> bool:
    from monta.perfmodel.network.exchange import modelled_as

    try:
        modelled_as(variant)
        return True
    except ValueError as e:
        if variant not in _UNMODELLED:
            _UNMODELLED.add(variant)
            print(f"monta: model accuracy leaves out {variant!r}: {e}", file=sys.stderr)
        return False


def _cluster_at(model: LinkProfile | Cluster, at: dict, factor: float, nodes: int, gpn: int) -> Cluster:
    """The cluster a record is priced on: a profile rescaled to the record's clock (``at`` keeps one per
    clock), or a cluster (a real one's records ran at its one rate) at the record's shape."""
    if isinstance(model, Cluster):
        return model.with_nodes(nodes, gpn)
    return at.setdefault(factor, model.rescaled(factor)).cluster(nodes, gpn)


def evaluate(records: list[dict], profile: LinkProfile | Cluster) -> tuple[list[Point], list[ChunkCheck]]:
    """Every measured AllToAll record priced on ``profile`` at the rates it ran at (the profile rescaled
    to a record's slower clock: ``clock_factor``), or on a cluster (``monta predict accuracy --cluster``:
    a real cluster's records, at its one rate), and the chunk choice per setup."""
    pts: list[Point] = []
    at: dict[float, LinkProfile] = {}  # the profile per clock
    for i, rec in enumerate(records):
        if rec.get("kind") != "alltoall" or rec.get("source") not in MEASURED_SOURCES:
            continue
        where = f"record {i + 1} ({rec.get('run_id', '?')})"
        size = int(_param(rec, "size_bytes", where))
        variant = str(_param(rec, "variant", where))
        if variant in ("a2a", "ag"):  # the benchmark's component rows (one half of the exchange alone)
            continue
        if not _has_model(variant):  # a plugin's exchange that declared no model (model_as): said once
            continue
        factor = 1.0 if isinstance(profile, Cluster) else clock_factor(rec, profile)
        if factor is None:  # e.g. a bandwidth-ratio ablation point: another intra:inter ratio
            continue
        chunks = _param(rec, "chunks", where)
        nodes, gpn, tp = (int(_param(rec, k, where)) for k in ("nodes", "gpus_per_node", "tp"))
        layout = make_layout(nodes, gpn, tp, rec["params"].get("ep"))
        cluster = _cluster_at(profile, at, factor, nodes, gpn)
        try:
            measured = float(rec["metrics"]["time_us"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{where}: metrics.time_us (median, microseconds) is missing") from None
        if measured <= 0:
            raise ValueError(f"{where}: metrics.time_us={measured} must be > 0")
        b = exchange_time(variant, size, layout, cluster, chunks if is_auto(chunks) else int(chunks), **_routing(rec))
        pts.append(
            Point(size, variant, b.chunks, nodes, gpn, tp, layout.ep, measured, b.total_us,
                  rec["metrics"].get("cpu_bound"), factor)
        )  # fmt: skip
    if not pts:
        raise ValueError(
            "no measured AllToAll records (kind 'alltoall', source measured/emulated) in the input; "
            "produce them with `monta bench alltoall --out FILE.jsonl`"
        )
    return pts, _chunk_checks(pts, profile, at)


def _chunk_checks(pts: list[Point], model: LinkProfile | Cluster, at: dict) -> list[ChunkCheck]:
    """Per setup (size, shape and clock) measured at two or more chunk counts: the model's pick among them."""
    checks = []
    groups: dict[tuple, dict[int, float]] = defaultdict(dict)
    bound: dict[tuple, set[int]] = defaultdict(set)
    for p in pts:
        if is_chunked(p.variant):  # the exchange whose chunk count the measurements vary
            key = (p.size_bytes, p.nodes, p.gpus_per_node, p.tp, p.ep, p.clock_factor)
            groups[key][p.chunks] = p.measured_us
            if p.cpu_bound:
                bound[key].add(p.chunks)
    for key, by_k in sorted(groups.items()):
        if len(by_k) < 2:
            continue
        size, nodes, gpn, tp, ep, factor = key
        cluster = _cluster_at(model, at, factor, nodes, gpn)
        chosen = choose_chunks(size, make_layout(nodes, gpn, tp, ep), cluster, candidates=by_k)
        best = min(by_k, key=by_k.get)
        checks.append(
            ChunkCheck(key[:5], best, chosen, by_k[chosen] / by_k[best] - 1, bool(bound[key] & {best, chosen}))
        )
    return checks


def _judged_note(checks: list[ChunkCheck]) -> str:
    """The same count over the sizes whose pick and best were both timed without waiting for cores."""
    bound = sum(c.cpu_bound for c in checks)
    if not bound:
        return ""
    judged = [c for c in checks if not c.cpu_bound]
    return (
        f"; {sum(c.ok for c in judged)}/{len(judged)} where neither the pick's nor the best count's timing was "
        f"CPU-bound ({bound} size(s) were: the cores, not the links, ordered their counts)"
    )


def mape(points: list[Point]) -> float:
    return sum(abs(p.error) for p in points) / len(points)


def report(points: list[Point], checks: list[ChunkCheck]) -> str:
    lines = [
        f"{'nodes':>5} {'gpn':>3} {'tp':>3} {'size':>10} {'variant':>10} {'chunks':>6} {'measured':>10} "
        f"{'predicted':>10} {'error':>8}"
    ]
    for p in points:
        lines.append(
            f"{p.nodes:>5} {p.gpus_per_node:>3} {p.tp:>3} {format_bytes(p.size_bytes):>10} {p.variant:>10} "
            f"{p.chunks:>6} {format_duration(p.measured_us / 1e6):>10} {format_duration(p.predicted_us / 1e6):>10} "
            f"{p.error:>+8.1%}"
        )
    by_v: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        by_v[p.variant].append(p)
    by_shape: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        by_shape[f"{p.nodes}x{p.gpus_per_node} TP{p.tp}"].append(p)
    if len(by_shape) > 1:
        for shape, ps in by_shape.items():
            lines.append(f"MAPE {shape}: {mape(ps):.1%} over {len(ps)} points")
    lines.append(
        "MAPE: "
        + ", ".join(f"{v} {mape(ps):.1%} ({len(ps)})" for v, ps in by_v.items())
        + f"; all {mape(points):.1%} over {len(points)} points (target <= 10%, goal 5%)"
    )
    slower = sorted({p.clock_factor for p in points} - {1.0})
    if slower:
        lines.append(
            f"{sum(p.clock_factor != 1.0 for p in points)} points ran slower than the calibration (x"
            + ", x".join(f"{f:g}" for f in slower)
            + "): priced on the profile rescaled to their links (LinkProfile.rescaled)"
        )
    if checks:
        lines.append(
            f"chunk choice (model's pick among the measured counts, within {CHUNK_TOLERANCE:.0%} of the best):"
        )
        for c in checks:
            size, nodes, gpn, tp, ep = c.setup
            lines.append(
                f"  {nodes}x{gpn} TP{tp} {format_bytes(size):>10}: best measured {c.best_measured}, model {c.chosen}, "
                f"{c.loss:+.1%} -> {'ok' if c.ok else 'MISS'}{' (CPU-bound timing)' if c.cpu_bound else ''}"
            )
        lines.append(
            f"chunk choice within {CHUNK_TOLERANCE:.0%}: {sum(c.ok for c in checks)}/{len(checks)}"
            + _judged_note(checks)
        )
    else:
        lines.append("chunk choice: no setup with monta measured at two or more chunk counts")
    return "\n".join(lines)


# -- the training step on the emulated clock ------------------------------------------------------


@dataclass(frozen=True)
class StepPoint:
    variant: str
    shape: str  # e.g. "2x4 TP4"
    measured_ms: float
    predicted_ms: float
    cpu_bound: bool | None = None
    run_id: str = ""

    @property
    def error(self) -> float:
        return (self.predicted_ms - self.measured_ms) / self.measured_ms


def evaluate_steps(records: list[dict], profile: LinkProfile) -> list[StepPoint]:
    """The model's step time for every measured step record whose compute ran on the emulated clock
    (``monta bench step --compute modeled``) at the profile's link rates. Compute is the model's by
    construction there (the clock's pieces); exchanges, TP collectives, gradient sync, overlap and
    scheduling are priced on the calibrated profile, so this checks those against real execution."""
    from monta import variants as registry
    from monta.model.config import ModelConfig
    from monta.perfmodel.training.clock import Clock
    from monta.perfmodel.training.step import predict_step
    from monta.perfmodel.training.strategy import Strategy

    out = []
    at: dict[float, LinkProfile] = {}  # the profile per clock, as for the AllToAll records
    for rec in records:
        p = rec.get("params") or {}
        if rec.get("kind") != "step" or rec.get("source") not in MEASURED_SOURCES or p.get("compute") != "modeled":
            continue
        # a step at a slower clock (the 2 x 8 step at half the 2 x 4's rates) is priced on the profile rescaled
        # to it; another intra:inter ratio is left out
        factor = clock_factor(rec, profile)
        if factor is None or not _has_model(registry.get(p["variant"]).exchange):
            continue
        spec = (rec.get("config") or {}).get("spec") or {}
        topo = spec.get("topology") or {}
        cfg = ModelConfig(**spec["overrides"])
        nodes, gpn, tp, ep, dp = (int(p[k]) for k in ("nodes", "gpus_per_node", "tp", "ep", "dp"))
        clock = Clock(
            topo["cluster"],
            cfg,
            tp=tp,
            ep=ep,
            gpus_per_node=gpn,
            inter_gbps=topo["inter_gbps"],
            intra_gbps=topo["intra_gbps"],
            zero=int(spec.get("zero_stage", 1)),
        )
        s = Strategy(
            tp=tp,
            ep=ep,
            dp=dp,
            micro_batch=cfg.micro_batch,
            zero=int(spec.get("zero_stage", 1)),
            variant=p["variant"],
            chunks=int(p["chunks"]),
        )
        b = predict_step(
            cfg,
            s,
            profile.cluster(nodes, gpn) if factor == 1.0 else _cluster_at(profile, at, factor, nodes, gpn),
            cfg.seq,
            dp * cfg.micro_batch,
            compute_scale=clock,
            elem_bytes=4,
        )
        out.append(
            StepPoint(
                p["variant"],
                f"{nodes}x{gpn} TP{tp}",
                float(rec["metrics"]["step_ms"]),
                b.total_us / 1e3,
                rec["metrics"].get("cpu_bound"),
                rec.get("run_id", ""),
            )
        )
    return out


RANK_TIE = 0.02  # two variants measured closer than this are a tie: either order agrees


def discordant_pairs(points: list[StepPoint], tie: float = RANK_TIE) -> tuple[int, list[tuple[str, str]]]:
    """Pairs of variants of one run that the model orders unlike the measurement (measured ``a`` faster
    than ``b`` by more than ``tie``, predicted not faster): (pairs judged, discordant pairs)."""
    by_run: dict[str, list[StepPoint]] = defaultdict(list)
    for p in points:
        by_run[p.run_id].append(p)
    judged, bad = 0, []
    for ps in by_run.values():
        for a in ps:
            for b in ps:
                if a.measured_ms < b.measured_ms * (1 - tie):
                    judged += 1
                    if not a.predicted_ms < b.predicted_ms:
                        bad.append((a.variant, b.variant))
    return judged, bad


def ranking_agrees(points: list[StepPoint]) -> bool:
    """Whether the model orders the variants of each run as the measurement does (ties: RANK_TIE)."""
    return not discordant_pairs(points)[1]


def report_steps(points: list[StepPoint]) -> str:
    lines = [f"{'shape':>8} {'variant':>16} {'measured(ms)':>13} {'predicted(ms)':>14} {'error':>8}"]
    for p in points:
        lines.append(
            f"{p.shape:>8} {p.variant:>16} {p.measured_ms:>13.1f} {p.predicted_ms:>14.1f} {p.error:>+8.1%}"
            f"{'  CPU-bound' if p.cpu_bound else ''}"
        )
    worst = max(points, key=lambda q: abs(q.error))
    judged, bad = discordant_pairs(points)
    lines.append(
        f"step MAPE {sum(abs(p.error) for p in points) / len(points):.1%} over {len(points)} variant(s), "
        f"worst {worst.variant} {worst.error:+.1%} (target <= 10% each); ranking "
        + ("agrees" if not bad else "DIFFERS")
        + f" ({judged - len(bad)} of {judged} pairs measured more "
        f"than {RANK_TIE:.0%} apart in the measured order)"
        + (": the model has " + ", ".join(f"{b} at or ahead of {a}" for a, b in bad) if bad else "")
    )
    return "\n".join(lines)
