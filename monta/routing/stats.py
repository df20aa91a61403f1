"""A routing and what it does to the exchanges: ``Routing`` holds the top-k expert choice of every token on
every rank ([R, T, k], -1 for a token a rank does not have: W4's ragged sources) and derives from it the
loads (per expert, per receiving rank, per node), the realized MaxVio, the rank-to-rank route matrix, and
what a capacity drops.

Ranks are the EP group's members in order (member r holds experts r E/R .. (r+1) E/R - 1, the layout
DeepSpeed and ``monta.comm.routing`` use); member r sits on node r // (R/N).

Capacity (DeepSpeed's ``_capacity``): C = ceil(T / E x cf x k) for T token rows per rank. The drop rule is
DeepSpeed's ``drop_policy="position"`` (its ``topkgating``): on each rank, each expert keeps its routes
first-come by token order (token 0 first) and drops every route past its C-th; a route's slot in the
[E, C] buffer is its place in that order. The same rule, so the same dropped set, for every exchange.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch


def maxvio(load) -> float:
    """max load / mean load - 1 over experts (0: balanced; 0 for no load at all): the imbalance a routing
    and the step's gate (``monta.routing.router``) both report, from per-expert route counts."""
    t = torch.as_tensor(load).double()
    mean = float(t.mean()) if t.numel() else 0.0
    return float(t.max()) / mean - 1.0 if mean > 0 else 0.0


def capacity(tokens: int, experts: int, k: int, cf: float) -> int:
    """DeepSpeed's capacity for ``tokens`` rows: ceil((T / E) x (cf x k))."""
    if not cf > 0:
        raise ValueError(f"capacity factor {cf!r}: must be > 0")
    return int(math.ceil((tokens / experts) * (cf * k)))


def tokens_per_rank(experts: int, capacity: int, k: int, cf: float = 1.0, tp: int = 1) -> int:
    """T tokens per rank for a buffer of ``capacity`` C slots per expert at capacity factor ``cf``: the
    buffer is DeepSpeed's capacity for them (C >= ceil(T k cf / E)). cf 1: T = E C / k, the buffer full at
    W0. cf > 1 (GShard and Switch train at 1.25): fewer tokens, so the buffer has room a balanced routing
    leaves empty and a skewed one fills; T rounded down to whole balanced routes (every expert the same
    count at W0) that split over TP."""
    if cf == 1.0:
        if (experts * capacity) % k:
            raise ValueError(f"{experts} experts x capacity {capacity} is not a whole number of top-{k} tokens")
        return experts * capacity // k
    if not cf > 0:
        raise ValueError(f"capacity factor {cf!r}: must be > 0")
    step = math.lcm(experts // math.gcd(experts, k), tp)
    tokens = int(experts * capacity / (k * cf)) // step * step
    if tokens <= 0:
        raise ValueError(
            f"capacity factor {cf:g} leaves no whole top-{k} tokens in {experts} experts x capacity {capacity}; "
            "use a larger size or a smaller factor"
        )
    return tokens


@dataclass(frozen=True)
class Routing:
    spec: str  # the spec string it was built from (monta.routing.spec)
    choices: torch.Tensor  # [R, T, k] int64 expert per route; -1: no such token
    experts: int
    nodes: int
    seed: int = 0
    step: int = 0

    def __post_init__(self) -> None:
        R = self.choices.shape[0]
        if self.experts % R or R % self.nodes:
            raise ValueError(f"{self.experts} experts over {R} ranks on {self.nodes} nodes do not divide evenly")

    @property
    def ranks(self) -> int:
        return self.choices.shape[0]

    @property
    def tokens(self) -> int:
        return self.choices.shape[1]

    @property
    def k(self) -> int:
        return self.choices.shape[2]

    @property
    def valid(self) -> torch.Tensor:
        return self.choices >= 0

    def active_tokens(self) -> torch.Tensor:
        """[R] tokens each rank holds (W4: fewer than T on some)."""
        return self.valid[..., 0].sum(1)

    # -- loads ---------------------------------------------------------------------------------------
    def expert_load(self) -> torch.Tensor:
        """[E] routes each expert receives from all ranks."""
        c = self.choices[self.valid]
        return torch.bincount(c, minlength=self.experts)

    def rank_load(self) -> torch.Tensor:
        """[R] routes each member receives (the sum over its experts)."""
        return self.expert_load().view(self.ranks, -1).sum(1)

    def node_load(self) -> torch.Tensor:
        """[N] routes each node receives."""
        return self.rank_load().view(self.nodes, -1).sum(1)

    def maxvio(self) -> float:
        """max expert load / mean expert load - 1 (0: balanced)."""
        return maxvio(self.expert_load())

    def traffic(self) -> torch.Tensor:
        """[R, R] routes from source rank (row) to the member holding the expert (column)."""
        R, nle = self.ranks, self.experts // self.ranks
        src = torch.arange(R).view(R, 1, 1).expand_as(self.choices)
        v = self.valid
        pair = src[v] * R + self.choices[v] // nle
        return torch.bincount(pair, minlength=R * R).view(R, R)

    # -- capacity ------------------------------------------------------------------------------------
    def capacity(self, cf: float = 1.0) -> int:
        return capacity(self.tokens, self.experts, self.k, cf)

    def places(self) -> torch.Tensor:
        """[R, T, k] each route's place among its expert's routes on its rank, first-come by token order
        (DeepSpeed's ``locations``); -1 for a missing token. Computed once (every rank's plan reads it)."""
        return self._places

    @cached_property
    def _places(self) -> torch.Tensor:
        R, T, k = self.choices.shape
        onehot = torch.zeros(R, T, self.experts + 1, dtype=torch.long)
        onehot.scatter_(2, self.choices.clamp_min(-1) % (self.experts + 1), 1)  # -1 -> column E (ignored)
        before = onehot.cumsum(1) - onehot  # routes to the same expert from earlier tokens
        place = before.gather(2, self.choices % (self.experts + 1))
        return torch.where(self.valid, place, torch.full_like(place, -1))

    def kept(self, cap: int) -> torch.Tensor:
        """[R, T, k] the routes a capacity of ``cap`` per expert and rank keeps (missing tokens: False)."""
        return self.valid & (self.places() < cap)

    def dropped(self, cap: int) -> torch.Tensor:
        """[R, T, k] the routes that capacity drops."""
        return self.valid & ~self.kept(cap)

    def slots(self, rank: int, cap: int) -> torch.Tensor:
        """[k, T] DeepSpeed's flat slots e * C + place of ``rank``'s routes; E * C (its scratch slot) for
        a dropped or missing route: the plan every exchange reads."""
        c, p = self.choices[rank], self.places()[rank]
        keep = (c >= 0) & (p < cap)
        flat = torch.where(keep, c * cap + p, torch.full_like(c, self.experts * cap))
        return flat.t().contiguous()

    def dropless_capacity(self, multiple: int = 1) -> int:
        """The smallest capacity that drops nothing on any rank, rounded up to ``multiple`` (TP: DeepSpeed
        pads a dropless capacity to the TP size)."""
        most = int(self.places().max()) + 1 if bool(self.valid.any()) else 1
        return max(multiple, -(-most // multiple) * multiple)

    def summary(self, cf: float = 1.0, cap: int | None = None) -> dict[str, Any]:
        """Plain-JSON facts a record carries: the spec, realized MaxVio, loads and the drops at ``cap``
        (default: DeepSpeed's capacity at ``cf``)."""
        cap = self.capacity(cf) if cap is None else cap
        routes = int(self.valid.sum())
        drops = self.dropped(cap)
        return {
            "routing": self.spec,
            "routing_seed": self.seed,
            "routing_step": self.step,
            "maxvio": self.maxvio(),
            "expert_load": self.expert_load().tolist(),
            "rank_load": self.rank_load().tolist(),
            "node_load": self.node_load().tolist(),
            "capacity": cap,
            "routes": routes,
            "dropped_routes": int(drops.sum()),
            "dropped_tokens": int(drops.any(2).sum()),  # tokens that lost at least one of their k routes
            "drop_fraction": int(drops.sum()) / routes if routes else 0.0,
        }
