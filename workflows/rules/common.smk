# Config loading and validation (before anything runs), the target lists and small helpers the
# topic files share. How benchmarks are launched and their command lines: launch.smk; the input
# functions of the predict, analysis and regress rules: inputs.smk.

import json
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(workflow.main_snakefile).resolve().parent
sys.path.insert(0, str(ROOT / "workflows" / "lib"))
from configcheck import ConfigError, check_config  # noqa: E402

try:
    _checked = check_config(config, ROOT / "config" / "schema.yaml")
except ConfigError as e:
    # One line that names the key; Snakemake stops before building the DAG.
    raise ValueError(f"invalid config: {e}") from None
config.clear()
config.update(_checked)

# Jobs call `monta`, `jupytext`, `papermill` and `python`: take them from the environment that
# runs Snakemake (e.g. .venv/bin/snakemake without an activated venv).
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")

# A cluster whose slurm.conf is found through SLURM_CONF (e.g. `make slurm-up`) loses it inside
# its jobs: Snakemake's slurm-jobstep (0.6.1) drops every SLURM_* variable but SLURM_JOB_ID before it
# runs the rule, and srun/squeue there then fail with "Could not establish a configuration source".
# Carry it under another name through the job (sbatch --export=ALL) and restore it for the rule.
_slurm_conf = os.environ.get("SLURM_CONF") or os.environ.get("MONTA_SLURM_CONF")
if _slurm_conf:
    os.environ.update(SLURM_CONF=_slurm_conf, MONTA_SLURM_CONF=_slurm_conf)

# Benchmarks log to wandb themselves (monta.tracking); the environment carries the settings.
os.environ.setdefault("WANDB_MODE", config["wandb"]["mode"])
os.environ.setdefault("MONTA_WANDB_DIR", config["wandb"]["dir"])
os.environ.setdefault("MONTA_WANDB_PROJECT", config["wandb"]["project"])
os.environ.setdefault("MONTA_EXPERIMENT", config["experiment"])
os.environ.setdefault("MONTA_BACKEND", config["launcher"]["backend"])
# gloo ranks run on CPUs (the emulator, or SLURM nodes without GPUs); NCCL ranks on GPUs.
GPUS = config["launcher"]["kind"] != "emulated" and config["launcher"]["backend"] == "nccl"
os.environ.setdefault("DS_ACCELERATOR", "cuda" if GPUS else "cpu")

VARIANTS = sorted(set(config["alltoall"]["variants"]) | set(config["step"]["variants"]))
ALLTOALL_CLUSTERS = {c["name"]: c for c in config["alltoall"]["clusters"]}
STEP_CLUSTERS = {c["name"]: c for c in config["step"]["clusters"]}
ABL = config["ablation"]
ABL_CLUSTER = ABL["cluster"]
ABL_STEPS = {"steps": ABL["step_steps"]} if ABL["step_steps"] else {}  # the step ablations' own step count
PRED = config["predict"]
EMULATED = config["launcher"]["kind"] == "emulated"


def source_file(path):
    """A workflow file (notebook, paper numbers, stored baseline) named relative to the repository:
    as given when it exists in the working directory (a user's own copy), else under the workflow's
    base directory, so `snakemake --directory RUN_DIR` finds it."""
    p = Path(path)
    return path if p.is_absolute() or p.exists() else str(ROOT / p)


def _alternatives(values):
    return "|".join(sorted({str(v).replace(".", r"\.").replace("+", r"\+") for v in values})) or "^$"


def csv(values):
    return ",".join(str(v) for v in values)


def seq_plan_files():
    return expand("results/ablation/seq/{seq}.jsonl", seq=ABL["seq"])


def alltoall_files():
    if not config["alltoall"]["enabled"]:
        return []
    return expand("results/alltoall/{cluster}.jsonl", cluster=ALLTOALL_CLUSTERS)


def step_files():
    if not config["step"]["enabled"]:
        return []
    return expand("results/step/{cluster}.jsonl", cluster=STEP_CLUSTERS)


def ablation_files():
    if not ABL["enabled"]:
        return []
    files = []
    if ABL["chunks"]:
        files.append("results/ablation/chunks.jsonl")
    files += expand("results/ablation/tp/{tp}.jsonl", tp=ABL["tp"])
    if ABL["buffer_sizes"]:
        files.append("results/ablation/buffer.jsonl")
    if EMULATED:
        files += expand("results/ablation/ratio/{gbps}.jsonl", gbps=ABL["inter_gbps"])
    files += expand("results/ablation/topk/{topk}.jsonl", topk=ABL["topk"])
    files += expand("results/ablation/capacity/{cf}.jsonl", cf=ABL["capacity_factor"])
    files += seq_plan_files()
    return files


def predict_files():
    if not PRED["enabled"]:
        return []
    files = ["results/predict/paper.jsonl", "results/predict/alltoall.jsonl", "results/predict/plan.jsonl"]
    # The model against the measurements: on the emulator a calibrated link profile; on GPU nodes the
    # cluster of predict.cluster against the cluster's own AllToAll records (monta predict accuracy --cluster).
    if (PRED["calibrate"] and EMULATED) or (GPUS and config["alltoall"]["enabled"]):
        files.append("results/predict/accuracy.jsonl")
    return files


def record_files():
    """Every record file the analysis reads."""
    return alltoall_files() + step_files() + ablation_files() + predict_files()


def build_files():
    return ["results/build/env.json"] + expand("results/build/variants/{variant}.json", variant=VARIANTS)


def get_all_input():
    targets = build_files() + record_files()
    if config["analysis"]["enabled"]:
        targets += ["results/report.md", "results/report-assets/figures", "results/report-assets/tables"]
    if config["regress"]["enabled"] and config["alltoall"]["enabled"]:
        targets.append("results/regress/alltoall.md")
    return targets

