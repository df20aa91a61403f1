"""The gate under a named routing workload, and what a gate's routing did (docs/routing.md).

``workload_gate``: DeepSpeed's gate with its expert choice replaced by a workload's (``monta bench step
--routing``): the workload's top-k experts per token, weighted by the gate's own softmax probabilities
for those experts (normalized over the routes the capacity keeps, as DeepSpeed's gate normalizes), so
the gate's weights still get gradients through the combine and the auxiliary loss. The capacity drops
by DeepSpeed's ``drop_policy="position"`` (first come by token order), the rule ``monta.routing`` uses,
so a rank's slots are exactly ``Routing.slots(rank, C)``.

``WorkloadChoices``: a workload's choices for one EP member, given to ``monta.moe.MoE(choices=...)`` when the
layer is built (the routing source: the gate's own choice without it).

``RouteTally``: per routing call, the per-expert load the gate chose (its ``exp_counts``, before the
capacity) and what the capacity dropped, as tensors: reading them costs no sync inside the timed step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True, eq=False)
class WorkloadChoices:
    """A routing workload's [S, k] expert choices for this EP member (``Routing.choices[ep_rank]``; -1: a
    route to no expert), which the layer routes in place of its gate's choice."""

    choices_Sk: torch.Tensor

    def __deepcopy__(self, memo):  # read-only and shared by every layer of a model
        return self


def workload_gate(gate, x_SM: torch.Tensor, choices_Sk: torch.Tensor, capacity: int):
    """The sparse gate's tuple (l_aux, C, E, indices [k, S], locations [k, S], gates [k, S], exp_counts)
    for ``choices_Sk`` ([S, k] expert per route, -1: a route to no expert) at ``capacity``."""
    S, k = choices_Sk.shape
    if S != x_SM.shape[0] or k != gate.k:
        raise ValueError(
            f"the routing has {S} tokens x top-{k} but this MoE call has {x_SM.shape[0]} tokens x top-{gate.k}; "
            "build it for the step's tokens per micro-batch and top-k"
        )
    logits = F.linear(x_SM.float(), gate.wg.weight.float())
    probs = F.softmax(logits, dim=1)
    E = probs.shape[1]
    choices = choices_Sk.to(device=probs.device, dtype=torch.long)
    valid = choices >= 0
    safe = choices.clamp_min(0)
    mask = torch.zeros(S, E, dtype=torch.long, device=probs.device).scatter_add_(1, safe, valid.long())
    place = (mask.cumsum(0) - mask).gather(1, safe)  # routes to the same expert from earlier tokens
    kept = valid & (place < capacity)
    picked = probs.gather(1, safe) * kept
    gates = picked / picked.sum(1, keepdim=True).clamp_min(torch.finfo(picked.dtype).eps)
    # DeepSpeed's top-k auxiliary loss: mean gate probability x share of the routes, per expert
    l_aux = torch.mean(probs.mean(0) * mask.float().mean(0)) * E * E / k
    indices = torch.where(kept, choices, torch.full_like(choices, -1))
    locations = place * kept
    exp_counts = mask.sum(0).detach()
    return (
        l_aux,
        torch.tensor(capacity),
        E,
        indices.t().contiguous().to(torch.int32),
        locations.t().contiguous().to(torch.int32),
        gates.t().contiguous(),
        exp_counts,
    )


@dataclass(frozen=True)
class RouteTally:
    """One routing call's load and drops, as tensors (converted after the timed step)."""

    counts: torch.Tensor  # [E] routes the gate chose per expert (before the capacity)
    dropped_routes: torch.Tensor  # routes past the capacity (on the scratch slot E * C)
    dropped_tokens: torch.Tensor  # tokens that lost at least one route
    tokens: int

    @staticmethod
    def of(plan, choices_Sk: torch.Tensor | None = None) -> RouteTally:
        """From a ``RoutingPlan``: its ``exp_counts`` and the routes on the scratch slot; ``choices_Sk``: a
        workload's choices, whose routes to no expert (-1: a token W4's rank does not hold) are no drop."""
        scratch = plan.slots == plan.capacity * plan.num_experts
        if choices_Sk is not None:
            scratch = scratch & (choices_Sk.t().to(scratch.device) >= 0)
        return RouteTally(plan.exp_counts.detach(), scratch.sum(), scratch.any(0).sum(), plan.num_tokens)

    def as_json(self) -> dict:
        return {
            "counts": [int(c) for c in self.counts.tolist()],
            "dropped_routes": int(self.dropped_routes),
            "dropped_tokens": int(self.dropped_tokens),
            "tokens": self.tokens,
        }
