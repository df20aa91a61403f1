# Config loading and validation (before anything runs) and the helpers the topic files share,
# i.e. target lists, launcher prefixes, emulated-network flags, input functions.

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
PRED = config["predict"]
EMULATED = config["launcher"]["kind"] == "emulated"


def _alternatives(values):
    return "|".join(sorted({str(v).replace(".", r"\.").replace("+", r"\+") for v in values})) or "^$"


def csv(values):
    return ",".join(str(v) for v in values)


def net_args(inter_gbps=None, intra_gbps=None, cluster=None):
    """Emulated-network flags for `monta bench` / `monta emulate calibrate`; none on real nodes.
    The NIC rate is ``inter_gbps``, else ``cluster``'s own, else the network section's. With a cluster
    preset topology the loopback follows at the preset's ratio (``--topology PRESET@GBPS``); an
    ``intra_gbps`` (the ratio ablation) or a topology of '' sets both rates by hand."""
    if not EMULATED:
        return ""
    net = config["network"]
    gbps = inter_gbps or (cluster or {}).get("inter_gbps") or net["inter_gbps"]
    intra = intra_gbps or net["intra_gbps"]
    if net["topology"] == "unshaped":
        args = ["--topology unshaped"]
    elif net["topology"] and not intra:
        args = [f"--topology {shlex.quote(net['topology'])}@{gbps}"]
    else:
        args = [f"--inter-gbps {gbps}"] + ([f"--intra-gbps {intra}"] if intra else [])
    if net["latency_us"]:
        args.append(f"--latency-us {net['latency_us']}")
    if net["allow_unshaped"]:
        args.append("--allow-unshaped")
    return " ".join(args)


def default_intra_gbps():
    """The loopback rate of the network section's profile (the ratio ablation keeps it, varying the NIC)."""
    net = config["network"]
    if net["topology"] and net["topology"] != "unshaped" and not net["intra_gbps"]:
        from monta.emulate.topology import Topology

        return Topology.preset(f"{net['topology']}@{net['inter_gbps']}").intra_gbps
    return net["intra_gbps"]


def repeat_args(a=None):
    """How many iterations `monta bench alltoall` runs: a fixed count (`--iters`, exactly), or adaptive
    (`--adaptive`: at least `iters`, more until the paired ratios' CIs are narrow, up to `max_iters` /
    `budget_s`)."""
    a = a or config["alltoall"]
    if a["max_iters"] <= a["iters"]:
        return f"--iters {a['iters']}"
    return (f"--adaptive --iters {a['iters']} --max-iters {a['max_iters']} --target-ci {a['target_ci']}"
            f" --budget-s {a['budget_s']}")


def launcher_args():
    """How `monta bench alltoall` gets its ranks: it spawns them on the emulator, or it is one
    rank of a torchrun started by srun (reads RANK, WORLD_SIZE, MASTER_ADDR)."""
    lc = config["launcher"]
    kind = "emulate" if EMULATED else "env"
    return f"--launcher {kind} --backend {lc['backend']} --experiment {config['experiment']}"


def step_launcher_args():
    """`monta bench step` runs on the emulator with --emulate (compute on the clock), else as a torchrun rank."""
    s = config["step"]
    if not EMULATED:
        return f"--launcher env --experiment {config['experiment']}"
    return (f"--emulate {net_args(inter_gbps=s['inter_gbps'] or None)} --compute {s['compute']}"
            f" --experiment {config['experiment']}")


def launch(cluster):
    """Command prefix that starts the benchmark: nothing for the emulator (it spawns its own
    ranks); on SLURM one torchrun per node under srun, rendezvous on the allocation's first node
    (workflows/scripts/master_addr.sh: the jobstep has SLURM_JOB_ID but no SLURM_JOB_NODELIST)."""
    if EMULATED:
        return ""
    lc = config["launcher"]
    gpus = f"--gpus-per-node={cluster['gpus_per_node']} " if GPUS else ""
    return (
        f"MASTER_ADDR=$(sh {shlex.quote(str(ROOT / 'workflows' / 'scripts' / 'master_addr.sh'))}); "
        f"srun --nodes={cluster['nodes']} --ntasks-per-node=1 --cpus-per-task={lc['cpus_per_task']} "
        f"{gpus}--kill-on-bad-exit=1 "
        f"torchrun --nnodes={cluster['nodes']} --nproc-per-node={cluster['gpus_per_node']} "
        f"--rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:{lc['rdzv_port']} --rdzv-id=$SLURM_JOB_ID "
        "--no-python"
    )


def bench_resources(cluster):
    """Scheduler resources of one benchmark job. Locally `emulator=1` (profiles/local) keeps
    emulated clusters from sharing the 2 cores; on SLURM whole nodes with their GPUs."""
    lc = config["launcher"]
    res = {"emulator": 1, "runtime": lc["runtime_min"], "mem_mb": 4000}
    if not EMULATED:
        res.update(
            nodes=cluster["nodes"],
            tasks=cluster["nodes"],
            mpi="srun",
            cpus_per_task=lc["cpus_per_task"],
            mem_mb=0,
            slurm_extra=f"'--gpus-per-node={cluster['gpus_per_node']} --exclusive'" if GPUS else "'--exclusive'",
        )
        if lc["partition"]:
            res["slurm_partition"] = lc["partition"]
        if lc["account"]:
            res["slurm_account"] = lc["account"]
    return res


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
    if PRED["calibrate"] and EMULATED:
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
        targets.append("results/report.md")
    if config["regress"]["enabled"] and config["alltoall"]["enabled"]:
        targets.append("results/regress/alltoall.md")
    return targets


def cluster_resources(lookup):
    """bench_resources as per-job callables; lookup(wildcards) -> the job's cluster shape."""
    keys = bench_resources({"nodes": 1, "gpus_per_node": 1}).keys()
    return {k: (lambda wildcards, k=k: bench_resources(lookup(wildcards))[k]) for k in keys}


# ---- per-topic helpers (input functions, argument builders) ----


def step_args(s):
    """Optional model overrides: 0 means "the preset's value" and is not passed."""
    extra = [f"--topk {s['topk']}", f"--capacity-factor {s['capacity_factor']}"]
    if s["layers"]:
        extra.append(f"--layers {s['layers']}")
    if s["seq"]:
        extra.append(f"--seq {s['seq']}")
    return " ".join(extra)


ABL_CLUSTER = ABL["cluster"]
ABL_VARIANTS = csv(config["alltoall"]["variants"])
ABL_CHUNKS = csv(config["alltoall"]["chunks"])
ABL_A = config["alltoall"]
ABL_STEP_VARIANTS = csv(ABL["step_variants"])


def ablation_step_args(topk=None, cf=None):
    s = dict(config["step"])
    if topk is not None:
        s["topk"] = topk
    if cf is not None:
        s["capacity_factor"] = cf
    return step_args(s)


def get_accuracy_input(wildcards):
    """Every AllToAll sweep (the calibration cluster's shape and the others, out of sample), plus
    the link profile calibrated on one shape."""
    measured = alltoall_files() or ["results/ablation/chunks.jsonl"]
    out = {"measured": measured, "profile": "results/calibrate/linkprofile.json"}
    if modeled_step_files():  # the step on the clock, priced on a profile of its own links
        out["steps"] = modeled_step_files()
        out["step_profile"] = ("results/calibrate/step-linkprofile.json" if config["step"]["inter_gbps"]
                               else out["profile"])
    return out


def modeled_step_files():
    """The step records the model is checked against: compute on the clock, the calibration's shape."""
    if not (config["step"]["enabled"] and config["step"]["compute"] == "modeled" and EMULATED):
        return []
    shape = PRED["calibrate_cluster"]
    return [f for f, c in zip(step_files(), config["step"]["clusters"])
            if (c["nodes"], c["gpus_per_node"]) == (shape["nodes"], shape["gpus_per_node"])]


def get_notebook_input(wildcards):
    return {
        "nb": f"analysis/nb_{wildcards.notebook}.py",
        "paper": config["analysis"]["paper"],
        "records": record_files(),
    }


def notebook_params(wildcards, input):
    """Papermill parameters as one JSON document (JSON is YAML): record paths, output dir.
    Absolute, because the kernel runs in the repository root (to import `analysis`), which need
    not be Snakemake's working directory."""
    return json.dumps({"records": [os.path.abspath(p) for p in input.records],
                       "out_dir": os.path.abspath("results"), "paper": os.path.abspath(input.paper)})


def get_report_input(wildcards):
    """The notebooks' manifests, and for the summary: the records, the published numbers, the
    regression check's table (when it runs)."""
    files = {
        "manifests": expand("results/analysis/{notebook}.json", notebook=config["analysis"]["notebooks"]),
        "records": record_files(),
        "paper": config["analysis"]["paper"],
    }
    if config["regress"]["enabled"] and config["alltoall"]["enabled"]:
        files["regress"] = "results/regress/alltoall.md"
    return files


def report_regress_arg(wildcards, input):
    return f"--regress {input.regress}" if "regress" in input.keys() else ""


REG = config["regress"]


def get_regress_input(wildcards):
    """The current records, and the stored baseline when it exists (so a new baseline reruns)."""
    files = {"current": f"results/alltoall/{REG['cluster']}.jsonl"}
    if Path(REG["baseline"]).exists():
        files["baseline"] = REG["baseline"]
    return files
