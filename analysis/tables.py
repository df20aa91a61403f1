"""Pure functions that turn result records (monta.results) into pandas tables.

Every function accepts records of any kinds and returns an empty frame when its kind is absent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from monta.results import read_records
from monta.variants import is_chunked  # the exchange whose chunk count varies (registry, not name)
from monta_analysis import display, known

# Params that describe how a point was measured, not which point it is.
RUN_SPECIFIC = frozenset({"run_id", "timestamp", "host", "seed", "iters", "warmup", "steps", "check", "out"})
# What a variant is made of (its record's params): they differ between the variant and its baseline by
# definition, so they never split a point.
VARIANT_PARTS = frozenset({"exchange", "schedule", "sync", "exchange_chunks", "chunks_requested"})
MEASURED = ("measured", "emulated")
PHASES = (
    "attention",
    "gate",
    "dispatch",
    "experts",
    "combine",
    "dispatch_bwd",
    "combine_bwd",
    "exchange",
    "forward",
    "backward",
    "grad_sync",
    "optimizer",
    "exposed_comm",
)
# Sums over other phases (never stacked with them); exposed_comm = communication the step waited for.
TOTALS = {"breakdown_ms.forward", "breakdown_ms.backward", "breakdown_ms.exchange", "breakdown_ms.exposed_comm"}
# What else makes two AllToAll records different points: the routing (`--routing`, absent = W0), the
# mode (`--mode layer`, absent = dispatch), experts/top-k, the capacity factor, and the clock a record ran
# at (`--dilation`: a time at dilation 2 is another point's time, never one sample of the same median).
# Absent keys are NaN (routing W0, mode dispatch) and group together, so records that do not set them keep
# their points; the tables show these columns only where they tell points apart (``shown_point``).
A2A_SETUP = ["experts", "topk", "capacity_factor", "routing", "mode", "dilation"]
A2A_POINT = ["source", "cluster", "nodes", "gpus_per_node", "tp", "inter_gbps", "dtype", "size_bytes", *A2A_SETUP]
# What a monta prediction states about its baselines (filled into the summary, not a column of its own).
STATED = ["legacy_us", "deepspeed_us", "legacy_inter_bytes"]
# Measured paired per iteration by `monta bench alltoall` (records' speedups with bootstrap CIs).
PAIRED = [
    "paired_vs_legacy",
    "paired_vs_legacy_lo",
    "paired_vs_legacy_hi",
    "paired_vs_deepspeed",
    "paired_vs_deepspeed_lo",
    "paired_vs_deepspeed_hi",
    "overlap_efficiency",
    "overlap_efficiency_ci_lo",
    "overlap_efficiency_ci_hi",
    "iters",
]
# the step's `--routing` workload (absent or "gate": the model's own router) is part of its point
STEP_POINT = ["source", "cluster", "model", "layers", "seq", "topk", "capacity_factor", "routing"]


def load(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Read every record file that exists; missing files are skipped (a stage that did not run)."""
    existing = [p for p in paths if Path(p).exists() and Path(p).stat().st_size > 0]
    return read_records(*existing) if existing else []


def to_frame(records: Sequence[Mapping[str, Any]], kind: str | None = None) -> pd.DataFrame:
    """One row per record: identity columns, params, scalar metrics, breakdown_ms.<phase>."""
    rows = []
    ran_at = known.measured_rates(records)  # the NIC rate each `predict accuracy` row was priced at
    for r in records:
        if kind is not None and r.get("kind") != kind:
            continue
        if kind == "step" and "measured_ms" in (r.get("metrics") or {}):
            continue  # `monta predict accuracy`'s scored step predictions: step_accuracy reads them
        row: dict[str, Any] = {k: r.get(k) for k in ("kind", "source", "experiment", "run_id")}
        row.update({k: v for k, v in r.get("params", {}).items() if not isinstance(v, (list, dict))})
        for k, v in r.get("metrics", {}).items():
            if isinstance(v, Mapping):
                row.update({f"{k}.{sk}": sv for sk, sv in v.items() if _is_number(sv)})
            elif _is_number(v) or v is None or isinstance(v, bool):
                row[k] = v
            elif k.endswith("_ci") and isinstance(v, list) and len(v) == 2 and all(_is_number(x) for x in v):
                row[f"{k}_lo"], row[f"{k}_hi"] = v  # a confidence interval: its two ends
        left = (r.get("metrics") or {}).get("not_run")
        if isinstance(left, Mapping) and left.get("rows"):  # rows the chunk floor left out at this size
            row["left_out"] = ", ".join(map(str, left["rows"]))
        if r.get("kind") == "step" and row.get("step_ms") is None and _is_number(row.get("step_time_us")):
            row["step_ms"] = row["step_time_us"] / 1000.0  # the performance model states step time in us
        known.fill(row, r, ran_at)
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty and {"nodes", "gpus_per_node"} <= set(df.columns):
        n = len(df)
        named = df["cluster"] if "cluster" in df.columns else pd.Series([None] * n)  # e.g. a800-8nic
        df["cluster"] = [
            _cluster_label(nd, g, t, c)
            for nd, g, t, c in zip(df["nodes"], df["gpus_per_node"], df.get("tp", pd.Series([None] * n)), named)
        ]
    return df


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cluster_label(nodes: Any, gpus: Any, tp: Any, name: Any = None) -> str:
    label = f"{int(nodes)}x{int(gpus)}"
    if tp is not None and not _isnan(tp):
        label += f" TP{int(tp)}"
    return f"{name} {label}" if isinstance(name, str) and name else label


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def shown_point(df: pd.DataFrame, keys: Iterable[str] = A2A_SETUP) -> pd.DataFrame:
    """``df`` without the setup keys that tell no two rows of one source apart (an all-W0 dispatch sweep
    shows no routing column; a measured dilation 1 beside predictions that state none shows no dilation)."""

    def differs(c: str) -> bool:
        by = df.groupby("source", dropna=False)[c] if "source" in df.columns else [(None, df[c])]
        return any(col.nunique(dropna=False) > 1 for _, col in by)

    return df.drop(columns=[c for c in keys if c in df.columns and not differs(c)])


def _ensure(df: pd.DataFrame, cols: Iterable[str]) -> pd.DataFrame:
    df = df.copy()
    for c in cols:
        if c not in df.columns:
            df[c] = float("nan")
    return df


def alltoall_table(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Median per (point, variant, chunks) with speedups vs legacy and deepspeed at the same point."""
    df = to_frame(records, "alltoall")
    if df.empty:
        return df
    # legacy_us / deepspeed_us: `monta predict paper` states the baselines on its monta records
    metrics = [
        "time_us",
        "algbw_GBps",
        "busbw_GBps",
        "inter_bytes",
        "intra_bytes",
        "wrong",
        "legacy_us",
        "deepspeed_us",
        "legacy_inter_bytes",
    ] + PAIRED
    df = _ensure(df, A2A_POINT + ["variant", "chunks", "cpu_bound", "left_out"] + metrics)
    # balanced dispatch: the bench leaves W0 and dispatch unsaid
    df["routing"] = df["routing"].astype(object).fillna("W0")
    df["mode"] = df["mode"].astype(object).fillna("dispatch")
    # What the benchmark measured paired per iteration (the records' speedups and their CIs) is kept
    # under its own names: speedup_vs_* below is recomputed from the medians for every source.
    for base in ("legacy", "deepspeed"):
        if f"speedup_vs_{base}" in df.columns and "source" in df.columns:
            measured = df["source"].isin(MEASURED)
            df.loc[measured, f"paired_vs_{base}"] = df.loc[measured, f"speedup_vs_{base}"]
            for end in ("lo", "hi"):
                col = f"speedup_vs_{base}_ci_{end}"
                if col in df.columns:
                    df.loc[measured, f"paired_vs_{base}_{end}"] = df.loc[measured, col]
    keys = A2A_POINT + ["variant", "chunks"]
    grouped = df.groupby(keys, dropna=False)
    out = grouped[metrics].median().reset_index().assign(n=grouped.size().values)
    out["left_out"] = grouped["left_out"].first().values  # what the chunk floor left out at the point, or NaN
    out["cpu_bound"] = (
        grouped["cpu_bound"]
        .apply(lambda c: bool(c.fillna(False).astype(bool).any()) if c.notna().any() else None)
        .values
    )
    for base in ("legacy", "deepspeed"):
        ref = (
            out[out["variant"] == base]
            .groupby(A2A_POINT, dropna=False)["time_us"]
            .min()
            .rename(f"_t_{base}")
            .reset_index()
        )
        out = out.merge(ref, on=A2A_POINT, how="left")
        out[f"_t_{base}"] = out[f"_t_{base}"].fillna(out[f"{base}_us"])
        out[f"speedup_vs_{base}"] = out[f"_t_{base}"] / out["time_us"]
        out = out.drop(columns=f"_t_{base}")
    return out.sort_values(keys).reset_index(drop=True)


CORE_ROWS = {"legacy", "deepspeed", "monta", "a2a", "ag"}  # the core's exchanges and the two halves


def alltoall_summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per point: legacy, deepspeed and the best MoNTA chunk count side by side."""
    if table.empty:
        return table
    rows = []
    for point, g in table.groupby(A2A_POINT, dropna=False, sort=True):
        row = dict(zip(A2A_POINT, point))
        m = g[g["variant"].map(is_chunked)]
        best = m.loc[m["time_us"].idxmin()] if len(m) and m["time_us"].notna().any() else None
        for v in ("legacy", "deepspeed"):
            t = g.loc[g["variant"] == v, "time_us"]
            if len(t):
                row[f"{v}_us"] = t.min()
            elif best is not None:  # a prediction that states only monta and its speedups: the model's baseline
                row[f"{v}_us"] = best["time_us"] * best[f"speedup_vs_{v}"]
            else:
                row[f"{v}_us"] = float("nan")
        nan = float("nan")
        for k in PAIRED:  # the best chunk count's paired ratios, efficiency and iterations
            row[k] = best[k] if best is not None and k in best else nan
        # a point is CPU-bound when a timing its ratios come from was: legacy, deepspeed, the best
        # monta (another chunk count's CPU-bound time shows only in the chunk ablation)
        used = g["variant"].isin(["legacy", "deepspeed", "a2a", "ag"])
        if best is not None:
            used |= g["variant"].map(is_chunked) & (g["chunks"] == best["chunks"])
        flags = [f for f in g.loc[used, "cpu_bound"] if f is not None and f == f] if "cpu_bound" in g else []
        row["cpu_bound"] = any(flags) if flags else None
        left = g["left_out"].dropna() if "left_out" in g else pd.Series(dtype=object)
        row.update(
            left_out=left.iloc[0] if len(left) else None,  # the chunk floor's left-out rows at this point
            monta_us=best["time_us"] if best is not None else nan,
            best_chunks=best["chunks"] if best is not None else nan,
            # monta's inter-node bytes do not depend on the chunk count: any monta row says them
            monta_inter_bytes=m["inter_bytes"].max() if len(m) else nan,
        )
        lg = g.loc[g["variant"] == "legacy", "inter_bytes"].min()
        if not lg == lg:  # no legacy row: the legacy bytes the model stated next to monta's
            lg = m["legacy_inter_bytes"].max() if len(m) else nan
        row["inter_bytes_ratio"] = lg / row["monta_inter_bytes"] if lg and row["monta_inter_bytes"] else nan
        row["speedup_vs_legacy"] = row["legacy_us"] / row["monta_us"]
        row["speedup_vs_deepspeed"] = row["deepspeed_us"] / row["monta_us"]
        # a plugin's exchange (monta.variants.add_exchange): its best time, next to the core's
        for v in sorted(set(g["variant"]) - CORE_ROWS):
            row[f"{v}_us"] = g.loc[g["variant"] == v, "time_us"].min()
        rows.append(row)
    return shown_point(pd.DataFrame(rows))


def with_intervals(summary: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The summary to read: paired ratios and overlap efficiency as 'value [lo, hi]' cells, a
    CPU-bound column, and a note naming the CPU-bound points (empty when none or unknown)."""
    if summary.empty:
        return summary, ""
    df = summary.copy()
    has = lambda c: c in df.columns and df[c].notna().any()  # noqa: E731

    def cell(v, lo, hi, pct=False):
        if v != v or v is None:
            return None
        f = (lambda x: f"{100 * x:.0f}%") if pct else (lambda x: f"{display.sig3(x)}x")
        return f"{f(v)} [{f(lo)}, {f(hi)}]" if lo == lo and hi == hi and lo is not None else f(v)

    for base in ("legacy", "deepspeed"):
        if has(f"paired_vs_{base}"):
            df[f"vs {base}, paired [95% CI]"] = [
                cell(v, lo, hi)
                for v, lo, hi in zip(df[f"paired_vs_{base}"], df[f"paired_vs_{base}_lo"], df[f"paired_vs_{base}_hi"])
            ]
    if has("overlap_efficiency"):
        df["overlap efficiency [95% CI]"] = [
            cell(v, lo, hi, pct=True)
            for v, lo, hi in zip(
                df["overlap_efficiency"], df["overlap_efficiency_ci_lo"], df["overlap_efficiency_ci_hi"]
            )
        ]
    note = ""
    if "cpu_bound" in df.columns and df["cpu_bound"].notna().any():
        bound = df[df["cpu_bound"] == True]  # noqa: E712  (None = not measured)
        df["CPU-bound"] = ["yes" if b is True else ("no" if b is False else "-") for b in df["cpu_bound"]]
        if len(bound):
            # each point once, by what tells it apart: cluster, its rate where several ran, size
            rated = df["inter_gbps"].nunique() > 1
            names = [
                f"{c}{f' @{g:g} Gbit/s' if rated and g == g else ''} {display.fmt_bytes(sz)}"
                for c, g, sz in zip(bound["cluster"], bound["inter_gbps"], bound["size_bytes"])
            ]
            where = ", ".join(dict.fromkeys(names))
            note = (
                f"CPU-BOUND: {len(bound)} of {int(df['cpu_bound'].notna().sum())} measured points ({where}): "
                "the ranks waited for a core more than the limit; their timings measure this machine, not the links"
            )
    df = df.drop(columns=[c for c in PAIRED + ["cpu_bound"] if c in df.columns])
    return df, note


def chunk_ablation(table: pd.DataFrame) -> pd.DataFrame:
    """MoNTA time per chunk count at each point, and relative to one chunk."""
    if table.empty or not any(map(is_chunked, set(table["variant"]))):
        return pd.DataFrame()
    m = table[table["variant"].map(is_chunked)].copy()
    one = m[m["chunks"] == 1].groupby(A2A_POINT, dropna=False)["time_us"].min().rename("_t1").reset_index()
    m = m.merge(one, on=A2A_POINT, how="left")
    m["rel_to_1_chunk"] = m["time_us"] / m["_t1"]
    m = m[m["rel_to_1_chunk"].notna()]  # a point without a 1-chunk run is not part of the ablation
    cols = A2A_POINT + ["chunks", "time_us", "rel_to_1_chunk", "speedup_vs_legacy", "speedup_vs_deepspeed"]
    return shown_point(m[cols].sort_values(A2A_POINT + ["chunks"]).reset_index(drop=True))


def ratio_ablation(summary: pd.DataFrame) -> pd.DataFrame:
    """Speedups against the emulated inter-node bandwidth, where a cluster was run at several."""
    if summary.empty or summary["inter_gbps"].nunique() < 2:
        return pd.DataFrame()
    keys = ["source", "cluster", "size_bytes"]
    varied = summary.groupby(keys, dropna=False)["inter_gbps"].transform("nunique") > 1
    cols = (
        keys
        + [
            "inter_gbps",
            "legacy_us",
            "deepspeed_us",
            "monta_us",
            "best_chunks",
            "speedup_vs_legacy",
            "speedup_vs_deepspeed",
        ]
        + (["left_out"] if "left_out" in summary.columns else [])
    )
    return summary.loc[varied, cols].sort_values(keys + ["inter_gbps"]).reset_index(drop=True)


def tp_ablation(summary: pd.DataFrame) -> pd.DataFrame:
    """Times and speedups against the TP degree, where one cluster shape, link and buffer size was
    run at several TP degrees (the TP ablation points next to the sweep's own TP)."""
    if summary.empty or "tp" not in summary.columns or summary["tp"].nunique() < 2:
        return pd.DataFrame()
    keys = ["source", "nodes", "gpus_per_node", "inter_gbps", "size_bytes"]
    varied = summary.groupby(keys, dropna=False)["tp"].transform("nunique") > 1
    cols = keys + [
        "tp",
        "legacy_us",
        "deepspeed_us",
        "monta_us",
        "best_chunks",
        "speedup_vs_legacy",
        "speedup_vs_deepspeed",
    ]
    out = summary.loc[varied, cols].sort_values(keys + ["tp"]).reset_index(drop=True)
    out.insert(1, "cluster", [f"{int(n)}x{int(g)}" for n, g in zip(out["nodes"], out["gpus_per_node"])])
    return out.drop(columns=["nodes", "gpus_per_node"])


def variant_parts(name: str) -> str:
    """``exchange / schedule / sync`` of a step variant, from the registry (monta.variants); empty for a
    name this environment does not know (a record from a plugin not installed here)."""
    from monta import variants as registry

    try:
        p = registry.get(str(name)).parts
    except ValueError:
        return ""
    return " / ".join(str(p[k]) for k in ("exchange", "schedule", "sync")) + (
        f" x{p['chunks']}" if "chunks" in p else ""
    )


def _with_parts(out: pd.DataFrame) -> pd.DataFrame:
    """The variant's parts next to its name, rows in the registry's order within each point."""
    from monta import variants as registry

    if out.empty:
        return out
    out.insert(out.columns.get_loc("variant") + 1, "parts", [variant_parts(v) for v in out["variant"]])
    rank = {v: registry.order_key(str(v)) for v in set(out["variant"])}
    order = sorted(
        range(len(out)), key=lambda i: (tuple(str(out.iloc[i][k]) for k in STEP_POINT), rank[out.iloc[i]["variant"]])
    )
    return out.iloc[order].reset_index(drop=True)


def step_table(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Median step time per (config, variant) with tokens/s, memory and speedup vs deepspeed."""
    df = to_frame(records, "step")
    if df.empty:
        return df
    phases = [f"breakdown_ms.{p}" for p in PHASES]
    metrics = ["step_ms", "tokens_per_s", "peak_mem_bytes", "loss"] + phases
    df = _ensure(df, STEP_POINT + ["variant"] + metrics)
    out = df.groupby(STEP_POINT + ["variant"], dropna=False)[metrics].median().reset_index()
    ref = (
        out[out["variant"] == "deepspeed"]
        .groupby(STEP_POINT, dropna=False)["step_ms"]
        .min()
        .rename("_t_ds")
        .reset_index()
    )
    out = out.merge(ref, on=STEP_POINT, how="left")
    out["speedup_vs_deepspeed"] = out["_t_ds"] / out["step_ms"]
    return _with_parts(out.drop(columns="_t_ds").reset_index(drop=True))


CONTENTION_FOOTER = "c = 0 is no contention: overlap gains are upper bounds"


def contention_ablation(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Median step time per (point, variant) at each contention factor c (``params.contention``: `monta bench
    step --contention`, `monta predict contention`), its speedup vs deepspeed at the same c and its slowdown
    vs itself at c = 0."""
    df = to_frame(records, "step")
    if df.empty or "contention" not in df.columns:
        return pd.DataFrame()
    df = _ensure(df[df["contention"].notna()], STEP_POINT + ["variant", "contention", "step_ms"])
    keys = STEP_POINT + ["contention"]
    out = df.groupby(keys + ["variant"], dropna=False)["step_ms"].median().reset_index()
    ds = out[out["variant"] == "deepspeed"].groupby(keys, dropna=False)["step_ms"].min().rename("_t_ds")
    out = out.merge(ds.reset_index(), on=keys, how="left")
    free = out[out["contention"] == 0].groupby(STEP_POINT + ["variant"], dropna=False)["step_ms"].min()
    out = out.merge(free.rename("_t_free").reset_index(), on=STEP_POINT + ["variant"], how="left")
    out["speedup_vs_deepspeed"] = out.pop("_t_ds") / out["step_ms"]
    out["slowdown_pct"] = 100.0 * (out["step_ms"] / out.pop("_t_free") - 1.0)
    out = out.sort_values("contention", kind="stable").reset_index(drop=True)
    return _with_parts(out)


def step_accuracy(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The model's step time on the emulated clock vs the measured one, per variant (``monta predict
    accuracy`` records): compute is the model's there, so this scores exchanges, overlap and scheduling."""
    rows = [
        {
            "variant": r["params"]["variant"],
            "shape": r["params"].get("shape"),
            "measured_ms": r["metrics"]["measured_ms"],
            "predicted_ms": r["metrics"]["step_ms"],
            "error_pct": 100.0 * r["metrics"]["error"],
            "ranking_agrees": r["metrics"].get("ranking_agrees"),
        }
        for r in records
        if r.get("kind") == "step" and "measured_ms" in (r.get("metrics") or {})
    ]
    return pd.DataFrame(rows)


def predicted_step_table(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The performance model's step per (cluster, model, variant): step time, the exchange it leaves exposed,
    the gradient sync it leaves exposed and the sync's whole time, speedup vs deepspeed (what a prediction
    states; no loss or memory). The records' ``grad_us`` is the exposed sync, ``grad_sync_us`` the total
    (monta.perfmodel.training.step): the same total for every variant, the exposed part is what differs."""
    df = to_frame(records, "step")
    if df.empty or "predicted" not in set(df["source"]):
        return pd.DataFrame()
    times = {"exchange_us": "exchange_ms", "grad_us": "grad_sync_exposed_ms", "grad_sync_us": "grad_sync_total_ms"}
    df = _ensure(df[df["source"] == "predicted"], STEP_POINT + ["variant", "step_ms", *times])
    out = df.groupby(STEP_POINT + ["variant"], dropna=False)[["step_ms", *times]].median().reset_index()
    for us, ms in times.items():
        out[ms] = out.pop(us) / 1000.0
    ref = out[out["variant"] == "deepspeed"].set_index(STEP_POINT)["step_ms"].rename("_t_ds")
    out = out.join(ref, on=STEP_POINT)
    out["speedup_vs_deepspeed"] = out.pop("_t_ds") / out["step_ms"]
    return _with_parts(out.reset_index(drop=True))


def step_breakdown_wide(long: pd.DataFrame) -> pd.DataFrame:
    """The breakdown as a table to read: one row per (point, variant), one column per phase (ms)."""
    if long.empty:
        return long
    keys = STEP_POINT + ["variant"]
    wide = long.pivot_table(index=keys, columns="phase", values="ms", aggfunc="mean", dropna=False, sort=False)
    wide = wide.dropna(how="all").reindex(columns=list(dict.fromkeys(long["phase"])))
    wide.columns = [f"breakdown_ms.{c}" for c in wide.columns]
    return wide.reset_index()


def step_breakdown(table: pd.DataFrame) -> pd.DataFrame:
    """Long format (point, variant, phase, ms) of the step-time breakdown."""
    if table.empty:
        return pd.DataFrame()
    table = table.copy()
    col = "breakdown_ms.{}".format
    # Stack disjoint parts only: forward/backward/exchange are totals that contain the others.
    fwd_parts = [col(p) for p in ("attention", "gate", "dispatch", "experts", "combine") if col(p) in table]
    if col("forward") in table and fwd_parts:
        table[col("forward_other")] = (table[col("forward")] - table[fwd_parts].sum(axis=1)).clip(lower=0)
    # The records time the backward's exchanges apart; the rest of the backward (attention, gate and expert
    # gradients) is one timer in the step benchmark (monta.model.engine), so it is one named piece here.
    bwd_parts = [col(p) for p in ("dispatch_bwd", "combine_bwd") if col(p) in table]
    if col("backward") in table:
        table[col("backward_compute")] = (table[col("backward")] - table[bwd_parts].sum(axis=1)).clip(lower=0)
    phases = [c for c in table.columns if c.startswith("breakdown_ms.") and c not in TOTALS]
    long = table.melt(id_vars=STEP_POINT + ["variant"], value_vars=phases, var_name="phase", value_name="ms")
    long["phase"] = long["phase"].str.removeprefix("breakdown_ms.")
    return long.dropna(subset=["ms"]).reset_index(drop=True)


def predicted_vs_measured(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """AllToAll points present both as a prediction and as a measurement, with the model's error.

    Matched on shape, point and (when the measurement is emulated) the emulated bandwidth, so a
    prediction for the A800 fabric is never scored against the emulator."""
    df = to_frame(records, "alltoall")
    if df.empty:
        return df
    # `monta predict accuracy` writes each prediction with the measurement it was scored against.
    paired = pd.DataFrame()
    if "measured_us" in df.columns:
        paired = df[(df["source"] == "predicted") & df["measured_us"].notna()]
        paired = paired.assign(predicted_us=paired["time_us"])[
            # inter_gbps: the rate the row was priced at, its measurement's (monta_analysis.known.measured_rates)
            [
                c
                for c in ("nodes", "gpus_per_node", "tp", "inter_gbps", "size_bytes", "variant", "chunks")
                if c in paired.columns
            ]
            + ["predicted_us", "measured_us"]
        ]
        df = df[~df.index.isin(paired.index)]
    keys = ["nodes", "gpus_per_node", "tp", "inter_gbps", "size_bytes", "variant", "chunks"]
    df = _ensure(df, keys + ["time_us"])
    for k in keys:  # NaN never equals NaN in a merge; a sentinel makes "absent on both" match
        df[k] = df[k].astype(object).where(df[k].notna(), "-")
    pred = df[df["source"] == "predicted"].groupby(keys)["time_us"].median().rename("predicted_us")
    meas = df[df["source"].isin(MEASURED)].groupby(keys)["time_us"].median().rename("measured_us")
    out = pd.concat([pred, meas], axis=1, join="inner").reset_index()
    out = pd.concat([paired, out], ignore_index=True) if len(paired) else out
    if out.empty:
        return out
    out["error_pct"] = 100.0 * (out["predicted_us"] - out["measured_us"]) / out["measured_us"]
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
        sdf = _ensure(sdf, point)
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


def fmt_paper(paper: Mapping[str, Any]) -> str:
    unit = paper.get("unit", "")
    scale, suffix = (100.0, "%") if unit == "fraction" else (1.0, unit)
    if "value" in paper:
        return f"{paper['value'] * scale:g}{suffix}"
    return f"{paper['low'] * scale:g}-{paper['high'] * scale:g}{suffix}"


def paper_comparison(records: Sequence[Mapping[str, Any]], paper: Mapping[str, Any]) -> pd.DataFrame:
    """Every published number of paper.yaml next to ours (per source) with what the difference means: the
    verdict (reproduced, exceeded, bound below the claim, not reproduced) and its reason (monta_analysis.claims)."""
    from monta_analysis.claims import verdict

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
                    "meaning": "{}: {}".format(*verdict(value, c["paper"], c.get("bound"))),
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


def _display(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Drop what the cluster label already says and columns with no value at all; a context
    column with one value for the whole table (e.g. dtype) moves into the caption."""
    if "cluster" not in df.columns and {"nodes", "gpus_per_node", "tp"} <= set(df.columns):
        df = df.copy()
        df.insert(
            0, "cluster", [_cluster_label(n, g, t) for n, g, t in zip(df["nodes"], df["gpus_per_node"], df["tp"])]
        )
    if "cluster" in df.columns:
        said = ["nodes", "gpus_per_node"] + (["tp"] if df["cluster"].astype(str).str.contains(" TP").all() else [])
        df = df.drop(columns=[c for c in said if c in df.columns])
    if "model" in df.columns:
        df = df.assign(model=[_base_model(m, df.columns) for m in df["model"]])
    df = df.dropna(axis=1, how="all")
    notes = []
    for c in CONTEXT:
        if c in df.columns and df[c].dropna().nunique() == 1:
            notes.append(f"{c} {df[c].dropna().iloc[0]}")
            df = df.drop(columns=c)
    return df, "; ".join(notes)


def _base_model(model: Any, columns: Iterable[str]) -> Any:
    """'moe-2x70b-mini[layers=1,topk=2]' -> 'moe-2x70b-mini' when every override has its own column."""
    m = re.fullmatch(r"(.*?)\[(.*)\]", str(model))
    if not m:
        return model
    keys = {kv.split("=", 1)[0] for kv in m.group(2).split(",") if kv}
    return m.group(1) if keys <= set(columns) else model


# Columns that describe the whole table when they have a single value.
CONTEXT = ("dtype", "kind", "experiment", "ep")


def write_table(df: pd.DataFrame, out_dir: str | Path, name: str, caption: str, footer: str = "") -> list[Path]:
    """Write results/tables/<name>.{md,csv,tex}; an empty frame becomes a 'no data' table. The
    markdown and LaTeX tables are for people (human units, 3 significant digits); the CSV keeps
    the raw numbers. ``footer``: a line under the markdown table (and the LaTeX caption's end)."""
    tables = Path(out_dir) / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    if df.empty:
        df = shown = pd.DataFrame({"status": [f"no data ({caption})"]})
    else:
        df, notes = _display(df)
        caption = f"{caption} ({notes})" if notes else caption
        shown = display.humanize(df)
    paths = [tables / f"{name}.md", tables / f"{name}.csv", tables / f"{name}.tex"]
    below = f"\n{footer}\n" if footer else ""
    paths[0].write_text(f"**{caption}**\n\n" + shown.to_markdown(index=False, disable_numparse=True) + "\n" + below)
    df.to_csv(paths[1], index=False)
    cap = f"{caption}. {footer}" if footer else caption
    paths[2].write_text(shown.to_latex(index=False, caption=cap, label=f"tab:{name}", escape=True))
    return paths
