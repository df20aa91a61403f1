"""AllToAll-over-AllReduce priority: a per-rank scheduler that runs gradient AllReduce micro-ops
only while no AllToAll is waiting or running (``monta.comm.activity.ALLTOALL``); Lina and monta+priority share it.

Collectives cannot be preempted, so priority means: never *start* a gradient micro-op while an
AllToAll is pending. Micro-ops run in one fixed order on every rank (reverse registration
order, i.e. backward order), so ranks always agree on the sequence of collectives.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from monta.comm import activity
from monta.variants import LINA_CHUNK_BYTES


@dataclass
class GradItem:
    """One gradient to synchronize: divided by ``divisor`` then summed over ``group`` (size ``group_size``)."""

    param: torch.nn.Parameter
    group: Any
    group_size: int
    divisor: float


class GradReadiness:
    """Process-wide 'this parameter's gradient is final' signal (autograd hooks and deferred dW both feed it)."""

    listeners: list = []

    @classmethod
    def notify(cls, param: torch.nn.Parameter) -> None:
        for fn in cls.listeners:
            fn(param)


def chunk_views(t: torch.Tensor, chunk_bytes: int | None) -> list[torch.Tensor]:
    """Equal chunks of one flat gradient (never two gradients in one chunk); None = whole tensor."""
    flat = t.view(-1)
    if chunk_bytes is None:
        return [flat]
    per = max(1, chunk_bytes // t.element_size())
    return list(flat.split(per))


class PriorityGradSync:
    """Synchronizes gradients in a background thread as they become ready, yielding to AllToAlls.

    ``chunk_bytes``: Lina's equal micro-ops (default 30 MB); None sends each gradient whole.
    ``priority=False`` turns the yield off (for ablation). Stats: micro-ops run and seconds spent
    waiting for an AllToAll to finish before launching one.
    """

    def __init__(
        self,
        items: list[GradItem],
        chunk_bytes: int | None = LINA_CHUNK_BYTES,
        priority: bool = True,
        tracker: activity.ActivityTracker = activity.ALLTOALL,
    ):
        self.items = list(reversed(items))  # backward produces the last parameters' grads first
        self.index = {id(it.param): i for i, it in enumerate(self.items)}
        self.chunk_bytes = chunk_bytes
        self.priority = priority
        self.tracker = tracker
        self._ready = [False] * len(self.items)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.micro_ops = 0
        self.yield_s = 0.0
        self.busy_s = 0.0
        self._hooks = []

    # -- readiness --------------------------------------------------------------------------
    def attach(self) -> None:
        """Listen for final gradients: post-accumulate hooks plus the deferred-dW signal."""
        GradReadiness.listeners.append(self._on_ready)
        for it in self.items:
            self._hooks.append(it.param.register_post_accumulate_grad_hook(self._on_hook))

    def detach(self) -> None:
        if self._on_ready in GradReadiness.listeners:
            GradReadiness.listeners.remove(self._on_ready)
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    def _on_hook(self, param) -> None:
        """Autograd's post-accumulate hook. A TP linear's weight whose dW a scheduler deferred (Lancet's
        sink) gets this hook with its dW still queued (autograd accumulated nothing): it is final only at
        ``GradReadiness`` (its last dW in). Without deferral the dW ran inside backward, before the hook."""
        if getattr(param, "_pending_dw", 0) > 0:
            return
        self._on_ready(param)

    def _on_ready(self, param) -> None:
        i = self.index.get(id(param))
        if i is None:
            return
        with self._cond:
            self._ready[i] = True
            self._cond.notify_all()

    # -- one step -----------------------------------------------------------------------------
    def start(self) -> None:
        """Call before backward: the thread waits for gradients and reduces them in order."""
        self._ready = [False] * len(self.items)
        self._error = None
        self.micro_ops, self.yield_s, self.busy_s = 0, 0.0, 0.0
        self._thread = threading.Thread(target=self._run, name="grad-sync", daemon=True)
        self._thread.start()

    def finish(self, timeout: float = 600.0) -> None:
        """Call after backward: mark everything ready (grads are final) and wait for the thread."""
        with self._cond:
            self._ready = [True] * len(self.items)
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("gradient synchronization did not finish in time")
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            for i, it in enumerate(self.items):
                with self._cond:
                    self._cond.wait_for(lambda: self._ready[i])  # noqa: B023 (called within this iteration)
                grad = it.param.grad
                if grad is None:
                    raise RuntimeError("a parameter has no gradient after backward; cannot synchronize it")
                if it.divisor != 1.0:
                    grad.div_(it.divisor)
                if it.group_size == 1:
                    continue
                for chunk in chunk_views(grad, self.chunk_bytes):
                    if self.priority and self.tracker.busy():
                        t0 = time.perf_counter()
                        self.tracker.wait_idle()
                        self.yield_s += time.perf_counter() - t0
                    t0 = time.perf_counter()
                    dist.all_reduce(chunk, group=it.group)
                    self.busy_s += time.perf_counter() - t0
                    self.micro_ops += 1
        except BaseException as e:  # surfaced by finish() on the main thread
            self._error = e
