"""Tutel's 2D hierarchical AllToAll ("2DH") as an exchange pass: an intra-node AllToAll gathers, on
each local GPU, everything bound for its peers of the same local index on the other nodes, then one
inter-node AllToAll among those peers: N-1 messages L times larger instead of (N-1) x L small ones.

With MoNTA's TP redundancy removal: the pass keeps the core's drop -> AllToAll -> AllGather(TP), only
its AllToAll is the hierarchical one (``run_pass(..., alltoall=hierarchical_all_to_all)``). Values are
exactly the flat AllToAll's: same blocks, another route.
"""

from __future__ import annotations

import torch

from monta.comm.exchange import run_pass
from monta.comm.rows import a2av


class _Done:
    """The handle of a pass step that already finished (the two phases run back to back)."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def hierarchical_all_to_all(recv: torch.Tensor, send: torch.Tensor, mesh, meter, phase: str) -> _Done:
    """``recv`` = the flat AllToAll of ``send`` over the EP group ([P blocks, ...] along dim 0), in two
    phases: intra-node (to the node's member of local index j: the blocks of every node's local-j
    member), then inter-node among same-local-index members (the node's blocks for each remote one)."""
    ep = mesh.ep  # the EP axis: its communicator and its node geometry
    P, N, L = ep.size, ep.nodes, ep.per_node
    blk = send.reshape(P, -1)
    out = recv.view(P, -1)
    n0, l0 = ep.my_node, ep.my_local
    dest = [[ep.member(n, j) for n in range(N)] for j in range(L)]  # dest[j]: local-j members per node
    # phase 1: to local peer j, the blocks for (n, j) for every node n: [N, b]
    sends = [blk.new_empty((0, blk.shape[1])) for _ in range(P)]
    for j in range(L):
        sends[ep.member(n0, j)] = blk[dest[j]]
    rows = [N if ep.node[p] == n0 else 0 for p in range(P)]
    got = a2av(sends, ep, rows, meter, "alltoall", phase)
    # got[(n0, l)]: source (n0, l)'s blocks for (n, l0), n = 0..N-1
    sends = [blk.new_empty((0, blk.shape[1])) for _ in range(P)]
    for n in range(N):
        sends[ep.member(n, l0)] = torch.stack([got[ep.member(n0, j)][n] for j in range(L)])
    rows = [L if ep.local[p] == l0 else 0 for p in range(P)]
    got = a2av(sends, ep, rows, meter, "alltoall", phase)
    # got[(n, l0)]: the blocks for this rank from sources (n, l), l = 0..L-1
    for n in range(N):
        part = got[ep.member(n, l0)]
        for j in range(L):
            out[ep.member(n, j)].copy_(part[j])
    return _Done()


def run_pass_2dh(x, spec, mesh, chunks, meter=None, phase=""):
    """The core pass (drop, AllToAll, AllGather over TP) with the 2DH AllToAll; never chunked."""
    return run_pass(x, spec, mesh, 1, meter, phase, alltoall=hierarchical_all_to_all)
