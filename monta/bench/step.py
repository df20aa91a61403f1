"""``monta bench step``: a training step of the MoE decoder on DeepSpeed for every variant
(``monta.variants``: the registered names, plugins' included, or compositions), interleaved step by step in one run.

The parent validates flags (``step_args``) and launches ranks (``step_launch``: the emulated cluster,
local processes on 127.0.0.1, or it is itself one torchrun/srun rank); every rank runs
``python -m monta.bench.step --worker SPEC`` (``step_worker``); rank 0 reports (``step_report``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from monta.bench.step_args import add_arguments
from monta.bench.step_args import spec as _spec
from monta.bench.step_compute import peak_tflops, run_chunks
from monta.parallel import ParallelLayout
from monta.variants import PARTITIONS


def main(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(json.loads(args.worker))
    from monta.bench.pipeline_preset import preset

    args.preset_line = preset(args, "step")  # before the spec: --preset sets the flags it reads
    spec = _spec(args)
    if args.launcher == "env":  # one rank of torchrun/srun: run the worker in this process
        return _worker(spec)
    from monta.bench.step_launch import launch

    rc = launch(args, spec)
    if rc == 0 and spec["out"] and not args.no_wandb:
        from monta.results import read_records
        from monta.tracking import log_records

        log_records(read_records(spec["out"]), group=args.experiment, config=spec, job_type="step")
    return rc


def _worker(spec: dict[str, Any]) -> int:
    import torch.distributed as dist

    from monta.bench.step_report import report
    from monta.bench.step_worker import init_from_env, run_interleaved
    from monta.model.config import ModelConfig

    init_from_env(backend=spec.get("backend", "auto"))
    import torch

    layout = ParallelLayout(**spec["layout"])
    cfg = ModelConfig(**spec["overrides"])
    chunks = run_chunks(spec, cfg, layout, 2 if torch.cuda.is_available() else 4)
    spec = dict(spec, chunks_requested=spec["chunks"], chunks=chunks)
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        spec["device"], spec["peak_tflops"] = name, peak_tflops(name, spec.get("peak_tflops"))
    clock = None
    if spec.get("clock"):
        from monta.model.clock import ComputeClock

        clock = ComputeClock(
            spec["clock"]["us_per_flop"],
            {"optimizer": spec["clock"]["optimizer_us"]},
            contention=spec.get("contention", 0.0),
        )
    res = run_interleaved(
        layout,
        cfg,
        spec["variants"],
        chunks=chunks,
        steps=spec["steps"],
        warmup=spec["warmup"],
        seed=spec["seed"],
        zero_stage=spec["zero_stage"],
        lancet_partitions=spec.get("lancet_partitions", PARTITIONS),
        clock=clock,
        routing=spec.get("routing"),
    )
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(res, gathered, dst=0)
    if dist.get_rank() == 0:
        report(spec, layout, cfg, gathered)
    dist.barrier()
    return 0


if __name__ == "__main__":
    from monta.bench.common_args import HelpFormatter

    _p = argparse.ArgumentParser(prog="monta bench step", formatter_class=HelpFormatter)
    add_arguments(_p)
    sys.exit(main(_p.parse_args()))
