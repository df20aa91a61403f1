"""Lancet-style schedule (MLSys'24): the gate partitioned along the batch with expert capacity carried
from partition to partition (identical token dropping), the exchange pipelined with the experts (both passes),
and weight-gradient (dW) computations deferred in backward to run while an AllToAll is in flight.
"""

from __future__ import annotations

import threading
from collections import deque

import torch
import torch.nn.functional as F
from deepspeed.moe.sharded_moe import _route_slots, gumbel_rsample

from baselines.pipeline import pipelined_experts
from monta.model.tp import DeferredWeightGrad
from monta.model.transformer import BACKWARD_CLOCK
from monta.moe import RoutingPlan


def top2_route_with_carry(logit_parts: list[torch.Tensor], noise_parts: list[torch.Tensor] | None,
                          capacity: int):
    """DeepSpeed's top-2 gating (drop_tokens=True) computed partition by partition.

    Slot order is DeepSpeed's: all first choices in token order, then all second choices. So the
    carry is two counters per expert: first choices of earlier partitions, and (offset by the
    total of first choices) second choices of earlier partitions. Returns
    (l_aux, indices [2, S], locations [2, S], gates [2, S], exp_counts), as the sparse gate does.
    """
    E = logit_parts[0].shape[1]
    dev = logit_parts[0].device
    carry1 = torch.zeros(E, dtype=torch.long, device=dev)
    firsts = []
    for lp in logit_parts:
        gates = F.softmax(lp, dim=1)
        mask1 = F.one_hot(torch.argmax(gates, dim=1), num_classes=E)
        loc1 = torch.cumsum(mask1, dim=0) - 1 + carry1
        carry1 = carry1 + mask1.sum(0)
        firsts.append((gates, mask1, loc1))
    carry2 = carry1.clone()  # second choices start after every first choice of the batch
    cols = {k: [] for k in ("i1", "i2", "l1", "l2", "g1", "g2", "gates", "m1", "cnt")}
    for p, lp in enumerate(logit_parts):
        gates, mask1, loc1 = firsts[p]
        logits = lp + noise_parts[p] if noise_parts is not None else lp
        mask2 = F.one_hot(torch.argmax(logits.masked_fill(mask1.bool(), float("-inf")), dim=1), num_classes=E)
        loc2 = torch.cumsum(mask2, dim=0) - 1 + carry2
        carry2 = carry2 + mask2.sum(0)
        cols["gates"].append(gates)
        cols["m1"].append(mask1)
        cols["cnt"].append((mask1 + mask2).sum(0))
        k1 = mask1 * torch.lt(loc1, capacity)
        k2 = mask2 * torch.lt(loc2, capacity)
        g1 = torch.einsum("se,se->s", gates, k1.float())
        g2 = torch.einsum("se,se->s", gates, k2.float())
        denom = torch.clamp(g1 + g2, min=torch.finfo(g1.dtype).eps)
        cols["g1"].append(g1 / denom)
        cols["g2"].append(g2 / denom)
        cols["l1"].append(torch.sum(loc1 * k1, dim=1))
        cols["l2"].append(torch.sum(loc2 * k2, dim=1))
        cols["i1"].append(torch.where(k1.any(1), torch.argmax(mask1, 1), torch.full_like(loc1[:, 0], -1)))
        cols["i2"].append(torch.where(k2.any(1), torch.argmax(mask2, 1), torch.full_like(loc2[:, 0], -1)))
    cat = {k: torch.cat(v) if k != "cnt" else torch.stack(v).sum(0) for k, v in cols.items()}
    me = cat["gates"].mean(0)
    ce = cat["m1"].float().mean(0)
    l_aux = torch.mean(me * ce) * E * E
    indices = torch.stack([cat["i1"], cat["i2"]]).to(torch.int32)
    locations = torch.stack([cat["l1"], cat["l2"]]).to(torch.int32)
    return l_aux, indices, locations, torch.stack([cat["g1"], cat["g2"]]), cat["cnt"]


class DeferredDW:
    """Backward dW queue drained by a worker thread while an exchange's backward (its AllToAlls) is in
    flight (greedy fill); whatever is left runs when backward ends, before gradients are synchronized.

    The worker is woken by events (a dW queued, an exchange backward opening or closing), never by
    polling: with 8 ranks on 2 cores a sub-millisecond poll steals the cores the other ranks need.
    """

    def __init__(self, clock=BACKWARD_CLOCK):
        self.clock = clock
        self._q: deque = deque()
        self._cond = threading.Condition()
        self._drain = False
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.deferred = 0
        self.during_alltoall = 0

    def defer(self, fn) -> None:
        with self._cond:
            self._q.append(fn)
            self.deferred += 1
            self._cond.notify_all()

    def _on_mark(self, role: str) -> None:
        with self._cond:
            self._in_flight = max(0, self._in_flight + (1 if role == "open" else -1))
            self._cond.notify_all()

    def begin(self) -> None:
        self._q.clear()
        self._drain, self._error, self._in_flight = False, None, 0
        self.deferred = self.during_alltoall = 0
        DeferredWeightGrad.sink = self
        self.clock.listeners.append(self._on_mark)
        self._thread = threading.Thread(target=self._run, name="lancet-dw", daemon=True)
        self._thread.start()

    def end(self) -> None:
        DeferredWeightGrad.sink = None
        if self._on_mark in self.clock.listeners:
            self.clock.listeners.remove(self._on_mark)
        with self._cond:
            self._drain = True
            self._cond.notify_all()
        self._thread.join()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            with torch.no_grad():
                while True:
                    with self._cond:
                        self._cond.wait_for(lambda: self._drain or (self._q and self._in_flight > 0))
                        if not self._q:
                            return  # drained and empty
                        fn = self._q.popleft()
                        in_a2a = self._in_flight > 0
                    fn()
                    self.during_alltoall += int(in_a2a)
        except BaseException as e:  # surfaced by end()
            self._error = e


class LancetSchedule:
    """MoE forward with the gate partitioned along the batch (capacity carried), then the exchange
    and experts pipelined over the same number of capacity partitions; dW deferral in backward."""

    def __init__(self, partitions: int = 2):
        if not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"lancet partitions={partitions!r} must be an integer >= 1")
        self.partitions = partitions
        self.dw = DeferredDW()

    def begin_backward(self) -> None:
        self.dw.begin()

    def end_backward(self) -> None:
        self.dw.end()

    def route(self, layer, x_SM: torch.Tensor) -> RoutingPlan:
        gate = layer.gate
        if gate.k != 2 or not gate.drop_tokens or gate.noisy_gate_policy not in (None, "None"):
            raise ValueError("the lancet variant carries capacity for DeepSpeed's top-2 gate with dropping; "
                             "use --topk 2")
        S, E = x_SM.shape[0], layer.ep_size * layer.num_local_experts
        C = layer.expected_capacity(S)
        layer.exchange.check(C)
        parts = x_SM.split(-(-S // self.partitions))
        logit_parts = [F.linear(p.float(), gate.wg.weight.float()) for p in parts]
        noise = None
        if gate.top2_2nd_expert_sampling:  # one draw for the whole batch, as DeepSpeed's gate does
            noise = list(gumbel_rsample((S, E), device=x_SM.device).split([p.shape[0] for p in parts]))
        l_aux, idx, loc, gates, counts = top2_route_with_carry(logit_parts, noise, C)
        return RoutingPlan(_route_slots(idx, loc, E, C), gates, C, E, S, l_aux, counts.detach())

    def __call__(self, moe, x: torch.Tensor):
        layer = moe.deepspeed_moe
        x_SM = x.reshape(-1, x.shape[-1])
        plan = layer._timed("gate", self.route, layer, x_SM)
        y_ECM = pipelined_experts(layer, layer.encode(x_SM, plan), self.partitions)
        return layer.decode(y_ECM, plan).reshape(x.shape), plan.l_aux
