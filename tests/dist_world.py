"""A reusable multi-process gloo world for tests: N spawned ranks that stay up and run many cases.

Importing torch + deepspeed costs seconds per rank (minutes for 8 ranks on one free core), so a world
starts once per size and module; each ``run`` sends a picklable top-level function to every rank and
collects the results.

Failures are final, never retried. A world that cannot start raises ``WorldStartError`` whose first
line says why. A call that fails on any rank (raised, died, or no answer in time) stops the world, since
its other ranks may be blocked in a collective with the failed one, and every later call on it fails at
once, naming that call. Restarting instead looped on a loaded machine: a start-up timeout killed ranks
inside torch's extension build lock, the lock stayed, and every later world waited on it until its own
timeout and restarted again.

The limits are generous fixed ones (a loaded machine is slow, not stuck) times ``$MONTA_TEST_TIMEOUT_SCALE``
(default 1); a stuck start-up is caught by its cause instead: a build lock that no process holds is removed
while the world waits, as ``monta.emulate`` does before it starts ranks.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

# 8 ranks start and run their first case in 15 s idle on 2 cores, 17 s with one core busy, 59 s with
# other jobs' load on top (test_routed, measured): a limit of minutes per rank is slow, never stuck.
START_S_PER_RANK = 120.0
# Cases take seconds; the first of a module also builds its process groups.
CALL_S = 600.0
# After one rank failed, how long the others get to report their own error before the world is stopped.
GRACE_S = 10.0
# How often a starting world looks for a build lock left by a killed process.
LOCK_CHECK_S = 10.0
SCALE_ENV = "MONTA_TEST_TIMEOUT_SCALE"


def timeout_scale(env: dict[str, str] | None = None) -> float:
    """The factor on every limit here, from ``$MONTA_TEST_TIMEOUT_SCALE`` (a slow machine raises it)."""
    raw = (os.environ if env is None else env).get(SCALE_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{SCALE_ENV}={raw!r}: give a positive number, e.g. 2 to double every test world's limits")
    return value


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankError(RuntimeError):
    """A call failed on one or more ranks; the first line says which and why, then each rank's traceback."""


class WorldStartError(RuntimeError):
    """The world did not start; the first line says why, then what each failed rank reported."""


def _worker(rank: int, world_size: int, port: int, conn, collective_timeout_s: float, before_init) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        DS_ACCELERATOR="cpu",
    )
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        if before_init is not None:
            before_init(rank)
        import torch

        torch.set_num_threads(1)
        import deepspeed

        deepspeed.init_distributed(
            dist_backend="gloo", verbose=False, timeout=datetime.timedelta(seconds=collective_timeout_s)
        )
        conn.send(("ready", None))
    except BaseException:  # noqa: BLE001 - report anything to the parent
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        fn, args, kwargs = msg
        try:
            conn.send(("ok", fn(*args, **kwargs)))
        except BaseException:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))


def _why(text: str) -> str:
    """One line for what a rank reported: its exception's last line, or how it died."""
    if not text.startswith("Traceback"):
        return text
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return f"raised {lines[-1]}"


def _clear_stale_build_locks() -> None:
    """Remove torch-extension build locks that no process holds (left by a killed process), saying so."""
    try:
        from monta import extensions
    except ImportError:  # the harness is not installed: nothing to look after
        return
    for note in extensions.clear_stale_locks():
        print(note, file=sys.stderr)


def _lock_note() -> str:
    """For a start-up that timed out: the build locks present, if any ('' or '; ...')."""
    try:
        from monta import extensions
    except ImportError:
        return ""
    return extensions.stuck_note()


class DistWorld:
    """N gloo ranks on 127.0.0.1; ``run(fn, ...)`` returns the list of per-rank results.

    ``before_init(rank)``, a picklable top-level function, runs in each rank before torch is imported
    (the tests of this class make a rank fail at start with it)."""

    def __init__(
        self,
        world_size: int,
        start_timeout_s: float | None = None,
        call_timeout_s: float = CALL_S,
        before_init: Callable[[int], None] | None = None,
    ):
        scale = timeout_scale()
        self.world_size = world_size
        self.start_timeout_s = scale * (START_S_PER_RANK * world_size if start_timeout_s is None else start_timeout_s)
        self.call_timeout_s = scale * call_timeout_s
        self.broken: str | None = None  # why the world was stopped; later calls fail at once with it
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self._start(before_init)

    def _start(self, before_init) -> None:
        _clear_stale_build_locks()  # one left by a killed process would hang every rank of this world
        ctx = mp.get_context("spawn")
        port = free_port()
        # Gloo's own limit is the call limit: a slow peer on a loaded machine must not fail a collective;
        # a stuck one is stopped by this process when the call's limit passes.
        for rank in range(self.world_size):
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_worker,
                args=(rank, self.world_size, port, child, self.call_timeout_s, before_init),
                daemon=True,
                name=f"rank{rank}",
            )
            p.start()
            child.close()  # the rank holds the only other end: its death reads as EOF here
            self.procs.append(p)
            self.conns.append(parent)
        _, errors, pending = self._collect(self.start_timeout_s, watch_locks=True)
        if errors or pending:
            lock_note = _lock_note() if pending else ""  # before the kill below, which may leave one of its own
            self.close(kill=True)
            self.broken = "it did not start"
            if errors:
                first = min(errors)
                head = f"the {self.world_size}-rank test world did not start: rank {first} {_why(errors[first])}"
            else:
                head = (
                    f"the {self.world_size}-rank test world did not start within {self.start_timeout_s:g} s "
                    f"(ranks {sorted(pending)} not ready; raise {SCALE_ENV} on a slow machine){lock_note}"
                )
            details = "".join(f"\n--- rank {r} ---\n{msg}" for r, msg in sorted(errors.items()))
            raise WorldStartError(head + details)

    def _collect(self, timeout_s: float, watch_locks: bool = False) -> tuple[list, dict[int, str], set[int]]:
        """Each rank's answer until all answered, one failed (then GRACE_S more), or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        next_lock_check = time.monotonic() + LOCK_CHECK_S
        results: list[Any] = [None] * self.world_size
        errors: dict[int, str] = {}
        pending = set(range(self.world_size))
        while pending:
            now = time.monotonic()
            if now >= deadline:
                break
            if watch_locks and now >= next_lock_check:
                _clear_stale_build_locks()
                next_lock_check = now + LOCK_CHECK_S
            ready = wait([self.conns[r] for r in pending], timeout=min(1.0, deadline - now))
            for rank in [r for r in sorted(pending) if self.conns[r] in ready]:
                pending.discard(rank)
                try:
                    status, value = self.conns[rank].recv()
                except EOFError:
                    self.procs[rank].join(timeout=5)
                    status, value = "error", f"died (exit code {self.procs[rank].exitcode})"
                if status == "error":
                    errors[rank] = value
                else:
                    results[rank] = value
            if errors and pending:
                # The others may be blocked in a collective with the failed rank: give them a moment
                # to fail on their own, then stop waiting.
                deadline = min(deadline, time.monotonic() + GRACE_S)
        return results, errors, pending

    def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None, **kwargs: Any) -> list[Any]:
        name = getattr(fn, "__name__", "call")
        if self.broken is not None:
            raise RankError(f"the {self.world_size}-rank test world was stopped because {self.broken}; not run: {name}")
        limit = self.call_timeout_s if timeout_s is None else timeout_scale() * timeout_s
        for conn in self.conns:
            conn.send((fn, args, kwargs))
        results, errors, pending = self._collect(limit)
        if not errors and not pending:
            return results
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        self.broken = f"{name} failed{' in ' + test if test else ''}"
        self.close(kill=True)
        if errors:
            first = min(errors)
            head = f"{name} failed on ranks {sorted(errors)} (rank {first} {_why(errors[first])})"
        else:
            head = f"{name}: ranks {sorted(pending)} did not answer within {limit:g} s"
        if pending and errors:
            head += f"; ranks {sorted(pending)} did not answer"
        head += "; the world is stopped, later calls on it fail at once"
        details = "".join(f"\n--- rank {r} ---\n{msg}" for r, msg in sorted(errors.items()))
        raise RankError(head + details)

    def close(self, kill: bool = False) -> None:
        """Stop the ranks: asked to exit (``kill``: at once, for ranks that may be blocked in a collective)."""
        if not kill:
            for conn in self.conns:
                try:
                    conn.send(None)
                except (OSError, BrokenPipeError):
                    pass
            for p in self.procs:
                p.join(timeout=30 * timeout_scale())
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(timeout=10)
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []
