"""How ``monta bench step`` starts its ranks: on the emulated cluster (``--launcher emulate``, compute on
the clock with ``--compute modeled``) or as local processes on 127.0.0.1 (``--launcher local``). Every rank
runs ``python -m monta.bench.step --worker CONFIG`` (the run's StepConfig as JSON)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time

from monta.bench.step.config import StepConfig


def topology(args: argparse.Namespace):
    """The flags' emulated network (the default profile when no network flag is given)."""
    from monta.bench.common_args import network

    return network(args)


def clock_of(topo, layout, cfg):  # layout: the run's ParallelLayout
    """The run's clock (``monta.perfmodel.training.clock``): its topology must emulate a cluster preset."""
    from monta.perfmodel.training.clock import Clock

    if not topo.cluster:
        raise ValueError(
            f"--compute modeled needs a topology that emulates a cluster preset (e.g. --topology "
            f"a800-4nic or a800-4nic@0.0625); {topo.name} has hand-set rates"
        )
    return Clock(
        topo.cluster,
        cfg,
        tp=layout.tp,
        ep=layout.ep,
        gpus_per_node=layout.gpus_per_node,
        inter_gbps=topo.inter_gbps,
        intra_gbps=topo.intra_gbps,
    )


# What every rank imports: imported once by the emulator's supervisor, which forks the ranks from itself
# (monta.emulate.forkstart). DeepSpeed's first initialize() imports its Muon optimizer, whose torch.compile
# decorators import torch._dynamo: 3.7 s of CPU per rank, the largest of the three.
STEP_PRELOAD = (
    "torch",
    "torch.distributed",
    "deepspeed",
    "deepspeed.runtime.zero.muon.muon_optimizer",
    "monta.bench.step.worker",
)


def _argv_env() -> tuple[list[str], dict[str, str]]:
    argv = [sys.executable, "-m", "monta.bench.step", "--worker"]
    env = {"DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu"), "DS_BUILD_OPS": "0", "OMP_NUM_THREADS": "1"}
    return argv, env


def launch(args: argparse.Namespace, run: StepConfig) -> tuple[int, StepConfig]:
    """Start the ranks and wait for them: 0 when every rank finished cleanly, and the run's config with
    what the launch learned (the emulated network, the compute clock)."""
    from monta.bench.common_args import network_line

    topo = topology(args) if args.launcher == "emulate" else None
    print(network_line("step", args, topo.describe() if topo else ""), flush=True)
    if getattr(args, "preset_line", None):  # --preset applied, or the settings unlike the pipeline's
        print(args.preset_line, flush=True)
    return _emulated(args, run, topo) if topo else (_local(args, run), run)


def _emulated(args: argparse.Namespace, run: StepConfig, topo) -> tuple[int, StepConfig]:
    from monta.emulate.launcher import launch as emulate

    argv, env = _argv_env()
    clock = clock_of(topo, run.layout, run.model_config).describe() if run.compute == "modeled" else None
    run = dataclasses.replace(run, emulated=True, topology=topo.to_dict(), clock=clock)
    if clock:
        print(
            f"# compute on the clock of {topo.cluster}: D = {clock['dilation']:.1f} (links and compute "
            f"alike; {topo.describe()})",
            flush=True,
        )
    result = emulate(
        argv + [json.dumps(run.to_dict())],
        run.nodes,
        run.gpus_per_node,
        topo,
        env=env,
        timeout_s=args.timeout,
        allow_unshaped=args.allow_unshaped,
        stall_s=max(120.0, 60.0 + 5.0 * run.nodes * run.gpus_per_node),
        preload=STEP_PRELOAD,
    )
    return 0, dataclasses.replace(run, emulated=bool(result.emulated))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _local(args: argparse.Namespace, run: StepConfig) -> int:
    """One process per rank on 127.0.0.1 (rank 0's output shown, the others' dropped); the first rank that
    fails, or the timeout, ends them all."""
    argv, env = _argv_env()
    world = run.nodes * run.gpus_per_node
    port = _free_port()
    procs = []
    for r in range(world):
        e = dict(
            os.environ,
            **env,
            RANK=str(r),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(r % run.gpus_per_node),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        procs.append(
            subprocess.Popen(argv + [json.dumps(run.to_dict())], env=e, stdout=None if r == 0 else subprocess.DEVNULL)
        )
    deadline = time.monotonic() + args.timeout
    try:
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise ValueError(
                    f"ranks {failed or 'all'} {'failed' if failed else 'timed out'}; see their stderr above"
                )
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return 0 if all(p.returncode == 0 for p in procs) else 1
