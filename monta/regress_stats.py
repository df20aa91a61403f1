"""The regression gate's statistics (``monta regress``): a point's samples, the Hodges-Lehmann
slowdown with its within-run bootstrap CI, and the between-run spread that widens it.

Why the between-run spread: a within-run CI says how well one run pins a point's time, not how far
a second run of the same code lands from it. On this project's 2-core machine two runs of unchanged
code put points 0-12% apart at 1-2 MiB while each run's CI was 1-3% wide (the stored baseline against a
fresh run: docs/results/regression-gate.md#the-assumed-run-spread), so a gate that trusts the CI alone flags
unchanged code.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

# Params that say how a point was measured (or by whom), not which point it is.
RUN_SPECIFIC = frozenset({"run_id", "timestamp", "host", "seed", "iters", "warmup", "steps", "check", "out"})
# The run-to-run spread assumed where the baseline holds one run: the log-sd of a point's time between
# two runs of the same code, measured on the stored pair (analysis/baselines/default-alltoall.jsonl and a
# fresh `make reproduce`: docs/results/regression-gate.md#the-assumed-run-spread).
DEFAULT_RUN_SPREAD = 0.025
# Metrics where bigger is better: the slowdown is baseline / current for them.
HIGHER_IS_BETTER = frozenset({"algbw_GBps", "busbw_GBps", "tokens_per_s"})

# Samples assumed behind a median that came without samples_* (p10/p90 only).
_PSEUDO_N = 10
_Z90 = 1.2815515655446004  # standard normal 90th percentile: p90 - p10 = 2 * z * sigma


def point_key(rec: Mapping[str, Any]) -> tuple:
    """(kind, source, params without the run-specific ones): which point a record measures."""
    params = {k: v for k, v in rec["params"].items() if k not in RUN_SPECIFIC}
    if params.get("dilation") == 1:  # the links as asked: the same point as a record from before --dilation
        del params["dilation"]
    return (rec["kind"], rec["source"], json.dumps(params, sort_keys=True, default=str))


def _samples_key(metric: str) -> str:
    """time_us -> samples_us, step_ms -> samples_ms; other metrics: samples_<metric>."""
    unit = metric.rsplit("_", 1)[-1]
    return f"samples_{unit}" if unit in ("us", "ms", "s") else f"samples_{metric}"


def samples(recs: Sequence[Mapping[str, Any]], metric: str, seed: int = 0) -> tuple[np.ndarray, str]:
    """All per-iteration samples of ``metric`` in ``recs``; where a record has none, a normal
    approximation from its median and p10/p90 (or the bare median). Returns (values, how)."""
    out: list[np.ndarray] = []
    how = "samples"
    rng = np.random.default_rng(seed)
    for r in recs:
        m = r["metrics"]
        if metric not in m or m[metric] is None:
            continue
        s = m.get(_samples_key(metric))
        if isinstance(s, list) and s:
            out.append(np.asarray(s, dtype=float))
            continue
        med = float(m[metric])
        p10, p90 = m.get(f"{metric}_p10"), m.get(f"{metric}_p90")
        if p10 is not None and p90 is not None and p90 >= p10:
            sigma = (float(p90) - float(p10)) / (2 * _Z90)
            out.append(med + sigma * rng.standard_normal(_PSEUDO_N))
            how = "p10/p90" if how == "samples" else how
        else:
            out.append(np.array([med]))
            how = "median"
    return (np.concatenate(out) if out else np.array([])), how


def shift_ratio(base: np.ndarray, cur: np.ndarray) -> float:
    """The Hodges-Lehmann estimate of how many times ``cur`` is ``base``: the median of all pairwise
    ratios cur_i / base_j (exp of the median pairwise log difference). Like a ratio of medians it
    shrugs off outliers, but it uses every sample of both runs, so it moves less from run to run."""
    return float(np.exp(np.median(np.subtract.outer(np.log(cur), np.log(base)))))


def bootstrap_ratio(
    base: np.ndarray, cur: np.ndarray, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """:func:`shift_ratio` of cur over base and its percentile-bootstrap confidence interval."""
    # > 0 for the logs (a normal approximation from p10/p90 can dip below zero)
    base, cur = (np.clip(np.asarray(x, dtype=float), np.finfo(float).tiny, None) for x in (base, cur))
    point = shift_ratio(base, cur)
    if len(base) < 2 and len(cur) < 2:
        return point, point, point
    rng = np.random.default_rng(seed)
    lb, lc = np.log(base), np.log(cur)
    shifts = np.empty(n_boot)
    step = max(1, 4_000_000 // (len(lb) * len(lc)))  # replicates per batch: bounded memory
    for start in range(0, n_boot, step):
        k = min(step, n_boot - start)
        b = lb[rng.integers(0, len(lb), size=(k, len(lb)))]
        c = lc[rng.integers(0, len(lc), size=(k, len(lc)))]
        shifts[start : start + k] = np.median((c[:, :, None] - b[:, None, :]).reshape(k, -1), axis=1)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.exp(np.quantile(shifts, [alpha, 1 - alpha]))
    return point, float(lo), float(hi)


def run_medians(recs: Sequence[Mapping[str, Any]], metric: str) -> list[float]:
    """One median of ``metric`` per run (``run_id``) in ``recs``: a run's level at this point."""
    by_run: dict[Any, list[float]] = defaultdict(list)
    for r in recs:
        m = r["metrics"]
        if m.get(metric) is None:
            continue
        s = m.get(_samples_key(metric))
        by_run[r.get("run_id")].extend(s if isinstance(s, list) and s else [float(m[metric])])
    return [float(np.median(v)) for v in by_run.values()]


def run_spreads(
    baseline: Sequence[Mapping[str, Any]], metric: str, default: float = DEFAULT_RUN_SPREAD
) -> dict[tuple, tuple[float, int]]:
    """Per point of the baseline: (log-sd of its time between runs, runs behind the baseline).

    With 3+ runs at a point: its own sd of the runs' log medians, shrunk halfway (in variance) to the
    sd pooled over every point (a few runs' sd alone is a rough estimate: 3 runs can agree by chance);
    with 2: the pooled sd; with 1: ``default`` (no second run to measure it)."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in baseline:
        if metric in r["metrics"]:
            groups[point_key(r)].append(r)
    levels = {k: np.log(np.clip(run_medians(v, metric), 1e-300, None)) for k, v in groups.items()}
    own = {k: float(np.std(x, ddof=1)) for k, x in levels.items() if len(x) >= 2}
    pooled = math.sqrt(float(np.mean(np.square(list(own.values()))))) if own else default
    out = {}
    for k, x in levels.items():
        if len(x) >= 3:
            out[k] = (math.sqrt((own[k] ** 2 + pooled**2) / 2), len(x))
        else:
            out[k] = (pooled if len(x) == 2 else default, len(x))
    return out


def noise_halfwidth(spread: float, runs: int, confidence: float) -> float:
    """How far (log) a new run of unchanged code may land from the baseline's level at ``confidence``:
    z x spread x sqrt(1 + 1/runs) (the new run's own spread plus the baseline mean's)."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    return z * spread * math.sqrt(1 + 1 / max(runs, 1))
