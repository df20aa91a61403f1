"""What CPU a benchmark had: the machine's busy share, how often every core was busy, and CPU pressure
(PSI: the share of time some runnable task waited for a core), sampled in the background over the timed windows.

Emulated ranks share this machine's few cores; a timing taken while they waited for a core measures the
machine, not the method. ``HostLoad.window`` says how much of that there was, ``verdict`` says it in one line.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

# A point is CPU-bound when the benchmark's own ranks waited for a core: their main thread (the one
# that packs, launches, waits and copies; in a training step also the one that computes) was ready
# to run but waiting (scheduler run delay, /proc/self/task/<tid>/schedstat) for more than
# RANK_WAIT_LIMIT of the timed wall time, on average over ranks. That is the direct measure of
# how much the cores stretched a timing; machine-wide PSI and saturation also count background
# work that the scheduler keeps off our ranks (a niced job saturates both cores and drives PSI to
# 80% while the ranks hardly wait), so they are recorded as context and decide only where
# schedstat is unavailable. Thresholds: docs/testbed.md.
# Measured on 2 x 8 ranks (docs/testbed.md), the same sweep with and without a busy-looping
# core: timings whose ranks waited <= 15% moved by under 3%; those that waited 20-42% (16 ranks
# packing and copying 4-8 chunks at once) moved by up to 16%.
RANK_WAIT_LIMIT = 0.15
PSI_LIMIT = 0.15
SATURATED_LIMIT = 0.30
_SATURATED_BUSY = 0.95  # an interval in which >= 95% of all cores' time was busy counts as saturated


def own_run_delay_s(all_threads: bool = False) -> float | None:
    """Seconds this process's main thread (or all its threads) spent runnable but waiting for a core."""
    tids = [str(os.getpid())]
    if all_threads:
        try:
            tids = os.listdir("/proc/self/task")
        except OSError:
            return None
    total, seen = 0.0, False
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1]) / 1e9
                seen = True
        except (OSError, ValueError, IndexError):
            continue  # a thread that just exited
    return total if seen else None


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of all cores from /proc/stat, or None where unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - idle, total


def _psi_some_us() -> float | None:
    """Cumulative microseconds some task waited for a CPU (/proc/pressure/cpu), or None."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return float(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True)
class Sample:
    t: float  # perf_counter seconds
    busy: float
    total: float
    psi_us: float | None


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class HostLoad:
    """Background sampler of /proc/stat and /proc/pressure/cpu; ``window`` summarizes time windows."""

    def __init__(self, interval_s: float = 0.02):
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.available = _cpu_times() is not None
        self.psi_available = _psi_some_us() is not None

    def _sample(self) -> None:
        ct = _cpu_times()
        if ct is not None:
            self.samples.append(Sample(time.perf_counter(), ct[0], ct[1], _psi_some_us()))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> HostLoad:
        if self.available and self._thread is None:
            self._sample()
            self._thread = threading.Thread(target=self._loop, name="monta-hostload", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample()

    def window(self, spans: Iterable[tuple[float, float]]) -> dict[str, float | None]:
        """Busy share, saturated share and PSI some share over ``spans`` (perf_counter (start, end)
        pairs, e.g. every timed iteration): each sample interval counts by how much of it the spans
        cover. (Counting only intervals whose midpoint fell inside a span left short spans with no
        figure at all when a loaded machine stretched the sampler's intervals past them.)"""
        spans = sorted(spans)
        wall = busy = sat = psi = 0.0
        psi_ok = True
        for a, b in zip(self.samples, self.samples[1:]):
            dt, dtot = b.t - a.t, b.total - a.total
            if dt <= 0 or dtot <= 0:
                continue
            covered = sum(max(0.0, min(e, b.t) - max(s, a.t)) for s, e in spans)
            if covered <= 0:
                continue
            share = (b.busy - a.busy) / dtot
            wall += covered
            busy += share * covered
            sat += covered if share >= _SATURATED_BUSY else 0.0
            if a.psi_us is None or b.psi_us is None:
                psi_ok = False
            else:
                psi += min(b.psi_us - a.psi_us, dt * 1e6) * covered / dt
        if wall <= 0:
            return {"busy": None, "saturated": None, "psi_some": None, "sampled_s": 0.0}
        return {
            "busy": busy / wall,
            "saturated": sat / wall,
            "psi_some": psi / 1e6 / wall if psi_ok else None,
            "sampled_s": wall,
        }


def is_cpu_bound(load: dict | None) -> bool | None:
    """True when a window's CPU figures say its timings measured the machine; None when unknown."""
    if not load:
        return None
    wait = load.get("rank_wait")
    if wait is not None:
        return bool(wait > RANK_WAIT_LIMIT)
    if load.get("busy") is None:
        return None
    psi, sat = load.get("psi_some"), load.get("saturated") or 0.0
    return bool((psi is not None and psi > PSI_LIMIT) or sat > SATURATED_LIMIT)


def describe(load: dict | None) -> str:
    if not load or (load.get("busy") is None and load.get("rank_wait") is None):
        return "host CPU not sampled"
    parts = []
    if load.get("rank_wait") is not None:
        parts.append(f"ranks' main threads waited for a core {100 * load['rank_wait']:.1f}% of the time")
    if load.get("busy") is not None:
        psi = load.get("psi_some")
        parts.append(
            f"machine busy {100 * load['busy']:.0f}%, all {cores()} cores busy "
            f"{100 * load['saturated']:.0f}% of the time, PSI some "
            + (f"{100 * psi:.0f}%" if psi is not None else "n/a")
        )
    return "; ".join(parts)


def verdict(load: dict | None) -> str:
    """One line for a run's footer: CPU-bound or not, with the figures that decide it."""
    bound = is_cpu_bound(load)
    if bound is None:
        return "CPU: not sampled (no /proc/stat or schedstat); cannot tell whether timings were CPU-bound"
    limit = (
        f"limit {100 * RANK_WAIT_LIMIT:.0f}% rank wait"
        if load.get("rank_wait") is not None
        else f"limits PSI {100 * PSI_LIMIT:.0f}%, saturated {100 * SATURATED_LIMIT:.0f}%"
    )
    if bound:
        return f"CPU-BOUND: {describe(load)} ({limit}): these timings measure this machine's cores, not the links"
    return f"CPU: not bound ({describe(load)}; {limit})"
