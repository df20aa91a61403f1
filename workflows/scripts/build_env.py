"""Snakemake script of rule `build`: record the software and hardware environment of this run.

Imports torch and deepspeed (that is the point: their real versions) and writes results/build/env.json.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sm = snakemake  # noqa: F821 - injected by Snakemake's script directive

with open(sm.log[0], "w") as log:
    sys.stderr = log
    import torch

    try:
        import deepspeed  # noqa: F401 - imported so monta.results.environment() records it
    except Exception as e:  # noqa: BLE001 - a broken deepspeed install is recorded, not fatal here
        print(f"deepspeed import failed: {e}", file=log)
    from monta.results import environment

    env = environment()
    env["torch_cuda_available"] = torch.cuda.is_available()
    env["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    env["nccl_available"] = torch.distributed.is_nccl_available()
    env["gloo_available"] = torch.distributed.is_gloo_available()
    env["ds_accelerator"] = os.environ.get("DS_ACCELERATOR")
    try:
        env["cpu_model"] = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        env["cpu_model"] = None
    env["mem_total_kb"] = (
        next(
            (
                int(line.split()[1])
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            ),
            None,
        )
        if Path("/proc/meminfo").exists()
        else None
    )
    env["slurm_job_id"] = os.environ.get("SLURM_JOB_ID")
    out = {"env": env, "config": json.loads(sm.params.config)}
    Path(sm.output.env).write_text(json.dumps(out, indent=2, sort_keys=True, default=str) + "\n")
    print(json.dumps(env, indent=2, default=str), file=log)
