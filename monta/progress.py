"""Rank heartbeats: where each rank is, so a stalled rank is named long before a collective times out.

The emulator's supervisor gives every rank ``MONTA_PROGRESS_DIR``; ``beat(where)`` writes the
rank's beat count, the time and a short description of where it is to ``rank{RANK}`` there (a
few microseconds; a no-op without the variable, e.g. under torchrun). The supervisor reads these
files (monta.emulate.supervisor): a rank stopped by a signal, or a run in which no rank has made
progress for the stall limit, ends the run with the rank that is behind and where it was.

For the person watching, ``start_live(total)`` then ``live(what)``: progress lines (``Eta``) on stdout,
which the launchers stream live to the terminal from rank 0. Off until ``start_live``, so a test that
calls a bench's loops directly prints nothing.
"""

from __future__ import annotations

import os
import time

_state = {"n": 0}
_live: dict = {"eta": None}


def beat(where: str) -> None:
    d = os.environ.get("MONTA_PROGRESS_DIR")
    if not d:
        return
    _state["n"] += 1
    path = os.path.join(d, f"rank{os.environ.get('RANK', '0')}")
    try:
        with open(path + ".tmp", "w") as f:
            f.write(f"{_state['n']} {time.time():.3f} {where}\n")
        os.replace(path + ".tmp", path)
    except OSError:  # progress reports must never fail a run
        pass


def read(path: str) -> tuple[int, float, str] | None:
    """(beat count, wall time, where) of one rank's progress file, or None if it has none yet."""
    try:
        with open(path) as f:
            n, t, where = f.read().rstrip("\n").split(" ", 2)
        return int(n), float(t), where
    except (OSError, ValueError):
        return None


class Eta:
    """Progress lines for a person watching a run: what was done, the time elapsed and an estimate of
    the time left (the mean time per unit so far, times the units still to do)."""

    def __init__(self, total: int, clock=time.monotonic) -> None:
        self.total, self.done, self._clock = total, 0, clock
        self._t0 = clock()

    def advance(self, what: str) -> str:
        """Count one unit done (``what`` names it) and return its line."""
        from monta.units import format_duration

        self.done += 1
        elapsed = self._clock() - self._t0
        left = elapsed / self.done * (self.total - self.done)
        return (
            f"# {what} ({self.done}/{self.total}): elapsed {format_duration(elapsed)}, "
            f"about {format_duration(left)} left"
        )


def start_live(total: int) -> None:
    """Turn on ``live``'s lines on stdout for a run of ``total`` units (call on rank 0 only)."""
    _live["eta"] = Eta(total)


def live(what: str) -> None:
    """One unit done: its ``Eta`` line on stdout (nothing before ``start_live``)."""
    eta = _live["eta"]
    if eta is not None:
        print(eta.advance(what), flush=True)
