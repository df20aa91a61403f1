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
from monta_analysis import figures, tables
from monta_analysis.report import Manifest

recs = tables.load(records)
manifest = Manifest("alltoall", out_dir)
table = tables.alltoall_table(recs)
summary = tables.alltoall_summary(table)
print(f"{len(recs)} records, {len(table)} AllToAll points")

# %% [markdown]
# ## Comparison per buffer size (best MoNTA chunk count)

# %%
shown, cpu_note = tables.with_intervals(summary)
caption = "TP AllToAll: time per exchange and MoNTA's speedups" + (f". {cpu_note}" if cpu_note else "")
manifest.section(
    "AllToAll comparison",
    tables.write_table(shown, out_dir, "alltoall_summary", caption),
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
        "and direction (for a predicted cluster, its NICs)." + (f" **{cpu_note}.**" if cpu_note else "")
    ),
)
tables.write_table(
    table.drop(columns=tables.STATED), out_dir, "alltoall_all", "TP AllToAll: every variant and chunk count"
)
summary

# %% [markdown]
# ## Chunk-count ablation

# %%
chunks = tables.chunk_ablation(table)
manifest.section(
    "Chunk-count ablation",
    tables.write_table(chunks, out_dir, "chunk_ablation", "MoNTA time per pipeline chunk count"),
    figures.chunk_ablation(chunks, out_dir),
    empty=chunks.empty,
)
chunks

# %% [markdown]
# ## Tensor-parallel degree ablation

# %%
tp = tables.tp_ablation(summary)
manifest.section(
    "TP ablation",
    tables.write_table(tp, out_dir, "tp_ablation", "Exchange time per tensor-parallel degree"),
    figures.tp_ablation(tp, out_dir),
    empty=tp.empty,
)
tp

# %% [markdown]
# ## Intra:inter bandwidth-ratio ablation

# %%
ratio = tables.ratio_ablation(summary)
manifest.section(
    "Bandwidth-ratio ablation",
    tables.write_table(ratio, out_dir, "ratio_ablation", "MoNTA speedup vs emulated inter-node bandwidth"),
    figures.ratio_ablation(ratio, out_dir),
    empty=ratio.empty,
)
manifest.save()
ratio
