"""Compute on the emulated clock: each priced piece runs its real math, then waits until the time that the
performance model gives the same pieces of the full-size model on the real cluster, x D, has passed.

Per thread, the pieces between two communications form a run that lasts the sum of their targets, as kernels
queued on a GPU stream do (``ComputeClock.charge``); the math the model does not price (norms, RoPE,
activations, routing, the loss) runs inside that time. Communication is not compute: every collective and
wait of ``torch.distributed`` ends the thread's run (``restarted_by_dist``), as do the harness's own waits on
its communication threads (``restart``). No process-wide clock: the run's owner gives its clock to the
model it builds (``monta.moe.Observers(clock=...)``), whose priced pieces charge it (``ClockPiece``).

Contention (``contention`` c > 0): on a GPU the exchange's kernels take SMs and memory bandwidth from the
compute they overlap. Here compute advances at 1 / (1 + c) of its speed while the harness's MoE exchange is
in flight in this process (the clock's ``exchange`` window: the pipelines' comm thread runs every exchange
inside it, through ``monta.moe.Observers.run_exchange``), so a piece whose target is waited wholly under the
exchange lasts (1 + c) x its target. Only waits change.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from monta.comm.activity import ActivityTracker

# The torch.distributed calls after which a thread's compute count restarts (a blocking collective,
# an async launch, a wait: time spent there is communication, never compute).
_DIST_CALLS = (
    "all_reduce",
    "all_to_all_single",
    "all_to_all",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "broadcast",
    "barrier",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
    "gather_object",
    "all_gather_object",
    "broadcast_object_list",
)


class ExchangeWindow(ActivityTracker):
    """When the harness's MoE exchange is in flight in this process (on any thread): what the contention
    stretch reads. ``active()`` marks one exchange task; overlapping tasks count once."""

    def __init__(self, keep: int = 4096):
        super().__init__("exchange window")
        self._since: float | None = None
        # Closed windows (start, end), oldest first; a piece looks back only to its own start.
        self._spans: deque[tuple[float, float]] = deque(maxlen=keep)

    def _busy(self) -> None:
        self._since = time.perf_counter()
        self._cond.notify_all()  # a stretched wait recomputes its end

    def _idle(self) -> None:
        self._spans.append((self._since, time.perf_counter()))
        self._since = None

    def run(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` as one exchange in flight (what the comm thread runs)."""
        with self.active():
            return fn(*args, **kwargs)

    def in_flight_s(self, t0: float, t1: float) -> float:
        """Seconds of [t0, t1] during which an exchange was in flight."""
        with self._cond:
            return self._in_flight_s(t0, t1)

    def _in_flight_s(self, t0: float, t1: float) -> float:
        total = 0.0
        if self._since is not None:
            total += max(0.0, t1 - max(self._since, t0))
        for a, b in reversed(self._spans):
            if b <= t0:
                break
            total += max(0.0, min(b, t1) - max(a, t0))
        return total

    def wait_stretched(self, start: float, target_s: float, c: float) -> float:
        """Wait until compute counted from ``start`` has progressed ``target_s`` seconds, advancing at
        1 / (1 + c) while an exchange is in flight; returns the seconds the stretch added. Woken by
        every window edge, so the end is exact however the exchange comes and goes."""
        while True:
            with self._cond:
                now = time.perf_counter()
                over = self._in_flight_s(start, now)
                left = stretched_left_s(target_s, now - start, over, c)
                if left <= 0.0:
                    return over * c / (1 + c)
                # At most ``left`` of compute to go: (1 + c) x that wall time under an exchange.
                self._cond.wait(left * (1 + c) if self._count else left)


def stretched_left_s(target_s: float, elapsed_s: float, in_flight_s: float, c: float) -> float:
    """Compute seconds a piece still owes: its target less its progress, where ``elapsed_s`` seconds since
    its count started, ``in_flight_s`` of them under an exchange, progressed
    ``elapsed_s - in_flight_s + in_flight_s / (1 + c)``."""
    return target_s - (elapsed_s - in_flight_s * c / (1 + c))


class ComputeClock:
    """Targets: ``us_per_flop[piece]`` for pieces priced by their FLOPs, ``fixed_us[piece]`` for the rest.
    ``contention`` c >= 0: compute waited under the harness's exchange (this clock's ``exchange`` window,
    marked by the comm thread through the model's observers) lasts (1 + c) x."""

    def __init__(
        self, us_per_flop: dict[str, float], fixed_us: dict[str, float] | None = None, contention: float = 0.0
    ):
        if isinstance(contention, bool) or not isinstance(contention, (int, float)) or not 0 <= contention < math.inf:
            raise ValueError(f"contention={contention!r}: give a finite factor >= 0 (0: no contention)")
        self.contention = float(contention)
        self.us_per_flop = dict(us_per_flop)
        self.fixed_us = dict(fixed_us or {})
        self.exchange = ExchangeWindow()  # when this process's exchanges are in flight (what contention reads)
        self._local = threading.local()
        self._lock = threading.Lock()
        self.reset_stats()

    # -- what a step did ------------------------------------------------------------------------
    def reset_stats(self) -> None:
        with self._lock:
            self.calls: dict[str, int] = defaultdict(int)
            self.target_s: dict[str, float] = defaultdict(float)
            self.overruns: dict[str, int] = defaultdict(int)  # pieces whose math outlasted their target
            self.overrun_s: dict[str, float] = defaultdict(float)  # by how much, summed
            self.contention_s: dict[str, float] = defaultdict(float)  # wait added by contention, summed

    def stats(self) -> dict[str, Any]:
        """What the pieces did since ``reset_stats``; this thread's run ends here (a step's last piece)."""
        self._end_run()
        with self._lock:
            return {
                "calls": dict(self.calls),
                "target_s": dict(self.target_s),
                "overruns": dict(self.overruns),
                "overrun_s": dict(self.overrun_s),
                "contention_s": dict(self.contention_s),
            }

    # -- the clock itself -------------------------------------------------------------------------
    # Per thread, a run of pieces between two communications is a GPU stream's queue of kernels: they
    # execute back to back, so the run ends at its start plus the sum of their targets, and the host only has
    # to stay ahead of that. A piece whose math (or a wait for a core) ran past the run's running total makes
    # the thread late; a later piece of the same run with time to spare absorbs it, as a queued kernel would.
    # What is still late when the run ends (the thread's next communication, or the end of its step) is an
    # overrun: host time that reached the step, named after the run's last piece. (Counted per piece, each
    # piece waiting from its own start, a 1 ms projection of 8 ranks on 2 cores that waited 20 ms for a core
    # was late even where the next piece had 100 ms to spare: 2.5-10% of every step, 1.5-1.7% with 16 heads.)
    def restart(self) -> None:
        """This thread just communicated or waited: its run of pieces ends, the next run starts now."""
        self._end_run()
        self._local.start = time.perf_counter()

    def _end_run(self) -> None:
        """The run's lateness, if any, becomes an overrun of its last piece."""
        late = getattr(self._local, "late", None)
        self._local.late, self._local.owed, self._local.stretched = None, 0.0, 0.0
        if late is not None and late[1] > 0:
            with self._lock:
                self.overruns[late[0]] += 1
                self.overrun_s[late[0]] += late[1]

    def priced(self, piece: str) -> bool:
        return piece in self.us_per_flop or piece in self.fixed_us

    def charge(self, piece: str, t0: float, flops: float | None = None, factor: float = 1.0) -> None:
        """Piece ``piece`` (``flops`` FLOPs of the run's math, or its fixed time) began at ``t0`` and its
        math is done: wait until the run's start plus the targets of its pieces so far, this one included,
        has passed (``factor``: its backward costs 2 forwards, and so on)."""
        target = factor * 1e-6 * (flops * self.us_per_flop[piece] if flops is not None else self.fixed_us[piece])
        start = getattr(self._local, "start", None)
        if start is None or start > t0:  # no communication yet on this thread: its run starts with this piece
            self._end_run()
            start = self._local.start = t0
        owed = getattr(self._local, "owed", 0.0) + target
        self._local.owed = owed
        now = time.perf_counter()
        stretch = 0.0
        if self.contention:
            c = self.contention
            late = -stretched_left_s(owed, now - start, self.exchange.in_flight_s(start, now), c)
            if late < 0:
                stretch = self.exchange.wait_stretched(start, owed, c)
        else:
            late = now - start - owed
            if late < 0:
                time.sleep(-late)
        self._local.late = (piece, late)
        with self._lock:
            self.calls[piece] += 1
            self.target_s[piece] += target
            if stretch:  # the run's stretch so far: this piece adds what its predecessors have not booked
                self.contention_s[piece] += max(0.0, stretch - getattr(self._local, "stretched", 0.0))
                self._local.stretched = stretch


@dataclass(frozen=True, eq=False)
class ClockPiece:
    """What a GEMM weight is priced as (``weight.clock_piece``): piece ``name`` on ``owner``'s clock (the
    model's ``monta.moe.Observers``, which charges nothing without a clock); ``owner`` also takes the
    weight's dW, computing it at once or handing it to the schedule that defers it (Lancet's)."""

    name: str
    owner: Any

    def charge(self, t0: float, flops: float | None = None, factor: float = 1.0) -> None:
        self.owner.charge(self.name, t0, flops, factor)

    def weight_grad(self, dw) -> None:
        self.owner.weight_grad(dw)


def _restarting(fn, clock: ComputeClock):
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            clock.restart()

    call.__wrapped__ = fn
    return call


@contextmanager
def restarted_by_dist(clock: ComputeClock | None):
    """While inside, every ``torch.distributed`` call of ``_DIST_CALLS`` and every wait on a work handle
    restarts the calling thread's run on ``clock`` (time spent there is communication); restored on exit.
    None: nothing changes (compute at the CPU's own speed)."""
    if clock is None:
        yield
        return
    work = dist.distributed_c10d.Work
    if hasattr(work.wait, "__wrapped__"):
        raise RuntimeError("torch.distributed already restarts a compute clock: one clock per process at a time")
    saved = {name: getattr(dist, name) for name in _DIST_CALLS if hasattr(dist, name)}
    saved_wait = work.wait
    work.wait = _restarting(saved_wait, clock)
    for name, fn in saved.items():
        setattr(dist, name, _restarting(fn, clock))
    try:
        yield
    finally:
        work.wait = saved_wait
        for name, fn in saved.items():
            setattr(dist, name, fn)
