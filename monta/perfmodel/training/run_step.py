"""One training step of a published MoE run (Megatron-style layout: TP, EP folded over TP x CP x DP, PP with
VPP, CP, DP with a distributed optimizer) on one GPU, priced from the model's shape, the layout and a
cluster file. The terms are those of ``monta.perfmodel.training.step`` on a Megatron layout: GEMMs at the
cluster's peak x efficiency (FP8 at twice the BF16 peak), the causal attention core at its own efficiency,
memory-bound elementwise work at HBM rate (FP8's quantisation passes included), recomputation, a per-layer
host (kernel-launch) floor by the parts of the layer a CUDA-graph scope leaves to the host (``host_floor``), the
MoE token exchange priced by the exchange model (``exchange_shapes``: a flat AllToAll, or the node-deduplicating
exchange for DeepEP/HybridEP; DeepEP at its measured rates on an NVLink domain wider than 8 GPUs; a
``monta.variants`` exchange on DeepSpeed's layout for the paper's setup), with A2A overlap paired with another
micro-batch's work as Megatron-Core's merged 1F1B schedules it (``a2a_overlap``: two streams, the host in the
loop, the SMs the exchange holds), tensor- and context-parallel communication, the 1F1B / interleaved pipeline
bubble and stage-to-stage sends, the gradient sync the backward does not hide, and the optimizer.
Real routing is priced by the skew model: the most-loaded EP rank's load over the mean
(``monta.perfmodel.network.skew.SkewFactors``) stretches its expert compute and its exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from monta.hardware.links import Cluster
from monta.parallel import axis_shapes
from monta.perfmodel.network import collectives
from monta.perfmodel.network.exchange import exchange_shapes
from monta.perfmodel.network.routed import reference_exchanges
from monta.perfmodel.training.a2a_overlap import LayerParts, overlapped_layer_us, serial_us, unpaired_share
from monta.perfmodel.training.compute import optimizer_us
from monta.perfmodel.training.gemm_eff import depth_eff, ffn_slowdown, k_half, proj_slowdown
from monta.perfmodel.training.host_floor import HOST_US_PER_OP, graph_scopes, host_floor_us, node_ops
from monta.perfmodel.training.passes import (
    LOSS_BYTES_PER_LOGIT,
    TE_LOSS_BYTES_PER_LOGIT,
    elementwise_bytes,
    mlp_elementwise_share,
    recompute_bytes,
    unfused_bytes,
)
from monta.perfmodel.training.run_shape import RunModel

# Hopper and Blackwell tensor cores run dense FP8 at twice their dense BF16 rate (H100 SXM 1,979 vs 989;
# B200 4,500 vs 2,250: NVIDIA's data sheets, clusters/*.yaml sources).
FP8_OVER_BF16 = 2.0
# FP8 GEMMs against BF16 ones at the same depth: Megatron's MXFP8 grouped GEMM runs 2,672 TFLOP/s on a GB200
# (K=7168, N=2048; docs/discussions/deepseek-v3-gb200-optimization in NVIDIA/Megatron-LM) = 53% of the 5,000
# FP8 peak that page counts; the depth law (``gemm_eff``) puts that GEMM at depth_eff(7168) of its asymptote,
# so FP8's asymptote is 0.53 / depth_eff = 0.59 of the FP8 peak (0.98 x the 60% the cluster files assume for
# BF16's). A fraction of the FP8 peak, measured as such: a measured BF16 table (``--compute-table``) leaves it.
FP8_GEMM_EFF = 0.53 / depth_eff(7168, k_half(5000.0, 7700.0, fp8=True))
# The host (kernel-launch) floor per layer and micro-batch, by the parts a row's CUDA-graph scope covers:
# ``monta.perfmodel.training.host_floor`` (its op counts and their sources).
# The MaxVio (max expert load / mean - 1) of real, dropless routing where a row states none: a log-normal
# per-expert load (the skew model's ``lognormal`` workload, DeepEP#393's fit of DeepSeek-V3's counts).
REAL_ROUTING_MAXVIO = 0.5
# DeepEP's kernels on an NVLink domain wider than 8 GPUs (GB200 NVL72, EP32; a community PR, not DeepEP's own
# target): ~400 GB/s dispatch and ~190 GB/s combine algorithm bandwidth with 24 SMs, against NVLink5's 900 GB/s
# per direction (NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, section 2.2.1).
DEEPEP_WIDE_NVLINK_GBPS = (400.0, 190.0)
# With A2A overlap the exchange kernels hold SMs while another micro-batch computes: DeepEP's and HybridEP's
# normal kernels take 20-24 SMs (DeepEP README; the guide runs DeepEP with 24), an H100's 132: the overlapped
# compute runs on the rest, (1 + c) x as long with c = 24 / (132 - 24) (the step model's contention factor,
# monta.perfmodel.training.contention).
OVERLAP_CONTENTION = 24 / (132 - 24)


@dataclass(frozen=True)
class Layout:
    gpus: int
    tp: int = 1
    ep: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    micro_batch: int = 1
    seq: int = 4096
    global_batch_tokens: int = 0
    precision: str = "bf16"
    routing: str = "forced"
    recompute: str = ""
    dispatcher: str = ""
    a2a_overlap: bool = False
    cuda_graphs: str = ""
    # A monta.variants exchange on DeepSpeed's layout (expert TP = TP: every TP rank holds the micro-batch's
    # tokens, the [E, C, M] buffer crosses EP groups strided by TP): the paper's setup. Empty: Megatron's EP
    # (ETP 1, tokens sharded over TP by sequence parallelism) with ``dispatcher``.
    variant: str = ""
    # Megatron-Core's ``--pipeline-model-parallel-layout`` where the run states one (``pp_layout``); empty: the
    # default split (decoder layers evenly, the MTP layers and the head on the last stage).
    pp_layout: str = ""
    # The loss's implementation (``cross_entropy``: "te" for Transformer Engine's; else Megatron-Core's default,
    # its own fused "native" one) and whether RoPE runs fused (``rope_fusion``: "no" where the run's code turns
    # it off).
    cross_entropy: str = ""
    rope_fused: bool = True

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def num_micro(self) -> int:
        return max(1, self.global_batch_tokens // (self.seq * self.micro_batch * self.dp))

    @property
    def fp8(self) -> bool:
        return "fp8" in self.precision

    def check(self) -> str | None:
        """Why this layout cannot be priced, or None."""
        if self.tp * self.pp * self.cp * self.dp != self.gpus:
            return f"tp*pp*cp = {self.tp * self.pp * self.cp} does not divide the {self.gpus} GPUs"
        if (self.tp * self.cp * self.dp) % self.ep:
            return f"ep={self.ep} does not divide tp*cp*dp = {self.tp * self.cp * self.dp} (EP folds over them)"
        try:
            graph_scopes(self.cuda_graphs)
        except ValueError as e:
            return str(e)
        if self.global_batch_tokens < self.seq * self.micro_batch * self.dp:
            return "the global batch is smaller than one micro-batch per data-parallel rank"
        if self.pp_layout:
            from monta.perfmodel.training.pp_layout import parse

            try:
                stages = len(parse(self.pp_layout))
            except ValueError as e:
                return str(e)
            if stages != self.pp * self.vpp:
                return f"pp_layout {self.pp_layout!r} has {stages} stages, not pp x vpp = {self.pp * self.vpp}"
        return None


@lru_cache(maxsize=256)
def rank_load(ep: int, nodes: int, experts: int, k: int, maxvio: float) -> float:
    """The most-loaded EP rank's routed tokens over the mean under a log-normal routing of ``maxvio``."""
    from monta.perfmodel.network.skew import SkewFactors
    from monta.routing.workloads import make_routing

    tokens = max(64, 4 * experts // k)
    return SkewFactors.of(make_routing(f"lognormal:maxvio={maxvio}", ep, tokens, experts, k, nodes)).rank


def _variant_exchange_us(m: RunModel, s: Layout, cluster: Cluster, tokens: float) -> float:
    """One MoE layer's exchange, forward and backward, of a ``monta.variants`` exchange on DeepSpeed's layout
    (the step model's ``micro_batch``: the [E, C, M] buffer at capacity factor 1, chunks the model's choice)."""
    from monta.perfmodel.network.exchange import best_chunks, takes_chunks
    from monta.perfmodel.training.micro_batch import PLAN_CHUNKS

    gpn = cluster.gpus_per_node
    shapes = axis_shapes(gpn, tp=s.tp, ep=s.ep)
    ep, tp = shapes["ep"], shapes["tp"]
    S = tokens * m.top_k * m.hidden * 2
    chunks = (
        best_chunks(S, ep, tp, cluster, candidates=PLAN_CHUNKS, exchange=s.variant) if takes_chunks(s.variant) else 1
    )
    ex = exchange_shapes(s.variant, S, ep, tp, cluster, chunks, m.top_k, m.experts, m.hidden * 2)
    return 4 * ex.total_us  # dispatch + combine, forward and backward


def _published_exchange(dispatcher: str | None) -> str | None:
    """The registered exchange that stands for a published run's dispatcher (``Exchange.stands_for``), or None
    (the run's AllToAll is priced as stock deepspeed's)."""
    from monta import variants as registry

    return next((name for name, e in registry.exchanges().items() if dispatcher and dispatcher in e.stands_for), None)


def _exchange_us(m: RunModel, s: Layout, cluster: Cluster, tokens: float) -> tuple[float, float]:
    """One MoE layer's token exchange of one micro-batch, one way: (dispatch, combine); the backward repeats it:
    ``tokens`` per rank, each sent to top-k experts; DeepEP/HybridEP send a token once per node (the registered
    exchange that stands for their dispatcher, ``_published_exchange``) and dispatch in FP8 with an FP8 recipe."""
    if s.ep == 1:
        return 0.0, 0.0
    gpn = cluster.gpus_per_node
    shapes = axis_shapes(gpn, ep=s.ep)  # the published runs' EP over consecutive ranks, no TP
    ep, tp1 = shapes["ep"], shapes["tp"]
    routed = _published_exchange(s.dispatcher)
    dedup = routed is not None
    disp_bytes = 1 if (dedup and s.fp8) else 2
    wide = s.dispatcher == "deepep" and ep.nodes == 1 and s.ep > 8  # DeepEP past its 8-GPU NVLink design
    parts = []
    for elem, cap in zip((disp_bytes, 2), DEEPEP_WIDE_NVLINK_GBPS):  # dispatch, then combine in BF16
        S = tokens * m.top_k * m.hidden * elem
        if dedup:
            ex = exchange_shapes(routed, S, ep, tp1, cluster, 1, m.top_k, m.experts, m.hidden * elem)
        else:
            ex = exchange_shapes(reference_exchanges()[0], S, ep, tp1, cluster, 1)  # stock deepspeed's
        parts.append(max(ex.total_us, S / (cap * 1e3)) if wide else ex.total_us)
    return parts[0], parts[1]


def _recompute_frac(s: Layout, m: RunModel, pieces: dict[str, float], moe: bool) -> float:
    """Forward GEMM FLOPs per token a layer recomputes (selective modules) -- full recompute: all of it."""
    rc = s.recompute.lower()
    if rc.startswith("full"):
        return sum(pieces.values())
    mods = rc.partition(":")[2].split(",") if ":" in rc else []
    out = 0.0
    if "mlp" in mods and not moe:
        out += pieces["dense"]
    if any(x in mods for x in ("up_proj", "mla_up_proj")):
        out += 2.0 * m.mla_up_params()
    return out


def _layer_us(
    m: RunModel, s: Layout, cluster: Cluster, tokens: float, moe: bool, skew: float
) -> tuple[dict[str, float], float]:
    """One layer, one micro-batch, forward + backward, on one GPU: its compute terms (us), and the part of them
    the MLP node runs (the routed experts' or the dense FFN's GEMMs and elementwise work: A2A
    overlap pairs it apart from the attention node, which runs the shared experts)."""
    p = m.layer_flops(s.seq, moe)
    gemm_rate = cluster.peak_tflops * (FP8_OVER_BF16 * FP8_GEMM_EFF if s.fp8 else cluster.gemm_eff) * 1e6
    attn_rate = cluster.peak_tflops * cluster.attn_eff * 1e6
    per_gpu = tokens / s.tp
    # each GEMM at the efficiency its depth allows (gemm_eff); an expert's weight gradient sees the tokens
    # routed to it from the whole EP group, a TP-split FFN's down projection a 1/tp-deep reduction
    kh = k_half(cluster.peak_tflops * (FP8_OVER_BF16 if s.fp8 else 1.0), cluster.hbm_GBps, s.fp8)
    per_expert = max(1.0, s.ep * per_gpu * m.top_k / m.experts)
    # the MLP node of Megatron-Core's merged 1F1B: the routed experts (a dense layer's FFN); the shared experts
    # run in the attention node, after the router (fine_grained_callables.submodule_attn_forward)
    mlp_gemm = p["experts"] * skew * ffn_slowdown(m.hidden, m.ffn, per_expert, kh) + p["dense"] * ffn_slowdown(
        m.hidden, m.dense_ffn // s.tp, tokens, kh
    )
    shared = p["shared"] * ffn_slowdown(m.hidden, m.shared_ffn // s.tp, tokens, kh)
    gemm = p["attn_proj"] * proj_slowdown(m.hidden, tokens, kh) + mlp_gemm + shared + p["router"]
    t_gemm = 3 * gemm * per_gpu / gemm_rate
    t_attn = 3 * p["attn_core"] * per_gpu / attn_rate
    t_mem = (3 * elementwise_bytes(m, s.fp8, moe) + unfused_bytes(m, s, moe)) * per_gpu / (cluster.hbm_GBps * 1e3)
    t_rc = _recompute_frac(s, m, p, moe) * proj_slowdown(m.hidden, tokens, kh) * per_gpu / gemm_rate
    t_rc += recompute_bytes(m, s, moe) * per_gpu / (cluster.hbm_GBps * 1e3)
    if s.recompute.lower().startswith("full"):
        t_rc += p["attn_core"] * per_gpu / attn_rate + t_mem / 3
    t_mlp = 3 * mlp_gemm * per_gpu / gemm_rate + t_mem * mlp_elementwise_share(m, s, moe)
    return {"gemm": t_gemm, "attention": t_attn, "elementwise": t_mem, "recompute": t_rc}, t_mlp


def _grad_sync_us(m: RunModel, s: Layout, cluster: Cluster, window_us: float) -> tuple[float, float, float]:
    """(exposed gradient reduce-scatter + parameter all-gather, their full time, optimizer): the distributed
    optimizer's syncs of BF16 gradients, overlapped with the last micro-batch's backward and the first's
    forward (``window_us``)."""
    gpn = cluster.gpus_per_node
    dense, expert = m.params()
    dense_slice, expert_slice = dense / (s.tp * s.pp), expert / (s.ep * s.pp)
    lanes = s.dp * s.cp
    edp = max(1, lanes * s.tp // s.ep)
    # dense: DP lanes strided by TP; experts folded (Megatron-Core: expert TP 1, EP over the TP x DP ranks)
    g_dense = axis_shapes(gpn, tp=s.tp, lanes=lanes)["dp"] if lanes > 1 else None
    g_exp = axis_shapes(gpn, ep=s.ep, lanes=lanes * s.tp)["edp"] if edp > 1 else None
    t = 0.0
    for g, n in ((g_dense, dense_slice), (g_exp, expert_slice)):
        if g is not None:
            t += (
                collectives.reducescatter(n * 2, g, cluster).time_us
                + collectives.allgather(n * 2 / g.size, g, cluster).time_us
            )
    opt = optimizer_us(dense_slice, expert_slice, lanes, edp, 1, cluster)
    return max(0.0, t - window_us), t, opt


def slowest_stage(
    m: RunModel, pp: int, pp_layout: str = "", times: tuple[float, float, float] = (1.0, 1.0, 1.0)
) -> tuple[float, float, float]:
    """(MoE layers, dense layers, share of the output layer) of one micro-batch's pass on the pipeline stage
    that paces the step. Megatron-Core splits the decoder layers evenly over the stages (the dense ones first)
    and, unless a layout says otherwise, puts the MTP layers ("by default, all MTP layers sit on the last
    pipeline stage": Megatron-Core's Multi-Token Prediction guide) and the output layer with its loss on the
    last stage (``--account-for-loss-in-pipeline-split`` and ``--pipeline-model-parallel-layout`` exist to
    rebalance it: Megatron-LM's arguments, Megatron-Bridge's "asymmetric PP: loss"). In 1F1B every micro-batch
    passes every stage, so the slowest stage sets the pace: the last one, with its even share of the decoder
    plus the MTP layers and the whole head. With a stated layout (``pp_layout``, :mod:`pp_layout`) the stage
    whose layers take longest at ``times`` (a MoE layer's, a dense layer's, the head's) paces it. With one
    stage this is the whole model."""
    if pp == 1:
        return float(m.moe_layers + m.mtp), float(m.dense_layers), 1.0
    if pp_layout:
        from monta.perfmodel.training.pp_layout import stage_loads

        loads = stage_loads(pp_layout, pp, m.layers, m.dense_layers, m.mtp)
        return max(loads, key=lambda ld: sum(n * t for n, t in zip(ld, times)))
    per = m.layers / pp
    moe = min(float(m.moe_layers), per)
    return moe + m.mtp, per - moe, 1.0


def exposed_sends(s: Layout) -> float:
    """Stage-to-stage sends one rank's step waits for (forward activations and backward gradients). Without
    interleaving every send of 1F1B is on the critical path (2 per micro-batch); with VPP > 1 Megatron overlaps
    the steady state's sends with the other model chunks' compute (``--overlap-p2p-communication``, on by
    default; Megatron-Bridge turns it on for VPP > 1) but not the warm-up's and the flush's
    (``--overlap-p2p-communication-warmup-flush``, off by default): the first stage's warm-up is
    2 (pp - 1) + (vpp - 1) pp micro-steps (Megatron-Core's interleaved schedule), its flush as many."""
    total = 2.0 * s.num_micro * s.vpp
    if s.vpp == 1:
        return total
    warmup = 2 * (s.pp - 1) + (s.vpp - 1) * s.pp
    return min(total, 2.0 * warmup)


def _moe_layer_us(
    m: RunModel, s: Layout, c_moe: float, moe_mlp: float, one_way: tuple[float, float]
) -> tuple[float, float, float]:
    """One MoE layer of one micro-batch, forward + backward: (its time, the exchange exposed, the host's wait),
    from its compute ``c_moe`` (``moe_mlp`` of it the MLP node's), the exchange one way (dispatch, combine) and
    the host's ops by node; with A2A overlap as Megatron-Core's merged 1F1B schedules it (``a2a_overlap``)."""
    a2a = 2 * sum(one_way)
    attn, mlp = c_moe - moe_mlp, moe_mlp  # the attention node's and the MLP node's work, forward 1 : backward 2
    ops = node_ops(m, s)
    host_us = tuple(ops[k] * HOST_US_PER_OP for k in ("attn", "dispatch", "mlp", "combine"))
    flex = not s.variant and _published_exchange(s.dispatcher) is not None
    parts = LayerParts(attn / 3, 2 * attn / 3, mlp / 3, 2 * mlp / 3, *one_way, host_us, HOST_US_PER_OP, flex)

    def layer(p: LayerParts) -> float:
        if s.a2a_overlap and a2a > 0:
            return overlapped_layer_us(p, unpaired_share(s.num_micro, s.pp, s.vpp), OVERLAP_CONTENTION)
        return serial_us(p)

    t, no_host = layer(parts), layer(parts.without_host())
    return t, min(a2a, max(0.0, no_host - c_moe)), max(0.0, t - no_host)


def price_run(m: RunModel, s: Layout, cluster: Cluster, maxvio: float | None = None) -> dict[str, float]:
    """The step's terms (us) and ``total_us`` on the slowest rank; ``maxvio`` for real routing (None: the
    default :data:`REAL_ROUTING_MAXVIO`)."""
    tokens = s.micro_batch * s.seq / s.cp  # one micro-batch's tokens on one TP group
    skew = 1.0
    if s.routing == "real" and s.ep > 1:
        nodes = max(1, s.ep // cluster.gpus_per_node)
        skew = rank_load(s.ep, nodes, m.experts, m.top_k, REAL_ROUTING_MAXVIO if maxvio is None else maxvio)
    moe_l, moe_mlp = _layer_us(m, s, cluster, tokens, True, skew)
    dense_l, _ = _layer_us(m, s, cluster, tokens, False, 1.0)
    head_kh = k_half(cluster.peak_tflops, cluster.hbm_GBps, fp8=False)  # the head runs in BF16
    head_us = (
        3 * 2.0 * m.hidden * m.vocab * (1 + m.mtp) * tokens / s.tp / (cluster.peak_tflops * cluster.gemm_eff * 1e6)
    ) * proj_slowdown(m.hidden, tokens, head_kh)
    loss_bytes = TE_LOSS_BYTES_PER_LOGIT if s.cross_entropy == "te" else LOSS_BYTES_PER_LOGIT
    loss_us = loss_bytes * m.vocab * (1 + m.mtp) * tokens / s.tp / (cluster.hbm_GBps * 1e3)
    head_us += loss_us
    host_dense = host_floor_us(m, s, moe=False)
    if s.variant:
        a2a = _variant_exchange_us(m, s, cluster, tokens) * skew if s.ep > 1 else 0.0
        one_way = (a2a / 4, a2a / 4)
    else:
        one_way = tuple(x * skew for x in _exchange_us(m, s, cluster, tokens / s.tp))
        a2a = 2 * sum(one_way)
    ag = collectives.allgather(tokens / s.tp * m.hidden * 2, axis_shapes(cluster.gpus_per_node, tp=s.tp)["tp"], cluster)
    tp_us = 4 * 2 * ag.time_us if s.tp > 1 else 0.0  # SP: AllGather + ReduceScatter around attention, fwd + bwd
    kv = tokens * m.kv_bytes_per_token * 2
    # every rank of a node passes its K/V (and activations between stages) at once: gpn concurrent sends
    gpn = cluster.gpus_per_node
    cp_link = "intra" if s.tp * s.cp <= gpn else "inter"
    kv_us = collectives.p2p(kv, cp_link, cluster, gpn).time_us
    cp_us = max(0.0, 3 * (s.cp - 1) * kv_us - moe_l["attention"]) if s.cp > 1 else 0.0

    c_moe = sum(moe_l.values())
    t_moe_core, a2a_exposed, host_wait = _moe_layer_us(m, s, c_moe, moe_mlp, one_way)
    t_moe = t_moe_core + tp_us + cp_us
    c_dense = sum(dense_l.values())
    t_dense = max(c_dense, host_dense) + tp_us + cp_us
    per_stage, dense_per_stage, head_share = slowest_stage(m, s.pp, s.pp_layout, (t_moe, t_dense, head_us))
    t_mb = per_stage * t_moe + dense_per_stage * t_dense + head_us * head_share
    even_mb = ((m.moe_layers + m.mtp) * t_moe + m.dense_layers * t_dense + head_us) / s.pp
    bubble = (s.pp - 1) / s.vpp * t_mb if s.pp > 1 else 0.0
    stage_link = "inter" if s.gpus // s.pp >= cluster.gpus_per_node else "intra"
    p2p = collectives.p2p(tokens / s.tp * m.hidden * 2, stage_link, cluster, gpn).time_us if s.pp > 1 else 0.0
    pp_us = bubble + exposed_sends(s) * p2p if s.pp > 1 else 0.0
    grad_exposed, grad_us, opt = _grad_sync_us(m, s, cluster, t_mb)
    total = s.num_micro * t_mb + pp_us + grad_exposed + opt
    compute = s.num_micro * (per_stage * c_moe + dense_per_stage * c_dense + head_us * head_share)
    return {
        "total_us": total,
        "compute_us": compute,
        "host_floor_us": s.num_micro * (per_stage * host_wait + dense_per_stage * max(0.0, host_dense - c_dense)),
        "exchange_us": s.num_micro * per_stage * a2a,
        "exchange_exposed_us": s.num_micro * per_stage * a2a_exposed,
        "tp_us": s.num_micro * (per_stage + dense_per_stage) * tp_us,
        "cp_us": s.num_micro * (per_stage + dense_per_stage) * cp_us,
        "pp_us": pp_us,
        # what the last stage's extra load (MTP, the head) adds over an even split, bubble included
        "last_stage_us": (t_mb - even_mb) * (s.num_micro + bubble / t_mb if t_mb else 0.0),
        "grad_exposed_us": grad_exposed,
        "grad_sync_us": grad_us,
        "optimizer_us": opt,
        "loss_us": s.num_micro * loss_us,
        "routing_skew": skew,
        "num_micro": float(s.num_micro),
        # for a calibration: layer passes per step on one stage, and what the bubble multiplies them by
        "layer_passes": s.num_micro * (per_stage + dense_per_stage),
        "bubble_factor": 1.0 + ((s.pp - 1) / s.vpp / s.num_micro if s.pp > 1 else 0.0),
    }
