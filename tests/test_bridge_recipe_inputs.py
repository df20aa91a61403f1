"""tools/bridge_recipe_inputs.py states what Megatron-Bridge's recipes ran for the rows of its releases, and the
step command's ``release_steps`` compares one layout from one release to the next: with the same stated inputs
the software alone moved, with different ones the model's ratio is scored."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from monta.cli import main
from monta.perfmodel.reports import published_steps as PS

ROOT = Path(__file__).resolve().parents[1]
KEPT_APART = ROOT / "data" / "published" / "steps-bridge-releases.csv"
RECIPES = ROOT / "data" / "published" / "steps-bridge-releases-recipes.csv"
TOOL = ROOT / "tools" / "bridge_recipe_inputs.py"

UTILS = """
from dataclasses import dataclass
from typing import List, Optional
HERE = __file__  # the real module reads its own path at import

@dataclass
class WorkloadBaseConfig:
    num_gpus: int = 1
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    context_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: Optional[int] = None
    expert_model_parallel_size: int = 1
    global_batch_size: int = 1
    micro_batch_size: int = 1
    cuda_graph_impl: Optional[str] = None
    cuda_graph_scope: Optional[List[str]] = None
    recompute_modules: Optional[List[str]] = None
    moe_flex_dispatcher_backend: Optional[str] = None
    moe_a2a_overlap: Optional[bool] = False
    cutedsl_fused_grouped_mlp: bool = False
"""
CONFIGS_0202 = """
from dataclasses import replace
from utils.utils import WorkloadBaseConfig
BASE = WorkloadBaseConfig(num_gpus=8, expert_model_parallel_size=8, global_batch_size=512, micro_batch_size=4)
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 = replace(BASE, moe_flex_dispatcher_backend="hybridep",
    cuda_graph_impl="transformer_engine", cuda_graph_scope=["moe_router", "moe_preprocess"])
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_V1 = replace(BASE, cuda_graph_impl="transformer_engine")
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1 = replace(BASE, micro_batch_size=8)
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 = replace(BASE, micro_batch_size=8, moe_a2a_overlap=True)
"""
CONFIGS_LATER_0202 = CONFIGS_0202.replace('"transformer_engine"', '"local"')
CONFIGS_0206 = """
from dataclasses import replace
from utils.utils import WorkloadBaseConfig
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 = WorkloadBaseConfig(num_gpus=8, expert_model_parallel_size=8,
    global_batch_size=512, micro_batch_size=4, moe_flex_dispatcher_backend="hybridep", moe_a2a_overlap=True,
    cuda_graph_impl="full_iteration", cuda_graph_scope=[], cutedsl_fused_grouped_mlp=True)
"""


def _bridge_repo(tmp_path: Path) -> Path:
    """A git repo with three tags: v1 and v1b publish the 26.02 table (v1 first), v2 the 26.06 one."""
    work = tmp_path / "bridge"
    (work / "scripts/performance/utils").mkdir(parents=True)
    (work / "scripts/performance/configs/qwen").mkdir(parents=True)
    (work / "docs").mkdir()
    (work / "scripts/performance/utils/utils.py").write_text(UTILS)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip

    def git(*args, env=env):
        subprocess.run(["git", "-C", str(work), *args], check=True, capture_output=True, env=env)

    git("init", "-q")
    for day, (tag, release, configs) in enumerate(
        (("v1", "26.02", CONFIGS_0202), ("v1b", "26.02", CONFIGS_LATER_0202), ("v2", "26.06", CONFIGS_0206)), 1
    ):
        (work / "docs/performance-summary.md").write_text(f"# Performance\n## {release} NeMo Container\n")
        (work / "scripts/performance/configs/qwen/qwen3_workload_base_configs.py").write_text(configs)
        git("add", "-A")
        stamp = f"2026-0{day}-01T00:00:00"
        git("commit", "-q", "-m", tag, env={**env, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
        git("tag", tag)
    return work / ".git"


def _row(base: dict, **kw) -> dict:
    r = dict(base)
    r.update(kw)
    return r


def test_the_tool_states_the_first_tagged_release_config_of_the_rows_layout(tmp_path):
    gitdir = _bridge_repo(tmp_path)
    rows = list(csv.DictReader(KEPT_APART.open()))
    base = next(r for r in rows if r["model"] == "Qwen3-30B-A3B" and r["gpu"] == "GB200" and r["micro_batch"] == "4")
    base = _row(base, dispatcher="", cuda_graphs="", a2a_overlap="", recompute="", uncertainty="u.")
    table = [
        _row(base, id="S1", software="Megatron-Bridge 26.02"),
        _row(base, id="S2", software="Megatron-Bridge 26.06"),
        _row(base, id="S3", software="Megatron-Bridge 26.02", gpu="GB300", micro_batch="8"),  # V1 and V2 disagree
        _row(base, id="S4", software="Megatron-Bridge 26.04"),  # no tag publishes 26.04
        _row(base, id="S5", software="Megatron-Bridge 26.02", micro_batch="2"),  # no config has this layout
        _row(base, id="S6", software="MCore"),
    ]
    src = tmp_path / "rows.csv"
    with src.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(base))
        w.writeheader()
        w.writerows(table)
    run = subprocess.run([sys.executable, str(TOOL), str(gitdir), str(src)], capture_output=True, text=True, check=True)
    out = {r["id"]: r for r in csv.DictReader(io.StringIO(run.stdout))}
    cols = lambda r: tuple(r[c] for c in ("dispatcher", "cuda_graphs", "a2a_overlap", "recompute"))  # noqa: E731
    # v1, not the later v1b, and the config named for FP8_MX over the GPU's default one
    assert cols(out["S1"]) == ("hybridep", "moe_router moe_preprocess", "no", "")
    assert "v1's QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1" in out["S1"]["uncertainty"]
    assert out["S1"]["uncertainty"].startswith("u. ") and "not priced" not in out["S1"]["uncertainty"]
    assert cols(out["S2"]) == ("hybridep", "full_iteration", "yes", "")
    assert "not priced: cutedsl_fused_grouped_mlp=True" in out["S2"]["uncertainty"]
    for i, why in (("S3", "configs of v1 disagree"), ("S4", "no tag for release 26.04"),
                   ("S5", "no config of v1 with this layout")):  # fmt: skip
        assert cols(out[i]) == ("", "", "", "") and why in out[i]["uncertainty"], i
        assert f"left as published: 1 ({why}" in run.stderr
    assert out["S6"]["uncertainty"] == "u." and "stated 2 of 6 rows" in run.stderr
    assert {k for k in out["S1"] if out["S1"][k] != table[0][k]} == {"dispatcher", "cuda_graphs", "a2a_overlap",
                                                                     "uncertainty"}  # fmt: skip


def test_release_steps_score_changed_inputs_and_leave_out_one_sided_steps():
    rows = list(csv.DictReader(KEPT_APART.open()))
    base = next(r for r in rows if r["model"] == "Qwen3-30B-A3B" and r["gpu"] == "GB300")
    partial = dict(dispatcher="hybridep", cuda_graphs="moe_router moe_preprocess", a2a_overlap="no", recompute="")
    full = dict(dispatcher="hybridep", cuda_graphs="full_iteration", a2a_overlap="yes", recompute="")
    none = dict(dispatcher="", cuda_graphs="", a2a_overlap="", recompute="")
    table = [
        _row(base, id="S1", software="Megatron-Bridge 26.02", value="30000", **partial),
        _row(base, id="S2", software="Megatron-Bridge 26.04", value="30300", **partial),
        _row(base, id="S3", software="Megatron-Bridge 26.06", value="45000", **full),
        _row(base, id="S4", software="Megatron-Bridge 26.10", value="44000", **none),  # one side states: left out
        _row(base, id="S5", software="Megatron-Bridge 26.02", value="20000", micro_batch="2", **none),
        _row(base, id="S6", software="Megatron-Bridge 26.04", value="21000", micro_batch="2", **none),
    ]
    table = [PS.Row(r) for r in table]
    recs, prs = PS.price_steps(table)
    st = PS.step_summary(recs, prs, table)["release_steps"]
    by = {(t["from"], t["to"]): t for t in st["steps"]}
    assert set(by) == {("S1", "S2"), ("S2", "S3"), ("S5", "S6")} and st["one_side_stated"] == 1
    assert by[("S1", "S2")]["inputs_changed"] == [] and by[("S1", "S2")]["predicted_ratio"] == pytest.approx(1.0)
    assert st["same_inputs"]["n"] == 1 and st["same_inputs"]["measured_change"]["median"] == pytest.approx(0.01)
    assert st["not_stated"]["n"] == 1 and st["not_stated"]["measured_change"]["median"] == pytest.approx(0.05)
    step = by[("S2", "S3")]
    assert step["inputs_changed"] == ["a2a_overlap", "cuda_graphs"] and step["measured_ratio"] == pytest.approx(
        45000 / 30300
    )
    # a whole-step graph and the A2A overlap take the host floor and the exchange off: faster, as measured
    assert step["predicted_ratio"] > 1.05 and step["direction_right"] and st["changed_inputs"]["direction_right"] == 1
    assert st["changed_inputs"]["ratio_error"]["median"] == pytest.approx(abs(step["ratio_error"]))


def test_the_recipe_stated_file_is_the_kept_apart_file_with_the_recipes_inputs():
    ours = list(csv.DictReader(KEPT_APART.open()))
    stated = list(csv.DictReader(RECIPES.open()))
    assert [r["id"] for r in stated] == [r["id"] for r in ours] and list(stated[0]) == list(ours[0])
    changed = set()
    for a, b in zip(ours, stated):
        changed |= {k for k in a if a[k] != b[k]}
        assert b["uncertainty"].startswith(a["uncertainty"].rstrip())
        assert ("Inputs stated from Megatron-Bridge " in b["uncertainty"]) != (
            "Recipe inputs not stated" in b["uncertainty"]
        )
    assert changed <= {*PS.RECIPE_INPUTS, "uncertainty"}
    assert sum("Inputs stated from" in r["uncertainty"] for r in stated) == 67


def test_the_release_steps_the_docs_report(capsys):
    """docs/results/published-steps.md, "What the recipes ran": with the recipes' inputs stated, 9 release steps
    change them, all 9 priced in the measured direction at a median ratio error of 5%; 32 keep them, and the
    measured throughput moves by a median 1%. As published (no inputs stated), no step is scored."""
    rows = PS.read_step_rows(RECIPES)
    recs, prs = PS.price_steps(rows)
    st = PS.step_summary(recs, prs, rows)["release_steps"]
    assert (st["changed_inputs"]["n"], st["changed_inputs"]["direction_right"]) == (9, 9)
    assert st["changed_inputs"]["ratio_error"]["median"] <= 0.06
    assert st["same_inputs"]["n"] == 32 and st["same_inputs"]["measured_change"]["median"] <= 0.02
    assert st["one_side_stated"] == 8 and st["not_stated"]["n"] == 8
    pub = PS.read_step_rows(KEPT_APART)
    recs, prs = PS.price_steps(pub)
    st = PS.step_summary(recs, prs, pub)["release_steps"]
    assert (st["changed_inputs"]["n"], st["same_inputs"]["n"], st["not_stated"]["n"]) == (0, 0, 57)
    assert main(["predict", "published", "--data", str(RECIPES)]) == 0
    assert "Different inputs stated (9 steps): 9 of 9 in the measured direction" in capsys.readouterr().out
