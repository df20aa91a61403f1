"""Result records (monta.results) as one pandas frame, and the keys that make a point: the first step of
every table (monta_analysis.alltoall_tables, step_tables, claims).

Every function accepts records of any kinds and returns an empty frame when its kind is absent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from monta.results import read_records
from monta_analysis import known

MEASURED = ("measured", "emulated")

# What else makes two AllToAll records different points: the routing (`--routing`, absent = W0), the
# mode (`--mode layer`, absent = dispatch), experts/top-k, the capacity factor, and the clock a record ran
# at (`--dilation`: a time at dilation 2 is another point's time, never one sample of the same median).
# Absent keys are NaN (routing W0, mode dispatch) and group together, so records that do not set them keep
# their points; the tables show these columns only where they tell points apart (``shown_point``).
A2A_SETUP = ["experts", "topk", "capacity_factor", "routing", "mode", "dilation"]

A2A_POINT = ["source", "cluster", "nodes", "gpus_per_node", "tp", "inter_gbps", "dtype", "size_bytes", *A2A_SETUP]

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
            cluster_label(nd, g, t, c)
            for nd, g, t, c in zip(df["nodes"], df["gpus_per_node"], df.get("tp", pd.Series([None] * n)), named)
        ]
    return df


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def cluster_label(nodes: Any, gpus: Any, tp: Any, name: Any = None) -> str:
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


def ensure(df: pd.DataFrame, cols: Iterable[str]) -> pd.DataFrame:
    df = df.copy()
    for c in cols:
        if c not in df.columns:
            df[c] = float("nan")
    return df
