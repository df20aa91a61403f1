"""The AllToAll bench's tokens and routing: per rank S tokens [S, M] and a balanced top-k routing (every
expert exactly C routes, each token k distinct experts, near-uniformly random), the [E, C, M] buffer the
capacity exchanges move (DeepSpeed's encode of them), and each exchange's inter-node byte formula
(its registered ``routing_inter_bytes``) on this routing.

Balanced (W0, the default) because a capacity buffer is then full: the exchanges that move tokens and
those that move buffers carry the same routes, so bytes compare exactly.

Under a skewed routing (``--routing SPEC``, ``monta.routing``; ``PointRouting``) one routing per point gives
every rank its experts' choices: the capacity exchanges read the plan at the buffer's capacity C (routes past
it dropped by DeepSpeed's first-come rule, slot E * C), the token-level ones, dropless, read the same
choices at the smallest capacity that drops nothing (``SizeInput.dropless``).

A capacity factor above 1 (``--capacity-factor CF``) puts fewer tokens in the same buffer (``tokens_per_rank``):
W0 then goes through the same routing path, its buffer partly empty, the token-level exchanges moving only
the routes there are, as under a real DeepSpeed gate at that factor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import torch

from monta.routing.construct import balanced_rows
from monta.routing.stats import tokens_per_rank


@dataclass(frozen=True)
class Plan:
    """What an exchange reads of a routing (``monta.moe.layer.RoutingPlan``'s fields)."""

    slots: torch.Tensor  # [k, S] flat slot e * C + c
    gates: torch.Tensor  # [k, S] fp32
    capacity: int
    num_experts: int
    num_tokens: int
    chunks: int | None = None  # a chunked exchange's count (None: its default)

    def to(self, device) -> Plan:
        """The plan beside its tokens: a layer's gate computes its routing on the data's device, and the
        token-level exchanges index CUDA rows with it (a CPU plan failed in ``index_select`` on an H200)."""
        return replace(self, slots=self.slots.to(device), gates=self.gates.to(device))


@dataclass(frozen=True)
class SizeInput:
    """One size's input on a rank: the tokens, their routing and the capacity buffer they fill; under a
    skewed routing also the same tokens and choices at a capacity that drops nothing (``dropless``)."""

    tokens: torch.Tensor  # [S, M]
    plan: Plan
    buffer: torch.Tensor  # [E, C, M]
    dropless: SizeInput | None = None  # None: ``plan`` drops nothing (the balanced routing)

    def to(self, device) -> SizeInput:
        d = self.dropless.to(device) if self.dropless is not None else None
        return SizeInput(self.tokens.to(device), self.plan.to(device), self.buffer.to(device), d)

    def for_exchange(self, capacity_based: bool) -> SizeInput:
        """What an exchange reads: a capacity exchange the capacity plan, a dropless one its own."""
        return self if capacity_based or self.dropless is None else self.dropless


@dataclass(frozen=True)
class PointRouting:
    """One routing for a point (a size): ``routing`` (``monta.routing.Routing``, one row per EP member),
    the buffer's capacity and the dropless capacity (a multiple of TP, as DeepSpeed pads it)."""

    routing: object
    capacity: int
    dropless_capacity: int

    def facts(self) -> dict:
        """What the records carry: spec, realized MaxVio and the drops at the buffer's capacity."""
        s = self.routing.summary(cap=self.capacity)
        keep = ("routing", "maxvio", "capacity", "routes", "dropped_routes", "dropped_tokens", "drop_fraction")
        return {**{k: s[k] for k in keep}, "dropless_capacity": self.dropless_capacity}


@lru_cache(maxsize=64)
def point_routing(
    spec: str, shape: tuple, k: int, members: int, nodes: int, tp: int, cf: float = 1.0
) -> PointRouting | None:
    """The routing of ``spec`` for a [E, C, M] buffer shape (T tokens per member, ``tokens_per_rank``);
    None for W0 at capacity factor 1, whose balanced routing fills the buffer and which the bench builds
    as it always has (its records stay bit-identical)."""
    from monta.routing import make_routing, parse_spec

    if parse_spec(spec).balanced and cf == 1.0:
        return None
    E, C, _ = shape
    r = make_routing(spec, members, tokens_per_rank(E, C, k, cf, tp), E, k, nodes)
    return PointRouting(r, C, r.dropless_capacity(tp))


def balanced_slots(tokens: int, experts: int, k: int, capacity: int, seed: int) -> torch.Tensor:
    """[k, S] slots: every expert gets exactly ``capacity`` routes, a token's k experts are distinct.
    Built from the regular layout (route j of token s -> expert (j S + s) // C, distinct when E >= k),
    randomized by relabelling experts and tokens and by degree-preserving swaps (a switch chain), then
    each expert's slots numbered in token order, as DeepSpeed's gate numbers them."""
    rows = balanced_rows(tokens, experts, k, capacity, seed)
    chosen = torch.tensor(rows, dtype=torch.long).t().contiguous()  # [k, S]
    # DeepSpeed numbers the first choices first (token order), then the second ones: each route's
    # place among its expert's routes in that (j-major) order
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    place = torch.empty_like(flat)
    place[order] = torch.arange(flat.numel()) - (torch.arange(experts) * capacity).repeat_interleave(capacity)
    return (flat * capacity + place).view(k, tokens)


def encode(tokens: torch.Tensor, slots: torch.Tensor, experts: int, capacity: int) -> torch.Tensor:
    """The [E, C, M] buffer: token s at each of its slots (DeepSpeed's ``_sparse_encode``); a dropped
    route (slot E * C) lands nowhere, an unfilled slot is zeros."""
    S, M = tokens.shape
    source = torch.full((experts * capacity + 1,), S, dtype=torch.long)  # + DeepSpeed's scratch slot E * C
    source.scatter_(0, slots.reshape(-1), torch.arange(S).expand_as(slots).reshape(-1))
    padded = torch.cat([tokens, tokens.new_zeros(1, M)])
    return padded.index_select(0, source[:-1]).view(experts, capacity, M)


def make_input(
    dp_index: int,
    size_idx: int,
    shape,
    dtype,
    k: int,
    salt: int = 0,
    device: str | torch.device = "cpu",
    routing: PointRouting | None = None,
) -> SizeInput:
    """Deterministic in (data-parallel index, size, salt, routing): every TP rank of a group holds the
    same tokens and routing, and any rank can rebuild a peer's. Small integers are exact in every dtype.
    ``routing`` None: the balanced routing; else member ``dp_index``'s choices of that point's routing."""
    E, C, M = shape
    S = tokens_per_rank(E, C, k) if routing is None else routing.routing.tokens
    seed = 1_000_003 * (size_idx + 1) + 7919 * dp_index + salt
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(-64, 64, (S, M), generator=g).to(dtype)
    slots = balanced_slots(S, E, k, C, seed) if routing is None else routing.routing.slots(dp_index, C)
    gates = torch.rand(k, S, generator=g)
    plan = Plan(slots, gates, C, E, S)
    dropless = None
    if routing is not None:
        Cd = routing.dropless_capacity
        free = routing.routing.slots(dp_index, Cd)
        dropless = SizeInput(tokens, Plan(free, gates, Cd, E, S), encode(tokens, free, E, Cd))
    return SizeInput(tokens, plan, encode(tokens, slots, E, C), dropless).to(device)


def inter_formula(variant: str, inp: SizeInput, geo_nodes: int, per_node: int, tp: int, elsize: int):
    """(formula, bytes) of the payload this rank sends across nodes in one dispatch of exchange
    ``variant``, from its routing (its registered ``routing_inter_bytes``; ``("-", None)`` without one):
    P EP members on N nodes (L per node), buffer B = E C M bytes, token row b = M bytes, T tokens."""
    from monta import variants as registry
    from monta.exchanges import RoutingBytes

    e = registry.exchanges().get(variant)
    if e is None or e.routing_inter_bytes is None:
        return "-", None
    inp = inp.for_exchange(registry.CAPACITY_PASSES in e.capabilities)
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


def routing_arg(spec: str, sizes, experts: int, hidden: int, elsize: int, k: int, layout, cf: float = 1.0) -> str:
    """``--routing SPEC`` checked against every size before any rank starts (UsageError, one line): the
    spec parses, a skewed routing has one EP group over all data-parallel ranks (its rows are the
    members), and each size's shape can hold it. Returns the spec as given."""
    from monta.routing import parse_spec
    from monta.validate import UsageError

    try:
        if parse_spec(spec).balanced and cf == 1.0:
            return spec.strip()
        if layout.ep != layout.dp:
            what = "a skewed routing" if not parse_spec(spec).balanced else f"--capacity-factor {cf:g}"
            raise ValueError(f"{what} needs --ep equal to the data-parallel size {layout.dp}")
        for s in sizes:
            C = s // (experts * hidden * elsize)
            point_routing(spec.strip(), (experts, C, hidden), k, layout.ep, layout.nodes, layout.tp, cf)
    except ValueError as e:
        msg = str(e)
        raise UsageError(msg if msg.startswith("routing ") else f"--routing {spec}: {msg}") from None
    return spec.strip()
