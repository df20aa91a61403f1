"""The host's (CPU's) time per layer and micro-batch of a published run, by the parts of the layer a CUDA-graph
scope covers (``run_step``'s floor: the GPU waits when its own work per layer is shorter).

Dropless MoE copies the tokens per expert to the host in every MoE layer's forward (Megatron-Core's
``MoEAlltoAllTokenDispatcher`` syncs at ``cuda_sync_point``; the flex dispatcher's DeepEP/HybridEP kernels hand the
counts back the same way), so the host cannot run ahead of the GPU across layers: the floor is per layer. Each op
the host issues costs :data:`HOST_US_PER_OP`; the backward issues twice the forward's. A CUDA graph replays its
part of the layer with one launch (forward and backward), whatever the part holds.

Ops per part, forward (Megatron-Core core_v0.16.0 with Transformer Engine):
- router (:data:`OPS_ROUTER`): 31 kernels with ``--moe-router-fusion`` (72 without), NVIDIA's Nsys count
  (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, section 2.1.4);
- the AlltoAll dispatcher's preprocess (:data:`OPS_PREPROCESS`), counted from
  ``MoEAlltoAllTokenDispatcher.preprocess``: the routing map's sum and cast (2), the input splits' reshape-sum (1),
  the all-gather of the counts (1), the local experts' slice made contiguous (1), three sums (3), then at the D2H
  point five non-blocking copies to the host (tokens per expert, input, output and TP splits, the per-rank counts)
  and the event that syncs them (1): 14;
- the flex dispatcher's (DeepEP, HybridEP) router and preprocess together: 17 kernels (the same guide, section 2.2:
  DeepEP's fused preprocessing "reduc[es] the number of kernels in the router and preprocess parts to 17"), taken
  as 15 router and 2 preprocess (its fused kernel and the count's copy);
- dispatch and combine (:data:`OPS_DISPATCH_COMBINE`), counted from ``token_dispatch``/``token_combine``: the
  permutation (fused: 2 with its probabilities), the AlltoAll and its output buffer (2), the local experts' sort
  (1), and the same back (sort, AlltoAll + buffer, unpermute: 4), the shape restores (3): 12;
- the experts (:data:`OPS_EXPERT` per local expert: the grouped GEMM's per-expert cuBLAS launches of fc1 and fc2
  and the split between them; twice with FP8 for the per-expert quantisation);
- attention with its norms and residuals (:data:`OPS_ATTENTION`): not counted op by op; the rest of the 130 ops
  the step model has priced per MoE layer since the host floor was added (130 - 31 - 14 - 12 = 73);
- a dense layer's MLP (:data:`OPS_DENSE_MLP`): one expert's ops with the pre-MLP norm and the residual (3 + 2).

Scopes (Megatron-Core ``--cuda-graph-scope``, the values Megatron-Bridge's perf configs set as
``cuda_graph_scope``): ``attn``, ``moe_router``, ``moe_preprocess`` (graphed with the router), ``moe`` (the whole
MoE layer: only with token dropping and padding), ``mlp`` (a dense layer's MLP); ``full`` graphs whole layers
(``full_iteration`` the whole step): no floor. ``partial`` (a source that says "partial CUDA graphs" without the
scope) is the scope NVIDIA's guide ends with and Megatron-Core's MoE README recommends against CPU overhead:
``attn moe_router moe_preprocess``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monta.perfmodel.training.run_shape import RunModel

# ``s``: a ``monta.perfmodel.training.run_step.Layout``, not imported here (run_step imports this module, and the
# project's import graph has no cycle, type-only imports included: tests/test_imports.py)
Layout = Any

# Host time per op: "a few microseconds" of host time even for an op without a kernel (the guide above), ~10 us
# for an op through Transformer Engine's Python layer; 5-25 us of CPU work per eager PyTorch op before its
# kernel runs (https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html), which brackets
# it and does not pin it. Model assumption, chosen with the Qwen3-30B rows' micro-batch contrast in view (MBS 1
# vs 8 on Blackwell): those rows say so in steps.csv's ``seen_by`` and are scored apart.
HOST_US_PER_OP = 10.0
OPS_ATTENTION = 73
OPS_ROUTER = 31
OPS_PREPROCESS = 14
OPS_FLEX_ROUTER = 15
OPS_FLEX_PREPROCESS = 2
OPS_DISPATCH_COMBINE = 12
OPS_EXPERT = 3
OPS_DENSE_MLP = OPS_EXPERT + 2
SCOPES = ("attn", "moe_router", "moe_preprocess", "moe", "mlp")
WHOLE = ("full", "full_iteration", "layer")
PARTIAL = ("attn", "moe_router", "moe_preprocess")
NONE = ("", "no", "none")


def graph_scopes(cuda_graphs: str) -> frozenset[str] | None:
    """The parts a row's ``cuda_graphs`` graphs (None: whole layers); a ValueError names an unknown scope."""
    text = cuda_graphs.strip().lower()
    if text in NONE:
        return frozenset()
    if text in WHOLE:
        return None
    if text == "partial":
        return frozenset(PARTIAL)
    names = [n for n in re.split(r"[\s,;+]+", text) if n]
    bad = [n for n in names if n not in SCOPES]
    if bad:
        raise ValueError(
            f"cuda_graphs {cuda_graphs!r}: unknown scope {bad[0]!r}; give no/partial/full or scopes from "
            f"{', '.join(SCOPES)} (space-separated)"
        )
    return frozenset(names)


def node_ops(m: RunModel, s: Layout, moe: bool = True) -> dict[str, float]:
    """Ops the host issues per layer and micro-batch, forward, by the node of the layer that issues them
    (``attn``: attention, norms, router and the dispatcher's preprocess; ``dispatch``, ``mlp``: the experts or a
    dense layer's MLP; ``combine``), less what the row's CUDA-graph scope replays with one launch."""
    scopes = graph_scopes(s.cuda_graphs)
    if scopes is None:
        return {"attn": 0.0, "dispatch": 0.0, "mlp": 0.0, "combine": 0.0}

    def part(ops: float, scope: str) -> float:
        return 1.0 if scope in scopes else ops

    attn = part(OPS_ATTENTION, "attn")
    if not moe:
        return {"attn": attn, "dispatch": 0.0, "mlp": part(OPS_DENSE_MLP, "mlp"), "combine": 0.0}
    if "moe" in scopes:
        return {"attn": attn, "dispatch": 0.0, "mlp": 1.0, "combine": 0.0}
    flex = s.dispatcher in ("deepep", "hybridep")
    router = OPS_FLEX_ROUTER if flex else OPS_ROUTER
    prep = OPS_FLEX_PREPROCESS if flex else OPS_PREPROCESS
    if "moe_preprocess" in scopes:  # graphed with the router (Megatron-Core asserts moe_router with it)
        routing = 1.0
    else:
        routing = part(router, "moe_router") + prep
    local = max(1, m.experts // s.ep)
    half = OPS_DISPATCH_COMBINE / 2
    return {
        "attn": attn + routing,
        "dispatch": half,
        "mlp": local * OPS_EXPERT * (2 if s.fp8 else 1),
        "combine": half,
    }


def host_ops(m: RunModel, s: Layout, moe: bool = True) -> float:
    """Ops the host issues per layer and micro-batch, forward (:func:`node_ops` together)."""
    return sum(node_ops(m, s, moe).values())


def host_floor_us(m: RunModel, s: Layout, moe: bool = True) -> float:
    """The host's time per layer and micro-batch, forward + backward (the backward issues twice the forward's
    ops)."""
    return 3 * host_ops(m, s, moe) * HOST_US_PER_OP
