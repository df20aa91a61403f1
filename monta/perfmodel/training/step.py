"""Training-step time of the MoE transformer for every variant of ``monta.variants`` (its exchange,
the exchange time its schedule hides, whether its gradient sync yields to AllToAll) at the level of
layers, links and pipeline stages."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from monta import variants as registry
from monta.chunking import Auto, parse_chunks
from monta.model.config import ModelConfig
from monta.perfmodel.network import collectives as C
from monta.perfmodel.network.collectives import GroupShape
from monta.perfmodel.network.exchange import best_chunks, exchange_shapes, modelled_as, takes_chunks
from monta.perfmodel.network.links import Cluster
from monta.perfmodel.network.routed import ROUTED
from monta.perfmodel.training import contention as K
from monta.perfmodel.training.compute import forward_pieces_us, gemm_us, layer_flops, optimizer_us
from monta.perfmodel.training.memory import params_per_rank
from monta.perfmodel.training.strategy import Strategy
from monta.variants import LINA_CHUNK_BYTES, PARTITIONS  # a priority sync's micro-op size; Lancet's partitions

PLAN_CHUNKS = (1, 2, 4, 8, 16)  # 'auto' at step level: powers of two keep the planner fast

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
    return {
        "tp": GroupShape.strided(tp, 1, gpn),
        "cp": GroupShape.strided(cp, tp, gpn),
        "ep": GroupShape.strided(ep, tp, gpn),
        "dp": GroupShape.strided(lanes, tp, gpn),
        "edp": GroupShape.strided(lanes // ep, tp * ep, gpn),
    }


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
    if validate:
        s.validate(cluster.world_size, gpn, m, seq)
    if global_batch % (s.dp * s.micro_batch):
        raise ValueError(f"global batch {global_batch} is not a multiple of dp*micro_batch = {s.dp * s.micro_batch}")
    num_micro = global_batch // (s.dp * s.micro_batch)
    g = shapes(s, gpn)
    tokens = s.micro_batch * seq // s.cp
    layers = math.ceil(m.num_layers / s.pp)
    fl = layer_flops(m, tokens, seq, s.tp)
    pieces = forward_pieces_us(m, tokens, seq, s.tp, cluster, measured_tflops)
    if compute_scale is not None:  # the emulated clock: the full-size model's pieces, dilated
        pieces = compute_scale.pieces_us
    attn_f = pieces["attention"] + pieces["attention_core"]
    moe_f = pieces["gate"] + pieces["experts"]
    head_f = pieces["head"]
    fwd_c = layers * (attn_f + moe_f) + head_f
    bwd_c = 2 * fwd_c

    # Tensor parallelism without sequence parallelism: AllReduce after attention and after the
    # experts, in the forward and the backward.
    tp_ar = C.allreduce(tokens * m.hidden * elem_bytes, g["tp"], cluster)
    # Context parallelism: ring attention passes this rank's K and V around the CP ring (cp-1 hops),
    # overlapped with the attention core; the backward also returns dK, dV.
    kv = C.p2p(tokens * 2 * m.kv_dim * elem_bytes, g["cp"].link, cluster, gpn) if s.cp > 1 else C.ZERO
    attn_core = pieces["attention_core"]
    cp_fwd = max(0.0, (s.cp - 1) * kv.time_us - attn_core)
    cp_bwd = max(0.0, 2 * (s.cp - 1) * kv.time_us - 2 * attn_core)

    # MoE token exchange: [E, C, M] per rank, 4 exchanges per layer (dispatch/combine x fwd/bwd).
    var = registry.get(s.variant)
    xv = modelled_as(var.exchange)  # a plugin's exchange: the core one it declared (ValueError if none)
    S = m.capacity_factor * m.top_k * tokens * m.hidden * elem_bytes
    chunks = 1
    if takes_chunks(xv):
        if var.chunks is not None:
            chunks = var.chunks
        else:
            asked = parse_chunks(s.chunks)
            # Auto at step level searches PLAN_CHUNKS only: powers of two keep the planner fast.
            if isinstance(asked, Auto):
                chunks = best_chunks(S, g["ep"], g["tp"], cluster, candidates=PLAN_CHUNKS)
            else:
                chunks = asked.n
    if s.ep > 1:
        # The routed exchanges' own models read the routing (top-k, experts, a token row's bytes).
        routing = (m.top_k, m.num_experts, m.hidden * elem_bytes) if xv in ROUTED else ()
        ex = exchange_shapes(xv, S, g["ep"], g["tp"], cluster, chunks, *routing)
        ex_b = (
            ex
            if (pipeline_backward or not takes_chunks(xv))
            else exchange_shapes("deepspeed", S, g["ep"], g["tp"], cluster, 1)
        )
    else:
        # EP1: every rank holds (its TP slice of) every expert; tokens never leave the rank.
        ex = ex_b = exchange_shapes("legacy", 0.0, g["ep"], g["tp"], cluster, 1)
    ex_fwd, ex_bwd = 2 * ex.total_us, 2 * ex_b.total_us
    hid_f = hid_b = 0.0
    # Contention, per layer: compute the overlap adds, and the exchange hidden with the compute slowed.
    add_f = add_b = 0.0
    slow_f = slow_b = 0.0
    if var.schedule.hidden_us is not None:
        # The schedule's own overlap model (Lina, Lancet: baselines/variants.py), on this variant's exchange.
        inputs = registry.OverlapInputs(
            ex_fwd_us=ex_fwd,
            ex_bwd_us=ex_bwd,
            attn_fwd_us=attn_f,
            moe_fwd_us=moe_f,
            top_k=m.top_k,
            micro_batch=s.micro_batch,
            partitions=PARTITIONS,
        )
        hid_f, hid_b = K.clamp_hidden(var.schedule.hidden_us(inputs), (ex_fwd, ex_bwd))
        slow_f, slow_b = hid_f, hid_b
        if c:
            (add_f, add_b), (slow_f, slow_b) = K.schedule_overlap(var.schedule.hidden_us, inputs, (hid_f, hid_b), c)
    # What contention adds to a layer's forward and backward (>= 0: the compute added less the exchange
    # it newly hides); the uncontended times below stay as they were, these are added on top.
    more_f = layers * (add_f - (slow_f - hid_f))
    more_b = layers * (add_b - (slow_b - hid_b))

    recompute = recompute_c = 0.0  # recomputation's time, and its compute
    if s.recompute == "full":
        recompute_c = fwd_c - head_f
        recompute = recompute_c + layers * (ex_fwd - hid_f + 2 * tp_ar.time_us + cp_fwd)
    elif s.recompute == "selective":
        recompute = recompute_c = layers * gemm_us(fl.expert_act, cluster, measured_tflops)

    t_fwd = fwd_c + layers * (ex_fwd - hid_f + 2 * tp_ar.time_us + cp_fwd)
    t_bwd = bwd_c + layers * (ex_bwd - hid_b + 2 * tp_ar.time_us + cp_bwd) + recompute
    t_bwd_free = t_bwd  # without contention: the priority sync's share of it stays a property of the sync
    # Contention (0.0 at c = 0: the sums are unchanged); full recomputation redoes the forward's overlap.
    more_rc = more_f if s.recompute == "full" else 0.0
    recompute += more_rc
    t_fwd += more_f
    t_bwd += more_b + more_rc
    t_mb = t_fwd + t_bwd

    # Pipeline: 1F1B, (pp-1) bubble slots; activations T x h cross each stage boundary both ways.
    stage_link = "inter" if cluster.world_size // s.pp >= gpn else "intra"
    pp_send = C.p2p(tokens * m.hidden * elem_bytes, stage_link, cluster, gpn) if s.pp > 1 else C.ZERO
    pp_us = (s.pp - 1) * t_mb + num_micro * 2 * pp_send.time_us

    # ZeRO-3 gathers the parameters before each forward and backward, prefetched under compute.
    dense, expert = params_per_rank(m, s)
    z3 = 0.0
    zg = C.ZERO
    if s.zero == 3:
        zg = C.allgather(dense * elem_bytes / s.lanes, g["dp"], cluster) + C.allgather(
            expert * elem_bytes / s.expert_dp, g["edp"], cluster
        )
        z3 = num_micro * (max(0.0, zg.time_us - fwd_c) + max(0.0, zg.time_us - bwd_c))

    # Gradient sync (AllReduce, or ReduceScatter + parameter AllGather: the same bytes), once per step,
    # overlapped with the last micro-batch's backward where it competes with the AllToAll for links.
    gd = C.allreduce(dense * elem_bytes, g["dp"], cluster)
    ge = C.allreduce(expert * elem_bytes, g["edp"], cluster)
    t_grad = gd.time_us + ge.time_us
    a2a_busy = layers * (ex_bwd - hid_b)  # the AllToAll's time on the link: compute speed does not change it
    shares_link = any(x.link == g["ep"].link for x in (g["dp"], g["edp"]) if x.size > 1) and s.ep > 1
    # Contention: the sync slows the last backward's compute it overlaps (what the exchange already
    # stretched excepted); a longer backward then hides more of the sync.
    grad_more = 0.0
    if c:
        stretched = layers * (hid_b + (hid_f if s.recompute == "full" else 0.0))
        grad_more = K.grad_sync_stretch(t_grad, bwd_c + recompute_c - stretched, c)
    t_last = t_bwd + grad_more
    if var.sync.priority:
        # AllToAll first: gradients use only the link's idle time, and a micro-op in flight blocks a
        # newly arriving AllToAll for half a chunk on average.
        idle = t_last - (a2a_busy if shares_link else 0.0)
        chunk = C.allreduce(min(LINA_CHUNK_BYTES, dense * elem_bytes), g["dp"], cluster).time_us
        busy = min(1.0, t_grad / max(t_bwd_free, 1e-9))
        grad_us = max(0.0, t_grad - idle) + (layers * 2 * 0.5 * chunk * busy if shares_link else 0.0)
    else:
        # Fair sharing: while both are on the link, the AllToAll gets half of it.
        delay = 0.5 * min(t_grad, a2a_busy) if shares_link else 0.0
        grad_us = max(0.0, t_grad - t_last) + delay

    opt_us = (
        compute_scale.optimizer_us
        if compute_scale is not None
        else optimizer_us(dense, expert, s.lanes, s.expert_dp, s.zero, cluster)
    )

    total = num_micro * t_mb + pp_us + z3 + grad_us + opt_us + grad_more
    micro = num_micro * (1 if s.recompute != "full" else 1.5)  # full recompute redoes forward exchanges
    per_layer_x = 2 * (ex.inter_bytes + ex_b.inter_bytes), 2 * (ex.intra_bytes + ex_b.intra_bytes)
    inter = (
        micro * layers * (per_layer_x[0] + 4 * tp_ar.inter_bytes + 3 * (s.cp - 1) * kv.inter_bytes)
        + gd.inter_bytes
        + ge.inter_bytes
        + num_micro * 2 * (pp_send.inter_bytes + zg.inter_bytes)
    )
    intra = (
        micro * layers * (per_layer_x[1] + 4 * tp_ar.intra_bytes + 3 * (s.cp - 1) * kv.intra_bytes)
        + gd.intra_bytes
        + ge.intra_bytes
        + num_micro * 2 * (pp_send.intra_bytes + zg.intra_bytes)
    )
    return StepBreakdown(
        s.variant,
        total,
        num_micro * (fwd_c + bwd_c),
        num_micro * recompute,
        num_micro * layers * (ex_fwd + ex_bwd - slow_f - slow_b),
        num_micro * layers * (slow_f + slow_b),
        num_micro * layers * 4 * tp_ar.time_us,
        num_micro * layers * (cp_fwd + cp_bwd),
        pp_us,
        grad_us + z3,
        opt_us,
        inter,
        intra,
        chunks,
        num_micro,
        num_micro * layers * (add_f + add_b) + grad_more,
        extra={
            "contention": c,
            "exchange_per_layer_us": ex_fwd + ex_bwd,
            "grad_sync_us": t_grad,
            "exchange_bytes": S,
            "tokens_per_rank": tokens,
        },
    )
