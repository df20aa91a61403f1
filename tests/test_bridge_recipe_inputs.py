"""tools/bridge_recipe_inputs.py states what Megatron-Bridge's recipes ran for the rows of its releases (the
version each release's container ships), and the
step command's ``release_steps`` compares one layout from one release to the next: with the same stated inputs
the software alone moved, with different ones the model's ratio is scored."""

from __future__ import annotations

import csv
import importlib.util
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
# A local Megatron-Bridge git directory (history and tags), where a developer has one
MIRROR = Path(os.environ.get("MONTA_BRIDGE_GIT", "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"))

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
QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 = replace(BASE, moe_flex_dispatcher_backend="deepep")
"""
# The perf script: per GPU, the token dispatcher it sets (parsed, never run: it imports Megatron-Bridge)
SCRIPT = """
from megatron.bridge.recipes import qwen3_30b_a3b_pretrain_config

def qwen3_30b_a3b_pretrain_config_gb200(precision="bf16"):
    cfg = qwen3_30b_a3b_pretrain_config()
    cfg.model.moe_token_dispatcher_type = "flex"
    return cfg

def qwen3_30b_a3b_pretrain_config_h100(precision="bf16"):
    cfg = qwen3_30b_a3b_pretrain_config()
    cfg.model.moe_token_dispatcher_type = "alltoall"
    return cfg
"""
CONFIGS_LATER_0202 = CONFIGS_0202.replace('"transformer_engine"', '"local"')
CONFIGS_0204 = CONFIGS_0202.replace(
    "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 = replace(BASE,",
    "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 = replace(BASE, recompute_modules=[],",
)
CONFIGS_0206 = """
from dataclasses import replace
from utils.utils import WorkloadBaseConfig
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 = WorkloadBaseConfig(num_gpus=8, expert_model_parallel_size=8,
    global_batch_size=512, micro_batch_size=4, moe_flex_dispatcher_backend="hybridep", moe_a2a_overlap=True,
    cuda_graph_impl="full_iteration", cuda_graph_scope=[], cutedsl_fused_grouped_mlp=True)
"""
VERSIONS = """# Software Component Versions
## NeMo Framework 26.06

| Software Component | Version |
|-------------------|---------|
| Megatron-Bridge | 2.0.0 |

## NeMo Framework 26.02

| Megatron Core | 0.9.0 |
| Megatron-Bridge | 1.0.0 |
"""
ISSUES = "- Something. **Fixed in 26.02.01 (r1.0.1).**\n"


def _bridge_repo(tmp_path: Path) -> Path:
    """A Megatron-Bridge-like history: v1.0.0 (26.02's version by the release notes; its page still shows 26.01),
    v1.0.1 (26.02.01's, by the known issues; the first tag whose page shows 26.02), v1.1.0 (the first tag whose
    page shows 26.04, a release the notes do not name), v2.0.0 (26.06's), v3.0.0 (HEAD, with the release notes;
    26.08: no workload base configs)."""
    work = tmp_path / "bridge"
    for d in ("scripts/performance/utils", "scripts/performance/configs/qwen", "docs/releases"):
        (work / d).mkdir(parents=True)
    (work / "scripts/performance/utils/utils.py").write_text(UTILS)
    (work / "scripts/performance/configs/qwen/qwen3_llm_pretrain.py").write_text(SCRIPT)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip

    def git(*args, env=env):
        subprocess.run(["git", "-C", str(work), *args], check=True, capture_output=True, env=env)

    git("init", "-q")
    history = (("v1.0.0", "26.01", CONFIGS_0202), ("v1.0.1", "26.02", CONFIGS_LATER_0202),
               ("v1.1.0", "26.04", CONFIGS_0204), ("v2.0.0", "26.06", CONFIGS_0206),
               ("v3.0.0", "26.08", None))  # fmt: skip
    for day, (tag, release, configs) in enumerate(history, 1):
        (work / "docs/performance-summary.md").write_text(f"# Performance\n## {release} NeMo Container\n")
        cfg = work / "scripts/performance/configs/qwen/qwen3_workload_base_configs.py"
        if configs:
            cfg.write_text(configs)
        elif cfg.exists():
            cfg.unlink()
        if tag == "v3.0.0":
            (work / "docs/releases/software-versions.md").write_text(VERSIONS)
            (work / "docs/releases/known-issues.md").write_text(ISSUES)
        git("add", "-A")
        stamp = f"2026-0{day}-01T00:00:00"
        git("commit", "-q", "-m", tag, env={**env, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
        git("tag", tag)
    return work / ".git"


def _row(base: dict, **kw) -> dict:
    r = dict(base)
    r.update(kw)
    return r


def _tool():
    spec = importlib.util.spec_from_file_location("bridge_recipe_inputs", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_tool_states_the_config_of_the_version_each_release_ships(tmp_path):
    gitdir = _bridge_repo(tmp_path)
    rows = list(csv.DictReader(KEPT_APART.open()))
    base = next(r for r in rows if r["model"] == "Qwen3-30B-A3B" and r["gpu"] == "GB200" and r["micro_batch"] == "4")
    base = _row(base, dispatcher="", cuda_graphs="", a2a_overlap="", recompute="", uncertainty="u.")
    table = [
        _row(base, id="S1", software="Megatron-Bridge 26.02"),
        _row(base, id="S2", software="Megatron-Bridge 26.06"),
        _row(base, id="S3", software="Megatron-Bridge 26.02", gpu="GB300", micro_batch="8"),  # V1 and V2 disagree
        _row(base, id="S4", software="Megatron-Bridge 26.02.01"),
        _row(base, id="S5", software="Megatron-Bridge 26.02", micro_batch="2"),  # no config has this layout
        _row(base, id="S6", software="MCore"),
        _row(base, id="S7", software="Megatron-Bridge 26.04"),
        _row(base, id="S8", software="Megatron-Bridge 26.08"),
        _row(base, id="S9", software="Megatron-Bridge 26.10"),
        _row(base, id="S10", software="Megatron-Bridge 26.02", precision="bf16"),  # only the default-named config
        _row(base, id="S11", software="Megatron-Bridge 26.02", gpu="H100", precision="fp8"),  # the script's AlltoAll
    ]
    src = tmp_path / "rows.csv"
    with src.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(base))
        w.writeheader()
        w.writerows(table)
    run = subprocess.run([sys.executable, str(TOOL), str(gitdir), str(src)], capture_output=True, text=True, check=True)
    out = {r["id"]: r for r in csv.DictReader(io.StringIO(run.stdout))}

    def cols(r):
        return tuple(r[c] for c in ("dispatcher", "cuda_graphs", "a2a_overlap", "recompute"))

    # 26.02 ships v1.0.0 (the release notes), not v1.0.1, the first tag whose page opens with 26.02; the config
    # named for FP8_MX, never the GPU's default-named one
    assert cols(out["S1"]) == ("hybridep", "moe_router moe_preprocess", "no", "")
    read = "v1.0.0's QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 (26.02's version: docs/releases/software-versions"
    assert read in out["S1"]["uncertainty"]
    assert out["S1"]["uncertainty"].startswith("u. ") and "not priced" not in out["S1"]["uncertainty"]
    assert cols(out["S2"]) == ("hybridep", "full_iteration", "yes", "")
    assert (
        "v2.0.0's" in out["S2"]["uncertainty"]
        and "not priced: cutedsl_fused_grouped_mlp=True" in out["S2"]["uncertainty"]
    )
    assert cols(out["S4"]) == ("hybridep", "moe_router moe_preprocess", "no", "")  # "local" graphs, same scope
    assert "v1.0.1's" in out["S4"]["uncertainty"] and "known-issues.md" in out["S4"]["uncertainty"]
    assert cols(out["S7"]) == ("hybridep", "moe_router moe_preprocess", "no", "none")  # an empty list: no recompute
    assert "v1.1.0's" in out["S7"]["uncertainty"] and "assumed: the first tag" in out["S7"]["uncertainty"]
    for i, why in (("S3", "configs of v1.0.0 disagree"), ("S5", "no config of v1.0.0 has this layout"),
                   ("S8", "v3.0.0 has no workload base configs"),
                   ("S9", "no known Megatron-Bridge version for release 26.10"),
                   ("S10", "no config of v1.0.0 has this layout")):  # fmt: skip
        assert cols(out[i]) == ("", "", "", "") and why in out[i]["uncertainty"], i
        assert f"({why}" in run.stderr
    # the config names DeepEP, the H100 script sets the AlltoAll dispatcher: DeepEP is never used
    assert cols(out["S11"]) == ("alltoall", "no", "no", "")
    assert "qwen3_30b_a3b_pretrain_config_h100's AlltoAll dispatcher" in out["S11"]["uncertainty"]
    assert out["S6"]["uncertainty"] == "u." and "stated 5 of 11 rows" in run.stderr
    assert {k for k in out["S1"] if out["S1"][k] != table[0][k]} == {"dispatcher", "cuda_graphs", "a2a_overlap",
                                                                     "uncertainty"}  # fmt: skip


def test_graph_scopes_as_the_step_table_writes_them():
    scope = _tool()._scope_text
    assert scope(None, None) == scope("none", ["attn"]) == "no"
    assert scope("transformer_engine", []) == scope("local", None) == "full"  # no scope: whole layers
    assert scope("full_iteration", []) == scope("local", ["full_iteration"]) == "full_iteration"
    assert scope("transformer_engine", ["attn", "moe_router"]) == "attn moe_router"


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
    table = [PS.Row(r) for r in (table[2], table[0], table[5], table[3], table[1], table[4])]  # sorted by version
    recs, prs = PS.price_steps(table)
    st = PS.step_summary(recs, prs, table)["release_steps"]
    by = {(t["from"], t["to"]): t for t in st["steps"]}
    assert set(by) == {("S1", "S2"), ("S2", "S3"), ("S5", "S6")} and st["one_side_stated"] == 1
    assert by[("S1", "S2")]["inputs_changed"] == [] and by[("S1", "S2")]["predicted_ratio"] == pytest.approx(1.0)
    assert st["same_inputs"]["n"] == 1 and st["same_inputs"]["measured_change"]["median"] == pytest.approx(0.01)
    assert st["same_inputs"]["largest_change"] == pytest.approx(0.01)
    assert st["same_inputs"]["predicted_change"]["median"] == pytest.approx(0.0)
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
    """docs/results/published-steps.md, "What the recipes ran": with the recipes' inputs stated, 11 release steps
    change them, all priced in the measured direction at a median ratio error of 5%; 28 keep them, and the
    measured throughput moves by a median 1%, at most 6%. As published (no inputs stated), no step is scored."""
    rows = PS.read_step_rows(RECIPES)
    recs, prs = PS.price_steps(rows)
    st = PS.step_summary(recs, prs, rows)["release_steps"]
    assert (st["changed_inputs"]["n"], st["changed_inputs"]["direction_right"]) == (11, 11)
    assert st["changed_inputs"]["ratio_error"]["median"] == pytest.approx(0.053, abs=0.005)
    assert st["same_inputs"]["n"] == 28 and st["same_inputs"]["measured_change"]["median"] == pytest.approx(
        0.009, abs=0.003
    )
    assert st["same_inputs"]["largest_change"] == pytest.approx(0.058, abs=0.003)
    assert st["one_side_stated"] == 10 and st["not_stated"]["n"] == 8
    pub = PS.read_step_rows(KEPT_APART)
    recs, prs = PS.price_steps(pub)
    st = PS.step_summary(recs, prs, pub)["release_steps"]
    assert (st["changed_inputs"]["n"], st["same_inputs"]["n"], st["not_stated"]["n"]) == (0, 0, 57)
    assert main(["predict", "published", "--data", str(RECIPES)]) == 0
    assert "Different inputs stated (11 steps): 11 of 11 in the measured direction" in capsys.readouterr().out


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-Bridge mirror here (MONTA_BRIDGE_GIT)")
def test_the_committed_file_is_what_the_tool_writes_from_the_mirror():
    run = subprocess.run([sys.executable, str(TOOL), str(MIRROR), str(KEPT_APART)], capture_output=True, check=True)
    assert run.stdout == RECIPES.read_bytes()
