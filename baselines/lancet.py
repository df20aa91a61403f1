"""Lancet-style schedule (MLSys'24): the non-MoE operators before each MoE layer (norm, attention, gate)
partitioned along the batch and pipelined with the dispatch AllToAll, expert capacity carried from partition
to partition (identical token dropping); the rest of the exchange pipelined with the experts (both passes);
weight-gradient (dW) computations deferred in backward to run while an AllToAll is in flight.

What DeepSpeed's top-2 rule allows: slots fill with every first choice in token order, then every
second choice. A partition's first choices are final once it is gated (their slots depend only on
earlier partitions), so capacity slots [0, min over experts of the first choices so far) can be
dispatched while the next partition's attention runs. Second choices start after the batch's last
first choice, and every token's output needs both routes, so the second half of the dispatch waits
for the last partition and the combine cannot overlap the operators after the layer without
changing which tokens drop (Lancet's post-MoE overlap needs a per-token slot rule).
"""

from __future__ import annotations

import threading
from collections import deque

import torch
import torch.distributed as dist
import torch.nn.functional as F
from deepspeed.moe.sharded_moe import _route_slots, _sparse_encode, gumbel_rsample

from monta.moe import Observers, RoutingPlan
from monta_baselines.pipeline import capacity_chunks, capacity_passes, launch_dispatch, pipeline_pieces


class CarryRouter:
    """DeepSpeed's top-2 gate (drop_tokens=True) decided partition by partition, capacity carried.

    ``add`` takes one partition's logits and returns how many leading capacity slots of every
    expert are final (filled by first choices); ``finish`` adds the second choices, whose slots
    start after all first choices of the batch, and returns what DeepSpeed's gate returns.
    """

    def __init__(self, num_experts: int, capacity: int, device=None):
        self.E, self.C = num_experts, capacity
        self.carry1 = torch.zeros(num_experts, dtype=torch.long, device=device)
        self.parts: list[tuple] = []  # (logits, gates, mask1, loc1)

    def add(self, logits: torch.Tensor) -> int:
        gates = F.softmax(logits, dim=1)
        mask1 = F.one_hot(torch.argmax(gates, dim=1), num_classes=self.E)
        loc1 = torch.cumsum(mask1, dim=0) - 1 + self.carry1
        self.carry1 = self.carry1 + mask1.sum(0)
        self.parts.append((logits, gates, mask1, loc1))
        return int(self.carry1.min().clamp(max=self.C))

    def first_slots(self) -> torch.Tensor:
        """[1, tokens so far]: flat slot e * C + loc of each first choice; dropped ones on slot E * C."""
        mask1 = torch.cat([m for _, _, m, _ in self.parts])
        loc1 = torch.sum(torch.cat([loc for _, _, _, loc in self.parts]) * mask1, dim=1)
        slot = torch.argmax(mask1, dim=1) * self.C + loc1
        return torch.where(loc1 < self.C, slot, torch.full_like(slot, self.E * self.C)).unsqueeze(0)

    def finish(self, noise: list[torch.Tensor] | None):
        """(l_aux, indices [2, S], locations [2, S], gates [2, S], exp_counts), as the sparse gate."""
        E, capacity = self.E, self.C
        carry2 = self.carry1.clone()  # second choices start after every first choice of the batch
        cols = {k: [] for k in ("i1", "i2", "l1", "l2", "g1", "g2", "gates", "m1", "cnt")}
        for p, (lp, gates, mask1, loc1) in enumerate(self.parts):
            logits = lp + noise[p] if noise is not None else lp
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


def top2_route_with_carry(logit_parts: list[torch.Tensor], noise_parts: list[torch.Tensor] | None, capacity: int):
    """DeepSpeed's top-2 gating (drop_tokens=True) computed partition by partition (``CarryRouter``)."""
    router = CarryRouter(logit_parts[0].shape[1], capacity, logit_parts[0].device)
    for lp in logit_parts:
        router.add(lp)
    return router.finish(noise_parts)


def encode_window(
    x_SM: torch.Tensor, slots: torch.Tensor, num_experts: int, capacity: int, lo: int, hi: int
) -> torch.Tensor:
    """Capacity slots [lo, hi) of every expert of the [E, C, M] dispatch buffer, as [E, hi - lo, M]:
    the routes of ``slots`` (flat e * C + loc, E * C = dropped) that land there, from ``x_SM``."""
    w = hi - lo
    e, loc = torch.div(slots, capacity, rounding_mode="floor"), slots % capacity
    keep = (slots < num_experts * capacity) & (loc >= lo) & (loc < hi)
    local = torch.where(keep, e * w + loc - lo, torch.full_like(slots, num_experts * w))
    return _sparse_encode(x_SM, local, num_experts, w)


class DeferredDW:
    """Backward dW queue drained by a worker thread while an exchange's backward (its AllToAlls) is in
    flight (greedy fill); whatever is left runs when backward ends, before gradients are synchronized.

    The worker is woken by events (a dW queued, an exchange backward opening or closing), never by
    polling: with 8 ranks on 2 cores a sub-millisecond poll steals the cores the other ranks need.
    """

    def __init__(self, observers: Observers):
        self.observers = observers  # the model's: takes its dW, its backward clock opens/closes, its clock restarts
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
        self.observers.defer_weight_grads(self)
        self.observers.listen_backward(self._on_mark)
        self._thread = threading.Thread(target=self._run, name="lancet-dw", daemon=True)
        self._thread.start()

    def end(self) -> None:
        self.observers.defer_weight_grads(None)
        self.observers.unlisten_backward(self._on_mark)
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
                    self.observers.restart()  # this thread waited for work: the dW's count starts now
                    fn()
                    self.during_alltoall += int(in_a2a)
        except BaseException as e:  # surfaced by end()
            self._error = e


class LancetSchedule:
    """Attention + gate partitioned along the batch, each partition's final capacity window dispatched
    while the next partition's attention runs; the remaining capacity pipelined with the experts over
    ``partitions`` chunks (forward and backward); dW deferral in backward.

    ``control``: a process group over the same ranks as the EP group, used by nothing else, on which
    the EP ranks agree on each early window (every rank must send the same window size).
    ``observers``: the model's ``monta.moe.Observers`` (its backward clock feeds the dW filler).
    """

    def __init__(self, partitions: int = 2, control=None, observers: Observers | None = None):
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise ValueError(f"lancet partitions={partitions!r} must be an integer >= 1")
        self.partitions = partitions
        self.control = control
        self.dw = DeferredDW(observers if observers is not None else Observers())
        self.early_slots = 0  # capacity slots dispatched during attention, last forward
        self.capacity = 0

    def begin_backward(self) -> None:
        self.dw.begin()

    def end_backward(self) -> None:
        self.dw.end()

    def __call__(self, moe, x: torch.Tensor):
        """The MoE alone (its input already computed): the gate still runs per batch partition."""
        _, out, l_aux = self._moe(moe.deepspeed_moe, x, lambda xp: (None, xp))
        return out, l_aux

    def layer_forward(self, dl, x: torch.Tensor):
        """A whole decoder layer: norm, attention, norm, gate per batch partition, then the MoE."""

        def pre(xp):
            with dl.observers.phase("attention"):
                h = xp + dl.attn(dl.norm1(xp))
            return h, dl.norm2(h)

        h, out, l_aux = self._moe(dl.moe.deepspeed_moe, x, pre)
        return h + out, l_aux

    def _moe(self, layer, x_BSM: torch.Tensor, pre):
        gate = layer.gate
        if gate.k != 2 or not gate.drop_tokens or gate.noisy_gate_policy not in (None, "None"):
            raise ValueError(
                "the lancet variant carries capacity for DeepSpeed's top-2 gate with dropping; use --topk 2"
            )
        passes = capacity_passes(layer)  # the capability the registry requires of its exchange (needs=)
        g = passes.mesh
        if g.ep.size > 1 and self.control is None:
            raise ValueError("LancetSchedule needs control= (a spare group over the EP ranks) when EP > 1")
        B, M = x_BSM.shape[0], x_BSM.shape[-1]
        S, E = x_BSM.numel() // M, layer.ep_size * layer.num_local_experts
        C = layer.expected_capacity(S)
        passes.check_capacity(C)
        noise = None
        if gate.top2_2nd_expert_sampling:  # one draw for the whole batch, as DeepSpeed's gate does
            noise = gumbel_rsample((S, E), device=x_BSM.device)
        router = CarryRouter(E, C, x_BSM.device)
        parts = x_BSM.tensor_split(min(self.partitions, B))  # along the batch: attention is per sequence
        hs, ms, pieces, launched = [], [], [], []
        lo = 0
        for p, xp in enumerate(parts):
            h, m = pre(xp)
            hs.append(h)
            ms.append(m.reshape(-1, M))
            final = layer._timed("gate", lambda: router.add(F.linear(ms[-1].float(), gate.wg.weight.float())))
            if p + 1 == len(parts):
                break
            hi = self._agree(final, x_BSM.device) // g.tp.size * g.tp.size
            if hi > lo:  # send what is final now; the next partition's attention runs meanwhile
                piece = encode_window(torch.cat(ms), router.first_slots(), E, C, lo, hi)
                pieces.append(piece)
                launched.append(launch_dispatch(layer, piece))
                lo = hi
        if noise is not None:
            noise = list(noise.split([m.shape[0] for m in ms]))
        l_aux, idx, loc, gates, counts = layer._timed("gate", router.finish, noise)
        plan = RoutingPlan(_route_slots(idx, loc, E, C), gates, C, E, S, l_aux, counts.detach())
        layer.keep_aux(plan)
        self.early_slots, self.capacity = lo, C
        x_SM = torch.cat(ms)
        if lo < C:
            rest = passes.encode(x_SM, plan)[:, lo:]  # slots [0, lo) left early, from their windows
            chunks = min(self.partitions, (C - lo) // g.tp.size)
            pieces += list(rest.split(capacity_chunks(C - lo, g.tp.size, chunks), dim=1))
        y_ECM = pipeline_pieces(layer, pieces, launched)
        out = passes.decode(y_ECM, plan).reshape(x_BSM.shape)
        h = torch.cat(hs) if hs[0] is not None else None
        return h, out, plan.l_aux

    def _agree(self, final: int, device) -> int:
        """The smallest count of final slots over the EP group (all ranks dispatch the same window)."""
        if self.control is None:
            return final
        t = torch.tensor([final], dtype=torch.long, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.control)
        return int(t.item())
