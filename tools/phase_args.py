"""What tools/a2a_phases.py and tools/chunk_phases.py share: a node's transmitted byte counters and their
one-line usage errors (both are run as scripts, so this sits beside them on their path)."""

from __future__ import annotations

import json
import math
import sys
import threading
import time


def tx() -> tuple[int, int]:
    """(loopback, other devices) transmitted bytes of this network namespace."""
    lo = other = 0
    for line in open("/proc/net/dev").read().splitlines()[2:]:
        name, rest = line.split(":", 1)
        sent = int(rest.split()[8])
        lo, other = (lo + sent, other) if name.strip() == "lo" else (lo, other + sent)
    return lo, other


def fail(tool: str, why: str) -> None:
    print(f"{tool}: {why}", file=sys.stderr)
    raise SystemExit(2)


def number(tool: str, text: str, what: str, kind=int) -> float:
    """``text`` as a positive ``kind``, or ``fail`` naming ``what``."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        fail(tool, f"{what} {text!r}: give a positive {'whole ' if kind is int else ''}number")
    return value


def load(tool: str, path: str) -> dict:
    """A file the tool's rank mode wrote, or ``fail`` naming it."""
    try:
        with open(path) as f:
            got = json.load(f)
    except (OSError, ValueError) as e:
        fail(tool, f"{path}: not a file the rank mode wrote ({e})")
    if not isinstance(got, dict) or not all(k in got for k in ("meta", "rows", "samples")):
        fail(tool, f"{path}: no meta, rows and samples in it (write it with the rank mode)")
    return got


def start_sampler(on: bool, every_s: float = 0.002) -> tuple[list, threading.Event]:
    """(samples, stop): where ``on`` (a node's local rank 0), a thread appends (time, loopback bytes, other bytes)
    every ``every_s`` until ``stop`` is set; the first sample is taken here, before the thread starts, since under
    load the thread may first run after a short exchange has ended."""
    samples: list = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.monotonic(), *tx()))
            time.sleep(every_s)

    if on:
        samples.append((time.monotonic(), *tx()))
        threading.Thread(target=sample, daemon=True).start()
    return samples, stop
