# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # TP AllToAll: legacy vs deepspeed vs MoNTA
# The AllToAll sweep and its ablations (chunk count, TP, buffer size, inter-node bandwidth),
# from the record files only. Executed by the pipeline with papermill; parameters below.

# %% tags=["parameters"]
records = []  # record files (JSONL); missing files are skipped
out_dir = "results"
paper = "analysis/paper.yaml"

# %%
from monta.bench.hostload import RANK_WAIT_LIMIT
from monta_analysis import alltoall_tables, figures, frames, table_files, testbed_bound
from monta_analysis.report import Manifest

recs = frames.load(records)
manifest = Manifest("alltoall", out_dir)
table = alltoall_tables.alltoall_table(recs)
summary = alltoall_tables.alltoall_summary(table)
print(f"{len(recs)} records, {len(table)} AllToAll points")

# %% [markdown]
# ## Comparison per buffer size (best MoNTA chunk count)

# %%
shown, cpu_note = alltoall_tables.with_intervals(summary)
past = testbed_bound.past_own_bound(recs)
past_note = (
    "Past the bound of their chunk split (monta.emulate.bound, legacy as measured in the same run): "
    f"{'; '.join(past)}. Under the bytes' bound with more than one chunk, the excess is the drain: the emulator's "
    "AllGather is point to point, so the last chunk's partly runs while a node's last ranks still receive the "
    "AllToAll (measured with tools/chunk_phases.py: docs/testbed.md, the chunk pipeline's drain); with one chunk "
    "nothing of it hid where measured, so its cause is not measured; over the bytes' bound, a testbed bug"
    if past
    else "No emulated MoNTA point lies above its own testbed bound."
)
caption = "TP AllToAll: time per exchange and MoNTA's speedups" + (f". {cpu_note}" if cpu_note else "")
manifest.section(
    "AllToAll comparison",
    table_files.write_table(shown, out_dir, "alltoall_summary", caption),
    figures.alltoall_comparison(table, out_dir),
    empty=summary.empty,
    note=(
        "Times: median of the slowest rank per iteration (emulated, in ms) or the performance model's "
        "(predicted, in us). monta = its best chunk count; vs legacy / vs deepspeed = baseline time / MoNTA "
        "time at the same point; 'paired' = the median of the per-iteration ratios (variants interleaved in "
        "every iteration) with its 95% bootstrap CI; overlap efficiency = (gain - 1) / (ideal - 1) with ideal = "
        "t_deepspeed / max(t_a2a, t_ag), the gain of a perfect overlap (gain and ideal share deepspeed as "
        "their baseline); CPU-bound = the ranks of a variant this point's ratios use waited for a "
        f"core more than {100 * RANK_WAIT_LIMIT:.0f}% of its timed wall time; inter-node link = per node "
        "and direction (for a predicted cluster, its NICs)."
        + (f" **{cpu_note}.**" if cpu_note else "")
        + f" {past_note}"
    ),
)
table_files.write_table(
    table.drop(columns=alltoall_tables.STATED), out_dir, "alltoall_all", "TP AllToAll: every variant and chunk count"
)
summary

# %% [markdown]
# ## Chunk-count ablation

# %%
chunks = alltoall_tables.chunk_ablation(table)
manifest.section(
    "Chunk-count ablation",
    table_files.write_table(chunks, out_dir, "chunk_ablation", "MoNTA time per pipeline chunk count"),
    figures.chunk_ablation(chunks, out_dir),
    empty=chunks.empty,
)
chunks

# %% [markdown]
# ## Tensor-parallel degree ablation

# %%
tp = alltoall_tables.tp_ablation(summary)
manifest.section(
    "TP ablation",
    table_files.write_table(tp, out_dir, "tp_ablation", "Exchange time per tensor-parallel degree"),
    figures.tp_ablation(tp, out_dir),
    empty=tp.empty,
)
tp

# %% [markdown]
# ## Intra:inter bandwidth-ratio ablation

# %%
ratio = alltoall_tables.ratio_ablation(summary)
manifest.section(
    "Bandwidth-ratio ablation",
    table_files.write_table(ratio, out_dir, "ratio_ablation", "MoNTA speedup vs emulated inter-node bandwidth"),
    figures.ratio_ablation(ratio, out_dir),
    empty=ratio.empty,
)
ratio

# %% [markdown]
# ## The model at every measured point
# `monta predict accuracy`'s predictions (the pipeline's predict rules): each measured point priced on the
# calibrated link profile rescaled to the rates it ran at (2 x 8 at half the 2 x 4 rates, a point that
# `--dilation` reran on a slower clock), so every point is scored.

# %%
import pandas as pd

scored = pd.DataFrame(
    [
        {
            "shape": f"{p['nodes']}x{p['gpus_per_node']} TP{p['tp']}",
            "abs_error_pct": 100 * abs(m["error"]),
            "cpu_bound": bool(m.get("measured_cpu_bound")),
        }
        for r in recs
        if r.get("kind") == "alltoall" and "measured_us" in (m := r["metrics"]) and "error" in m
        for p in [r["params"]]
    ]
)
accuracy = pd.DataFrame()
if not scored.empty:
    everything = scored.assign(shape="all")
    accuracy = (
        pd.concat([scored, everything])
        .groupby("shape", sort=False)
        .agg(points=("abs_error_pct", "size"), mape_pct=("abs_error_pct", "mean"), cpu_bound=("cpu_bound", "sum"))
        .reset_index()
    )
    calm = pd.concat([scored, everything])[lambda d: ~d["cpu_bound"]].groupby("shape", sort=False)["abs_error_pct"]
    accuracy["MAPE not CPU-bound"] = accuracy["shape"].map(calm.mean())
    for col in ("mape_pct", "MAPE not CPU-bound"):  # an unsigned share (the tables' *_pct is a signed change)
        accuracy[col] = accuracy[col].map(lambda v: "-" if pd.isna(v) else f"{v:.1f}%")
    accuracy = accuracy.rename(columns={"mape_pct": "MAPE", "cpu_bound": "CPU-bound points"})
manifest.section(
    "Model accuracy per shape",
    table_files.write_table(
        accuracy, out_dir, "alltoall_model_accuracy", "Performance model vs measured AllToAll: MAPE"
    ),
    empty=accuracy.empty,
    note="MAPE = mean |predicted - measured| / measured over every measured point of the shape (legacy, deepspeed, "
    "monta at each chunk count), each priced at the link rates it ran at; cpu_bound = points whose timing the "
    "cores stretched, left out of the last column.",
)
manifest.save()
accuracy
