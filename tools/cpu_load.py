"""A background load for checking that a run's verdicts survive a busier machine: one process that keeps
one core busy a given share of the time (default 0.2, "one process using a fifth of a core"), in 10 ms
periods (busy, then asleep), until killed.

    python tools/cpu_load.py 0.2 &  make reproduce;  kill %1
"""

from __future__ import annotations

import sys
import time

PERIOD_S = 0.010


def main(share: float) -> None:
    if not 0 < share <= 1:
        raise SystemExit(f"cpu_load: share {share}: give a number in (0, 1], e.g. 0.2")
    busy = PERIOD_S * share
    while True:
        start = time.perf_counter()
        while time.perf_counter() - start < busy:
            pass
        time.sleep(max(0.0, PERIOD_S - busy))


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.2)
