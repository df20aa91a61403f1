"""The AllToAll tables: medians per point and exchange with speedups, the summary per point (legacy, deepspeed
and the best MoNTA chunk count side by side), its paired ratios as cells to read, the chunk, bandwidth and TP
ablations, and the performance model against the measurements.

Every function accepts records of any kinds and returns an empty frame when its kind is absent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from monta.variants import is_chunked  # the exchange whose chunk count varies (registry, not name)
from monta_analysis import display
from monta_analysis.frames import A2A_POINT, MEASURED, ensure, shown_point, to_frame

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
    df = ensure(df, A2A_POINT + ["variant", "chunks", "cpu_bound", "left_out"] + metrics)
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
    df = ensure(df, keys + ["time_us"])
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
