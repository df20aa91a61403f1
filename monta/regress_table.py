"""The table `monta regress` prints: one row per matched point with its slowdown, CIs and run spread,
the header saying what the threshold means, and the tail counting regressed / inconclusive / CPU-bound
points and naming an injected slowdown (a test aid)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from monta.regress_rule import GATE_RULE
from monta.regress_stats import HIGHER_IS_BETTER

CPU_BOUND = "CPU-BOUND"


def _human(value: float, metric: str) -> str:
    """A metric value for people: times in the unit that fits (us, ms, s), 3 significant digits, never
    scientific notation; other metrics with 3 significant digits."""
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}.get(metric.rsplit("_", 1)[-1])
    if scale is None:
        return _sig3(value)
    seconds = value * scale
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= factor or unit == "us":
            return f"{_sig3(seconds / factor)} {unit}"
    return _sig3(value)


def _sig3(x: float) -> str:
    if x == 0 or not math.isfinite(x):
        return str(x) if x else "0"
    rounded = round(x, 2 - math.floor(math.log10(abs(x))))
    return f"{rounded:.{max(0, 2 - math.floor(math.log10(abs(rounded))))}f}"


def _runs(n: int) -> str:
    return "assumed, 1 run" if n == 1 else f"{n} runs"


def _short(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()))


def format_table(rows: Sequence[Mapping[str, Any]], metric: str, threshold: float, confidence: float) -> str:
    paired = sorted({r["from"].split(" / ")[-1] for r in rows if " / " in r["from"]})
    head = (
        f"regress: metric {metric}, slowdown = current/baseline (median of all pairwise sample ratios)"
        + (
            f" (points marked '/ {paired[0]}': of the per-iteration time relative to {paired[0]} in the same "
            f"run, which cancels a drift of the whole run)"
            if paired
            else ""
        )
        + f"{' (inverted: higher is better)' if metric in HIGHER_IS_BETTER else ''}, "
        f"{confidence:.0%} bootstrap CI within the run, 'with run noise': that CI widened by how far a run of "
        f"unchanged code lands from the baseline (run spread: log-sd between runs, from the baseline's runs or "
        f"assumed where it holds one).\nthreshold {threshold:.0%} = the slowdown the gate must catch (T = "
        f"{threshold:g}: 1 + T/2 = {1 + threshold / 2:.3f}, 1 + T = {1 + threshold:.3f}): {GATE_RULE}\n\n"
    )
    lines = [
        "| status | kind | source | point | baseline | current | slowdown | CI | with run noise | run spread | n "
        "| from |",
        "|---|---|---|---|---:|---:|---:|---|---|---|---|---|",
    ]
    for r in rows:
        show = (lambda v: f"{v:.3f}x") if " / " in r["from"] else (lambda v: _human(v, metric))  # a paired ratio
        how = r["from"] + (
            f"; before its injected delay {r['without_injection']:.3f}"
            if r.get("without_injection") is not None
            else ""
        )
        lines.append(
            f"| {r['status']} | {r['kind']} | {r['source']} | {r['point']} | {show(r['baseline'])} | "
            f"{show(r['current'])} | {r['slowdown']:.3f} | [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}] | "
            f"[{r['lo']:.3f}, {r['hi']:.3f}] | {100 * r['spread']:.1f}% ({_runs(r['runs'])}) | {r['n']} | {how} |"
        )
    bad = sum(r["status"] == "REGRESSED" for r in rows)
    unsure = sum(r["status"] == "inconclusive" for r in rows)
    bound = [r for r in rows if r["status"].startswith(CPU_BOUND)]
    tail = f"\n\n{len(rows)} matched points, {bad} regressed, {unsure} inconclusive"
    tail += f", {len(bound)} CPU-bound (not judged).\n" if bound else ".\n"
    if bound:
        slower = sum(r["verdict"] == "REGRESSED" for r in bound)
        tail += (
            f"CPU-BOUND: {len(bound)} point(s) ran CPU-bound in the baseline or the current run (the ranks waited "
            f"for a core more than the limit): their times measure this machine's cores, not the code, so "
            f"they are not judged ({slower} would read slower); --judge-cpu-bound judges them.\n"
        )
    injected = sorted({(r["point"], r["injected"]) for r in rows if r.get("injected")})
    if injected:
        tail += (
            f"TEST AID: {len(injected)} current point(s) carry an injected slowdown (--inject-slowdown, "
            f"{', '.join(sorted({f'{100 * f:g}%' for _, f in injected}))}): a gate check, not a measurement.\n"
        )
        own = [r for r in rows if r.get("without_injection") is not None]
        if own:
            judged = [r for r in own if not r["status"].startswith(CPU_BOUND)]
            lo, hi = min(r["without_injection"] for r in own), max(r["without_injection"] for r in own)
            tail += (
                f"TEST AID: before their injected delay these points read {lo:.3f}-{hi:.3f} against the "
                f"baseline (the run's own drift); REGRESSED at {sum(r['status'] == 'REGRESSED' for r in judged)} "
                f"of {len(judged)} judged.\n"
            )
    return head + "\n".join(lines) + tail
