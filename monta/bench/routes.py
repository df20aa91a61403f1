"""The AllToAll bench's tokens and routing: per rank S tokens [S, M] and a balanced top-k routing (every
expert exactly C routes, each token k distinct experts, near-uniformly random), the [E, C, M] buffer the
capacity exchanges move (DeepSpeed's encode of them), and each exchange's inter-node byte formula
(its registered ``routing_inter_bytes``) on this routing.

Balanced because a capacity buffer is then full: the exchanges that move tokens and those that move
buffers carry the same routes, so bytes compare exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Plan:
    """What an exchange reads of a routing (``monta.moe.layer.RoutingPlan``'s fields)."""

    slots: torch.Tensor  # [k, S] flat slot e * C + c
    gates: torch.Tensor  # [k, S] fp32
    capacity: int
    num_experts: int
    num_tokens: int
    chunks: int | None = None  # a chunked exchange's count (None: its default)


@dataclass(frozen=True)
class SizeInput:
    """One size's input on a rank: the tokens, their routing and the capacity buffer they fill."""

    tokens: torch.Tensor  # [S, M]
    plan: Plan
    buffer: torch.Tensor  # [E, C, M]


def tokens_per_rank(experts: int, capacity: int, k: int) -> int:
    if (experts * capacity) % k:
        raise ValueError(f"{experts} experts x capacity {capacity} is not a whole number of top-{k} tokens")
    return experts * capacity // k


def balanced_slots(tokens: int, experts: int, k: int, capacity: int, seed: int) -> torch.Tensor:
    """[k, S] slots: every expert gets exactly ``capacity`` routes, a token's k experts are distinct.
    Built from the regular layout (route j of token s -> expert (j S + s) // C, distinct when E >= k),
    randomized by relabelling experts and tokens and by degree-preserving swaps (a switch chain), then
    each expert's slots numbered in token order, as DeepSpeed's gate numbers them."""
    if k > experts:
        raise ValueError(f"top-{k} needs at least {k} experts (got {experts})")
    rng = random.Random(seed)
    perm = list(range(experts))
    rng.shuffle(perm)
    order = list(range(tokens))
    rng.shuffle(order)
    rows = [[perm[(j * tokens + s) // capacity] for j in range(k)] for s in order]
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
    chosen = torch.tensor(rows, dtype=torch.long).t().contiguous()  # [k, S]
    # DeepSpeed numbers the first choices first (token order), then the second ones: each route's
    # place among its expert's routes in that (j-major) order
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    place = torch.empty_like(flat)
    place[order] = torch.arange(flat.numel()) - (torch.arange(experts) * capacity).repeat_interleave(capacity)
    return (flat * capacity + place).view(k, tokens)


def encode(tokens: torch.Tensor, slots: torch.Tensor, experts: int, capacity: int) -> torch.Tensor:
    """The [E, C, M] buffer: token s at each of its slots (DeepSpeed's ``_sparse_encode``; all full)."""
    S, M = tokens.shape
    source = torch.full((experts * capacity,), S, dtype=torch.long)
    source.scatter_(0, slots.reshape(-1), torch.arange(S).expand_as(slots).reshape(-1))
    padded = torch.cat([tokens, tokens.new_zeros(1, M)])
    return padded.index_select(0, source).view(experts, capacity, M)


def make_input(
    dp_index: int, size_idx: int, shape, dtype, k: int, salt: int = 0, device: str | torch.device = "cpu"
) -> SizeInput:
    """Deterministic in (data-parallel index, size, salt): every TP rank of a group holds the same
    tokens and routing, and any rank can rebuild a peer's. Small integers are exact in every dtype."""
    E, C, M = shape
    S = tokens_per_rank(E, C, k)
    seed = 1_000_003 * (size_idx + 1) + 7919 * dp_index + salt
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(-64, 64, (S, M), generator=g).to(dtype)
    slots = balanced_slots(S, E, k, C, seed)
    gates = torch.rand(k, S, generator=g)
    plan = Plan(slots, gates, C, E, S)
    return SizeInput(tokens.to(device), plan, encode(tokens, slots, E, C).to(device))


def inter_formula(variant: str, inp: SizeInput, geo_nodes: int, per_node: int, tp: int, elsize: int):
    """(formula, bytes) of the payload this rank sends across nodes in one dispatch of exchange
    ``variant``, from its routing (its registered ``routing_inter_bytes``; ``("-", None)`` without one):
    P EP members on N nodes (L per node), buffer B = E C M bytes, token row b = M bytes, T tokens."""
    from monta import variants
    from monta.exchanges import RoutingBytes

    e = variants.exchanges().get(variant)
    if e is None or e.routing_inter_bytes is None:
        return "-", None
    E, C, M = inp.buffer.shape
    r = RoutingBytes(
        buffer_bytes=E * C * M * elsize,
        row_bytes=M * elsize,
        tokens=inp.plan.num_tokens,
        members=geo_nodes * per_node,
        nodes=geo_nodes,
        per_node=per_node,
        tp=tp,
        experts=E,
        capacity=C,
        slots=inp.plan.slots,
    )
    return e.routing_inter_bytes(r)
