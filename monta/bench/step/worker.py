"""Rank side of ``monta bench step``: build every variant in one world and run them interleaved
step by step, so noise hits them alike; reads torchrun-style env (RANK, WORLD_SIZE, MASTER_*).
"""

from __future__ import annotations

import datetime
import os
import resource
import time
from typing import Any

import torch
import torch.distributed as dist

from monta.comm.collectives import group_backend
from monta.model.clock import restarted_by_dist
from monta.progress import Eta, beat
from monta.variants import (
    LINA_CHUNK_BYTES,
    PARTITIONS,  # Lancet's batch partitions: the model's number by default
)


def init_from_env(timeout_s: float = 300.0, backend: str = "auto") -> None:
    """torch.distributed from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun, srun, emulator, local);
    ``backend`` auto: nccl where this rank has CUDA, else gloo."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise ValueError(f"missing environment {', '.join(missing)}; launch with torchrun/srun or monta bench step")
    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])
    if not dist.is_initialized():
        import deepspeed

        beat("joining the process group (init_distributed)")

        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if torch.cuda.is_available():  # ranks beyond the GPUs share them (gloo; NCCL refuses two ranks on one)
            local, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
            if backend == "nccl" and local >= gpus:
                raise ValueError(
                    f"LOCAL_RANK {local} on a node of {gpus} GPU(s): NCCL takes one rank per GPU; start at most "
                    f"{gpus} ranks per node, or --backend gloo to share the GPUs"
                )
            gpu = local % gpus
            torch.cuda.set_device(gpu)
            # DeepSpeed's engine puts a rank on cuda:LOCAL_RANK: ranks sharing a GPU name the one they share
            os.environ["LOCAL_RANK"] = str(gpu)
            if backend == "gloo":
                # DeepSpeed binds a CUDA rank's group to its device (device_id), and with a bound group torch
                # 2.11 splits every new gloo group through a call gloo lacks (perform_nocolor_split, seen on
                # an H200): start gloo here unbound, DeepSpeed adopts it
                dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
        deepspeed.init_distributed(
            dist_backend=group_backend(backend), verbose=False, timeout=datetime.timedelta(seconds=timeout_s)
        )


def build_world(
    layout,
    cfg,
    variants,
    chunks,
    seed: int,
    zero_stage: int = 1,
    lancet_partitions: int = PARTITIONS,
    lina_chunk_bytes: int = LINA_CHUNK_BYTES,
    routes=None,
    clock=None,
):
    """The mesh and one engine per variant (collective; same order on every rank). ``routes``: a
    ``monta.routing.Routing`` every gate routes by (None: the gates' own), the same for every variant so
    every exchange sees the same tokens; ``clock``: the compute clock every variant's model charges."""
    from monta.bench.step.router import member_choices
    from monta.groups import init_deepspeed_groups
    from monta.mesh import build_mesh
    from monta.model.engine import build_variant
    from monta.moe import Observers

    cfg.check_layout(layout.tp, layout.ep)
    mesh = build_mesh(layout)  # exchange + DeepSpeed (mpu, expert groups)
    tp = build_mesh(layout).tp  # the model's TP linears: communicators of their own
    sync_mesh = build_mesh(layout)  # background gradient sync: communicators of their own
    init_deepspeed_groups(mesh, expert_tp=True)
    beat("building the process groups and engines")
    choices = member_choices(routes, mesh.ep.index)
    built = {}
    for name in variants:
        beat(f"building the {name} engine")
        built[name] = build_variant(
            name,
            cfg,
            mesh,
            tp,
            chunks=chunks,
            seed=seed,
            zero_stage=zero_stage,
            sync_mesh=sync_mesh,
            lancet_partitions=lancet_partitions,
            lina_chunk_bytes=lina_chunk_bytes,
            choices=choices,
            observers=Observers(clock=clock),
        )
    return mesh, built


def run_interleaved(
    layout,
    cfg,
    variants,
    *,
    chunks=4,
    steps=5,
    warmup=1,
    seed=1234,
    zero_stage=1,
    lancet_partitions=PARTITIONS,
    clock=None,
    routing: str | None = None,
) -> dict[str, Any]:
    """Run warm-up + steps of every variant, interleaved; returns per-step losses, times and what each MoE
    layer's gate routed (``router``) of this rank. ``clock``: a ``monta.model.clock.ComputeClock`` to
    run the compute on (None: the CPU's own speed). ``routing``: a workload spec every gate routes by."""
    import monta.bench.step.router as step_router
    from monta.model.engine import dp_rank_of

    routes = None if routing is None else step_router.step_routing(routing, cfg, layout)
    mesh, built = build_world(
        layout, cfg, variants, chunks, seed, zero_stage, lancet_partitions, routes=routes, clock=clock
    )
    dp_rank = dp_rank_of(mesh)
    with restarted_by_dist(clock):
        out = _run_steps(built, cfg, variants, steps, warmup, seed, dp_rank, clock, routing)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if torch.cuda.is_available():
        out["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
    for v in built.values():
        v.engine.destroy() if hasattr(v.engine, "destroy") else None
    return out


def _run_steps(built, cfg, variants, steps, warmup, seed, dp_rank, clock, routing) -> dict[str, Any]:
    """The interleaved steps (inside the clock's restarts): per variant its losses, times, clock and router."""
    import monta.bench.step.router as step_router
    from monta.bench.hostload import HostLoad, own_run_delay_s
    from monta.model.engine import train_step

    out: dict[str, Any] = {
        v: {"loss": [], "step_s": [], "breakdown_s": [], "wait_s": [], "wall_s": [], "clock": [], "router": []}
        for v in variants
    }
    # What CPU the steps had: the machine (rank 0 samples it) and this rank's own wait for a core.
    load = HostLoad().start() if dist.get_rank() == 0 else None
    spans: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    eta = Eta((warmup + steps) * len(variants)) if dist.get_rank() == 0 else None
    for step in range(warmup + steps):
        for name in variants:
            where = f"{'warm-up ' if step < warmup else ''}step {step + 1}/{warmup + steps} of variant {name}"
            beat(where)
            if clock is not None:
                clock.reset_stats()
            observers = built[name].model.observers
            observers.record_routes()
            d0, t0 = own_run_delay_s(), time.perf_counter()
            r = train_step(built[name], cfg, step, seed, dp_rank, timed=step >= warmup)
            d1, t1 = own_run_delay_s(), time.perf_counter()
            tallies = step_router.read_tallies(observers)  # after the clock: no sync inside it
            step_router.check_forced(name, tallies, routing)
            if eta is not None:  # rank 0's stdout is what the launcher streams live to the person watching
                print(eta.advance(where), flush=True)
            if step >= warmup:
                out[name]["loss"].append(r["loss"])
                out[name]["step_s"].append(r["step_s"])
                out[name]["breakdown_s"].append(r["breakdown_s"])
                out[name]["wait_s"].append(d1 - d0 if d0 is not None and d1 is not None else None)
                out[name]["wall_s"].append(t1 - t0)
                out[name]["router"].append(tallies)
                spans[name].append((t0, t1))
                if clock is not None:
                    out[name]["clock"].append(clock.stats())
    if load is not None:
        load.stop()
        out["host_cpu"] = {v: load.window(spans[v]) for v in variants}
    return out
