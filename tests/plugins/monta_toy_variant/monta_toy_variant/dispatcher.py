"""``toy-dispatcher``: a whole exchange in one module, the worked example of docs/exchanges.md.

It is written against the one interface (``monta.comm.dispatcher.Dispatcher``): tokens and their
routing in, the experts' input out, and back. It encodes the tokens into DeepSpeed's [E, C, M] buffer
itself, moves the buffer with the toy pass (drop to the TP rank's capacity slice, one AllToAll over
EP, one AllGather over TP; ``monta_toy_variant.toy_pass``) and decodes on the way back. It declares no
capacity passes, so Lina's schedule runs it through its own dispatch and combine (windows of the
routing) and Lancet's refuses it up front.

Beside it, its model: the steps of its timeline (``steps``), its inter-node bytes from a layout
(``inter_bytes``) and from one routing (``routing_inter_bytes``). ``register`` is the one registry call.

Torch-free at import (the plugin loads with the CLI and the performance model): torch and DeepSpeed
are imported where a rank runs.
"""

from __future__ import annotations

from functools import cache

from monta.comm.dispatcher import Dispatcher


class ToyDispatcher(Dispatcher):
    """Encode + toy pass, toy pass + decode; the handle carries nothing (the plan says it all)."""

    def _spec(self, dispatch: bool):
        from monta.comm.exchange import PassSpec

        # experts tensor-parallel: every TP rank needs the full capacity back (gather over TP)
        s = PassSpec(drop_in=True, gather_out=self.expert_tp)
        return s if dispatch else s.transpose()

    def dispatch(self, x_SM, plan):
        from deepspeed.moe.sharded_moe import _sparse_encode

        x_ECM = _sparse_encode(x_SM, plan.slots, plan.num_experts, plan.capacity)
        return _toy_pass().apply(x_ECM, self._spec(True), self.mesh, self.meter, "dispatch"), None

    def combine(self, y_ECM, plan, handle):
        from deepspeed.moe.sharded_moe import _sparse_decode

        y = _toy_pass().apply(y_ECM, self._spec(False), self.mesh, self.meter, "combine")
        E, C, M = y.shape
        return _sparse_decode(y.reshape(E * C, M), plan.slots, plan.gates, plan.num_tokens)


@cache
def _toy_pass():
    """The toy pass as an autograd Function: the backward is the transposed pass (built once, with torch)."""
    import torch

    from monta_toy_variant import toy_pass

    class ToyPass(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, spec, mesh, meter, phase):
            ctx.spec, ctx.mesh, ctx.meter, ctx.phase = spec, mesh, meter, phase
            return toy_pass(x, spec, mesh, 1, meter, phase + "/fwd")

        @staticmethod
        def backward(ctx, grad):
            dx = toy_pass(grad.contiguous(), ctx.spec.transpose(), ctx.mesh, 1, ctx.meter, ctx.phase + "/bwd")
            return dx, None, None, None, None

    return ToyPass


# -- its model -------------------------------------------------------------------------------------------
def steps(S, ep, tp, cluster, top_k, experts, row_bytes, chunks):
    """One dispatch of one rank: encode (a copy of the buffer), pack the 1/TP slice, AllToAll over EP,
    AllGather over TP, copy into place; each after the previous (monta.perfmodel.network.routed)."""
    from monta.perfmodel.network.routed import Step, flat_a2a, gather

    part = S / tp.size
    out = [Step("encode", "pack", nbytes=S)]
    if tp.size > 1:
        out.append(Step("pack", "pack", nbytes=part))
    out.append(Step("alltoall", "a2a", flat_a2a(part, ep, cluster)))
    if tp.size > 1:
        out.append(Step("allgather", "ag", gather(part, tp, cluster), gather=True, msgs=tp.size - 1))
    out.append(Step("copy", "copy", nbytes=S))
    return out


def inter_bytes(g):
    """From a layout (``monta.exchanges.LayoutBytes``): the 1/TP slice to the other nodes."""
    return "S/TP x (N-1)/N", g.S / g.tp * (g.nodes - 1) / g.nodes


def routing_inter_bytes(r):
    """From one routing (``monta.exchanges.RoutingBytes``): its buffer's 1/TP slice to the P-L remote members."""
    return "B/TP (P-L)/P", r.buffer_bytes // r.tp * (r.members - r.per_node) // r.members


def register(registry) -> None:
    registry.add_exchange(
        "toy-dispatcher",
        dispatcher=ToyDispatcher,
        price=steps,
        inter_bytes=inter_bytes,
        routing_inter_bytes=routing_inter_bytes,
        about="toy plugin: encodes its tokens itself, one AllToAll and one AllGather of the buffer, decodes "
        "(no capacity passes: Lina runs it by routing windows, Lancet refuses it)",
    )
    registry.add_variant(
        "toy-dispatcher", exchange="toy-dispatcher", about="toy plugin: its dispatcher under DeepSpeed's schedule"
    )
