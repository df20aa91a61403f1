"""The percentile of a list of samples, at the bottom of the house: the benchmarks (``monta.bench.stats``) and
the emulator's probe (``monta.emulate.probe``) read it here, so neither imports the other."""

from __future__ import annotations


def percentile(xs: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not xs:
        raise ValueError("percentile of no samples")
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
