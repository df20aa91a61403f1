"""Process-wide tracker of in-flight AllToAlls, so schedulers can give them priority.

Lina's scheduler and monta+priority launch a gradient AllReduce chunk only while it is idle.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager


class ActivityTracker:
    """Counts operations that are waiting or running; ``wait_idle`` blocks until none are."""

    def __init__(self, name: str):
        self.name = name
        self._count = 0
        self._cond = threading.Condition()

    def busy(self) -> bool:
        with self._cond:
            return self._count > 0

    def enter(self) -> None:
        with self._cond:
            if self._count == 0:
                self._busy()
            self._count += 1

    def exit(self) -> None:
        with self._cond:
            if self._count <= 0:
                raise RuntimeError(f"{self.name}: exit() without a matching enter()")
            self._count -= 1
            if self._count == 0:
                self._idle()
                self._cond.notify_all()

    def _busy(self) -> None:
        """Hook, under the lock: the first operation entered (a subclass records when)."""

    def _idle(self) -> None:
        """Hook, under the lock: the last operation left."""

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._count == 0, timeout=timeout)

    @contextmanager
    def active(self):
        self.enter()
        try:
            yield
        finally:
            self.exit()


ALLTOALL = ActivityTracker("alltoall")
