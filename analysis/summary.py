"""The report's opening summary: the run's headline numbers, each linked to the table or figure behind it.

Pure functions of the records, analysis/paper.yaml and the regression check's table; monta_analysis.report renders them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from monta import variants as registry
from monta.chunking import CHUNK_TIE  # the chunk-pick check below applies the model's own rule to the predictions
from monta.perfmodel.reports.accuracy import CHUNK_TOLERANCE
from monta_analysis import alltoall_tables, step_tables
from monta_analysis.display import fmt_bytes, fmt_time_us, sig3, split_model, time_unit
from monta_analysis.frames import MEASURED

REGRESS_STATUSES = ("REGRESSED", "improved", "inconclusive", "ok", "CPU-bound")


def _x(v: float) -> str:
    return f"{sig3(v)}x"


def _t(us: float, source: str) -> str:
    return fmt_time_us(us, time_unit(source, us))


def _where(row: Mapping[str, Any]) -> str:
    gbps = row.get("inter_gbps")
    link = f" @ {gbps:g} Gbit/s" if row.get("source") in MEASURED and gbps == gbps and gbps is not None else ""
    return f"{row['source']} {row['cluster']}{link}"


def alltoall_lines(summary: pd.DataFrame) -> list[str]:
    """Measured: the largest TP (then the largest cluster) at its main link and its largest buffer with
    legacy and monta (and deepspeed when it ran). Predicted (a named cluster, not the emulator's
    profile): the largest gain over legacy."""
    if summary.empty:
        return []
    full = summary.dropna(subset=["legacy_us", "monta_us"])
    lines = []
    meas = full[full["source"].isin(MEASURED)]
    if len(meas):
        meas = meas.assign(_size=meas["nodes"] * meas["gpus_per_node"])
        top = meas.sort_values(["tp", "_size"]).iloc[-1]
        same = meas[(meas["cluster"] == top["cluster"]) & (meas["source"] == top["source"])]
        gbps = same["inter_gbps"].mode()
        if len(gbps):
            same = same[same["inter_gbps"] == gbps.iloc[0]]
        r = same.sort_values("size_bytes").iloc[-1]
        text = (
            f"**TP AllToAll**, {_where(r)}, {fmt_bytes(r['size_bytes'])} per rank: monta "
            f"({int(r['best_chunks'])} chunk{'s' if r['best_chunks'] != 1 else ''}) {_t(r['monta_us'], r['source'])}: "
            f"**{_x(r['speedup_vs_legacy'])}** over legacy ({_t(r['legacy_us'], r['source'])})"
        )
        if r["deepspeed_us"] == r["deepspeed_us"]:
            text += f", **{_x(r['speedup_vs_deepspeed'])}** over deepspeed ({_t(r['deepspeed_us'], r['source'])})"
        paired = [
            f"{_x(r[f'paired_vs_{b}'])} [{_x(r[f'paired_vs_{b}_lo'])}, {_x(r[f'paired_vs_{b}_hi'])}] vs {b}"
            for b in ("legacy", "deepspeed")
            if r.get(f"paired_vs_{b}") == r.get(f"paired_vs_{b}")
            and r.get(f"paired_vs_{b}") is not None
            and r.get(f"paired_vs_{b}_lo") == r.get(f"paired_vs_{b}_lo")
        ]
        if paired:
            text += f"; paired per iteration (95% CI, {int(r['iters'])} iterations): {', '.join(paired)}"
        if r.get("overlap_efficiency") == r.get("overlap_efficiency") and r.get("overlap_efficiency") is not None:
            text += f"; overlap efficiency {100 * r['overlap_efficiency']:.0f}%"
        if r.get("cpu_bound") is True:
            text += "; **CPU-BOUND** (the ranks waited for cores: the machine, not the method)"
        lines.append(text + ".")
    pred = full[(full["source"] == "predicted") & ~full["cluster"].astype(str).str.startswith("emulator")]
    pred = pred.dropna(subset=["deepspeed_us"])
    parts = []
    for cluster, g in pred.groupby("cluster", sort=True):
        r = g.loc[g["speedup_vs_legacy"].idxmax()]
        parts.append(
            f"{cluster}: up to **{_x(r['speedup_vs_legacy'])}** over legacy at {fmt_bytes(r['size_bytes'])} "
            f"({_x(r['speedup_vs_deepspeed'])} over deepspeed there)"
        )
    if parts:
        lines.append("**TP AllToAll, predicted** by the performance model: " + "; ".join(parts) + ".")
    return lines


def step_line(steps: pd.DataFrame) -> str | None:
    """The measured step point with the most variants (the step experiment, not a 2-variant ablation)."""
    if steps.empty or "deepspeed" not in set(steps["variant"]):
        return None
    key = ["source", "cluster", "model"]
    meas = steps[steps["source"].isin(MEASURED)]
    pool = meas if len(meas) else steps
    counts = pool.groupby(key, dropna=False)["variant"].nunique()
    point = counts.idxmax()
    g = pool[(pool[key] == pd.Series(point, index=key)).all(axis=1)].set_index("variant")
    if "monta" not in g.index or g["speedup_vs_deepspeed"].isna().all():
        return None
    ds = g.loc["deepspeed", "step_ms"]
    model, overrides = split_model(point[2])
    text = (
        f"**Training step**, {point[0]} {point[1]}, {model}{' (' + overrides + ')' if overrides else ''}: "
        f"monta {sig3(g.loc['monta', 'step_ms'])} ms, **{_x(g.loc['monta', 'speedup_vs_deepspeed'])}** over "
        f"deepspeed ({sig3(ds)} ms)"
    )
    # the registry's order (monta.variants), the pre-fix baseline last
    rest = sorted(
        (v for v in g.index if v not in ("monta", "deepspeed")),
        key=lambda v: (v == "legacy", *registry.order_key(v)),
    )
    others = [f"{v} {_x(g.loc[v, 'speedup_vs_deepspeed'])}" for v in rest]
    return text + ("; " + ", ".join(others) + " over deepspeed" if others else "") + "."


def chunk_picks(records: Sequence[Mapping[str, Any]]) -> list[tuple[tuple, int, int, float, bool]]:
    """(setup, best measured chunks, model's pick, measured loss of the pick, whether the pick's or the
    best's timing was CPU-bound) per buffer size and shape, from `monta predict accuracy` records (a
    prediction next to each measurement)."""
    by_setup: dict[tuple, dict[int, tuple[float, float]]] = {}
    for r in records:
        m, p = r.get("metrics", {}), r.get("params", {})
        if r.get("kind") != "alltoall" or r.get("source") != "predicted" or m.get("measured_us") is None:
            continue
        if not registry.is_chunked(p.get("variant")):
            continue
        setup = tuple(p.get(k) for k in ("size_bytes", "nodes", "gpus_per_node", "tp", "ep"))
        by_setup.setdefault(setup, {})[int(p["chunks"])] = (
            float(m["time_us"]),
            float(m["measured_us"]),
            m.get("measured_cpu_bound") is True,
        )
    out = []
    for setup, by_k in sorted(by_setup.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        if len(by_k) < 2:
            continue
        pick, best_t = None, float("inf")
        for k in sorted(by_k):
            if pick is None or by_k[k][0] < best_t * (1 - CHUNK_TIE):
                pick, best_t = k, by_k[k][0]
        best = min(by_k, key=lambda k: by_k[k][1])
        out.append((setup, best, pick, by_k[pick][1] / by_k[best][1] - 1, by_k[pick][2] or by_k[best][2]))
    return out


def model_line(records: Sequence[Mapping[str, Any]]) -> str | None:
    pvm = alltoall_tables.predicted_vs_measured(records)
    if pvm.empty:
        return None
    err = pvm["error_pct"].abs()
    shapes = pvm.assign(
        shape=[f"{int(n)}x{int(g)} TP{int(t)}" for n, g, t in zip(pvm["nodes"], pvm["gpus_per_node"], pvm["tp"])]
    ).groupby("shape")
    per = ", ".join(f"{s} {g['error_pct'].abs().mean():.1f}%" for s, g in shapes) if shapes.ngroups > 1 else ""
    text = (
        f"**Performance model** vs this run's measurements: MAPE **{err.mean():.1f}%** over {len(pvm)} "
        f"point{'s' if len(pvm) != 1 else ''}"
    )
    text += f" ({per})" if per else ""
    picks = chunk_picks(records)
    if picks:
        ok = sum(loss <= CHUNK_TOLERANCE for *_, loss, _ in picks)
        text += (
            f"; its chunk pick is within {CHUNK_TOLERANCE:.0%} of the best measured count at "
            f"**{ok} of {len(picks)}** buffer sizes"
        )
        judged = [loss for *_, loss, bound in picks if not bound]
        if len(judged) < len(picks):
            text += (
                f" ({sum(x <= CHUNK_TOLERANCE for x in judged)} of {len(judged)} where neither timing was CPU-bound)"
            )
    else:
        text += "; chunk pick not checked (no buffer size measured at two or more chunk counts)"
    sa = step_tables.step_accuracy(records)
    if not sa.empty:
        worst = sa.loc[sa["error_pct"].abs().idxmax()]
        text += (
            f". On the training step (compute on the A800 clock, so this scores the model's exchanges, overlap "
            f"and scheduling): MAPE **{sa['error_pct'].abs().mean():.1f}%** over {len(sa)} variants, worst "
            f"{worst['variant']} {worst['error_pct']:+.1f}%, ranking "
            f"**{'agrees' if sa['ranking_agrees'].all() else 'differs'}**"
        )
    return text + "."


def regress_line(path: str | Path | None) -> str:
    if path is None:
        return "**Regression check**: not run (regress.enabled is false in this config)."
    text = Path(path).read_text() if Path(path).exists() else ""
    counts = {s: 0 for s in REGRESS_STATUSES}
    for line in text.splitlines():
        cell = line.split("|")[1].strip() if line.startswith("|") and line.count("|") > 2 else ""
        if cell.startswith("CPU-BOUND"):  # not judged: monta.regress
            cell = "CPU-bound"
        if cell in counts:
            counts[cell] += 1
    total = sum(counts.values())
    if not total:
        first = text.strip().splitlines()[0] if text.strip() else "no output"
        return f"**Regression check**: no verdict ({first.removeprefix('regress: ')})."
    threshold = re.search(r"threshold (\d+(?:\.\d+)?%)", text)
    bad = counts["REGRESSED"]
    verdict = f"**{bad} regressed**" if bad else "**none regressed**"
    rest = ", ".join(
        f"{counts[s]} {s}" + (" (not judged)" if s == "CPU-bound" else "")
        for s in ("improved", "inconclusive", "CPU-bound")
        if counts[s]
    )
    return (
        f"**Regression check** against the stored baseline: {total} matched points, {verdict}"
        f"{' (' + rest + ')' if rest else ''}{'; threshold ' + threshold.group(1) if threshold else ''}."
    )


def injection_line(records: Sequence[Mapping[str, Any]]) -> str | None:
    """TEST AID banner: which variants carry an injected slowdown (``alltoall.inject_slowdown``), or None."""
    got = sorted(
        {
            (str(r.get("params", {}).get("variant")), float(r["metrics"]["injected_slowdown"]))
            for r in records
            if (r.get("metrics") or {}).get("injected_slowdown")
        }
    )
    if not got:
        return None
    what = ", ".join(f"{v} +{100 * f:g}%" for v, f in got)
    return (
        f"**TEST AID: injected slowdown ({what})**: this run slowed those variants on purpose "
        "(`alltoall.inject_slowdown`, `make reproduce INJECT=...`) to check the regression gate; their "
        "timings, ratios, chunk picks and model errors below are not measurements of the code."
    )


def host_line(records: Sequence[Mapping[str, Any]]) -> str | None:
    """How the host held up in the AllToAll runs: the points (a sweep's size) whose ranks waited for a core,
    and the rows the chunk floor (``--min-chunk``) left out, or None where no run measured its host."""
    points: dict[tuple, dict] = {}
    for r in records:
        p, m = r.get("params") or {}, r.get("metrics") or {}
        if r.get("kind") != "alltoall" or r.get("source") not in ("emulated", "measured"):
            continue
        key = (p.get("nodes"), p.get("gpus_per_node"), p.get("tp"), p.get("inter_gbps"), p.get("size_bytes"))
        pt = points.setdefault(key, {"bound": False, "left": None})
        pt["bound"] |= bool(m.get("cpu_bound"))
        pt["left"] = pt["left"] or m.get("not_run")
    if not points:
        return None

    def name(k: tuple) -> str:  # a real network (SLURM) has no emulated rate
        return f"{k[0]}x{k[1]} TP{k[2]}{'' if k[3] is None else f' @ {k[3]:g} Gbit/s'} {fmt_bytes(k[4])}"

    bound = [name(k) for k, v in points.items() if v["bound"]]
    text = f"**The host**: {len(bound)} of {len(points)} AllToAll points CPU-bound" + (
        f" ({', '.join(bound)}: their ranks waited for a core; the machine, not the method)" if bound else ""
    )
    steps = [r for r in records if r.get("kind") == "step" and r.get("source") in ("emulated", "measured")]
    if steps:  # a step is CPU-bound where its ranks waited for a core or its math outran the compute clock
        n = sum(bool((r.get("metrics") or {}).get("cpu_bound")) for r in steps)
        text += f"; {n} of {len(steps)} step records CPU-bound"
    left = [f"{name(k)}: {', '.join(v['left']['rows'])}" for k, v in points.items() if v["left"]]
    if left:
        text += (
            "; left out by the chunk floor (chunks whose host work, not the links, would set their time here; "
            f"docs/testbed.md): {'; '.join(left)}"
        )
    return text + "."


def summarize(
    records: Sequence[Mapping[str, Any]],
    paper: Mapping[str, Any] | None,
    regress: str | Path | None,
    link: Callable[[str], str | None],
) -> list[str]:
    """Markdown bullet lines; ``link(relative path under results/)`` gives a link target or None
    when that file does not exist."""

    def links(*targets: tuple[str, str]) -> str:
        got = [f"[{name}]({link(t)})" for name, t in targets if link(t)]
        return (" " + " · ".join(got)) if got else ""

    summary = alltoall_tables.alltoall_summary(alltoall_tables.alltoall_table(records))
    lines = [banner for banner in (injection_line(records),) if banner]  # a TEST AID run says so first
    lines += [
        line + links(("table", "tables/alltoall_summary.md"), ("figure", "figures/alltoall_comparison.png"))
        for line in alltoall_lines(summary)
    ]
    step = step_line(step_tables.step_table(records))
    if step:
        lines.append(step + links(("table", "tables/step_summary.md"), ("figure", "figures/step_breakdown.png")))
    model = model_line(records)
    if model:
        lines.append(
            model
            + links(
                ("table", "tables/predicted_vs_measured.md"),
                ("figure", "figures/predicted_vs_measured.png"),
                ("log", "logs/predict/accuracy.log"),
            )
        )
    host = host_line(records)
    if host:
        lines.append(host)
    lines.append(regress_line(regress) + links(("table", "regress/alltoall.md")))
    if paper and link("tables/paper_comparison.md"):  # the claims table opens the report; every number: here
        lines.append("**Every published number** next to ours" + links(("table", "tables/paper_comparison.md")) + ".")
    return [f"- {line}" for line in lines]
