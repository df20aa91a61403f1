"""One micro-batch of the training step on one pipeline stage, priced by the performance model: its
compute (or the emulated clock's), recomputation, tensor and context parallelism, and the MoE token
exchange of its variant (``monta.variants``: the exchange's price, the part its schedule hides behind
compute, contention). ``monta.perfmodel.training.step`` adds the pipeline, ZeRO-3, the gradient sync and
the optimizer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from monta import variants as registry
from monta.chunking import Auto, parse_chunks
from monta.hardware.links import Cluster
from monta.model.config import ModelConfig
from monta.perfmodel.network import collectives
from monta.perfmodel.network.exchange import best_chunks, exchange_shapes, modelled_as, takes_chunks
from monta.perfmodel.network.routed import reference_exchanges
from monta.perfmodel.training import contention as K
from monta.perfmodel.training.compute import forward_pieces_us, gemm_us, layer_flops
from monta.perfmodel.training.strategy import Strategy
from monta.variants import PARTITIONS  # Lancet's partitions

PLAN_CHUNKS = (1, 2, 4, 8, 16)  # 'auto' at step level: powers of two keep the planner fast


def _exchanges(
    m: ModelConfig, s: Strategy, var, g, cluster: Cluster, S: float, elem_bytes: int, pipeline_backward: bool
):
    """The MoE token exchange of ``S`` bytes per rank ([E, C, M]), priced for the forward and the backward
    (a chunked exchange's backward is the unchunked one's unless the backward is pipelined too), and
    its chunk count."""
    xv = modelled_as(var.exchange)  # a plugin's exchange: the core one it declared (ValueError if none)
    chunks = 1
    if takes_chunks(xv):
        if var.chunks is not None:
            chunks = var.chunks
        else:
            asked = parse_chunks(s.chunks)
            # Auto at step level searches PLAN_CHUNKS only: powers of two keep the planner fast.
            if isinstance(asked, Auto):
                chunks = best_chunks(S, g["ep"], g["tp"], cluster, candidates=PLAN_CHUNKS, exchange=xv)
            else:
                chunks = asked.n
    if s.ep == 1:
        # EP1: every rank holds (its TP slice of) every expert; tokens never leave the rank.
        ex = exchange_shapes("legacy", 0.0, g["ep"], g["tp"], cluster, 1)
        return ex, ex, chunks
    # The routing (top-k, experts, a token row's bytes) reaches the entries that read it (the token-level ones).
    ex = exchange_shapes(xv, S, g["ep"], g["tp"], cluster, chunks, m.top_k, m.num_experts, m.hidden * elem_bytes)
    if pipeline_backward or not takes_chunks(xv):
        return ex, ex, chunks
    # The unchunked backward of a chunked exchange: the reference exchange's (the registry's flag: deepspeed).
    return ex, exchange_shapes(reference_exchanges()[0], S, g["ep"], g["tp"], cluster, 1), chunks


def _schedule_overlap(
    var, ex_fwd: float, ex_bwd: float, attn_f: float, moe_f: float, m: ModelConfig, s: Strategy, c: float
):
    """Per layer: the exchange a schedule hides behind compute (forward, backward), what contention adds
    to the overlapped compute, and the exchange hidden with the compute slowed (zeros: none hidden)."""
    hid_f = hid_b = 0.0
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
    return hid_f, hid_b, add_f, add_b, slow_f, slow_b


def _tp_cp(m: ModelConfig, s: Strategy, g, cluster: Cluster, tokens: int, elem_bytes: int, attn_core: float):
    """Per layer: the TP AllReduce, the CP ring's K/V hop, and the CP time not hidden under the attention
    core (forward, backward)."""
    # Tensor parallelism without sequence parallelism: AllReduce after attention and after the
    # experts, in the forward and the backward.
    tp_ar = collectives.allreduce(tokens * m.hidden * elem_bytes, g["tp"], cluster)
    # Context parallelism: ring attention passes this rank's K and V around the CP ring (cp-1 hops),
    # overlapped with the attention core; the backward also returns dK, dV.
    kv = (
        collectives.p2p(tokens * 2 * m.kv_dim * elem_bytes, g["cp"].link, cluster, cluster.gpus_per_node)
        if s.cp > 1
        else collectives.ZERO
    )
    cp_fwd = max(0.0, (s.cp - 1) * kv.time_us - attn_core)
    cp_bwd = max(0.0, 2 * (s.cp - 1) * kv.time_us - 2 * attn_core)
    return tp_ar, kv, cp_fwd, cp_bwd


def _recompute(s: Strategy, fl, cluster: Cluster, measured_tflops, layers_fwd_c: float, layers: int, fwd_comm: float):
    """Recomputation's time per micro-batch and its compute: full redoes the layers' forward
    (``layers_fwd_c`` of compute, ``fwd_comm`` of communication per layer), selective the expert
    activations' GEMM."""
    if s.recompute == "full":
        return layers_fwd_c + layers * fwd_comm, layers_fwd_c
    if s.recompute == "selective":
        r = layers * gemm_us(fl.expert_act, cluster, measured_tflops)
        return r, r
    return 0.0, 0.0


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch on one pipeline stage (microseconds): compute, recomputation, the exchange (per
    layer, priced forward and backward, and what the schedule hides of it), TP and CP, and the times."""

    var: Any
    tokens: int
    layers: int
    fwd_c: float
    bwd_c: float
    recompute: float
    recompute_c: float
    tp_ar: Any
    kv: Any
    cp_fwd: float
    cp_bwd: float
    S: float
    ex: Any
    ex_b: Any
    chunks: int
    ex_fwd: float
    ex_bwd: float
    overlap: tuple[float, float, float, float, float, float]  # hid_f, hid_b, add_f, add_b, slow_f, slow_b
    t_bwd: float
    t_bwd_free: float
    t_mb: float


def micro_batch(
    m: ModelConfig,
    s: Strategy,
    cluster: Cluster,
    seq: int,
    g,
    pipeline_backward: bool,
    measured_tflops,
    compute_scale,
    elem_bytes: int,
    c: float,
) -> MicroBatch:
    """The forward and backward of one micro-batch (``predict_step``'s arguments)."""
    tokens = s.micro_batch * seq // s.cp
    layers = math.ceil(m.num_layers / s.pp)
    fl = layer_flops(m, tokens, seq, s.tp)
    # the emulated clock: the full-size model's pieces, dilated
    pieces = (
        compute_scale.pieces_us
        if compute_scale is not None
        else forward_pieces_us(m, tokens, seq, s.tp, cluster, measured_tflops)
    )
    attn_f = pieces["attention"] + pieces["attention_core"]
    moe_f = pieces["gate"] + pieces["experts"]
    head_f = pieces["head"]
    fwd_c = layers * (attn_f + moe_f) + head_f
    bwd_c = 2 * fwd_c

    tp_ar, kv, cp_fwd, cp_bwd = _tp_cp(m, s, g, cluster, tokens, elem_bytes, pieces["attention_core"])

    # MoE token exchange: [E, C, M] per rank, 4 exchanges per layer (dispatch/combine x fwd/bwd).
    var = registry.get(s.variant)
    S = m.capacity_factor * m.top_k * tokens * m.hidden * elem_bytes
    ex, ex_b, chunks = _exchanges(m, s, var, g, cluster, S, elem_bytes, pipeline_backward)
    ex_fwd, ex_bwd = 2 * ex.total_us, 2 * ex_b.total_us
    overlap = _schedule_overlap(var, ex_fwd, ex_bwd, attn_f, moe_f, m, s, c)
    hid_f, hid_b, add_f, add_b, slow_f, slow_b = overlap
    # What contention adds to a layer's forward and backward (>= 0: the compute added less the exchange
    # it newly hides); the uncontended times below stay as they were, these are added on top.
    more_f = layers * (add_f - (slow_f - hid_f))
    more_b = layers * (add_b - (slow_b - hid_b))

    recompute, recompute_c = _recompute(
        s, fl, cluster, measured_tflops, fwd_c - head_f, layers, ex_fwd - hid_f + 2 * tp_ar.time_us + cp_fwd
    )
    t_fwd = fwd_c + layers * (ex_fwd - hid_f + 2 * tp_ar.time_us + cp_fwd)
    t_bwd = bwd_c + layers * (ex_bwd - hid_b + 2 * tp_ar.time_us + cp_bwd) + recompute
    t_bwd_free = t_bwd  # without contention: the priority sync's share of it stays a property of the sync
    # Contention (0.0 at c = 0: the sums are unchanged); full recomputation redoes the forward's overlap.
    more_rc = more_f if s.recompute == "full" else 0.0
    recompute += more_rc
    t_fwd += more_f
    t_bwd += more_b + more_rc
    return MicroBatch(
        var,
        tokens,
        layers,
        fwd_c,
        bwd_c,
        recompute,
        recompute_c,
        tp_ar,
        kv,
        cp_fwd,
        cp_bwd,
        S,
        ex,
        ex_b,
        chunks,
        ex_fwd,
        ex_bwd,
        overlap,
        t_bwd,
        t_bwd_free,
        t_fwd + t_bwd,
    )
