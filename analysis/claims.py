"""The report's opening: the paper's claims next to ours (emulated and predicted) with a verdict that says
what the difference means, then one provenance line (commit, host, cores, torch, when) from the records.

Pure functions of the records and analysis/paper.yaml; monta_analysis.report renders them first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from monta_analysis import tables

# A value within 10% of the published one (or of a published range's ends) reproduces it: the paper states
# its numbers to two digits ("8x", "13%"), and our emulated runs repeat to a few percent, so a closer test
# would judge the rounding, not the result.
WITHIN = 0.10

MEASURED = tables.MEASURED
VERDICTS = ("reproduced", "exceeded", "bound below the claim", "not reproduced")


def _fmt(value: float, unit: str) -> str:
    return f"{100 * value:.1f}%" if unit == "fraction" else f"{value:.2f}{unit}"


def verdict(value: float, paper: Mapping[str, Any], bound: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """(verdict, the reason in a few words) for ``value`` against the published ``paper`` number.

    ``bound``: a ceiling below the claim that physics sets on the cluster ({value, why}, analysis/paper.yaml):
    a value under the claim but at that ceiling is "bound below the claim", not a failure to reproduce."""
    unit = paper.get("unit", "")
    lo, hi = (paper["value"], paper["value"]) if "value" in paper else (paper["low"], paper["high"])
    shown = tables.fmt_paper(paper)
    if bound and bound["value"] < lo and value > bound["value"] * (1 + WITHIN):
        # above what physics allows here: a testbed bug until shown otherwise, never a result
        return "above its bound", f"{_fmt(value, unit)} over the bound {_fmt(bound['value'], unit)}: check the testbed"
    if lo * (1 - WITHIN) <= value <= hi * (1 + WITHIN):
        where = f"within {WITHIN:.0%} of {shown}" if lo == hi else f"within {WITHIN:.0%} of {shown}'s range"
        return "reproduced", where
    if value > hi:
        return "exceeded", f"{100 * (value / hi - 1):+.0f}% over {shown}"
    if bound and bound["value"] < lo and value >= bound["value"] * (1 - WITHIN):
        return "bound below the claim", f"at most {_fmt(bound['value'], unit)} here: {bound['why']}"
    return "not reproduced", f"{_fmt(value, unit)} is {100 * (1 - value / lo):.0f}% under {shown}"


def _ours(values: Mapping[str, tuple[float, int]], sources: Sequence[str], unit: str) -> tuple[float | None, str]:
    got = [(values[s][0], s) for s in sources if s in values]
    if not got:
        return None, "no data"
    return got[0][0], ", ".join(_fmt(v, unit) for v, _ in got)


def claims_table(records: Sequence[Mapping[str, Any]], paper: Mapping[str, Any]) -> list[str]:
    """Markdown lines of the claims table: each claim with a ``short`` line in paper.yaml, the published number,
    ours emulated and predicted, and the verdict on the emulated value (on the predicted where nothing was
    measured), with its reason."""
    rows = ["| claim | paper | emulated | predicted | verdict |", "|---|---|---|---|---|"]
    for c in paper.get("claims", []):
        if "short" not in c:
            continue
        unit = c["paper"].get("unit", "")
        values = tables.claim_values(records, c["ours"])
        emulated, emulated_text = _ours(values, MEASURED, unit)
        predicted, predicted_text = _ours(values, ("predicted",), unit)
        judged = emulated if emulated is not None else predicted
        if judged is None:
            cell = "no data"
        else:
            word, why = verdict(judged, c["paper"], c.get("bound"))
            cell = f"**{word}** ({'' if emulated is not None else 'predicted: '}{why})"
        rows.append(f"| {c['short']} | {tables.fmt_paper(c['paper'])} | {emulated_text} | {predicted_text} | {cell} |")
    return rows if len(rows) > 2 else []


def provenance(records: Sequence[Mapping[str, Any]]) -> str:
    """One line: the commit(s), host(s), cores and torch of the measured records, and when they were taken."""
    measured = [r for r in records if r.get("source") in MEASURED] or list(records)
    if not measured:
        return "**Provenance**: no records."

    def values(key: str) -> str:
        got = sorted({str((r.get("env") or {}).get(key)) for r in measured if (r.get("env") or {}).get(key)})
        return ", ".join(got) if got else "unknown"

    stamps = sorted(str(r.get("timestamp", "")) for r in measured if r.get("timestamp"))
    when = f"{stamps[0]} to {stamps[-1]}" if stamps and stamps[0] != stamps[-1] else (stamps[0] if stamps else "?")
    return (
        f"**Provenance**: commit {values('git_commit')} · host {values('host')} · {values('cpus')} cores · "
        f"torch {values('torch')} · python {values('python')} · measured {when} (UTC; the records' env)."
    )
