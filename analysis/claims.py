"""The paper's claims against ours: each claim's value from the records (``claim_values``: a ratio of an
exchange's or a step's time to its baseline's, or the model's error), the verdict that says what the difference
means, the comparison table (``paper_comparison``) and the report's opening (``claims_table``, then one
provenance line: commit, host, cores, torch, when).

Pure functions of the records and analysis/paper.yaml; monta_analysis.report renders the opening first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from monta.regress_stats import RUN_SPECIFIC  # params that say how a point was measured, not which point it is
from monta_analysis.alltoall_tables import predicted_vs_measured
from monta_analysis.frames import MEASURED, ensure, to_frame
from monta_analysis.testbed_bound import bound_for

# A value within 10% of the published one (or of a published range's ends) reproduces it: the paper states
# its numbers to two digits ("8x", "13%"), and our emulated runs repeat to a few percent, so a closer test
# would judge the rounding, not the result.
WITHIN = 0.10

VERDICTS = ("reproduced", "exceeded", "bound below the claim", "not reproduced")


def _fmt(value: float, unit: str) -> str:
    return f"{100 * value:.1f}%" if unit == "fraction" else f"{value:.2f}{unit}"


def _above(value: float, bound: Mapping[str, Any]) -> bool:
    """Past the bound: a testbed bound computed from the measured record itself (it carries ``low``, the
    measured ratio's 95% CI lower end) is passed once that interval lies above it; a typed bound of a real
    cluster, read against a testbed that only approximates it, once the value is over it by more than WITHIN."""
    if "low" in bound:
        return min(value, float(bound["low"])) > bound["value"]
    return value > bound["value"] * (1 + WITHIN)


def verdict(value: float, paper: Mapping[str, Any], bound: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """(verdict, the reason in a few words) for ``value`` against the published ``paper`` number.

    ``bound``: a ceiling below the claim that physics sets on the cluster ({value, why}, analysis/paper.yaml),
    or on the testbed ({value, why, low}: ``monta_analysis.testbed_bound``): a value under the claim but at
    that ceiling is "bound below the claim", not a failure to reproduce; one past it is "above its bound"."""
    unit = paper.get("unit", "")
    lo, hi = (paper["value"], paper["value"]) if "value" in paper else (paper["low"], paper["high"])
    shown = fmt_paper(paper)
    if bound and bound["value"] < lo and _above(value, bound):
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
        values = claim_values(records, c["ours"])
        emulated, emulated_text = _ours(values, MEASURED, unit)
        predicted, predicted_text = _ours(values, ("predicted",), unit)
        judged = emulated if emulated is not None else predicted
        if judged is None:
            cell = "no data"
        else:
            source = next((s for s in MEASURED if s in values), "predicted")  # "predicted" when nothing measured
            bound = bound_for(records, c, source)
            word, why = verdict(judged, c["paper"], bound)
            cell = f"**{word}** ({'' if emulated is not None else 'predicted: '}{why})"
        rows.append(f"| {c['short']} | {fmt_paper(c['paper'])} | {emulated_text} | {predicted_text} | {cell} |")
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


# What a variant is made of (its record's params): they differ between the variant and its baseline by
# definition, so they never split a point.
VARIANT_PARTS = frozenset({"exchange", "schedule", "sync", "exchange_chunks", "chunks_requested"})


def fmt_paper(paper: Mapping[str, Any]) -> str:
    unit = paper.get("unit", "")
    scale, suffix = (100.0, "%") if unit == "fraction" else (1.0, unit)
    if "value" in paper:
        return f"{paper['value'] * scale:g}{suffix}"
    return f"{paper['low'] * scale:g}-{paper['high'] * scale:g}{suffix}"


def paper_comparison(records: Sequence[Mapping[str, Any]], paper: Mapping[str, Any]) -> pd.DataFrame:
    """Every published number of paper.yaml next to ours (per source) with what the difference means: the
    verdict (reproduced, exceeded, bound below the claim, not reproduced) and its reason (monta_analysis.claims)."""
    rows = []
    for c in paper["claims"]:
        src = c["source"]
        cite = f"{src['paper']} (arXiv {src['arxiv']}, {src['where']})"
        base = {"claim": c["claim"], "source": cite, "paper": fmt_paper(c["paper"])}
        values = claim_values(records, c["ours"])
        if not values:
            rows.append({**base, "ours_source": "-", "ours": "no data", "meaning": "no data", "points": 0})
            continue
        unit = c["paper"].get("unit", "")
        for source, (value, n) in sorted(values.items()):
            shown = f"{value * 100:.1f}%" if unit == "fraction" else f"{value:.2f}{unit}"
            rows.append(
                {
                    **base,
                    "ours_source": source,
                    "ours": shown,
                    "meaning": "{}: {}".format(*verdict(value, c["paper"], bound_for(records, c, str(source)))),
                    "points": n,
                }
            )
    return pd.DataFrame(rows)


def claim_values(records: Sequence[Mapping[str, Any]], ours: Mapping[str, Any]) -> dict[str, tuple[float, int]]:
    """Our value of one claim per source: {source: (value, number of points)}."""
    if ours.get("compute") == "model_error":
        pvm = predicted_vs_measured(records)
        if pvm.empty:
            return {}
        return {"predicted vs " + "/".join(MEASURED): (float(pvm["error_pct"].abs().mean()) / 100.0, len(pvm))}
    ratios = _paired_ratio(records, ours)
    if ratios.empty:
        return {}
    out = {}
    for source, g in ratios.groupby("source"):
        r = g["ratio"]
        value = {"max": r.max(), "mean": r.mean(), "min": r.min()}[ours.get("reduce", "max")]
        if ours.get("as") == "reduction":  # latency reduction 1 - t_variant / t_baseline
            value = 1.0 - 1.0 / value
        out[str(source)] = (float(value), len(r))
    return out


def _paired_ratio(records: Sequence[Mapping[str, Any]], ours: Mapping[str, Any]) -> pd.DataFrame:
    """Per source and point: baseline metric / variant metric (best chunk count for variants)."""
    kind, metric = ours["kind"], ours.get("metric", "time_us")
    df = to_frame(records, kind)
    if df.empty or metric not in df.columns or "variant" not in df.columns:
        return pd.DataFrame()
    for k, v in (ours.get("where") or {}).items():
        if k not in df.columns:
            return pd.DataFrame()
        df = df[df[k] == v]
    if "measured_us" in df.columns:  # `predict accuracy` rows: the model scored on the emulator, not a claim
        df = df[df["measured_us"].isna()]
    out = []
    for source, sdf in df.groupby("source"):
        # A point is what every record of this kind and source states (a prediction's cluster,
        # a measurement's link rate); variant-only knobs would split pairs.
        recs = [r for r in records if r.get("source") == source]
        point = ["source"] + sorted(
            _common_params(recs, kind) - {"variant", "chunks", "source"} - RUN_SPECIFIC - VARIANT_PARTS
        )
        sdf = ensure(sdf, point)
        med = (
            sdf.groupby(
                point + ["variant", "chunks"] if "chunks" in sdf.columns else point + ["variant"], dropna=False
            )[metric]
            .median()
            .reset_index()
        )
        best = med.groupby(point + ["variant"], dropna=False)[metric].min().unstack("variant")
        stated = f"{ours['baseline']}_us"  # `predict paper` states the baseline's time on its monta records
        if metric == "time_us" and stated in sdf.columns and ours["variant"] in best.columns:
            known = sdf[sdf["variant"] == ours["variant"]].groupby(point, dropna=False)[stated].median()
            have = best[ours["baseline"]] if ours["baseline"] in best.columns else pd.Series(float("nan"), best.index)
            best[ours["baseline"]] = have.fillna(known.reindex(best.index))
        if ours["variant"] in best.columns and ours["baseline"] in best.columns:
            out.append((best[ours["baseline"]] / best[ours["variant"]]).dropna().rename("ratio").reset_index())
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _common_params(records: Sequence[Mapping[str, Any]], kind: str) -> set[str]:
    sets = [
        {k for k, v in r.get("params", {}).items() if not isinstance(v, (list, dict))}
        for r in records
        if r.get("kind") == kind
    ]
    return set.intersection(*sets) if sets else set()
