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

from monta_analysis import figures, tables
from monta_analysis.report import Manifest

recs = tables.load(records)
published = yaml.safe_load(open(paper))
manifest = Manifest("paper", out_dir)

# %%
comparison = tables.paper_comparison(recs, published)
manifest.section(
    "Published numbers vs ours",
    tables.write_table(comparison, out_dir, "paper_comparison", "Published numbers next to ours, and what each means"),
    note=(
        "meaning: reproduced (within 10% of the published number or range), exceeded, bound below the claim (a "
        "ceiling the cluster sets under it, analysis/paper.yaml's bound), or not reproduced. No records: 'no data'."
    ),
)
comparison

# %%
pvm = tables.predicted_vs_measured(recs)
manifest.section(
    "Predicted vs measured",
    tables.write_table(pvm, out_dir, "predicted_vs_measured", "Performance model vs measured AllToAll time"),
    figures.predicted_vs_measured(pvm, out_dir),
    empty=pvm.empty,
)
manifest.save()
pvm
