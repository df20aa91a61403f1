"""Compute on the emulated clock: each priced piece runs its real math, then waits until it has taken
the time that the performance model gives the same piece of the full-size model on the real cluster, x D.

Per thread, the math between two pieces that the model does not price (norms, RoPE, activations,
routing, the loss) is counted into the next piece's time; communication is not: every collective and
wait of ``torch.distributed`` restarts the thread's count (``install``), as do the harness's own waits
on its communication threads (``restart``). One process-wide clock, like autograd itself.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import torch.distributed as dist

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


class ComputeClock:
    """Targets: ``us_per_flop[piece]`` for pieces priced by their FLOPs, ``fixed_us[piece]`` for the rest."""

    def __init__(self, us_per_flop: dict[str, float], fixed_us: dict[str, float] | None = None):
        self.us_per_flop = dict(us_per_flop)
        self.fixed_us = dict(fixed_us or {})
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

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "calls": dict(self.calls),
                "target_s": dict(self.target_s),
                "overruns": dict(self.overruns),
                "overrun_s": dict(self.overrun_s),
            }

    # -- the clock itself -------------------------------------------------------------------------
    def restart(self) -> None:
        """This thread just communicated or waited: the next piece's count starts now."""
        self._local.start = time.perf_counter()

    def priced(self, piece: str) -> bool:
        return piece in self.us_per_flop or piece in self.fixed_us

    def charge(self, piece: str, t0: float, flops: float | None = None, factor: float = 1.0) -> None:
        """Piece ``piece`` (``flops`` FLOPs of the run's math, or its fixed time) began at ``t0`` and its
        math is done: wait until its target, counted from the end of this thread's last piece or
        communication, has passed (``factor``: its backward costs 2 forwards, and so on)."""
        target = factor * 1e-6 * (flops * self.us_per_flop[piece] if flops is not None else self.fixed_us[piece])
        start = getattr(self._local, "start", None)
        start = t0 if start is None or start > t0 else start
        now = time.perf_counter()
        late = now - start - target
        if late < 0:
            time.sleep(-late)
        with self._lock:
            self.calls[piece] += 1
            self.target_s[piece] += target
            if late > 0:
                self.overruns[piece] += 1
                self.overrun_s[piece] += late
        self._local.start = time.perf_counter()


CLOCK: ComputeClock | None = None
_saved: dict[str, Any] = {}


def _restarting(fn):
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            if CLOCK is not None:
                CLOCK.restart()

    call.__wrapped__ = fn
    return call


def install(clock: ComputeClock | None) -> None:
    """Make ``clock`` the process's clock (None: compute at the CPU's own speed again)."""
    global CLOCK
    if clock is not None and not _saved:
        work = dist.distributed_c10d.Work
        _saved["Work.wait"] = work.wait
        work.wait = _restarting(work.wait)
        for name in _DIST_CALLS:
            if hasattr(dist, name):
                _saved[name] = getattr(dist, name)
                setattr(dist, name, _restarting(_saved[name]))
    elif clock is None and _saved:
        dist.distributed_c10d.Work.wait = _saved.pop("Work.wait")
        for name, fn in _saved.items():
            setattr(dist, name, fn)
        _saved.clear()
    CLOCK = clock


def restart() -> None:
    """A wait on a communication thread (a future, a join) just ended in this thread."""
    if CLOCK is not None:
        CLOCK.restart()


def charge(piece: str, t0: float, flops: float | None = None, factor: float = 1.0) -> None:
    if CLOCK is not None and CLOCK.priced(piece):
        CLOCK.charge(piece, t0, flops, factor)
