"""A stated pipeline layout (Megatron-Core's ``--pipeline-model-parallel-layout``, the steps table's ``pp_layout``
column): parsed as Megatron writes it, the stage with the most work paces the step, and a layout that does not fit
the row is a reason, not a crash."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from monta.hardware.profile import get_cluster
from monta.perfmodel.reports import published_steps as PS
from monta.perfmodel.reports.published import Row
from monta.perfmodel.training.pp_layout import parse, stage_loads
from monta.perfmodel.training.run_shape import RunModel
from monta.perfmodel.training.run_step import Layout, price_run, slowest_stage

DATA = Path(__file__).resolve().parents[1] / "data" / "published" / "steps.csv"


def test_the_layout_string_expands_as_megatron_writes_it():
    guide = parse("Et|(tt|)*30mL")  # the GB200 guide's DeepSeek-V3 layout: 32 stages
    assert len(guide) == 32 and guide[0] == "Et" and guide[1:31] == ["tt"] * 30 and guide[31] == "mL"
    bridge = parse("Et*4|(t*4|)*14tmL")  # Megatron-Bridge's 16-stage one
    assert len(bridge) == 16 and bridge[0] == "Etttt" and bridge[-1] == "tmL"
    assert sum(v.count("t") for v in bridge) == 61
    with pytest.raises(ValueError, match="symbols"):
        parse("Et|tx|L")
    with pytest.raises(ValueError, match=r"^pipeline layout '' is empty: write its stages \(e\.g\. 'Et\|"):
        parse("")


@pytest.mark.parametrize(
    "layout, said",
    [
        ("Et*5|t*5|t*5|tm", "holds 0 'L' (output layer with the loss)"),
        ("Et*5|t*5|t*5L|tmL", "holds 2 'L' (output layer with the loss)"),
        ("t*6|t*5|t*5|tmL", "holds 0 'E' (embedding)"),
        ("Et*5|Et*5|t*5|tmL", "holds 2 'E' (embedding)"),
    ],
)
def test_a_layout_holds_one_embedding_and_one_head(layout, said):
    """Without its ``L`` the head and loss would vanish from the step (priced short, silently); with two
    they would count twice: the layout is refused, and a row stating it is unpriced with that reason."""
    with pytest.raises(ValueError) as e:
        parse(layout)
    assert str(e.value) == f"pipeline layout {layout!r} {said}: write exactly one"
    base = dict(gpus=32, ep=8, pp=4, seq=4096, global_batch_tokens=32 * 4096 * 8)
    assert Layout(**base, pp_layout=layout).check() == f"pipeline layout {layout!r} {said}: write exactly one"


def test_interleaved_stages_land_on_their_gpu_and_the_dense_layers_come_first():
    # 8 virtual stages on pp=4: stage i on GPU i mod 4; the first 3 decoder layers dense
    loads = stage_loads("Ett|tt|tt|tt|tt|tt|tt|tmL", pp=4, layers=15, dense_layers=3, mtp=1)
    assert loads[0] == (2.0, 2.0, 0.0)  # "Ett" (2 dense) + "tt" (virtual stage 4: MoE)
    assert loads[1] == (3.0, 1.0, 0.0)  # "tt" (1 dense, 1 MoE) + "tt"
    assert loads[3] == (4.0, 0.0, 1.0)  # "tt" + "tmL": 3 MoE + the MTP layer, and the head
    with pytest.raises(ValueError) as e:
        stage_loads("Ett|tt|tt|tmL", pp=4, layers=15, dense_layers=3, mtp=1)
    assert str(e.value) == "pipeline layout 'Ett|tt|tt|tmL' holds 7 decoder layers; the model has 15"
    with pytest.raises(ValueError) as e:  # the decoder layers fit: the MTP count gets its own words
        stage_loads("Ett|tt|tt|tt|tt|tt|tt|tL", pp=4, layers=15, dense_layers=3, mtp=1)
    assert str(e.value) == "pipeline layout 'Ett|tt|tt|tt|tt|tt|tt|tL' holds 0 MTP layers; the model has 1"


def test_a_layout_that_unloads_the_last_stage_shortens_the_step():
    """The default split puts the MTP layer and a large head on the last stage; a layout that gives that stage
    fewer decoder layers (as DeepSeek-V3's recipes do) makes the step shorter, and the slowest stage paces it."""
    m = RunModel(layers=16, hidden=2048, ffn=1024, experts=16, top_k=2, heads=16, head_dim=128, vocab=150000, mtp=1)
    c = get_cluster("h100").with_nodes(4, 8)
    base = dict(gpus=32, ep=8, pp=4, seq=4096, global_batch_tokens=32 * 4096 * 8)
    default = price_run(m, Layout(**base), c)
    unloaded = price_run(m, Layout(**base, pp_layout="Et*5|t*5|t*5|tmL"), c)
    assert unloaded["total_us"] < default["total_us"]
    times = (1.0, 1.0, 10.0)  # a head as slow as 10 layers: the last stage still paces it
    assert slowest_stage(m, 4, "Et*5|t*5|t*5|tmL", times) == (2.0, 0.0, 1.0)
    assert slowest_stage(m, 4, "Et*5|t*5|t*5|tmL", (1.0, 1.0, 1.0)) == (5.0, 0.0, 0.0)


def test_a_layout_that_does_not_fit_the_row_is_its_reason():
    head = next(csv.reader(DATA.open()))
    row = dict(zip(head, next(r for r in csv.reader(DATA.open()) if r[0] == "S64")))
    assert row["pp_layout"] == "Et*4|(t*4|)*14tmL"
    wrong_stages = {**row, "pp_layout": "Et|(tt|)*30mL"}  # 32 stages at PP4 VPP4
    rec = PS.blind(Row(wrong_stages))
    assert rec["predicted_blind"] is None and "32 stages, not pp x vpp = 16" in rec["reason"]
    wrong_layers = {**row, "pp_layout": "Et*4|(t*4|)*14tL"}  # no MTP layer for a model that has one
    rec = PS.blind(Row(wrong_layers))
    said = "cannot be priced: pipeline layout 'Et*4|(t*4|)*14tL' holds 0 MTP layers; the model has 1"
    assert rec["predicted_blind"] is None and rec["reason"] == said
    no_head = {**row, "pp_layout": "Et*4|(t*4|)*14tm"}  # the head and its loss left out
    rec = PS.blind(Row(no_head))
    said = "pipeline layout 'Et*4|(t*4|)*14tm' holds 0 'L' (output layer with the loss): write exactly one"
    assert rec["predicted_blind"] is None and rec["reason"] == said
    assert PS.blind(Row(row))["predicted_blind"] is not None
