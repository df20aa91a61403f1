"""Timing an exchange's backward: a ``BackwardClock`` (one per model, its ``monta.moe.Observers``' own:
no process-wide clock) collects the seconds from an exchange's output gradient to its input gradient, and
the ``timed_*`` wrappers, given that clock, put its marks around a dispatcher's calls
(``timed_dispatch``, ``timed_combine``) or around a capacity pass (``timed_pass``; run directly off
autograd by a pipelined backward: ``timed_pass_backward``). The marks are identities: values never change.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import torch


class _BackwardMark(torch.autograd.Function):
    """Identity whose backward stamps a clock: 'open' after an exchange's output, 'close' before its input."""

    @staticmethod
    def forward(ctx, x, clock, key, role):
        ctx.clock, ctx.key, ctx.role = clock, key, role
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.clock.stamp(ctx.key, ctx.role)
        return grad, None, None, None


class BackwardClock:
    """Seconds spent in each exchange's backward (from its output gradient to its input gradient).

    CPU autograd runs a chain in one thread, so the interval is the transposed exchange itself.
    The Lina/Lancet pipelined backward stamps from its communication thread around each transposed
    pass (``timed_pass_backward``), so there too it is the exchange's own duration.
    """

    def __init__(self):
        self.enabled = False
        self.times: dict[str, float] = {}
        self.listeners: list[Callable[[str], None]] = []  # told "open"/"close" (Lancet's dW filler)
        self._open: dict[int, tuple[str, float]] = {}
        self._keys = itertools.count()  # one per marked call: its open and close pair up
        self._lock = threading.Lock()  # stamps come from autograd's thread and from a comm thread

    @property
    def active(self) -> bool:
        return self.enabled or bool(self.listeners)

    def stamp(self, key: tuple[int, str], role: str) -> None:
        if self.enabled and torch.cuda.is_available():
            torch.cuda.synchronize()
        now = time.perf_counter()
        with self._lock:
            if role == "open":
                self._open[key[0]] = (key[1], now)
            elif key[0] in self._open:
                name, t0 = self._open.pop(key[0])
                if self.enabled:
                    self.times[name] = self.times.get(name, 0.0) + now - t0
            else:
                return  # a close without its open (graph cut between them): nothing was in flight
            listeners = list(self.listeners)
        for fn in listeners:
            fn(role)

    def key(self, name: str) -> tuple[int, str]:
        return (next(self._keys), f"{name}_bwd")

    def clear(self) -> None:
        with self._lock:
            self.times.clear()
            self._open.clear()


def _marked(clock: BackwardClock, name: str, fn, x: torch.Tensor, *args):
    """``fn(x, *args)`` with its backward timed on ``clock`` as ``<name>_bwd`` (when the clock listens and a
    graph is built); ``fn`` returns a tensor or (tensor, handle)."""
    if not (clock.active and torch.is_grad_enabled() and x.requires_grad):
        return fn(x, *args)
    key = clock.key(name)
    got = fn(_BackwardMark.apply(x, clock, key, "close"), *args)
    if isinstance(got, tuple):
        return (_BackwardMark.apply(got[0], clock, key, "open"), *got[1:])
    return _BackwardMark.apply(got, clock, key, "open")


def timed_dispatch(clock: BackwardClock, exchange, x_SM: torch.Tensor, plan):
    """``exchange.dispatch(x_SM, plan)`` (a ``monta.comm.dispatcher.Dispatcher``), backward timed on ``clock``."""
    return _marked(clock, "dispatch", exchange.dispatch, x_SM, plan)


def timed_combine(clock: BackwardClock, exchange, y_ECM: torch.Tensor, plan, handle):
    """``exchange.combine(y_ECM, plan, handle)``, backward timed on ``clock``."""
    return _marked(clock, "combine", exchange.combine, y_ECM, plan, handle)


def timed_pass(clock: BackwardClock, passes, name: str, x: torch.Tensor, chunks: int | None = None) -> torch.Tensor:
    """A capacity pass (``CapacityPasses.dispatch_pass`` / ``combine_pass``, by ``name``) of ``x`` in
    ``chunks`` (None: the exchange's default), backward timed on ``clock``."""
    return _marked(clock, name, getattr(passes, f"{name}_pass"), x, chunks)


def timed_pass_backward(
    clock: BackwardClock, passes, name: str, grad: torch.Tensor, chunks: int | None = None
) -> torch.Tensor:
    """The transposed pass of ``grad`` run directly (a pipelined backward, off autograd), stamped on
    ``clock`` as ``timed_pass``'s backward is: ``<name>_bwd``, listeners told open/close."""
    fn = getattr(passes, f"{name}_pass_backward")
    if not clock.active:
        return fn(grad, chunks)
    key = clock.key(name)
    clock.stamp(key, "open")
    try:
        return fn(grad, chunks)
    finally:
        clock.stamp(key, "close")
