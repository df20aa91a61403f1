"""Small statistics and bandwidth helpers shared by the benchmarks (nccl-tests conventions)."""

from __future__ import annotations

import statistics

from monta.percentiles import percentile


def summarize(samples_us: list[float]) -> dict[str, float]:
    return {
        "time_us": statistics.median(samples_us),
        "time_us_p10": percentile(samples_us, 10),
        "time_us_p90": percentile(samples_us, 90),
        "time_us_mean": statistics.fmean(samples_us),
    }


def alltoall_bw(size_bytes: int, time_us: float, n: int) -> tuple[float, float]:
    """nccl-tests AllToAll: algbw = S / t (GB/s, 1e9), busbw = algbw * (n - 1) / n."""
    algbw = size_bytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    return algbw, algbw * (n - 1) / n if n > 0 else 0.0


# -- paired ratios (variants interleaved per iteration) ---------------------------------------
def bootstrap(
    stat, samples: list[list[float]], n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """``stat(*arrays)`` on paired samples (same length, iteration i of each belongs together) and its
    bias-corrected and accelerated (BCa) bootstrap CI, resampling whole iterations
    (``scipy.stats.bootstrap(paired=True)``; ``stat`` works along the last axis). Returns (point, lo, hi);
    with fewer than 3 iterations the interval is unknown (nan, nan). Where BCa cannot be computed (a
    statistic with no spread over the jackknife) the percentile interval of the same resamples."""
    import warnings

    import numpy as np
    from scipy import stats

    arrays = [np.asarray(s, dtype=float) for s in samples]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError("paired samples must have the same length")
    point = float(stat(*arrays))
    if n < 3:
        return point, float("nan"), float("nan")

    def along(*a, axis=-1):
        return stat(*(np.moveaxis(x, axis, -1) for x in a))

    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a degenerate BCa warns and returns nan: fall back below
            res = stats.bootstrap(
                arrays, along, paired=True, vectorized=True, n_resamples=n_boot, confidence_level=confidence,
                method=method, rng=np.random.default_rng(seed),
            )  # fmt: skip
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if np.isfinite(lo) and np.isfinite(hi):
            break
    return point, lo, hi


def median_ratio(num, den):
    """Median over iterations of num[i] / den[i] (rows = bootstrap resamples when 2-D)."""
    import numpy as np

    return np.median(num / den, axis=-1)


def overlap_efficiency(ds, monta, a2a, ag):
    """Share of the ideal overlap gain achieved: (gain - 1) / (ideal - 1), gain = deepspeed / monta,
    ideal = deepspeed / max(t_a2a, t_ag): the gain of a perfect overlap, which takes as long as the
    longer half alone; each the median of its paired per-iteration values. 0 when monta is no faster
    than deepspeed, 1 when it takes max(t_a2a, t_ag). (gain / ideal would read 1 / ideal with no
    overlap at all.)

    Why deepspeed's own time and not t_a2a + t_ag in the ideal: gain and ideal must share their
    baseline. deepspeed runs the two halves back to back and already overlaps them a little (ranks
    whose AllToAll ends first start their AllGather), so it measures 2-6% under the halves' sum at
    half the default rates and a perfect overlap would read only ~85% against (t_a2a + t_ag) / max;
    where it measures above the sum, the old ideal let an imperfect overlap read over 100%."""
    import numpy as np

    return _share_of_ideal(np.median(ds / monta, axis=-1), np.median(ds / np.maximum(a2a, ag), axis=-1))


def overlap_efficiency_vs_sum(ds, monta, a2a, ag):
    """The earlier definition, kept for comparison with older records: ideal = (t_a2a + t_ag) / max(t_a2a, t_ag)."""
    import numpy as np

    return _share_of_ideal(np.median(ds / monta, axis=-1), np.median((a2a + ag) / np.maximum(a2a, ag), axis=-1))


def _share_of_ideal(gain, ideal):
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        return (gain - 1.0) / (ideal - 1.0)


def rel_width(ci: tuple[float, float, float]) -> float:
    """Width of a CI relative to its point estimate ((hi - lo) / point); inf when unknown."""
    point, lo, hi = ci
    if not (lo == lo and hi == hi) or point == 0:  # nan check without numpy
        return float("inf")
    return (hi - lo) / abs(point)
