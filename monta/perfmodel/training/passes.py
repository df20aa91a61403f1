"""HBM bytes of the memory-bound passes of a published run's step (``run_step``), counted from the code that
runs them: a layer's elementwise work per token (norms, residuals, rotary, the MoE permutation, the activation,
FP8's quantisation), the passes a run leaves unfused (RoPE without its fused kernel, the experts' second bias) and
the loss over the vocabulary per logit, by implementation."""

from __future__ import annotations

from typing import Any

from monta.perfmodel.training.run_shape import RunModel

# ``s``: a ``monta.perfmodel.training.run_step.Layout``, not imported here (run_step imports this module, and the
# project's import graph has no cycle, type-only imports included: tests/test_imports.py)
Layout = Any

# The loss over the vocabulary is memory-bound: HBM bytes per logit (one token, one vocabulary entry, forward +
# backward) of Megatron-Core's fused vocab-parallel cross entropy (megatron/core/fusions/fused_cross_entropy.py on
# tensor_parallel/cross_entropy.py's VocabParallelCrossEntropy), each jit-fused function one kernel: the BF16
# logits read and an FP32 copy written (2 + 4, ``calculate_logits_max``), the max subtracted and exponentiated in
# place (4 + 4, ``calculate_predicted_logits``), divided by the sum in place into the saved softmax (4 + 4,
# ``calculate_cross_entropy_loss``); backward, the softmax read and the BF16 gradient written (4 + 2,
# ``calculate_gradients``). Each MTP layer has its own loss.
LOSS_BYTES_PER_LOGIT = 2 + 4 + 4 + 4 + 4 + 4 + 4 + 2
# Transformer Engine's cross entropy (``cross_entropy_fusion_impl = "te"``, which Megatron-Bridge's performance
# scripts set for every run: scripts/performance utils ``cross_entropy_fusion_impl = "te"`` since v0.1): its
# Triton kernels (transformer_engine/pytorch/triton/cross_entropy.py) read the BF16 logits for the online softmax
# (2), read them again and write the gradient over them (2 + 2), and the backward scales the gradient in place
# (2 + 2).
TE_LOSS_BYTES_PER_LOGIT = 2 + 2 + 2 + 2 + 2
# RoPE without fusion (Megatron-Core's ``_apply_rotary_pos_emb_bshd``, eager PyTorch; Megatron-Bridge turns
# ``apply_rope_fusion`` off for any position embedding but "rope", e.g. GPT-OSS's YaRN): per element of the
# queries and keys, forward t*cos (read, write), -x2 (half a read and write), cat(-x2, x1) (read, write), *sin
# (read, write), the sum (two reads, a write), cat((t, t_pass)) (read, write): 12 BF16 moves; backward grad*cos,
# grad*sin (2 + 2), the negation (1), the chunks' cat (2), the two gradients summed (3): 10. The fused kernel
# (Transformer Engine's) reads and writes once each way (4): 12 + 10 - 4 = 18 moves more, 2 bytes each (36 B).
UNFUSED_ROPE_BYTES = 2 * (12 + 10 - 4)
# Expert biases (GPT-OSS; ``add_bias_linear``): Megatron-Core's TEGroupedMLP adds the second GEMM's bias outside
# the kernel, per local expert in Python (``TEGroupedMLP._apply_bias``, core_v0.15-0.16: ``torch.cat([t + b * p
# for ...])``), per element of the [tokens x top-k, hidden] output: forward b*p written (1), t + b*p (two reads, a
# write), the cat (read, write): 6 BF16 moves; backward grad*p and its sum into the bias (3), grad*b and its sum
# into the probabilities (3), the split's backward cat of the input gradient (2): 8 (the router's probabilities in
# BF16, as the runs' router dtype). The first GEMM's bias is added by Transformer Engine's GEMM and the clamped
# GLU is fused (``weighted_bias_quick_geglu_impl``): no pass.
EXPERT_BIAS_BYTES = 2 * (6 + 8)


def elementwise_bytes(m: RunModel, fp8: bool, moe: bool) -> float:
    """HBM bytes one token moves per layer outside the GEMMs and attention, forward (BF16 elements): norms,
    residuals, rotary/reshape, the MoE permutation both ways, the SwiGLU activation; FP8 adds a quantisation
    pass (read 2 bytes, write 1) over every GEMM input."""
    h, k = m.hidden, (m.top_k if moe else 1)
    f = m.ffn if moe else m.dense_ffn
    sh = (m.shared * m.shared_ffn) if moe else 0
    elems = 4 * h + 6 * h + 4 * h + (2 * (h + k * h) if moe else 0) + 3 * (k * f + sh)
    out = 2.0 * elems
    if fp8:
        out += 3.0 * (h + m.heads * m.v_dim + k * h + k * f + (h + sh if sh else 0))
    return out


def mlp_elementwise_share(m: RunModel, s: Layout, moe: bool) -> float:
    """The share of a layer's elementwise time (``elementwise_bytes`` x 3 + ``unfused_bytes``) that the MLP node
    runs: the MoE permutation, the routed experts' activation, their quantisation and the experts' second bias;
    the norms, residuals, rotary and the shared experts belong to the attention node (Megatron-Core's
    ``submodule_attn_forward`` runs the shared experts after the router)."""
    h, k = m.hidden, (m.top_k if moe else 1)
    f = m.ffn if moe else m.dense_ffn
    mlp = 2.0 * ((2 * (h + k * h) if moe else 0) + 3 * k * f)
    if s.fp8:
        mlp += 3.0 * (k * h + k * f)
    mlp *= 3
    total = 3 * elementwise_bytes(m, s.fp8, moe) + unfused_bytes(m, s, moe)
    if moe and m.linear_bias:
        mlp += EXPERT_BIAS_BYTES * m.top_k * m.hidden
    return mlp / total if total else 0.0


def recompute_bytes(m: RunModel, s: Layout, moe: bool) -> float:
    """HBM bytes one token moves per layer re-running the memory-bound modules a selective recompute names
    (Megatron-Core's ``--recompute-modules``): ``layernorm`` re-runs the input and pre-MLP norms (each reads and
    writes the hidden state: 4 x hidden elements), ``moe_act`` the experts' activation (reads the gate and up
    halves, writes the product: 3 x top-k x FFN elements), BF16."""
    rc = s.recompute.lower()
    mods = rc.partition(":")[2].split(",") if rc.startswith("selective:") else []
    elems = 0.0
    if "layernorm" in mods:
        elems += 4 * m.hidden
    if "moe_act" in mods and moe:
        elems += 3 * m.top_k * m.ffn
    return 2.0 * elems


def unfused_bytes(m: RunModel, s: Layout, moe: bool) -> float:
    """HBM bytes one token moves per layer, forward + backward, in passes the run leaves unfused: RoPE without
    its fused kernel over the queries and keys (not MLA's, whose rotary part Megatron-Bridge keeps fused), the
    experts' second bias added per expert."""
    out = 0.0
    if not s.rope_fused and m.attention != "mla":
        out += UNFUSED_ROPE_BYTES * (m.heads + (m.kv_heads or m.heads)) * m.head_dim
    if moe and m.linear_bias:
        out += EXPERT_BIAS_BYTES * m.top_k * m.hidden
    return out
