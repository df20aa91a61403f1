"""Build a model variant inside the real DeepSpeed engine (ZeRO-1 by default, fp32 on CPU, bf16 on GPU),
and run one training step of it with a timed breakdown.

A "variant" differs only in the MoE exchange, the MoE schedule and the gradient synchronization;
model, data, seed and optimizer are shared, so every comparison is apples to apples.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from monta import variants as registry
from monta.groups import MPU
from monta.mesh import Mesh, MeshAxis
from monta.model.config import ModelConfig
from monta.model.data import synthetic_batch
from monta.model.transformer import MoETransformer
from monta.variants import LINA_CHUNK_BYTES, PARTITIONS  # PARTITIONS: Lancet's batch partitions by default


def ds_config(cfg: ModelConfig, zero_stage: int, bf16: bool) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": bf16},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


@contextmanager
def zero_handoff(optimizer):
    """Hand already-averaged gradients to ZeRO-1/2 without a second reduction.

    ZeRO's bookkeeping (partition copy, optimizer step) runs unchanged; only its collective is
    replaced by the flatten it would reduce, and its pre-division is off because our scheduler
    already divided exactly as ZeRO does (by the DP world size, summed over the param's group).
    """
    if not hasattr(optimizer, "allreduce_bucket"):
        yield
        return
    saved_avg = optimizer.gradient_average
    optimizer.gradient_average = False
    optimizer.allreduce_bucket = lambda bucket, *a, **k: optimizer.flatten(bucket)
    try:
        yield
    finally:
        del optimizer.allreduce_bucket
        optimizer.gradient_average = saved_avg


@dataclass
class Variant:
    """One variant's engine and schedule state on this rank."""

    name: str
    engine: Any
    model: MoETransformer
    grad_sync: Any = None  # PriorityGradSync for a sync with priority (lina-microops, priority)
    schedule: Any = None  # the MoE schedule object (None: DeepSpeed's forward)
    spec: Any = None  # monta.variants.Variant
    stats: dict[str, float] = field(default_factory=dict)


def grad_items(model: MoETransformer, sync_mesh: Mesh):
    """What DeepSpeed's ZeRO reduction does, per parameter: divide by DP size, sum over DP (dense) or EDP (experts)."""
    from deepspeed.moe.utils import is_moe_param

    from monta.comm.priority import GradItem

    dp = sync_mesh.layout.dp
    items = []
    for p in model.parameters():
        if is_moe_param(p):
            items.append(GradItem(p, sync_mesh.edp.group, sync_mesh.layout.expert_dp, float(dp)))
        else:
            items.append(GradItem(p, sync_mesh.dp.group, dp, float(dp)))
    return items


def build_variant(
    name: str,
    cfg: ModelConfig,
    mesh: Mesh,
    model_tp: MeshAxis,
    *,
    chunks=4,
    seed: int = 1234,
    zero_stage: int = 1,
    lr: float = 1e-3,
    sync_mesh: Mesh | None = None,
    lina_chunk_bytes: int = LINA_CHUNK_BYTES,
    lancet_partitions: int = PARTITIONS,
    choices=None,
    observers=None,
) -> Variant:
    """Construct the model, its DeepSpeed engine and the variant's schedule (collective: all ranks).
    ``choices`` (a workload's ``monta.moe.WorkloadChoices``: every MoE layer routes them; None: the gates'
    own) and ``observers`` (``monta.moe.Observers``: what watches the model; None: its own) go to the model."""
    import deepspeed
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

    spec = registry.get(name)  # ValueError names the choices
    if spec.schedule.check_model is not None:
        spec.schedule.check_model(cfg)
    model = MoETransformer(
        cfg,
        mesh,
        model_tp,
        exchange=spec.exchange,
        chunks=spec.exchange_chunks(chunks),
        seed=seed,
        choices=choices,
        observers=observers,
    )
    bf16 = torch.cuda.is_available()
    if bf16:
        model = model.cuda()
    groups = split_params_into_different_moe_groups_for_optimizer(
        {"params": list(model.parameters()), "name": "params"}
    )
    opt = torch.optim.AdamW(groups, lr=lr, weight_decay=0.0)
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=opt, config=ds_config(cfg, zero_stage, bf16), mpu=MPU(mesh)
    )
    v = Variant(name, engine, model, spec=spec)
    if spec.sync.priority:
        from monta.comm.priority import PriorityGradSync

        if sync_mesh is None:
            raise ValueError(f"variant {name} needs sync_mesh (its own communicators for the background thread)")
        chunk_bytes = None if spec.sync.chunk_bytes is None else lina_chunk_bytes
        v.grad_sync = PriorityGradSync(grad_items(model, sync_mesh), chunk_bytes=chunk_bytes)
    if spec.schedule.build is not None:
        ctx = registry.ScheduleContext(model=model, cfg=cfg, mesh=mesh, chunks=chunks, partitions=lancet_partitions)
        v.schedule = spec.schedule.build(ctx)
        if v.schedule is not None:
            model.set_schedule(v.schedule)
    return v


def train_step(v: Variant, cfg: ModelConfig, step: int, seed: int, dp_rank: int, timed: bool = False) -> dict:
    """One forward/backward/gradient-sync/optimizer step; returns loss and (when timed) phase seconds."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokens, labels = synthetic_batch(cfg, seed, step, dp_rank, device)
    torch.manual_seed(seed * 1000 + step)  # gate noise: identical for every variant and TP rank
    engine, model = v.engine, v.model
    obs = model.observers  # its phase timers, backward clock and compute clock
    obs.record_times(timed)
    sync = lambda: torch.cuda.synchronize() if torch.cuda.is_available() else None  # noqa: E731
    sync()
    t0 = time.perf_counter()
    obs.restart()
    loss, lm_loss = engine(tokens, labels)
    sync()
    t1 = time.perf_counter()
    engine.enable_backward_allreduce = False  # we call the reduction ourselves, to time it
    if v.grad_sync is not None:
        v.grad_sync.attach()
        v.grad_sync.start()
    hooks = v.schedule if hasattr(v.schedule, "begin_backward") else None
    if hooks is not None:
        hooks.begin_backward()
    try:
        engine.backward(loss)
    finally:
        if hooks is not None:
            hooks.end_backward()
    obs.restart()  # end_backward waited for the dW worker thread
    sync()
    t2 = time.perf_counter()
    if v.grad_sync is not None:
        v.grad_sync.finish()
        v.grad_sync.detach()
        with zero_handoff(engine.optimizer):
            engine.allreduce_gradients()
    else:
        engine.allreduce_gradients()
    sync()
    t3 = time.perf_counter()
    obs.restart()  # the gradient sync was communication
    engine.step()
    obs.charge("optimizer", t3)
    sync()
    t4 = time.perf_counter()
    out = {"loss": float(loss.detach()), "lm_loss": float(lm_loss), "step_s": t4 - t0}
    if timed:
        ph = obs.phase_times()
        # Communication the step waited for: the forward exchanges (a pipelined schedule's are its
        # waits), the backward exchanges (for a pipelined backward only its waits: the rest overlapped
        # expert backward) and what gradient synchronization left after the backward.
        pipelined_bwd = "dispatch_bwd_wait" in ph
        bwd_exposed = (
            ph["dispatch_bwd_wait"] + ph["combine_bwd_wait"]
            if pipelined_bwd
            else ph.get("dispatch_bwd", 0.0) + ph.get("combine_bwd", 0.0)
        )
        exposed = ph.get("dispatch", 0.0) + ph.get("combine", 0.0) + bwd_exposed + (t3 - t2)
        out["breakdown_s"] = {
            "attention": ph.get("attention", 0.0),
            "gate": ph.get("gate", 0.0),
            "dispatch_exchange": ph.get("dispatch", 0.0),
            "experts": ph.get("experts", 0.0),
            "combine_exchange": ph.get("combine", 0.0),
            "forward_total": t1 - t0,
            "backward": t2 - t1,
            "dispatch_exchange_bwd": ph.get("dispatch_bwd", 0.0),
            "combine_exchange_bwd": ph.get("combine_bwd", 0.0),
            "gradient_sync": t3 - t2,
            "optimizer": t4 - t3,
            "exposed_comm": exposed,
        }
    return out


def dp_rank_of(mesh: Mesh) -> int:
    return MPU(mesh).get_data_parallel_rank()
