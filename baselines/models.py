"""The performance models of the baselines' exchanges, registered with them (``monta_baselines.variants``):
each one's price (the steps of one dispatch pass of one rank, which ``monta.perfmodel.network.routed``
schedules under its conventions: per-message latency, metadata priced apart, the emulator's CPU) and its
inter-node byte formulas (from a layout for the model, from one routing for the AllToAll bench). A price
takes the one signature of every exchange's (``monta.exchanges``); none of these is chunked.

Torch-free: the performance model imports this, never the exchanges' runtime modules.

Routing is the benchmark's BALANCED routing: every expert gets exactly C routes, each token a uniformly
random k-subset of distinct experts. So a rank holds T = E C / k tokens of S / k bytes; each TP rank
moves its 1/TP token shard (S / (k TP)). A node of E/N experts is touched by a token with probability
``touch_probability(E, k, N)``, a rank of E/P experts with ``touch_probability(E, k, P)``.
"""

from __future__ import annotations

from monta.exchanges import LayoutBytes, RoutingBytes
from monta.hardware.links import Cluster
from monta.parallel import GroupShape
from monta.perfmodel.network.routed import (
    COUNT_BYTES,  # noqa: F401  (the count exchanges' size, priced by counts())
    GATE_BYTES,
    SLOT_BYTES,
    Step,
    call,
    counts,
    gather,
    touch_probability,
)


# -- 2dh: Tutel's 2D hierarchical AllToAll (baselines/exchange_2dh.py) ------------------------------------------
def steps_2dh(
    S: float, ep: GroupShape, tp: GroupShape, cluster: Cluster, top_k: int, experts: int, row_bytes, chunks
) -> list[Step]:
    """Pack the 1/TP capacity slice; phase 1, intra: to each local peer j the blocks of every node's
    local-j member (part / L); phase 2, inter: to each same-local-index peer the node's blocks for it
    (part / N, L x the flat message); re-laid out before, between and after (three copies of the part);
    AllGather over TP; copy into place."""
    L, N, TP, c = ep.ranks_per_node, ep.nodes, tp.size, ep.concurrent_per_node
    part = S / TP
    out: list[Step] = []
    if TP > 1:
        out.append(Step("pack", "pack", nbytes=part))
    out.append(Step("regroup[0]", "pack", nbytes=part))
    out.append(
        Step("alltoall[intra]", "a2a", call(cluster, c, intra_msgs=L - 1, intra_bytes=part * (L - 1) / L, size=part))
    )
    out.append(Step("regroup[1]", "pack", nbytes=part))
    # The inter phase's efficiency: on the emulator at a flat AllToAll's with the same message size (the
    # shaper's bursts grow with the message); on a real cluster at the rank's buffer, as the flat one's,
    # since NCCL streams both through the same NIC: there the larger messages pay off through the
    # per-message cost (routed.call), not twice.
    size = part * L if cluster.host_cores else part
    out.append(
        Step("alltoall[inter]", "a2a", call(cluster, c, inter_msgs=N - 1, inter_bytes=part * (N - 1) / N, size=size))
    )
    out.append(Step("regroup[2]", "pack", nbytes=part))
    if TP > 1:
        out.append(Step("allgather", "ag", gather(part, tp, cluster), gather=True, msgs=TP - 1))
    out.append(Step("copy", "copy", nbytes=S))
    return out


# -- allgather: Megatron-Core's AllGather dispatcher (baselines/exchange_allgather.py) -----------------------------
def steps_allgather(
    S: float, ep: GroupShape, tp: GroupShape, cluster: Cluster, top_k: int, experts: int, row_bytes, chunks
) -> list[Step]:
    """The TP rank's token shard gathered over EP (across the nodes), then over TP; the routes (an int64
    slot per route) the same way; the local experts' slots of every source placed; the gates over EP."""
    P, TP = ep.size, tp.size
    sh = S / (top_k * TP)  # this TP rank's token shard
    rows = sh / row_bytes if row_bytes else 0.0  # its tokens (0: row size unknown, row metadata not priced)
    out: list[Step] = []
    if TP > 1:
        out.append(Step("shard", "pack", nbytes=sh))
    out.append(Step("allgather[ep]", "ag", gather(sh, ep, cluster), gather=True, msgs=P - 1))
    if TP > 1:
        out.append(Step("allgather[tp]", "ag", gather(P * sh, tp, cluster), gather=True, msgs=TP - 1))
    if rows:
        slots = SLOT_BYTES * top_k * rows
        out.append(Step("slots[ep]", "meta", gather(slots, ep, cluster), gather=True, msgs=P - 1))
        if TP > 1:
            out.append(Step("slots[tp]", "meta", gather(P * slots, tp, cluster), gather=True, msgs=TP - 1))
    out.append(Step("copy", "copy", nbytes=S))  # the local experts' slots of every source, gathered
    if rows:
        gates = GATE_BYTES * top_k * rows
        out.append(Step("gates[ep]", "meta", gather(gates, ep, cluster), gather=True, msgs=P - 1))
    return out


# -- node-dedup: DeepEP's normal dispatch, node-deduplicated (baselines/exchange_node_dedup.py) -----------------------
def steps_node_dedup(
    S: float, ep: GroupShape, tp: GroupShape, cluster: Cluster, top_k: int, experts: int, row_bytes, chunks
) -> list[Step]:
    """1. rails: each token once to every node it touches, to that node's member of this local index;
    2. forward: the gateway's rows to the node's members holding one of their experts, one copy per
    (row, member); 3. the rows every TP rank received gathered over TP (uneven). Count exchanges before
    each uneven step; each row's gates and routes travel in the same batch as the row (one wait: the call's
    ``riders``). A node of one member forwards to itself: no count exchange, nothing sent."""
    P, L, N, TP, c = ep.size, ep.ranks_per_node, ep.nodes, tp.size, ep.concurrent_per_node
    sh = S / (top_k * TP)
    rows = sh / row_bytes if row_bytes else 0.0
    per_row = GATE_BYTES * top_k + SLOT_BYTES * (1 + top_k)  # a row's gates and routes (token or source, k slots)
    p_node, p_rank = touch_probability(experts, top_k, N), touch_probability(experts, top_k, P)
    out: list[Step] = []
    if TP > 1:
        out.append(Step("shard", "pack", nbytes=sh))
    out.append(Step("counts[1]", "meta", counts(ep, cluster)))
    out.append(Step("pack[1]", "pack", nbytes=sh * N * p_node))
    r1 = rows * (N - 1) * p_node * per_row
    size1 = (sh + rows * per_row) * N * p_node
    rails = call(cluster, c, inter_msgs=N - 1, inter_bytes=sh * (N - 1) * p_node + r1, size=size1)
    out.append(Step("rails", "a2a", rails, riders=(r1, 0.0)))
    # its own rows need no send; a node of one member only packs them
    if L > 1:
        out.append(Step("counts[2]", "meta", counts(ep, cluster)))
    out.append(Step("pack[2]", "pack", nbytes=N * sh * L * p_rank))
    if L > 1:
        r2 = N * rows * (L - 1) * p_rank * per_row
        size2 = N * (sh + rows * per_row) * L * p_rank
        fwd = call(cluster, c, intra_msgs=L - 1, intra_bytes=N * sh * (L - 1) * p_rank + r2, size=size2)
        out.append(Step("forward", "a2a", fwd, riders=(0.0, r2)))
    if TP > 1:
        got = P * sh * p_rank
        routes = SLOT_BYTES * (1 + top_k) * P * rows * p_rank  # source member + k slots per row
        ag = gather(got + routes, tp, cluster)
        out.append(Step("counts[tp]", "meta", counts(tp, cluster)))
        out.append(
            Step(
                "allgather[tp]",
                "ag",
                ag,
                gather=True,
                msgs=TP - 1,
                riders=_share(ag, routes / (got + routes) if got + routes else 0.0),
            )
        )
    out.append(Step("copy", "copy", nbytes=S))
    return out


def _share(ct, frac: float) -> tuple[float, float]:
    """(inter, intra) bytes of ``ct`` that are a ``frac`` share of what it moves."""
    return ct.inter_bytes * frac, ct.intra_bytes * frac


# -- inter-node payload per rank and dispatch --------------------------------------------------------------
def shard_gathered_bytes(g: LayoutBytes) -> tuple[str, float]:
    """allgather: the TP rank's token shard to every remote EP member."""
    return "S/(k TP) x (N-1) L", g.S / (g.top_k * g.tp) * (g.nodes - 1) * g.per_node


def shard_per_node_bytes(g: LayoutBytes) -> tuple[str, float]:
    """node-dedup: the TP rank's token shard once per remote node a token touches."""
    p = touch_probability(g.experts, g.top_k, g.nodes)
    return "S/(k TP) x (N-1) x [1 - C(E-E/N, k)/C(E, k)]", g.S / (g.top_k * g.tp) * (g.nodes - 1) * p


def shard_gathered_routing_bytes(r: RoutingBytes) -> tuple[str, int]:
    return "b T/TP (P-L)", r.row_bytes * r.tokens // r.tp * (r.members - r.per_node)


def shard_per_node_routing_bytes(r: RoutingBytes) -> tuple[str, int]:
    """Rank 0 (member 0, node 0): a row per (token of TP rank 0's shard, remote node it touches)."""
    slots = r.slots[:, : r.tokens // r.tp]  # TP rank 0's shard
    node = ((slots // r.capacity) // (r.experts // r.members)) // r.per_node
    remote = sum(int((node == n).any(0).sum()) for n in range(1, r.nodes))
    return "b #(token, remote node)", r.row_bytes * remote
