"""Time dilation of ``monta bench alltoall`` (DieCast, NSDI'08): a size whose ranks waited for a core is
run again on a slower clock, every link rate divided by one factor (x2 per retry), until its ranks stop
waiting or its budget ends. Times are reported as measured on the slower clock; the model prices a record
at the rate it ran at (``LinkProfile.rescaled``). Ratios between variants are not clock-free here: the
host's work and per-message latency do not stretch with the links, and at x2 the paired ratios of a
2 x 4 TP4 point read 2-5% higher (docs/testbed.md), so the pipeline runs one fixed clock.

Pure functions on records: which sizes rerun, the factor sequence, when to stop, and what each record
says about it (``params.dilation``, ``metrics.dilation_reason``). ``monta.bench.alltoall.main`` launches.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from monta.bench.hostload import RANK_WAIT_LIMIT

RETRY_STEP = 2.0  # each retry halves every link rate again
MAX_RETRIES = 2  # x4 at most: beyond that a size's run takes minutes for one point on 2 cores

Rerun = Callable[[int, float], "tuple[list[dict], float] | None"]  # (size, factor) -> (records, wall s)


def parse(text: str) -> float | None:
    """``--dilation``: ``auto`` (None) or a fixed factor >= 1 (ValueError naming what to give)."""
    if str(text).strip().lower() == "auto":
        return None
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    if not factor >= 1 or factor > 1000:
        raise ValueError(f"--dilation {text}: give 'auto' or a factor between 1 and 1000 (e.g. 2)")
    return factor


def _size(rec: dict) -> int:
    return int(rec["params"]["size_bytes"])


def rank_wait(records: Iterable[dict]) -> float | None:
    """The largest share of its timed wall time any variant's ranks waited for a core (None: not sampled)."""
    waits = [(r["metrics"].get("host_cpu") or {}).get("rank_wait") for r in records]
    waits = [w for w in waits if w is not None]
    return max(waits) if waits else None


def is_bound(records: Iterable[dict]) -> bool:
    """A size is CPU-bound when any of its variants is (its ratios pair every variant's iterations)."""
    return any(r["metrics"].get("cpu_bound") for r in records)


def by_size(records: Iterable[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in records:
        out.setdefault(_size(r), []).append(r)
    return out


def bound_sizes(records: Iterable[dict]) -> list[int]:
    """The sizes to run again, in sweep order."""
    return [s for s, recs in by_size(records).items() if is_bound(recs)]


def wait_note(records: list[dict], factor: float) -> str:
    """One size's verdict at one factor, e.g. 'rank wait 22% > 15% at x1'."""
    wait = rank_wait(records)
    limit = f"{100 * RANK_WAIT_LIMIT:.0f}%"
    if wait is None:
        return f"CPU-bound at x{factor:g} (host figures)" if is_bound(records) else f"not sampled at x{factor:g}"
    return f"rank wait {100 * wait:.0f}% {'>' if is_bound(records) else '<='} {limit} at x{factor:g}"


def timed_s(records: Iterable[dict]) -> float:
    """Seconds of timed calls behind one size's records (every variant's samples)."""
    return sum(sum(r["metrics"].get("samples_us") or []) for r in records) * 1e-6


def retry_s(records: list[dict]) -> float:
    """The least a retry of this size costs: its minimum iterations (the run's --iters; --adaptive may
    add more within --budget-s) on a clock RETRY_STEP x slower than this try's iterations took."""
    done = max((len(r["metrics"].get("samples_us") or []) for r in records), default=0)
    if not done:
        return 0.0
    least = min(int((records[0].get("config") or {}).get("iters") or done), done)
    return RETRY_STEP * timed_s(records) / done * least


def next_factor(factor: float, retries: int, spent_s: float, retry_cost_s: float, budget_s: float) -> float | None:
    """The factor of the next try, or None when the retry limit or the budget ends it: the reruns of one
    size may spend ``budget_s`` seconds in all (the run's --budget-s; 0: the retry limit only), and a
    retry starts only when what it costs at least (``retry_s``) still fits."""
    if retries >= MAX_RETRIES:
        return None
    if budget_s and spent_s + retry_cost_s > budget_s:
        return None
    return factor * RETRY_STEP


def annotate(records: Iterable[dict], factor: float, reason: str) -> list[dict]:
    """Copies of ``records`` that say the clock they ran on and why."""
    out = []
    for r in records:
        r = copy.deepcopy(r)
        r["params"]["dilation"] = factor
        r["metrics"]["dilation_reason"] = reason
        out.append(r)
    return out


def _stop_note(retries: int, spent_s: float, budget_s: float) -> str:
    if retries >= MAX_RETRIES:
        return f"retry limit ({MAX_RETRIES} retries)"
    return f"budget ({spent_s:.0f} s of {budget_s:g} s spent; another try would pass it)"


def adapt_size(size: int, first: list[dict], rerun: Rerun, budget_s: float, say: Callable[[str], Any]) -> list[dict]:
    """One size's final records: the first try's when its ranks did not wait, else the last retry's."""
    factor, recs, notes = 1.0, first, []
    retries, spent = 0, 0.0
    while is_bound(recs):
        note = wait_note(recs, factor)
        notes.append(note)
        nxt = next_factor(factor, retries, spent, retry_s(recs), budget_s)
        if nxt is None:
            notes.append(f"still CPU-bound at x{factor:g}: {_stop_note(retries, spent, budget_s)}")
            say(f"# dilation: {size} B {note}; {notes[-1]}; kept flagged")
            break
        say(f"# dilation: {size} B {note}: rerunning this size alone at x{nxt:g}")
        done = rerun(size, nxt)
        if done is None:  # the rerun failed: keep what the last try measured, flagged
            notes.append(f"the rerun at x{nxt:g} failed")
            break
        new, wall = done
        retries, spent = retries + 1, spent + wall
        if not new:
            notes.append(f"the rerun at x{nxt:g} wrote no records")
            break
        factor, recs = nxt, new
    if factor == 1.0 and not notes:
        return annotate(recs, 1.0, wait_note(recs, 1.0))
    if not is_bound(recs):
        notes.append(wait_note(recs, factor))
    return annotate(recs, factor, "; ".join(notes))


def adapt(
    records: list[dict], rerun: Rerun, budget_s: float, say: Callable[[str], Any] = print, why_not: str = ""
) -> list[dict]:
    """Every size's final records, in the sweep's order (a CPU-bound size's replaced by its rerun's).
    ``why_not``: why this run cannot be dilated (hand-set links): CPU-bound sizes stay as they are, saying so."""
    out: list[dict] = []
    for size, recs in by_size(records).items():
        if why_not and is_bound(recs):
            say(f"# dilation: {size} B {wait_note(recs, 1.0)}; not dilated: {why_not}")
            out += annotate(recs, 1.0, f"{wait_note(recs, 1.0)}; not dilated: {why_not}")
        else:
            out += adapt_size(size, recs, rerun, budget_s, say)
    return out
