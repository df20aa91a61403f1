"""The calibrated step of ``monta predict published``: leave one source out, the factors by one of
:data:`ESTIMATORS` (default :data:`DEFAULT_ESTIMATOR`), or by the one a nested leave-one-source-out over the
other sources chooses (``nested``).

A row is re-priced as ``a x compute + g x rest`` of its blind step (compute: its kernels with the pipeline's
bubble factor; rest: everything around them). The factors come from the forced-balance rows of OTHER sources on
GPUs of the row's generation (:data:`SAME_GENERATION`): the pool. Which estimator turns a pool into (a, g) is a
statistics question with few sources (six or seven per generation) whose software stacks differ, so the
candidates (:data:`ESTIMATORS`, fixed before any was scored) range from no factor to today's two-factor fit:

- ``none``: a = g = 1 (the blind step).
- ``pooled-median``: one factor on the whole step, the pool's median ratio measured / blind step time.
- ``source-median``: one factor, the median over the pool's sources of each source's median log ratio: one vote
  per source, so a source with many rows does not outweigh the others.
- ``source-median-shrunk``: that log factor m shrunk toward 0 (factor 1) by how well the sources determine it:
  a source's effect is a draw around the mean effect, the pooled estimate of the mean has standard error
  se = 1.2533 x 1.4826 MAD / sqrt(K) over its K sources (a median's, from a robust spread), and the weight
  w = max(0, 1 - se^2 / m^2) (positive-part James-Stein) applies the factor in full only where the mean effect
  stands well above the between-source spread; with one source the spread is unknown and w = 0.
- ``pooled-lad-2``: a compute and a rest factor by least absolute deviations over the pool's rows (:func:`_fit`;
  the calibration until this module).
- ``pooled-lad-2-shrunk``: those two log factors shrunk with the weight of ``source-median-shrunk``.

The nested choice (``nested``): for each held-out source S, every candidate prices the other sources'
forced-balance rows leave-one-source-out among themselves (S absent from every pool); the candidate with the
lowest median absolute error there calibrates S's rows (ties: the earlier, simpler one). S's own rows never enter
its choice. On data/published/steps.csv it scores worse than the default (docs/results/published-steps.md,
"Calibration": the inner scores of the candidates lie within a few points of each other, so which one wins is
noise), and the default stays the two-factor fit, chosen on the whole table's score by an earlier commit: its
calibrated figure carries that choice.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from monta.perfmodel.reports.published_steps_metric import _time_ratio, predict_value

MIN_FIT_ROWS = 4  # rows of other sources a two-factor fit needs
# One tensor-core generation: GPUs whose cluster files' dense BF16 peaks are within this factor of each other
# (A100/A800 312; H100/H800 989; B200/B300/GB200 2,250, GB300 2,500 TFLOP/s) share a calibration pool. A GPU
# type has few rows from other sources (B300: none), and what differs between sources (their software's
# kernels and overlap) is the generation's more than the node's (docs/results/published-steps.md, "Calibration").
SAME_GENERATION = 1.25

Point = tuple[float, float, float]  # (measured step time, blind compute, blind rest), one unit


def _fit(points: list[Point]) -> tuple[float, float]:
    """(a, g) >= 0 minimising the summed absolute relative error of T = a C + g R over the points
    (T_measured, C, R). Least absolute deviations (a linear programme), not least squares: the other sources'
    rows include software stages 2x apart (the GB200 guide's baseline and final figure, early GPT-OSS recipes),
    and a squared fit lets them pull every row. With fewer than MIN_FIT_ROWS points one factor scales the whole
    step (the median ratio)."""
    import numpy as np
    from scipy.optimize import linprog

    if len(points) < MIN_FIT_ROWS:
        k = statistics.median(tm / (c + r) for tm, c, r in points)
        return k, k
    x = np.array([[c / tm, r / tm] for tm, c, r in points])
    y = np.ones(len(points))
    k = len(y)  # variables: a, g, then u_i >= |x_i . (a, g) - 1|
    eye = np.eye(k)
    res = linprog(
        np.r_[0.0, 0.0, np.ones(k)],
        A_ub=np.vstack([np.c_[x, -eye], np.c_[-x, -eye]]),
        b_ub=np.r_[y, -y],
        bounds=[(0, None)] * (2 + k),
    )
    if not res.success:
        raise RuntimeError(f"calibration fit failed: {res.message}")
    return float(res.x[0]), float(res.x[1])


def _source_logs(pool: dict[str, list[Point]]) -> list[float]:
    """Each source's median log ratio measured / blind step time."""
    return [statistics.median(math.log(tm / (c + r)) for tm, c, r in pts) for pts in pool.values()]


def shrink_weight(pool: dict[str, list[Point]]) -> tuple[float, float]:
    """(m, w): the median over sources of their median log ratios and its positive-part James-Stein weight."""
    logs = _source_logs(pool)
    m = statistics.median(logs)
    if len(logs) < 2 or m == 0:
        return m, 0.0
    mad = statistics.median(abs(x - m) for x in logs)
    se = 1.2533 * 1.4826 * mad / math.sqrt(len(logs))
    return m, max(0.0, 1.0 - se**2 / m**2)


def _pooled_median(pool):
    k = statistics.median(tm / (c + r) for pts in pool.values() for tm, c, r in pts)
    return k, k


def _source_median(pool):
    k = math.exp(statistics.median(_source_logs(pool)))
    return k, k


def _source_median_shrunk(pool):
    m, w = shrink_weight(pool)
    return math.exp(w * m), math.exp(w * m)


def _lad2(pool):
    return _fit([p for pts in pool.values() for p in pts])


def _lad2_shrunk(pool):
    a, g = _lad2(pool)
    _, w = shrink_weight(pool)
    return (a**w if a > 0 else 0.0), (g**w if g > 0 else 0.0)


ESTIMATORS: dict[str, Callable[[dict[str, list[Point]]], tuple[float, float]]] = {
    "none": lambda pool: (1.0, 1.0),
    "source-median-shrunk": _source_median_shrunk,
    "source-median": _source_median,
    "pooled-median": _pooled_median,
    "pooled-lad-2-shrunk": _lad2_shrunk,
    "pooled-lad-2": _lad2,
}  # in the order a tie prefers: fewer fitted numbers first
DEFAULT_ESTIMATOR = "pooled-lad-2"


def _same_generation(a, b) -> bool:
    return abs(math.log(a.peak_tflops / b.peak_tflops)) <= math.log(SAME_GENERATION)


def _split(o: dict) -> tuple[float, float]:
    """(compute, rest) of a priced record's blind step, in microseconds."""
    t = o["_priced"][4]
    c = t["compute_us"] * t["bubble_factor"]
    return c, t["total_us"] - c


class _Pools:
    """The forced-balance records that calibrate, their points, and each estimator's factors per pool (cached:
    the nested choice asks for one pool many times)."""

    def __init__(self, recs: list[dict]):
        for r in recs:  # the key a row is left out by: its source's group (calibrate's same_source), or its source
            r.setdefault("_group", r["source"])
        self.fit = [r for r in recs if r.get("_priced") and r["routing"] == "forced"]
        self.points = {}
        for o in self.fit:
            tm = o["_priced"][4]["total_us"] * _time_ratio(o["metric"], o["measured"], o["predicted_blind"])
            self.points[id(o)] = (tm, *_split(o))
        self.cache: dict[tuple, tuple[float, float]] = {}

    def pool(self, r: dict, out: frozenset) -> dict[str, list[Point]]:
        """The points of sources not in ``out`` on GPUs of ``r``'s generation, by source."""
        c, by_source = r["_priced"][2], {}
        for o in self.fit:
            if o["_group"] not in out and _same_generation(o["_priced"][2], c):
                by_source.setdefault(o["_group"], []).append(self.points[id(o)])
        return by_source

    def factors(self, name: str, pool: dict[str, list[Point]]) -> tuple[float, float]:
        key = (name, tuple(sorted((s, tuple(p)) for s, p in pool.items())))
        if key not in self.cache:
            self.cache[key] = ESTIMATORS[name](pool)
        return self.cache[key]

    def inner_error(self, name: str, held_out: str) -> float | None:
        """Median absolute error of ``name`` on the forced-balance rows of every source but ``held_out``, each
        calibrated from the sources that are neither ``held_out`` nor its own."""
        errs = []
        for o in self.fit:
            if o["_group"] == held_out:
                continue
            pool = self.pool(o, frozenset((held_out, o["_group"])))
            if pool:
                errs.append(abs(_error(o, self.factors(name, pool))))
        return statistics.median(errs) if errs else None


def _predicted(r: dict, factors: tuple[float, float]) -> float:
    m, s, c, _, _ = r["_priced"]
    comp, rest = _split(r)
    return predict_value(r["metric"], (factors[0] * comp + factors[1] * rest) / 1e6, m, s, c)


def _error(r: dict, factors: tuple[float, float]) -> float:
    return (_predicted(r, factors) - r["measured"]) / r["measured"]


def choose(pools: _Pools, held_out: str) -> tuple[str, dict[str, float | None]]:
    """The estimator with the lowest inner leave-one-source-out error without ``held_out``, and every one's."""
    inner = {name: pools.inner_error(name, held_out) for name in ESTIMATORS}
    scored = [name for name in ESTIMATORS if inner[name] is not None]
    return (min(scored, key=lambda n: inner[n]) if scored else "none"), inner


def calibrate(
    recs: list[dict], estimator: str | None = None, reference: list[dict] = (), same_source: list[set] = ()
) -> None:
    """Leave one source out: each priced row gets ``predicted_calibrated`` and ``calibration`` (the estimator,
    its factors, the pool's rows and sources, and for ``nested`` the inner errors it was chosen by), or
    ``reason_calibrated`` where no other source has a forced-balance row of its generation. ``estimator``: one of
    ESTIMATORS for every row (None: DEFAULT_ESTIMATOR), or ``nested`` (per held-out source, :func:`choose`).
    ``reference``: priced records of another table (``--calibrate-with``) that join every pool as rows of their
    own sources and are not calibrated themselves; a source key both tables use is left out of its own rows'
    pools all the same. ``same_source``: sets of source keys left out together, as one source (one publisher's
    pages: ``--same-source``)."""
    estimator = estimator or DEFAULT_ESTIMATOR
    if estimator != "nested" and estimator not in ESTIMATORS:
        raise ValueError(f"calibration estimator {estimator!r} is not 'nested' or one of {', '.join(ESTIMATORS)}")
    group = {k: "+".join(sorted(g)) for g in same_source for k in g}
    for r in [*recs, *reference]:
        r["_group"] = group.get(r["source"], r["source"])
    pools, chosen = _Pools([*recs, *reference]), {}
    for r in recs:
        if not r.get("_priced"):
            continue
        pool = pools.pool(r, frozenset((r["_group"],)))
        if not pool:
            r["reason_calibrated"] = f"no other source's forced-balance row on a GPU of {r['cluster']}'s generation"
            continue
        if estimator == "nested" and r["_group"] not in chosen:
            chosen[r["_group"]] = choose(pools, r["_group"])
        name, inner = chosen[r["_group"]] if estimator == "nested" else (estimator, None)
        a, g = pools.factors(name, pool)
        r["calibration"] = {"estimator": name, "compute_factor": a, "rest_factor": g,
                            "rows": sum(map(len, pool.values())), "sources": len(pool),
                            "pool_sources": sorted(pool),
                            "chosen_by": "nested leave-one-source-out" if inner else "fixed",
                            "inner_errors": inner}  # fmt: skip
        r["predicted_calibrated"] = _predicted(r, (a, g))
        r["error_calibrated"] = (r["predicted_calibrated"] - r["measured"]) / r["measured"]
