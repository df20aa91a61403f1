"""A table as files to read: results/tables/<name>.{md,csv,tex}, with what the cluster label already says
dropped and a column of one value moved into the caption."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from monta_analysis import display
from monta_analysis.frames import cluster_label

# Columns that describe the whole table when they have a single value.
CONTEXT = ("dtype", "kind", "experiment", "ep")


def _display(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Drop what the cluster label already says and columns with no value at all; a context
    column with one value for the whole table (e.g. dtype) moves into the caption."""
    if "cluster" not in df.columns and {"nodes", "gpus_per_node", "tp"} <= set(df.columns):
        df = df.copy()
        df.insert(0, "cluster", [cluster_label(n, g, t) for n, g, t in zip(df["nodes"], df["gpus_per_node"], df["tp"])])
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
