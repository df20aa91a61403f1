"""Small statistics and bandwidth helpers shared by the benchmarks (nccl-tests conventions)."""

from __future__ import annotations

import statistics


def percentile(xs: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not xs:
        raise ValueError("percentile of no samples")
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(samples_us: list[float]) -> dict[str, float]:
    return {"time_us": statistics.median(samples_us), "time_us_p10": percentile(samples_us, 10),
            "time_us_p90": percentile(samples_us, 90), "time_us_mean": statistics.fmean(samples_us)}


def alltoall_bw(size_bytes: int, time_us: float, n: int) -> tuple[float, float]:
    """nccl-tests AllToAll: algbw = S / t (GB/s, 1e9), busbw = algbw * (n - 1) / n."""
    algbw = size_bytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    return algbw, algbw * (n - 1) / n if n > 0 else 0.0
