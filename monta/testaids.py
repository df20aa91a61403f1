"""TEST AIDS: deliberate faults and slowdowns that check the checks. Nothing here acts unless a test
or a test-aid flag turns it on, and every use is marked in the output and the records.

- ``Fault`` (``monta bench alltoall --inject-fault``, hidden): the exchange corrupts one element of
  the first chunk it places on one rank, so ``--check`` must count wrong elements. No process-wide
  fault: the bench's ``Runner`` owns one and gives it to the traffic meters its exchanges report to
  (``TrafficMeter(fault=...)``, its MoE layer's through ``monta.moe.Observers(fault=...)``); the exchange
  (``monta.comm.exchange.run_pass``) keeps only the hook that calls ``meter.fault.corrupt``.
- ``Slowdown`` (``monta bench alltoall --inject-slowdown VARIANT:FRACTION``): a measured delay after
  each timed call of one variant, added to its recorded time, so the regression gate must flag it.

Torch-free at import.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from monta.runconfig import check_keys


@dataclass
class Fault:
    """Corrupt one element of the first chunk placed on rank ``rank`` (while ``enabled``)."""

    rank: int = 0
    enabled: bool = False

    def corrupt(self, out_view: Any, chunk: int, rank: int) -> None:
        """The exchange's hook, called after chunk ``chunk`` is placed into ``out_view`` [E, tp, c, M]."""
        if self.enabled and chunk == 0 and rank == self.rank:
            out_view[0, 0, 0, 0] += 1.0


@dataclass(frozen=True)
class Slowdown:
    """``--inject-slowdown``: slow ``variant`` by ``fraction`` of its time (no variant: nothing slowed)."""

    variant: str | None = None
    fraction: float = 0.0

    @classmethod
    def from_dict(cls, data: dict | None) -> Slowdown:
        """From the config's ``inject_slowdown`` ({"variant", "fraction"} or None); an unknown or missing key
        is a one-line error."""
        if not data:
            return cls()
        check_keys(cls, data)
        if set(data) != {"variant", "fraction"}:
            raise ValueError(f"Slowdown: give both variant and fraction, got {', '.join(sorted(data))}")
        return cls(data["variant"], float(data["fraction"]))

    def applies(self, variant: str) -> bool:
        return self.variant is not None and variant == self.variant

    def delay(self, history: list[float], own: float) -> float:
        """Sleep after the timed call and return the seconds the sleep measured (the caller adds them to
        the call's recorded time). Every rank sleeps the same share of the variant's median so far
        (``history``: the slowest rank's undelayed time per iteration, from the all-reduced rounds), so
        the iteration's time grows by that share exactly; ``own`` (this call's undelayed time) stands in
        for the first iteration. A sleep of each rank's own elapsed share fell short on CPU-bound sizes
        (+2.5-5% instead of 10% at 1 MiB on 2 x 4): a rank that sleeps frees its core for the slowest one."""
        t0 = time.perf_counter()
        time.sleep(self.fraction * (statistics.median(history) if history else own))
        return time.perf_counter() - t0
