"""Named, seeded routing workloads (docs/routing.md defines each): ``make_routing(spec, ranks, tokens,
experts, k, nodes)`` -> ``monta.routing.stats.Routing``, a pure function of (workload, its parameters,
seed, step) and the shape, so every exchange at a point sees the same tokens and expert choices.

W0-W7 follow Megatron-LM's token-imbalance suite (NVIDIA/Megatron-LM#7488), each isolating one variable:
W0 balanced, W1 hot expert set, W2 hot rank, W3 the same heat spread, W4 ragged sources, W5 a rank that
receives nothing, W6 a hotspot that moves with the step, W7 a burst; ``hotnode`` every expert of one node
hot (the load on one node's links); ``lognormal`` a per-expert load with
a target MaxVio (DeepEP#393's fit of DeepSeek-V3's counts; sigma by bisection), ``zipf`` a Zipf load.
"""

from __future__ import annotations

import math
import zlib

import torch

from monta.routing.construct import balanced_rows, counts_from_weights, rows_with_counts
from monta.routing.spec import RoutingSpec, param, parse_spec
from monta.routing.stats import Routing, maxvio

MAXVIO_TOLERANCE = 0.10  # a log-normal target is met when realized MaxVio is within 10% of it


def _seed(spec: RoutingSpec, *extra) -> int:
    """A stable seed from (workload, seed, step, extra): crc32, not Python's salted hash."""
    return zlib.crc32("|".join(str(x) for x in (spec.name, spec.seed, spec.step, *extra)).encode())


def _check_shape(ranks: int, tokens: int, experts: int, k: int, nodes: int) -> None:
    for name, v in (("ranks", ranks), ("tokens", tokens), ("experts", experts), ("k", k), ("nodes", nodes)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}: must be a positive integer")
    if experts % ranks:
        raise ValueError(f"{experts} experts do not split over {ranks} ranks; use a multiple of {ranks}")
    if ranks % nodes:
        raise ValueError(f"{ranks} ranks do not split over {nodes} nodes")
    if k > experts:
        raise ValueError(f"top-{k} needs at least {k} experts (got {experts})")


def make_routing(spec: str | RoutingSpec, ranks: int, tokens: int, experts: int, k: int, nodes: int = 1) -> Routing:
    """The routing of ``spec`` for ``ranks`` EP members on ``nodes`` nodes, ``tokens`` rows per rank,
    ``experts`` experts, top-``k``. ValueError (one line) for a shape the workload cannot fill."""
    s = parse_spec(spec) if isinstance(spec, str) else spec
    _check_shape(ranks, tokens, experts, k, nodes)
    if s.name == "W0" or (s.name == "W7" and s.step % int(param(s, "period")) != 0):
        choices = _balanced(s, ranks, tokens, experts, k)
    elif s.name == "W4":
        choices = _ragged(s, ranks, tokens, experts, k)
    else:
        w = _weights(s, ranks, experts, k, tokens * ranks, nodes)
        gen = torch.Generator().manual_seed(_seed(s, "rows"))
        counts = counts_from_weights(w, ranks * tokens, k)
        choices = rows_with_counts(counts, ranks * tokens, k, gen).view(ranks, tokens, k)
    return Routing(s.text, choices, experts, nodes, s.seed, s.step)


def _balanced(s: RoutingSpec, ranks: int, tokens: int, experts: int, k: int) -> torch.Tensor:
    """Every rank gives every expert exactly T k / E routes: MaxVio 0, no drop at cf 1."""
    if (tokens * k) % experts:
        raise ValueError(
            f"routing {s.text!r}: {tokens} tokens x top-{k} do not split evenly over {experts} experts; "
            f"use a token count that is a multiple of {experts // math.gcd(experts, k)}"
        )
    per = tokens * k // experts
    rows = [balanced_rows(tokens, experts, k, per, _seed(s, "rank", r)) for r in range(ranks)]
    return torch.tensor(rows, dtype=torch.long).view(ranks, tokens, k)


def _ragged(s: RoutingSpec, ranks: int, tokens: int, experts: int, k: int) -> torch.Tensor:
    """W4: rank r holds T - round(ragged T r / (R - 1)) tokens (rank 0 all T, the last (1 - ragged) T),
    routed evenly over the experts; the rows a rank lacks are -1."""
    ragged = float(param(s, "ragged"))
    if ragged >= 1:
        raise ValueError(f"routing {s.text!r}: ragged={ragged} must be < 1 (the last rank keeps (1 - ragged) of T)")
    held = [tokens - (round(ragged * tokens * r / (ranks - 1)) if ranks > 1 else 0) for r in range(ranks)]
    held = [max(1, h) for h in held]
    n = sum(held)
    gen = torch.Generator().manual_seed(_seed(s, "rows"))
    rows = rows_with_counts(counts_from_weights(torch.ones(experts), n, k), n, k, gen)
    out = torch.full((ranks, tokens, k), -1, dtype=torch.long)
    start = 0
    for r, h in enumerate(held):
        out[r, :h] = rows[start : start + h]
        start += h
    return out


def _hot_count(s: RoutingSpec, experts: int) -> int:
    hot = int(param(s, "hot", max(2, experts // 8)))
    return min(hot, experts)


def _rank_block(s: RoutingSpec, ranks: int, experts: int, rank: int) -> list[int]:
    if not 0 <= rank < ranks:
        raise ValueError(f"routing {s.text!r}: rank={rank} is outside the {ranks} ranks; use 0..{ranks - 1}")
    nle = experts // ranks
    return list(range(rank * nle, (rank + 1) * nle))


def _matched_heat(s: RoutingSpec, experts: int, hot_set: int) -> float:
    """The per-expert heat that gives a hot set of ``hot_set`` experts the same share of the load as
    W1's (``hot`` experts at ``heat``): the hot rank at comparable heat."""
    h, x = _hot_count(s, experts), float(param(s, "heat"))
    mass = h * x / (h * x + experts - h)
    if hot_set >= experts or mass >= 1:
        return 1.0
    return max(1.0, mass * (experts - hot_set) / (hot_set * (1 - mass)))


def _weights(s: RoutingSpec, ranks: int, experts: int, k: int, pool: int, nodes: int = 1) -> torch.Tensor:
    """Per-expert weights (expected load up to a factor) of a weighted workload."""
    gen = torch.Generator().manual_seed(_seed(s, "weights"))
    w = torch.ones(experts, dtype=torch.float64)
    if s.name in ("W1", "W3"):
        h = _hot_count(s, experts)
        if s.name == "W1":  # a random set: heat per expert, wherever the experts live
            hot = torch.randperm(experts, generator=gen)[:h].tolist()
        else:  # the same heat strided over the layout: a different rank (and node) per hot expert
            hot = sorted({(i * experts) // h for i in range(h)})
        w[hot] = float(param(s, "heat"))
    elif s.name in ("W2", "W6"):
        rank = int(param(s, "rank"))
        if s.name == "W6":  # the hot rank moves by one each step
            rank = (rank + s.step) % ranks
        block = _rank_block(s, ranks, experts, rank)
        w[block] = _matched_heat(s, experts, len(block))
    elif s.name == "W5":
        block = _rank_block(s, ranks, experts, int(param(s, "rank", ranks - 1)))
        w[block] = 0.0
        if experts - len(block) < k:
            raise ValueError(f"routing {s.text!r}: top-{k} needs {k} experts off the empty rank; use more experts")
    elif s.name == "hotnode":  # all of one node's experts at `heat`: that node's links carry the load
        node = int(param(s, "node"))
        if not 0 <= node < nodes:
            raise ValueError(f"routing {s.text!r}: node={node} is outside the {nodes} nodes; use 0..{nodes - 1}")
        per = experts // nodes
        w[node * per : (node + 1) * per] = float(param(s, "heat"))
    elif s.name == "W7":  # a burst step: one expert (by seed and step) takes `heat` x its share
        w[int(torch.randint(experts, (1,), generator=gen))] = float(param(s, "heat"))
    elif s.name == "zipf":
        order = torch.randperm(experts, generator=gen)
        w[order] = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** float(param(s, "s"))
    elif s.name == "lognormal":
        w = _lognormal_weights(s, torch.randn(experts, generator=gen, dtype=torch.float64), pool, k)
    return w


def realized_maxvio(weights: torch.Tensor, pool: int, k: int) -> float:
    return maxvio(counts_from_weights(weights, pool, k))


def _lognormal_weights(s: RoutingSpec, z: torch.Tensor, pool: int, k: int) -> torch.Tensor:
    """exp(sigma z) with sigma found by bisection so that the realized MaxVio of the counts (not of the
    weights) meets the target within ``MAXVIO_TOLERANCE``. MaxVio grows with sigma (max/mean of
    exp(sigma z) does), up to the cap E / k - 1 (an expert on every token)."""
    target = float(param(s, "maxvio"))
    E = z.numel()
    if target >= E / k - 1:
        raise ValueError(
            f"routing {s.text!r}: maxvio={target:g} is unreachable with {E} experts at top-{k} "
            f"(at most {E / k - 1:g}: one expert on every token); use a smaller target or more experts"
        )
    if target == 0:
        return torch.ones(E, dtype=torch.float64)
    lo, hi = 0.0, 1.0
    while realized_maxvio(torch.exp(hi * z), pool, k) < target and hi < 64:
        lo, hi = hi, hi * 2
    best = (float("inf"), hi)
    for _ in range(60):
        mid = (lo + hi) / 2
        got = realized_maxvio(torch.exp(mid * z), pool, k)
        best = min(best, (abs(got - target), mid))
        lo, hi = (mid, hi) if got < target else (lo, mid)
    err, sigma = best
    if err > MAXVIO_TOLERANCE * target:
        raise ValueError(
            f"routing {s.text!r}: {pool} tokens cannot realize maxvio={target:g} within 10% (closest "
            f"{target + err:.3g} or {target - err:.3g}); use more tokens per rank"
        )
    return torch.exp(sigma * z)


def lognormal_sigma(spec: str, experts: int, k: int, pool: int) -> float:
    """The sigma the bisection picks (for the docs and tests): the log-normal's spread."""
    s = parse_spec(spec)
    gen = torch.Generator().manual_seed(_seed(s, "weights"))
    z = torch.randn(experts, generator=gen, dtype=torch.float64)
    w = _lognormal_weights(s, z, pool, k)
    return float(torch.log(w).std() / z.std()) if experts > 1 else 0.0
