"""Building top-k expert choices with exact per-expert route counts.

Two constructions, both deterministic in their seed:

* ``balanced_rows``: one rank's tokens, every expert exactly ``per_expert`` routes (the AllToAll bench's
  balanced routing since the start; W0 builds every rank with it);
* ``rows_with_counts``: a pool of tokens whose experts receive exactly the given route counts (each at
  most one route per token), then the tokens shuffled: the skewed workloads' loads are exact, so their
  realized MaxVio is what the spec asked for, not a sample of it.
"""

from __future__ import annotations

import random

import torch


def balanced_rows(tokens: int, experts: int, k: int, per_expert: int, seed: int) -> list[list[int]]:
    """[S][k] experts: every expert exactly ``per_expert`` routes, a token's k experts distinct. The
    regular layout (route j of token s -> expert (j S + s) // per_expert, distinct when E >= k),
    randomized by relabelling experts and tokens and by degree-preserving swaps (a switch chain)."""
    if k > experts:
        raise ValueError(f"top-{k} needs at least {k} experts (got {experts})")
    rng = random.Random(seed)
    perm = list(range(experts))
    rng.shuffle(perm)
    order = list(range(tokens))
    rng.shuffle(order)
    rows = [[perm[(j * tokens + s) // per_expert] for j in range(k)] for s in order]
    sets = [set(r) for r in rows]
    if k < experts:
        for _ in range(4 * k * tokens):
            s1, s2 = rng.randrange(tokens), rng.randrange(tokens)
            j1, j2 = rng.randrange(k), rng.randrange(k)
            e1, e2 = rows[s1][j1], rows[s2][j2]
            if s1 == s2 or e1 == e2 or e2 in sets[s1] or e1 in sets[s2]:
                continue
            rows[s1][j1], rows[s2][j2] = e2, e1
            sets[s1].remove(e1)
            sets[s1].add(e2)
            sets[s2].remove(e2)
            sets[s2].add(e1)
    return rows


def counts_from_weights(weights: torch.Tensor, tokens: int, k: int) -> torch.Tensor:
    """Route counts per expert proportional to ``weights`` (>= 0), summing to ``tokens`` x k, none above
    ``tokens`` (a token picks an expert at most once): water-filling of the cap, then largest remainders."""
    w = weights.double().clamp_min(0)
    E = w.numel()
    if int((w > 0).sum()) < k:
        raise ValueError(f"top-{k} needs at least {k} experts with load; this workload leaves {int((w > 0).sum())}")
    total = tokens * k
    capped = torch.zeros(E, dtype=torch.bool)
    share = torch.zeros(E, dtype=torch.float64)
    while True:  # experts whose share passes the cap get the cap; the rest share what is left
        left = total - tokens * int(capped.sum())
        free = ~capped & (w > 0)
        share = torch.where(capped, torch.full_like(w, float(tokens)), torch.zeros_like(w))
        share[free] = w[free] / w[free].sum() * left
        over = free & (share > tokens)
        if not bool(over.any()):
            break
        capped |= over
    base = share.floor()
    counts = base.long()
    rest = total - int(counts.sum())
    if rest:
        frac = torch.where(counts < tokens, share - base, torch.full_like(share, -1.0))
        order = torch.argsort(-frac, stable=True)  # ties: the lower expert index first
        counts[order[:rest]] += 1
    return counts


def rows_with_counts(counts: torch.Tensor, tokens: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """[tokens, k] experts: expert e on exactly ``counts[e]`` tokens (each at most ``tokens``), a token's
    k experts distinct. Experts are laid out in a shuffled order as consecutive runs of the j-major route
    sequence (route p -> token p % tokens, choice p // tokens; a run no longer than ``tokens`` never
    hits one token twice), then tokens are shuffled."""
    E = counts.numel()
    if int(counts.sum()) != tokens * k or int(counts.max()) > tokens:
        raise ValueError(f"counts must sum to {tokens} x {k} with none above {tokens}")
    order = torch.randperm(E, generator=gen)
    seq = torch.repeat_interleave(order, counts[order])  # [tokens * k], j-major
    rows = seq.view(k, tokens).t()
    return rows[torch.randperm(tokens, generator=gen)].contiguous()
