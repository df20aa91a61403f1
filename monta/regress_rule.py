"""The regression gate's rule: the decision for one point and the words that describe it, kept together.

``GATE_RULE`` is the one description of the rule: ``monta regress --help``, the table's header,
README.md, docs/pipeline.md and docs/testbed.md quote it, and tests/test_regress_rule.py fails when
one of them says something else, or when :func:`decide` stops honouring the bounds it names.
Why a line at 1 + T/2: it puts "no change" and "T slower" equally far from it, so both are called
right once the interval is narrower than T.
"""

from __future__ import annotations

import math

DEFAULT_THRESHOLD = 0.10

GATE_RULE = (
    "a point is REGRESSED when its slowdown is above 1 + T/2 and its CI, widened by the run-to-run "
    "spread, lies above 1; improved when its slowdown is below 1/(1 + T/2) and that widened CI lies "
    "below 1; inconclusive when the widened CI holds both 1 and 1 + T; ok otherwise "
    f"(T = --threshold, {DEFAULT_THRESHOLD:.2f} by default)"
)


def widen(ratio: float, lo: float, hi: float, noise: float) -> tuple[float, float]:
    """The CI (lo, hi) moved away from ``ratio`` by the between-run half-width ``noise`` (log), added
    in quadrature: the run's own uncertainty and the run-to-run spread are independent."""
    d = math.log(ratio)
    return math.exp(d - math.hypot(d - math.log(lo), noise)), math.exp(d + math.hypot(math.log(hi) - d, noise))


def decide(ratio: float, lo: float, hi: float, threshold: float, noise: float = 0.0) -> str:
    """REGRESSED / improved / inconclusive / ok for one point, by GATE_RULE; ``lo``,
    ``hi``: the within-run CI, widened here by the between-run half-width ``noise`` (log)."""
    lo, hi = widen(ratio, lo, hi, noise)
    line = 1 + threshold / 2
    if lo > 1 and ratio > line:
        return "REGRESSED"
    if hi < 1 and ratio < 1 / line:
        return "improved"
    if lo < 1 and hi > 1 + threshold:
        return "inconclusive"
    return "ok"
