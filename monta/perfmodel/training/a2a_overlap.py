"""EP A2A overlap as Megatron-Core runs it (``--overlap-moe-expert-parallel-comm --delay-wgrad-compute``): one
micro-batch's forward of a layer merged with the previous micro-batch's backward of the same layer, on two
streams.

What pairs up (``TransformerLayerSchedulePlan.run``, megatron/core/models/common/model_chunk_schedule_plan.py at
core_v0.16.0), in issue order:

    comm stream: combine_bwd | dispatch_fwd -> dispatch_bwd          | combine_fwd
    comp stream: attn_fwd    | mlp_bwd -> mlp_bwd_dw -> mlp_fwd      | attn_bwd

with the data dependencies of one micro-batch: dispatch_fwd waits for attn_fwd, mlp_fwd for dispatch_fwd,
combine_fwd for mlp_fwd; mlp_bwd for combine_bwd, dispatch_bwd for mlp_bwd (its input gradient), attn_bwd for
dispatch_bwd. :func:`pair_us` list-schedules the two streams: an exchange is hidden only as far as the other
micro-batch's work in the same slot lasts, and what the chain of dependencies serialises stays exposed.

What stays unpaired (megatron/core/pipeline_parallel/schedules.py at core_v0.16.0): without a pipeline the
combined schedule runs the first micro-batch's forward and the last one's backward alone; with an interleaved
pipeline the warm-up's forwards and the cool-down's backwards are unpaired, the last stage's warm-up being
``(vpp - 1) x pp`` micro-steps plus the one extra forward the overlap schedules "to ensure the forward and backward
computations are independent". :func:`unpaired_share` gives that share of a stage's micro-steps.

The host issues both micro-batches' ops in that order, and the forward's dispatch waits on the host for the
tokens per expert (dropless MoE's device-to-host copy): the backward's work issued after it can no longer run
ahead, and every schedule node adds its own host work (NVIDIA's GB200 guide: the overlap "divides the forward and
backward into multiple stages for scheduling, and there is some synchronization between different stages, which
aggravates the CPU overhead"). The exchange kernels hold SMs while the other stream computes:
compute that runs beside an exchange is stretched by ``contention`` of the time they overlap."""

from __future__ import annotations

from dataclasses import dataclass, replace

# Host ops each schedule node adds per pass, counted from ``ScheduleNode._forward``/``_backward``
# (megatron/core/pipeline_parallel/utils.py, core_v0.16.0): the event wait and record of
# ``stream_acquire_context`` (2), the input's detach for the node's own autograd graph (1; the backward: the
# separate ``run_backward`` call), the record_stream of its input or gradient (1), the freed storage's resize (1),
# the stream switch (1).
OPS_PER_NODE = 6


@dataclass(frozen=True)
class LayerParts:
    """One layer's work for one micro-batch (us): the attention node (attention, norms, router, the dispatcher's
    preprocess) and the MLP node (the experts and shared experts), forward and backward, the token exchange one
    way (dispatch, combine), and the host's time to issue each node's forward (us; its backward: twice)."""

    attn_fwd: float
    attn_bwd: float
    mlp_fwd: float
    mlp_bwd: float
    dispatch: float
    combine: float
    host: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # attn, dispatch, mlp, combine; forward
    host_per_op: float = 0.0
    # where the host waits for the tokens per expert: before the dispatch (Megatron-Core's AlltoAll dispatcher
    # needs the splits for its AlltoAll) or after it (the flex dispatcher's DeepEP/HybridEP kernels return the
    # counts; the experts' grouped GEMM needs them on the host: Transformer Engine's ``m_splits`` is a list)
    counts_after_dispatch: bool = False

    def without_host(self) -> LayerParts:
        return replace(self, host=(0.0, 0.0, 0.0, 0.0), host_per_op=0.0)


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total time the intervals of ``a`` and of ``b`` run together."""
    return sum(max(0.0, min(a1, b1) - max(a0, b0)) for a0, a1 in a for b0, b1 in b)


def pair_us(p: LayerParts, contention: float) -> float:
    """One layer's merged forward (micro-batch i + 1) and backward (micro-batch i): the host issues the nodes in
    ``run``'s order (each node's ops at ``host_per_op``, plus :data:`OPS_PER_NODE`), and waits before the
    forward's dispatch until the GPU has run the forward's attention node (dropless MoE's D2H copy of the tokens
    per expert, ``before_ep_alltoall``); each node runs on its stream once issued, its stream free and its
    inputs ready, and ends no sooner than its last op is issued."""
    ha, hd, hm, hc = p.host
    node = OPS_PER_NODE * p.host_per_op
    dgrad = wgrad = p.mlp_bwd / 2  # --delay-wgrad-compute: the weight gradient is its own node
    # name: (stream, GPU time, host time, inputs, host waits for this node's GPU end before issuing it)
    plan = [
        ("comb_b", "comm", p.combine, 2 * hc + node, (), None),
        ("attn_f", "comp", p.attn_fwd, ha + node, (), None),
        ("mlp_b", "comp", dgrad, hm + node, ("comb_b",), None),
        ("disp_f", "comm", p.dispatch, hd + node, ("attn_f",), None if p.counts_after_dispatch else "attn_f"),
        ("mlp_dw", "comp", wgrad, hm + node, ("mlp_b",), None),
        ("disp_b", "comm", p.dispatch, 2 * hd + node, ("mlp_b",), None),
        ("mlp_f", "comp", p.mlp_fwd, hm + node, ("disp_f",), "disp_f" if p.counts_after_dispatch else None),
        ("comb_f", "comm", p.combine, hc + node, ("mlp_f",), None),
        ("attn_b", "comp", p.attn_bwd, 2 * ha + node, ("disp_b",), None),
    ]
    host = 0.0
    free = {"comp": 0.0, "comm": 0.0}
    span: dict[str, tuple[float, float]] = {}
    for name, stream, gpu, issue, deps, sync in plan:
        if sync:
            host = max(host, span[sync][1])
        first = host + (p.host_per_op if issue else 0.0)
        host += issue
        start = max([free[stream], first] + [span[d][1] for d in deps])
        span[name] = (start, max(start + gpu, host))
        free[stream] = span[name][1]
    comp = [span[n] for n, st, *_ in plan if st == "comp"]
    comm = [span[n] for n, st, *_ in plan if st == "comm"]
    end = max(max(e for _, e in comp), max(e for _, e in comm), host)
    return end + contention * _overlap(comp, comm)


def serial_us(p: LayerParts) -> float:
    """One layer's forward and backward of one micro-batch without overlap: its compute no shorter than the
    host's time to issue it (the per-layer floor: the forward's wait for the tokens per expert stops the host
    running ahead across layers), then the exchange exposed."""
    gpu = p.attn_fwd + p.attn_bwd + p.mlp_fwd + p.mlp_bwd
    return max(gpu, 3 * sum(p.host)) + 2 * (p.dispatch + p.combine)


def unpaired_share(num_micro: int, pp: int, vpp: int) -> float:
    """The share of a stage's micro-steps whose forward or backward runs alone (the first and last without a
    pipeline; the last stage's warm-up and cool-down with one)."""
    total = max(1, num_micro * vpp)
    warmup = 1 + ((vpp - 1) * pp if pp > 1 else 0)
    return min(1.0, warmup / total)


def overlapped_layer_us(p: LayerParts, share: float, contention: float) -> float:
    """A layer's time per micro-batch with A2A overlap: ``share`` of its passes alone (:func:`serial_us`), the
    rest merged pairs (:func:`pair_us`)."""
    return share * serial_us(p) + (1 - share) * pair_us(p, contention)
