"""The adaptive stop rule of ``monta bench alltoall --adaptive``: after ``--iters`` iterations of a
size, go on while a watched paired ratio (legacy / monta_c and deepspeed / monta_c, every chunk
count c) has a 95% bootstrap CI wider than ``--target-ci`` of its value, up to ``--max-iters`` or
until ``--budget-s`` is spent. Without ``--adaptive``: exactly ``--iters``.

Rank 0 decides (``StopRule.decide``) and broadcasts the decision; torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from monta.bench.stats import bootstrap, median_ratio, rel_width

# The CI target may end a size only from this many iterations on: a percentile bootstrap over fewer
# samples comes out too narrow (at 5, the pipeline's minimum, a 4 MiB point stopped with CIs "within
# 4%" while its medians, which `monta regress` compares between runs, rested on 5 samples).
CI_MIN_ITERS = 10


def key_ratios(variants: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """(numerator, denominator) variant-row indices of the paired ratios the rule watches:
    legacy / monta_c and deepspeed / monta_c for every chunk count c."""
    idx = {v: i for i, v in enumerate(variants)}
    pairs = []
    for i, (v, _) in enumerate(variants):
        if v == "monta":
            pairs += [(idx[b], i) for b in (("legacy", 1), ("deepspeed", 1)) if b in idx]
    return pairs


def widest(times_si, pairs, seed: int) -> tuple[float, tuple[int, int] | None]:
    """Widest relative 95% CI among the watched paired ratios of one size (inf if under 3 iterations)."""
    worst, which = 0.0, None
    for a, b in pairs:
        if not times_si[a] or not times_si[b]:  # a row under the chunk floor (not run at this size)
            continue
        w = rel_width(bootstrap(median_ratio, [times_si[a], times_si[b]], n_boot=1000, seed=seed))
        if w >= worst:
            worst, which = w, (a, b)
    return worst, which


def row_label(variant: str, chunks: int) -> str:
    """A variant row's name: the exchange, with its chunk count when it is chunked (``monta4``)."""
    from monta import variants as registry

    chunked = variant in registry.exchanges() and registry.exchange(variant).chunked
    return f"{variant}{chunks if chunked else ''}"


def ratio_name(variants, pair) -> str:
    if not pair:
        return "-"
    (a, _), (b, cb) = variants[pair[0]], variants[pair[1]]
    return f"{a}/{row_label(b, cb)}"


@dataclass(frozen=True)
class StopRule:
    """When one size's timed iterations end."""

    adaptive: bool
    min_iters: int
    max_iters: int
    target: float  # relative CI width to reach; 0 = none
    budget_s: float  # seconds per size; 0 = none
    variants: tuple[tuple[str, int], ...]  # the variant rows, as timed
    pairs: tuple[tuple[int, int], ...]  # the watched ratios (key_ratios)

    @classmethod
    def from_config(cls, cfg, variants: list[tuple[str, int]]) -> StopRule:
        """Exactly ``cfg.iters`` unless the config asks for adaptive repetition."""
        lo = int(cfg.iters)
        pairs = tuple(key_ratios(variants))
        if not cfg.adaptive:
            return cls(False, lo, lo, 0.0, 0.0, tuple(variants), pairs)
        hi = max(lo, int(cfg.max_iters or lo))
        return cls(True, lo, hi, float(cfg.target_ci or 0.0), float(cfg.budget_s or 0.0), tuple(variants), pairs)

    def decide(self, times_si, it: int, elapsed: float, seed: int) -> str | None:
        """After ``it`` iterations of one size (``times_si[variant row][iteration]``, ``elapsed`` s so
        far): None to go on, else why the size stops (the note its records and the log carry)."""
        if it < self.min_iters:
            return None
        if not self.adaptive:
            return f"{it} iterations as asked"
        watched = bool(self.pairs) and self.target > 0
        width, which = widest(times_si, self.pairs, seed) if watched and it >= 3 else (0.0, None)
        if it >= self.max_iters:
            return f"max {self.max_iters} iterations" + (f", widest CI {100 * width:.1f}%" if which else "")
        if watched and (width > self.target or it < CI_MIN_ITERS):
            if self.budget_s and elapsed + elapsed / it > self.budget_s:
                return (
                    f"time budget {self.budget_s:g} s spent, widest CI {100 * width:.1f}% "
                    f"({ratio_name(self.variants, which)}) "
                    + (
                        f"above the {100 * self.target:g}% target"
                        if width > self.target
                        else f"within the {100 * self.target:g}% target but from {it} < {CI_MIN_ITERS} iterations"
                    )
                )
            return None
        return f"every paired ratio's 95% CI within {100 * self.target:g}%" if watched else f"{it} iterations as asked"
