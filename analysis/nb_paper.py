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
# # Ours vs published, and the performance model vs measurement
# Every number of analysis/paper.yaml next to ours with what the difference means; predicted vs measured AllToAll.

# %% tags=["parameters"]
records = []
out_dir = "results"
paper = "analysis/paper.yaml"

# %%
import yaml

from monta_analysis import alltoall_tables, claims, figures, frames, table_files
from monta_analysis.report import Manifest

recs = frames.load(records)
published = yaml.safe_load(open(paper))
manifest = Manifest("paper", out_dir)

# %%
comparison = claims.paper_comparison(recs, published)
manifest.section(
    "Published numbers vs ours",
    table_files.write_table(
        comparison, out_dir, "paper_comparison", "Published numbers next to ours, and what each means"
    ),
    note=(
        "meaning: reproduced (within 10% of the published number or range), exceeded, bound below the claim (a "
        "ceiling the cluster sets under it, analysis/paper.yaml's bound), or not reproduced. No records: 'no data'."
    ),
)
comparison

# %%
pvm = alltoall_tables.predicted_vs_measured(recs)
manifest.section(
    "Predicted vs measured",
    table_files.write_table(pvm, out_dir, "predicted_vs_measured", "Performance model vs measured AllToAll time"),
    figures.predicted_vs_measured(pvm, out_dir),
    empty=pvm.empty,
)
manifest.save()
pvm
