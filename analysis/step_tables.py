"""The training-step tables: median step time per point and variant with speedups (measured and predicted),
the contention ablation, the model's step accuracy, and the step-time breakdown per phase.

Every function accepts records of any kinds and returns an empty frame when its kind is absent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from monta_analysis.frames import STEP_POINT, ensure, to_frame

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
    df = ensure(df, STEP_POINT + ["variant"] + metrics)
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
    df = ensure(df[df["contention"].notna()], STEP_POINT + ["variant", "contention", "step_ms"])
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
    df = ensure(df[df["source"] == "predicted"], STEP_POINT + ["variant", "step_ms", *times])
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
