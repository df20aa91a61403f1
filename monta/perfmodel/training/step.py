"""Training-step time of the MoE transformer for every variant of ``monta.variants`` (its exchange,
the exchange time its schedule hides, whether its gradient sync yields to AllToAll) at the level of
layers, links and pipeline stages."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from monta.hardware.links import Cluster
from monta.model.config import ModelConfig
from monta.parallel import GroupShape, axis_shapes
from monta.perfmodel.network import collectives
from monta.perfmodel.training import contention as K
from monta.perfmodel.training.compute import optimizer_us
from monta.perfmodel.training.memory import params_per_rank
from monta.perfmodel.training.micro_batch import MicroBatch, micro_batch
from monta.perfmodel.training.strategy import Strategy
from monta.variants import LINA_CHUNK_BYTES  # a priority sync's micro-op size

# Per variant (monta.variants; docs/design.md#variants): its exchange runs the AllToAll, its sync says
# whether AllToAll has priority over gradient sync, its schedule's ``hidden_us`` what overlap hides.


@dataclass(frozen=True)
class StepBreakdown:
    """Predicted time of one training step (us) on the slowest rank and what it spent it on."""

    variant: str
    total_us: float
    compute_us: float
    recompute_us: float
    exchange_us: float  # MoE token exchange left exposed
    exchange_hidden_us: float  # exchange time hidden behind compute by Lina/Lancet schedules
    tp_us: float
    cp_us: float
    pp_us: float  # pipeline bubble + stage-to-stage sends
    grad_us: float  # gradient sync left exposed, including the AllToAll it delays
    optimizer_us: float
    inter_bytes: float  # per rank per step
    intra_bytes: float
    chunks: int
    num_micro: int
    # compute added by contention (overlapped compute x c; a full recomputation's own is in recompute_us)
    contention_us: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = {
            k: getattr(self, k)
            for k in (
                "variant",
                "total_us",
                "compute_us",
                "recompute_us",
                "exchange_us",
                "exchange_hidden_us",
                "tp_us",
                "cp_us",
                "pp_us",
                "grad_us",
                "optimizer_us",
                "inter_bytes",
                "intra_bytes",
                "chunks",
                "num_micro",
                "contention_us",
            )
        }
        d.update(self.extra)
        return d


def shapes(s: Strategy, gpn: int) -> dict[str, GroupShape]:
    return _shapes(s.tp, s.cp, s.ep, s.lanes, gpn)


@lru_cache(maxsize=4096)
def _shapes(tp: int, cp: int, ep: int, lanes: int, gpn: int) -> dict[str, GroupShape]:
    return axis_shapes(gpn, tp=tp, ep=ep, lanes=lanes, cp=cp)


def _priority_sync_us(
    t_grad: float, t_last: float, t_bwd_free: float, a2a_busy: float | None, chunk: float, layers: int
) -> float:
    """The gradient sync's exposed time when the AllToAll goes first (``a2a_busy``: the AllToAll's time
    on the link the sync shares, None when it shares none): gradients use only the link's idle time,
    and a micro-op of ``chunk`` us in flight blocks a newly arriving AllToAll for half a chunk on average."""
    idle = t_last - (a2a_busy if a2a_busy is not None else 0.0)
    busy = min(1.0, t_grad / max(t_bwd_free, 1e-9))
    return max(0.0, t_grad - idle) + (layers * 2 * 0.5 * chunk * busy if a2a_busy is not None else 0.0)


def _link_bytes(link: str, micro: float, layers: int, num_micro: int, cp: int, exs, tp_ar, kv, grads, pp_send, zg):
    """Bytes a rank sends over ``link`` ("inter" or "intra") in one step: per layer and micro-batch the
    exchanges (dispatch + combine, forward and backward), the TP AllReduces and the CP ring, once per
    step the gradient syncs, per micro-batch the pipeline's sends and ZeRO-3's gathers."""

    def b(x) -> float:
        return getattr(x, f"{link}_bytes")

    per_layer_x = 2 * (b(exs[0]) + b(exs[1]))
    return (
        micro * layers * (per_layer_x + 4 * b(tp_ar) + 3 * (cp - 1) * b(kv))
        + b(grads[0])
        + b(grads[1])
        + num_micro * 2 * (b(pp_send) + b(zg))
    )


def _zero3_gather(s: Strategy, g, cluster: Cluster, dense: float, expert: float, elem_bytes: int):
    """ZeRO-3's parameter gathers before each forward and backward (nothing below stage 3)."""
    if s.zero != 3:
        return collectives.ZERO
    return collectives.allgather(dense * elem_bytes / s.lanes, g["dp"], cluster) + collectives.allgather(
        expert * elem_bytes / s.expert_dp, g["edp"], cluster
    )


def _shared_link_busy(s: Strategy, g, a2a_busy: float) -> float | None:
    """The AllToAll's busy time on the link a gradient sync (dense or expert) shares with it; None when
    the syncs run on other links (or there is no AllToAll)."""
    shares_link = any(x.link == g["ep"].link for x in (g["dp"], g["edp"]) if x.size > 1) and s.ep > 1
    return a2a_busy if shares_link else None


def _micro_batches(m: ModelConfig, s: Strategy, cluster: Cluster, seq: int, global_batch: int, validate: bool) -> int:
    """Micro-batches per step; ValueError for a strategy that cannot run (``validate``) or a global batch
    that does not split into them."""
    if validate:
        s.validate(cluster.world_size, cluster.gpus_per_node, m, seq)
    if global_batch % (s.dp * s.micro_batch):
        raise ValueError(f"global batch {global_batch} is not a multiple of dp*micro_batch = {s.dp * s.micro_batch}")
    return global_batch // (s.dp * s.micro_batch)


def _grad_sync(s: Strategy, g, cluster: Cluster, mb: MicroBatch, dense_bytes: float, expert_bytes: float, c: float):
    """Gradient sync (AllReduce, or ReduceScatter + parameter AllGather: the same bytes), once per step,
    overlapped with the last micro-batch's backward where it competes with the AllToAll for links: the
    dense and expert syncs, their time, the part of it the step waits for, and what contention adds."""
    hid_f, hid_b = mb.overlap[0], mb.overlap[1]
    gd = collectives.allreduce(dense_bytes, g["dp"], cluster)
    ge = collectives.allreduce(expert_bytes, g["edp"], cluster)
    t_grad = gd.time_us + ge.time_us
    # Contention: the sync slows the last backward's compute it overlaps (what the exchange already
    # stretched excepted); a longer backward then hides more of the sync.
    stretched = mb.layers * (hid_b + (hid_f if s.recompute == "full" else 0.0))
    grad_more = K.grad_sync_stretch(t_grad, mb.bwd_c + mb.recompute_c - stretched, c) if c else 0.0
    a2a_busy = mb.layers * (mb.ex_bwd - hid_b)  # the AllToAll's time on the link: compute speed does not change it
    link_busy = _shared_link_busy(s, g, a2a_busy)
    if mb.var.sync.priority:
        chunk = collectives.allreduce(min(LINA_CHUNK_BYTES, dense_bytes), g["dp"], cluster).time_us
        grad_us = _priority_sync_us(t_grad, mb.t_bwd + grad_more, mb.t_bwd_free, link_busy, chunk, mb.layers)
    else:  # fair sharing: while both are on the link, the AllToAll gets half of it
        grad_us = max(0.0, t_grad - (mb.t_bwd + grad_more)) + (
            0.5 * min(t_grad, a2a_busy) if link_busy is not None else 0.0
        )
    return gd, ge, t_grad, grad_us, grad_more


def predict_step(
    m: ModelConfig,
    s: Strategy,
    cluster: Cluster,
    seq: int,
    global_batch: int,
    pipeline_backward: bool = True,
    measured_tflops: float | None = None,
    validate: bool = True,
    compute_scale=None,
    elem_bytes: int = 2,
    contention: float = 0.0,
) -> StepBreakdown:
    """``global_batch`` in sequences; gradients are synchronised once per step (DeepSpeed).
    ``validate=False`` is for the planner, whose enumeration only builds valid strategies.
    ``compute_scale`` (a ``monta.perfmodel.training.clock.Clock``): compute and optimizer times are the clock's
    (the full-size model's on the real cluster, dilated), communication is priced on ``cluster``.
    ``elem_bytes``: bytes of an activation and gradient element (2: bf16 on GPUs; 4: the CPU runs' fp32).
    ``contention`` c >= 0: compute overlapped by the MoE exchange (a schedule's hidden exchange) or by the
    gradient sync runs (1 + c) x as long for the overlapped part (``monta.perfmodel.training.contention``);
    0 prices overlap as free, so overlap gains are upper bounds."""
    c = K.check(contention)
    gpn = cluster.gpus_per_node
    num_micro = _micro_batches(m, s, cluster, seq, global_batch, validate)
    g = shapes(s, gpn)
    mb = micro_batch(m, s, cluster, seq, g, pipeline_backward, measured_tflops, compute_scale, elem_bytes, c)
    layers, fwd_c, bwd_c = mb.layers, mb.fwd_c, mb.bwd_c
    hid_f, hid_b, add_f, add_b, slow_f, slow_b = mb.overlap

    # Pipeline: 1F1B, (pp-1) bubble slots; activations T x h cross each stage boundary both ways.
    stage_link = "inter" if cluster.world_size // s.pp >= gpn else "intra"
    pp_send = (
        collectives.p2p(mb.tokens * m.hidden * elem_bytes, stage_link, cluster, gpn) if s.pp > 1 else collectives.ZERO
    )
    pp_us = (s.pp - 1) * mb.t_mb + num_micro * 2 * pp_send.time_us

    # ZeRO-3 gathers the parameters before each forward and backward, prefetched under compute.
    dense, expert = params_per_rank(m, s)
    zg = _zero3_gather(s, g, cluster, dense, expert, elem_bytes)
    z3 = num_micro * (max(0.0, zg.time_us - fwd_c) + max(0.0, zg.time_us - bwd_c)) if s.zero == 3 else 0.0

    gd, ge, t_grad, grad_us, grad_more = _grad_sync(s, g, cluster, mb, dense * elem_bytes, expert * elem_bytes, c)

    opt_us = (
        compute_scale.optimizer_us
        if compute_scale is not None
        else optimizer_us(dense, expert, s.lanes, s.expert_dp, s.zero, cluster)
    )

    total = num_micro * mb.t_mb + pp_us + z3 + grad_us + opt_us + grad_more
    micro = num_micro * (1 if s.recompute != "full" else 1.5)  # full recompute redoes forward exchanges
    inter, intra = (
        _link_bytes(link, micro, layers, num_micro, s.cp, (mb.ex, mb.ex_b), mb.tp_ar, mb.kv, (gd, ge), pp_send, zg)
        for link in ("inter", "intra")
    )
    return StepBreakdown(
        s.variant,
        total,
        num_micro * (fwd_c + bwd_c),
        num_micro * mb.recompute,
        num_micro * layers * (mb.ex_fwd + mb.ex_bwd - slow_f - slow_b),
        num_micro * layers * (slow_f + slow_b),
        num_micro * layers * 4 * mb.tp_ar.time_us,
        num_micro * layers * (mb.cp_fwd + mb.cp_bwd),
        pp_us,
        grad_us + z3,
        opt_us,
        inter,
        intra,
        mb.chunks,
        num_micro,
        num_micro * layers * (add_f + add_b) + grad_more,
        extra={
            "contention": c,
            "exchange_per_layer_us": mb.ex_fwd + mb.ex_bwd,
            "grad_sync_us": t_grad,
            "exchange_bytes": mb.S,
            "tokens_per_rank": mb.tokens,
        },
    )
