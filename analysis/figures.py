"""Seaborn figures from the tables of analysis.tables, written to results/figures/*.png.

Each function returns the path it wrote, or None when its table is empty (the report says "no data").
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")  # headless: papermill kernels and CI have no display

import matplotlib  # noqa: E402
import matplotlib.ticker  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402


def _save(fig: plt.Figure, out_dir: str | Path, name: str) -> Path:
    path = Path(out_dir) / "figures" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _label_variants(table: pd.DataFrame) -> pd.DataFrame:
    t = table.copy()
    chunks = t["chunks"].astype(object).where(t["chunks"].notna(), None)
    t["variant_label"] = [f"{v} x{int(c)}" if v == "monta" and c is not None else v
                          for v, c in zip(t["variant"], chunks)]
    t["series"] = t["source"] + " " + t["cluster"].astype(str)
    return t


def alltoall_comparison(table: pd.DataFrame, out_dir: str | Path) -> Path | None:
    """Bus bandwidth vs buffer size per variant (and chunk count), one panel per source+cluster."""
    if table.empty:
        return None
    t = _label_variants(table)
    # Ratio-ablation points share the cluster: plot each series at its most common bandwidth only.
    gbps = t["inter_gbps"].fillna(-1.0)
    main = gbps.groupby(t["series"]).transform(lambda s: s.value_counts().idxmax())
    t = t[gbps == main]
    t["size_MiB"] = t["size_bytes"] / 2**20
    y = "busbw_GBps" if t["busbw_GBps"].notna().any() else "time_us"
    g = sns.relplot(data=t, x="size_MiB", y=y, hue="variant_label", col="series", kind="line", marker="o",
                    col_wrap=min(3, t["series"].nunique()), facet_kws={"sharey": False}, height=3.2)
    g.set_titles("{col_name}")
    for ax in g.axes.flat:  # buffer sizes are powers of two: base-2 axis with plain MiB labels
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    g.set_axis_labels("buffer size (MiB)", "bus bandwidth (GB/s)" if y == "busbw_GBps" else "time (us)")
    g.figure.suptitle("TP AllToAll: legacy vs deepspeed vs MoNTA", y=1.02)
    return _save(g.figure, out_dir, "alltoall_comparison")


def chunk_ablation(table: pd.DataFrame, out_dir: str | Path) -> Path | None:
    """MoNTA time relative to one chunk, per chunk count."""
    if table.empty or table["rel_to_1_chunk"].isna().all():
        return None
    t = table.copy()
    t["point"] = t["source"] + " " + t["cluster"].astype(str) + " " + (t["size_bytes"] / 2**20).map("{:g} MiB".format)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    sns.lineplot(data=t, x="chunks", y="rel_to_1_chunk", hue="point", marker="o", ax=ax)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(xscale="log", xlabel="pipeline chunks", ylabel="time / time(1 chunk)", title="MoNTA chunk-count ablation")
    ax.set_xticks(sorted(t["chunks"].dropna().unique()), labels=[str(int(c)) for c in sorted(t["chunks"].dropna().unique())])
    return _save(fig, out_dir, "chunk_ablation")


def ratio_ablation(table: pd.DataFrame, out_dir: str | Path) -> Path | None:
    """MoNTA speedup vs the inter-node bandwidth of the emulated link."""
    if table.empty:
        return None
    long = table.melt(id_vars=["source", "cluster", "size_bytes", "inter_gbps"],
                      value_vars=["speedup_vs_legacy", "speedup_vs_deepspeed"], var_name="baseline", value_name="speedup")
    long["baseline"] = long["baseline"].str.removeprefix("speedup_vs_")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    sns.lineplot(data=long, x="inter_gbps", y="speedup", hue="baseline", style="cluster", marker="o", ax=ax)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(xscale="log", xlabel="inter-node bandwidth (Gbit/s); intra-node fixed",
           ylabel="MoNTA speedup", title="Bandwidth-ratio ablation")
    return _save(fig, out_dir, "ratio_ablation")


def step_breakdown(long: pd.DataFrame, out_dir: str | Path) -> Path | None:
    """Stacked step-time breakdown per variant (first source/config point of the table)."""
    if long.empty:
        return None
    panels = long.groupby(["source", "cluster", "model"], dropna=False)
    fig, axes = plt.subplots(1, panels.ngroups, figsize=(5.5 * panels.ngroups, 3.8), squeeze=False)
    for ax, (key, g) in zip(axes[0], panels):
        g = g.groupby(["variant", "phase"], sort=False)["ms"].mean().unstack("phase").fillna(0.0)
        bottom = pd.Series(0.0, index=g.index)
        for phase, color in zip(g.columns, sns.color_palette("tab10", len(g.columns))):
            ax.bar(g.index, g[phase], bottom=bottom, label=phase, color=color)
            bottom += g[phase]
        ax.set(ylabel="ms per step", title=" ".join(str(k) for k in key))
        ax.tick_params(axis="x", rotation=30)
    axes[0][-1].legend(fontsize=8, bbox_to_anchor=(1.02, 1), loc="upper left")
    return _save(fig, out_dir, "step_breakdown")


def predicted_vs_measured(table: pd.DataFrame, out_dir: str | Path) -> Path | None:
    """Predicted vs measured AllToAll time, log-log, with the y = x line."""
    if table.empty:
        return None
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    sns.scatterplot(data=table, x="measured_us", y="predicted_us", hue="variant", ax=ax)
    lo = min(table["measured_us"].min(), table["predicted_us"].min())
    hi = max(table["measured_us"].max(), table["predicted_us"].max())
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")
    ax.set(xscale="log", yscale="log", xlabel="measured (us)", ylabel="predicted (us)",
           title=f"Performance model: mean |error| {table['error_pct'].abs().mean():.1f}%")
    return _save(fig, out_dir, "predicted_vs_measured")
