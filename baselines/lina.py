"""Lina-style schedule (USENIX ATC'23): the MoE exchange split along tokens, pipelined with the experts
per chunk in forward and backward; gradient AllReduce in equal 30 MB micro-ops, only while no AllToAll is pending.

The gradient side is ``monta.comm.priority.PriorityGradSync`` (shared with monta+priority);
this module is the token-split MoE side.
"""

from __future__ import annotations

import torch

from monta_baselines.pipeline import pipelined_experts, routing_windows


class LinaSchedule:
    """MoE forward: gate, then (dispatch, experts, combine) per token chunk, pipelined (its backward
    too); then decode. An exchange with passes over capacity windows (the capability) is pipelined per
    capacity chunk of its buffer; any other through its own dispatch and combine, per window of the routing."""

    def __init__(self, chunks: int = 4):
        if not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"lina chunks={chunks!r} must be an integer >= 1")
        self.chunks = chunks

    def __call__(self, moe, x: torch.Tensor):
        layer = moe.deepspeed_moe
        x_SM = x.reshape(-1, x.shape[-1])
        plan = layer._timed("gate", layer.route, x_SM)
        passes = layer.exchange.capacity_passes
        if passes is None:  # the capability check: no capacity passes, so windows of the routing
            return routing_windows(layer, x_SM, plan, self.chunks).reshape(x.shape), plan.l_aux
        y_ECM = pipelined_experts(layer, passes.encode(x_SM, plan), self.chunks, exchange_chunks=plan.chunks)
        return passes.decode(y_ECM, plan).reshape(x.shape), plan.l_aux
