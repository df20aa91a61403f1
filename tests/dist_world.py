"""A reusable multi-process gloo world for tests: N spawned ranks that stay up and run many cases.

Importing torch + deepspeed costs seconds per rank on 2 cores, so a world starts once per size;
each ``run`` sends a picklable top-level function to every rank and collects the results. A rank
that raises, dies, or does not answer within the timeout fails the call and the world restarts.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankError(RuntimeError):
    """A function raised on one or more ranks; the message carries each rank's traceback."""


def _worker(rank: int, world_size: int, port: int, conn, collective_timeout_s: float) -> None:
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


class DistWorld:
    """N gloo ranks on 127.0.0.1; ``run(fn, ...)`` returns the list of per-rank results."""

    def __init__(self, world_size: int, timeout_s: float = 180.0, collective_timeout_s: float = 60.0):
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.collective_timeout_s = collective_timeout_s
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        port = free_port()
        for rank in range(self.world_size):
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_worker,
                args=(rank, self.world_size, port, child, self.collective_timeout_s),
                daemon=True,
                name=f"rank{rank}",
            )
            p.start()
            self.procs.append(p)
            self.conns.append(parent)
        self._collect(timeout_s=max(self.timeout_s, 300.0), what="start-up")

    def _collect(self, timeout_s: float, what: str) -> list[Any]:
        deadline = time.monotonic() + timeout_s
        results: list[Any] = [None] * self.world_size
        errors: dict[int, str] = {}
        pending = set(range(self.world_size))
        while pending:
            for rank in sorted(pending):
                conn, proc = self.conns[rank], self.procs[rank]
                if conn.poll(0.01):
                    try:
                        status, value = conn.recv()
                    except EOFError:
                        status, value = "error", f"rank {rank} closed its pipe (exit code {proc.exitcode})"
                    pending.discard(rank)
                    if status == "error":
                        errors[rank] = value
                    else:
                        results[rank] = value
                elif not proc.is_alive():
                    pending.discard(rank)
                    errors[rank] = f"rank {rank} died (exit code {proc.exitcode})"
            if errors and pending:
                # Give the other ranks a moment to fail on their own, then stop waiting: ranks
                # blocked in a collective with a failed peer would otherwise hang until timeout.
                deadline = min(deadline, time.monotonic() + 5.0)
            if pending and time.monotonic() > deadline:
                for rank in pending:
                    errors[rank] = f"rank {rank} did not answer within the timeout ({what})"
                break
        if errors:
            self.restart()
            details = "\n".join(f"--- rank {r} ---\n{msg}" for r, msg in sorted(errors.items()))
            raise RankError(f"{what} failed on ranks {sorted(errors)}:\n{details}")
        return results

    def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None, **kwargs: Any) -> list[Any]:
        for conn in self.conns:
            conn.send((fn, args, kwargs))
        return self._collect(timeout_s or self.timeout_s, what=getattr(fn, "__name__", "call"))

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self.procs, self.conns = [], []

    def restart(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(timeout=5)
        self.procs, self.conns = [], []
        self._start()
