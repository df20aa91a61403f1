"""Megatron-Core's AllGather token dispatcher as an exchange: gather every token of the EP group, each
rank keeps the routes of its local experts; combine by ReduceScatter of the partial outputs.

Bytes do not grow with top-k (tokens travel once, not once per route), so it is Megatron's choice for
small EP or large top-k. With TP (tokens replicated over the TP group) each TP rank gathers its 1/TP
token shard over EP across the nodes and the shards meet over TP inside the node (MoNTA's redundancy
removal: inter-node bytes / TP). The routing (slot, gate per route) travels with the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from monta.comm.dispatcher import TokenDispatcher
from monta.comm.routing import expert_rows, place_rows, used_rows, weighted_partials
from monta.comm.rows import (
    ep_gather,
    ep_reduce_scatter,
    gather_ints,
    tp_gather,
    tp_select,
    tp_shard,
)


@dataclass
class Handle:
    used: list[torch.Tensor]  # per TP member: the expert-output rows its combine reads (disjoint)
    local: torch.Tensor  # [k, P * Sh] each route of this TP shard (all sources): its row among used[own]
    gates: torch.Tensor  # [k, P * Sh] their gates (differentiable: the backward sends their gradients home)


def _shard_routes(plan, tp) -> tuple[torch.Tensor, torch.Tensor]:
    S = plan.num_tokens
    sh = S // tp.size
    lo = tp.index * sh
    return plan.slots[:, lo : lo + sh], sh


def dispatch(x_SM, plan, mesh, meter=None, phase=""):
    ep, tp = mesh.ep, mesh.tp
    P, E, C = ep.size, plan.num_experts, plan.capacity
    xs = tp_shard(x_SM, tp, meter, phase)  # [Sh, M]
    slots, sh = _shard_routes(plan, tp)  # [k, Sh]
    k = slots.shape[0]
    # tokens: EP gather (inter-node), then TP gather (intra-node): [TP, P, Sh, M]
    tokens = tp_gather(ep_gather(xs, ep, meter, phase), tp, meter, phase)
    # routes of every token, in the same order: [TP, P, k, Sh]
    meta = phase + "/fwd"
    routes = gather_ints(gather_ints(slots.contiguous().view(1, k, sh), ep, meter, meta), tp, meter, meta)
    routes = routes.view(tp.size, P, k, sh)
    source = torch.arange(P, device=routes.device).view(1, P, 1, 1).expand_as(routes)
    flat = routes.permute(2, 0, 1, 3).reshape(k, -1)  # [k, TP * P * Sh], token order of `tokens`
    rows, mine = expert_rows(flat, source.permute(2, 0, 1, 3).reshape(k, -1), ep.index, E, C, P)
    out = place_rows(rows, mine, tokens, P * (E // P) * C).view(E, C, -1)
    # the combine's share: each TP shard's routes of every source (TP member t reads shard t's rows)
    gates = ep_gather(tp_shard(plan.gates.t(), tp, meter, phase).contiguous(), ep, meter, phase, "meta")
    src = torch.arange(P, device=routes.device).view(1, P, 1).expand(k, P, sh).reshape(k, -1)
    shares = [
        used_rows(*expert_rows(routes[t].permute(1, 0, 2).reshape(k, -1), src, ep.index, E, C, P))
        for t in range(tp.size)
    ]
    return out, Handle([u for u, _ in shares], shares[tp.index][1], gates.t())


def combine(y_ECM, plan, handle, mesh, meter=None, phase=""):
    ep, tp = mesh.ep, mesh.tp
    E, C, M = y_ECM.shape
    ys = tp_select(y_ECM.reshape(E * C, M), handle.used, tp, meter, phase)  # the rows this TP shard reads
    partial = weighted_partials(ys, handle.local, handle.gates)  # [P * Sh, M]
    mine = ep_reduce_scatter(partial, ep, meter, phase)  # [Sh, M]: this shard of this rank's tokens
    return tp_gather(mine, tp, meter, phase)


class AllGatherDispatcher(TokenDispatcher):
    """Megatron-Core's AllGather dispatcher on this rank's mesh (``monta.comm.dispatcher.Dispatcher``)."""

    def dispatch(self, x_SM, plan):
        return dispatch(x_SM, plan, self.mesh, self.meter, "dispatch")

    def combine(self, y_ECM, plan, handle):
        return combine(y_ECM, plan, handle, self.mesh, self.meter, "combine")
