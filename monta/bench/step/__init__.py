"""``monta bench step``: a training step of the MoE decoder on DeepSpeed for every variant
(``monta.variants``: the registered names, plugins' included, or compositions), interleaved step by step in one run.

The parent validates flags (``args``) and launches ranks (``launch``: the emulated cluster,
local processes on 127.0.0.1, or it is itself one torchrun/srun rank); every rank runs
``python -m monta.bench.step --worker CONFIG`` (``worker``; CONFIG: the StepConfig as JSON); rank 0
reports (``report``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from monta.bench.step.args import add_arguments, step_config
from monta.bench.step.compute import peak_tflops, run_chunks
from monta.bench.step.config import StepConfig

__all__ = ["add_arguments", "main"]  # the entry monta.bench.cli and ``python -m monta.bench.step`` use


def main(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(StepConfig.from_dict(json.loads(args.worker)))
    from monta.bench.pipeline_preset import preset

    args.preset_line = preset(args, "step")  # before the config: --preset sets the flags it reads
    cfg = step_config(args)
    if args.launcher == "env":  # one rank of torchrun/srun: run the worker in this process
        return _worker(cfg)
    from monta.bench.step.launch import launch

    rc, cfg = launch(args, cfg)
    if rc == 0 and cfg.out and not args.no_wandb:
        from monta.results import read_records
        from monta.tracking import log_records

        log_records(read_records(cfg.out), group=args.experiment, config=cfg.to_dict(), job_type="step")
    return rc


def _worker(run: StepConfig) -> int:
    import torch.distributed as dist

    from monta.bench.step.report import report
    from monta.bench.step.worker import init_from_env, run_interleaved

    init_from_env(backend=run.backend)
    import torch

    layout, cfg = run.layout, run.model_config
    run = dataclasses.replace(run, chunks_used=run_chunks(run, cfg, layout, 2 if torch.cuda.is_available() else 4))
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        run = dataclasses.replace(run, device=name, peak_tflops=peak_tflops(name, run.peak_tflops))
    clock = None
    if run.clock:
        from monta.model.clock import ComputeClock

        clock = ComputeClock(
            run.clock["us_per_flop"], {"optimizer": run.clock["optimizer_us"]}, contention=run.contention
        )
    res = run_interleaved(
        layout,
        cfg,
        list(run.variants),
        chunks=run.chunks_used,
        steps=run.steps,
        warmup=run.warmup,
        seed=run.seed,
        zero_stage=run.zero_stage,
        lancet_partitions=run.lancet_partitions,
        clock=clock,
        routing=run.routing,
    )
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(res, gathered, dst=0)
    if dist.get_rank() == 0:
        report(run, layout, cfg, gathered)
    dist.barrier()
    return 0
