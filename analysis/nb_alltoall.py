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
from analysis import figures, tables
from analysis.report import Manifest

recs = tables.load(records)
manifest = Manifest("alltoall", out_dir)
table = tables.alltoall_table(recs)
summary = tables.alltoall_summary(table)
print(f"{len(recs)} records, {len(table)} AllToAll points")

# %% [markdown]
# ## Comparison per buffer size (best MoNTA chunk count)

# %%
manifest.section(
    "AllToAll comparison",
    tables.write_table(summary, out_dir, "alltoall_summary", "TP AllToAll: time (us) and MoNTA speedups"),
    figures.alltoall_comparison(table, out_dir),
    empty=summary.empty,
    note="speedup = baseline time / MoNTA time at the same point; inter_bytes_ratio = legacy / MoNTA inter-node bytes.",
)
tables.write_table(table, out_dir, "alltoall_all", "TP AllToAll: every variant and chunk count")
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
