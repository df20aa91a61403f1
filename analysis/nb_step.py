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
# # Training step per variant
# Step time, throughput, memory and the per-phase breakdown (deepspeed, legacy, MoNTA, Lina-style,
# Lancet-style, MoNTA + priority), including the top-k and capacity-factor ablations.

# %% tags=["parameters"]
records = []
out_dir = "results"
paper = "analysis/paper.yaml"

# %%
from analysis import figures, tables
from analysis.report import Manifest

recs = tables.load(records)
manifest = Manifest("step", out_dir)
steps = tables.step_table(recs)
print(f"{len(recs)} records, {len(steps)} step points")

# %%
cols = [c for c in steps.columns if not c.startswith("breakdown_ms.")] if not steps.empty else []
manifest.section(
    "Training step per variant",
    tables.write_table(steps[cols] if cols else steps, out_dir, "step_summary",
                       "Training step: median step time (ms) and speedup vs DeepSpeed"),
    empty=steps.empty,
)
steps[cols] if cols else steps

# %%
breakdown = tables.step_breakdown(steps)
manifest.section(
    "Step-time breakdown",
    tables.write_table(breakdown, out_dir, "step_breakdown", "Step-time breakdown (ms) per phase and variant"),
    figures.step_breakdown(breakdown, out_dir),
    empty=breakdown.empty,
)
manifest.save()
breakdown
