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
# Step time, throughput, memory and the per-phase breakdown of every variant measured (its exchange,
# schedule and gradient sync from the registry, monta.variants), including the top-k and capacity-factor ablations.

# %% tags=["parameters"]
records = []
out_dir = "results"
paper = "analysis/paper.yaml"

# %%
from monta_analysis import figures, frames, step_tables, table_files
from monta_analysis.report import Manifest

recs = frames.load(records)
manifest = Manifest("step", out_dir)
steps = step_tables.step_table(recs)
print(f"{len(recs)} records, {len(steps)} step points")

# %%
measured = steps[steps["source"].isin(frames.MEASURED)] if not steps.empty else steps
cols = [c for c in measured.columns if not c.startswith("breakdown_ms.")] if not measured.empty else []
manifest.section(
    "Training step per variant",
    table_files.write_table(
        frames.shown_point(measured[cols], ["routing"]) if cols else measured,  # routing: where runs differ
        out_dir,
        "step_summary",
        "Training step: median step time and speedup vs DeepSpeed",
    ),
    empty=measured.empty,
)
measured[cols] if cols else measured

# %%
# The router's realized imbalance (docs/routing.md): per run and variant, the MaxVio and drop share the
# MoE gates (or a --routing workload) realized, next to the synthetic workloads' MaxVio at the same shape.
frame = frames.to_frame(recs, "step")
shown = ("router.maxvio", "router.maxvio_layer_min", "router.maxvio_layer_max", "router.drop_fraction")
router_cols = [c for c in frame.columns if c in shown or c.startswith("workload_maxvio.")]
ids = [c for c in ("cluster", "model", "topk", "capacity_factor", "variant", "routing") if c in frame.columns]
router = frame[frame["router.maxvio"].notna()][ids + router_cols] if "router.maxvio" in frame else frame.iloc[0:0]
# Column names a reader knows: the point as the step tables name it, the router's figures, the workloads' names.
router = router.rename(
    columns={
        "router.maxvio": "MaxVio",
        "router.maxvio_layer_min": "layer min",
        "router.maxvio_layer_max": "layer max",
        "router.drop_fraction": "routes dropped",
    }
    | {c: "MaxVio " + c.removeprefix("workload_maxvio.") for c in router_cols if c.startswith("workload_maxvio.")}
)
manifest.section(
    "The router's realized imbalance",
    table_files.write_table(
        router,
        out_dir,
        "step_router",
        "Router: realized MaxVio (mean over MoE layers and steps; layer range) and share of routes dropped, "
        "with the synthetic workloads' MaxVio at the same experts, top-k and tokens",
    ),
    empty=router.empty,
)
router

# %%
predicted = step_tables.predicted_step_table(recs)
manifest.section(
    "Training step, predicted",
    table_files.write_table(
        predicted,
        out_dir,
        "step_predicted",
        "Training step predicted by the performance model: step time, exposed exchange, gradient sync exposed "
        "(what the step waits for) and total (the whole sync, the same for every variant)",
    ),
    empty=predicted.empty,
)
predicted

# %%
breakdown = step_tables.step_breakdown(measured)
manifest.section(
    "Step-time breakdown",
    table_files.write_table(
        step_tables.step_breakdown_wide(breakdown),
        out_dir,
        "step_breakdown",
        "Step-time breakdown per phase and variant",
    ),
    figures.step_breakdown(breakdown, out_dir),
    empty=breakdown.empty,
    note=(
        "The forward is split into attention, gate, dispatch, experts and combine; the backward into its two "
        "exchanges (dispatch_bwd, combine_bwd) and backward_compute, the rest of it: the records time the "
        "attention, gate and expert gradients as one piece (monta.model.engine), so they are not split here."
    ),
)
manifest.save()
breakdown
