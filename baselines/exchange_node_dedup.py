"""Node-deduplicated dispatch (DeepEP's "normal" kernels, DeepSeek-V3's node-limited routing) as an
exchange: a token crosses to each destination node once, however many of its top-k experts live there,
and is forwarded inside the node to its experts' ranks; the combine reduces inside the node before the
one row per (token, node) crosses back.

Per TP rank (tokens replicated over TP: each takes its 1/TP token shard):
1. rails: each token once to every node holding one of its experts, to the node's member of the same
   local index (its own node: itself), with its routes (slots, gates);
2. forward: that member sends one copy per (token, destination member) inside the node;
3. TP: the rows each TP rank received meet over TP (uneven AllGather) so every TP rank holds its
   experts' full capacity; placed into the expert input exactly where the core exchange puts them.
Combine: route-holders weight and sum their routes per row, the gateway sums its node's rows, the owner
sums the nodes, then the TP shards meet. Worth its bytes with more experts than nodes and top-k > 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from monta.comm.dispatcher import TokenDispatcher
from monta.comm.routing import expert_rows, place_rows, route_members, used_rows, weighted_partials
from monta.comm.rows import (
    a2av_rows,
    a2av_rows_with,
    exchange_counts,
    tp_gather,
    tp_gather_v_with,
    tp_select,
    tp_shard,
)


@dataclass
class Handle:
    shard_tokens: int
    idx1: torch.Tensor  # shard token of each step-1 send row (member order)
    send1: list[int]
    recv1: list[int]
    idx2: torch.Tensor  # step-1 received row of each step-2 send row (member order)
    send2: list[int]
    recv2: list[int]
    used: list[torch.Tensor]  # per TP member: the expert-output rows its combine reads (disjoint)
    local: torch.Tensor  # [k, R2] each route of the rows this rank received in step 2: its row among used[own]
    gates: torch.Tensor  # [k, R2] (differentiable)


def _send_plan(need: torch.Tensor, targets: list[int], P: int) -> tuple[torch.Tensor, list[int]]:
    """Rows to send to each member: ``need[i]`` ([n] bool) marks the rows for member ``targets[i]``;
    returns the row indices in member order and the count per member."""
    per = {t: need[i].nonzero().squeeze(1) for i, t in enumerate(targets)}
    empty = torch.zeros(0, dtype=torch.long, device=need.device)
    idx = [per.get(p, empty) for p in range(P)]
    return torch.cat(idx), [int(i.numel()) for i in idx]


def dispatch(x_SM, plan, mesh, meter=None, phase=""):
    ep, tp = mesh.ep, mesh.tp  # the EP axis carries the node geometry (rails, node members)
    P, N = ep.size, ep.nodes
    E, C, M = plan.num_experts, plan.capacity, x_SM.shape[-1]
    meta = phase + "/fwd"
    xs = tp_shard(x_SM, tp, meter, phase)  # [Sh, M]
    gs = tp_shard(plan.gates.t().contiguous(), tp, meter, phase)  # [Sh, k]
    sh = xs.shape[0]
    slots = plan.slots[:, tp.index * sh : (tp.index + 1) * sh]  # [k, Sh]
    k = slots.shape[0]
    dev = x_SM.device
    node_of = torch.tensor(ep.node + (-1,), device=dev)  # member -1 (dropped) -> node -1
    mem = route_members(slots, E, C, P)
    nd = node_of[mem]
    # 1. rails: one row per (token, touched node), to the node's member of this rank's local index
    gateways = [ep.member(n, ep.my_local) for n in range(N)]
    idx1, send1 = _send_plan(torch.stack([(nd == n).any(0) for n in range(N)]), gateways, P)
    recv1 = exchange_counts(send1, ep, meter, meta, dev)
    m1 = torch.cat([idx1.unsqueeze(1), slots[:, idx1].t()], 1)  # [n, 1 + k]: token, slots
    # the rows with their gates and routes in one batch (one wait per hop, not three)
    x1, g1, m1 = a2av_rows_with(
        xs.index_select(0, idx1), (gs.index_select(0, idx1), m1), send1, ep, recv1, meter, "alltoall", phase
    )
    src1 = torch.repeat_interleave(torch.arange(P, device=dev), torch.tensor(recv1, device=dev))  # row's source
    # 2. forward inside the node: one copy per (row, destination member on this node)
    slots1 = m1[:, 1:].t()
    mem1 = route_members(slots1, E, C, P)
    local = ep.node_members(ep.my_node)
    idx2, send2 = _send_plan(torch.stack([(mem1 == q).any(0) for q in local]), local, P)
    m2 = torch.cat([src1[idx2].unsqueeze(1), m1[idx2, 1:]], 1)  # [n, 1 + k]: source member, slots
    x2, g2 = x1.index_select(0, idx2), g1.index_select(0, idx2)
    if len(local) > 1:  # a node of one member forwards to itself: no counts to learn, nothing to send
        recv2 = exchange_counts(send2, ep, meter, meta, dev)
        x2, g2, m2 = a2av_rows_with(x2, (g2, m2), send2, ep, recv2, meter, "alltoall", phase)
    else:
        recv2 = list(send2)
    # 3. every TP rank's rows and their routes, so each holds the full capacity of its experts
    (xa, ma), tp_rows = tp_gather_v_with(x2, (m2,), tp, meter, phase)
    rows, mine = expert_rows(ma[:, 1:].t(), ma[:, 0].expand(k, -1), ep.index, E, C, P)
    out = place_rows(rows, mine, xa, E * C).view(E, C, M)
    # the combine: TP member t weights the routes of the rows it received itself
    bounds = [sum(tp_rows[:t]) for t in range(tp.size + 1)]
    shares = [used_rows(rows[:, bounds[t] : bounds[t + 1]], mine[:, bounds[t] : bounds[t + 1]]) for t in range(tp.size)]
    handle = Handle(sh, idx1, send1, recv1, idx2, send2, recv2, [u for u, _ in shares], shares[tp.index][1], g2.t())
    return out, handle


def combine(y_ECM, plan, h: Handle, mesh, meter=None, phase=""):
    ep, tp = mesh.ep, mesh.tp
    E, C, M = y_ECM.shape
    ys = tp_select(y_ECM.reshape(E * C, M), h.used, tp, meter, phase)  # the rows this TP rank's routes read
    part = weighted_partials(ys, h.local, h.gates)  # [R2, M] per received row
    back2 = a2av_rows(part, h.recv2, ep, h.send2, meter, "alltoall", phase)  # to the gateways
    node = part.new_zeros(sum(h.recv1), M).index_add(0, h.idx2, back2)  # the node's sum per row
    back1 = a2av_rows(node, h.recv1, ep, h.send1, meter, "alltoall", phase)  # once per (token, node)
    shard = part.new_zeros(h.shard_tokens, M).index_add(0, h.idx1, back1)
    return tp_gather(shard, tp, meter, phase)


class NodeDedupDispatcher(TokenDispatcher):
    """Node-deduplicated dispatch on this rank's mesh (``monta.comm.dispatcher.Dispatcher``)."""

    def dispatch(self, x_SM, plan):
        return dispatch(x_SM, plan, self.mesh, self.meter, "dispatch")

    def combine(self, y_ECM, plan, handle):
        return combine(y_ECM, plan, handle, self.mesh, self.meter, "combine")
