"""Compute time of the MoE transformer's pieces: FLOPs / (peak x efficiency) per device preset.

A measured GEMM throughput (``gemm_tflops`` in a link profile, or ``measured_tflops`` here) replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

from monta.hardware.links import Cluster
from monta.model.config import ModelConfig

# FLOPs count a multiply-add as 2. T = tokens one rank processes (micro-batch x sequence / CP).


@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOPs of one transformer layer on one rank (already divided by TP)."""

    attn_gemm: float  # QKV and output projections
    attn_core: float  # softmax(QK^T)V, causal
    gate: float
    experts: float  # routed SwiGLU, capacity-factor padded
    expert_act: float  # the part of ``experts`` before the down projection (recomputed by 'selective')

    @property
    def total(self) -> float:
        return self.attn_gemm + self.attn_core + self.gate + self.experts


def layer_flops(m: ModelConfig, tokens: int, seq: int, tp: int) -> LayerFlops:
    h = m.hidden
    attn_gemm = 2 * tokens * h * (h + 2 * m.kv_dim) + 2 * tokens * h * h
    # Causal attention is 2 * seq^2 * h per sequence and layer (QK^T and AV, halved by the mask);
    # a CP rank with tokens = mb * seq / cp owns mb/cp of it (load-balanced zigzag split assumed).
    attn_core = 2.0 * seq * h * tokens
    routed = m.capacity_factor * m.top_k * tokens  # expert slots a rank computes (E/EP experts x EP*C)
    experts = 2 * 3 * h * m.ffn * routed
    gate = 2 * tokens * h * m.num_experts
    return LayerFlops(attn_gemm / tp, attn_core / tp, gate, experts / tp, experts * 2 / 3 / tp)


def head_flops(m: ModelConfig, tokens: int, tp: int) -> float:
    return 2 * tokens * m.hidden * m.vocab / tp


def gemm_us(flops: float, cluster: Cluster, measured_tflops: float | None = None) -> float:
    tflops = measured_tflops or cluster.peak_tflops * cluster.gemm_eff
    return flops / (tflops * 1e6)  # TFLOP/s = 1e6 FLOP/us


def attn_us(flops: float, cluster: Cluster, measured_tflops: float | None = None) -> float:
    tflops = measured_tflops or cluster.peak_tflops * cluster.attn_eff
    return flops / (tflops * 1e6)


# The compute pieces of one layer (and the head) that a step prices; the emulated clock
# (monta.perfmodel.training.clock) dilates exactly these, so the emulated step and the model agree by construction.
COMPUTE_PIECES = ("attention", "attention_core", "gate", "experts", "head")


def forward_pieces_us(
    m: ModelConfig, tokens: int, seq: int, tp: int, cluster: Cluster, measured_tflops: float | None = None
) -> dict[str, float]:
    """Forward time (us) of each compute piece on one rank: per layer, and the head once per step.
    The backward of each piece costs twice its forward (dX and dW)."""
    fl = layer_flops(m, tokens, seq, tp)
    return {
        "attention": gemm_us(fl.attn_gemm, cluster, measured_tflops),
        "attention_core": attn_us(fl.attn_core, cluster, measured_tflops),
        "gate": gemm_us(fl.gate, cluster, measured_tflops),
        "experts": gemm_us(fl.experts, cluster, measured_tflops),
        "head": gemm_us(head_flops(m, tokens, tp), cluster, measured_tflops),
    }


def piece_flops(m: ModelConfig, tokens: int, seq: int, tp: int) -> dict[str, float]:
    """Forward FLOPs of the same pieces on one rank (the head as the model prices it: split over TP)."""
    fl = layer_flops(m, tokens, seq, tp)
    return {
        "attention": fl.attn_gemm,
        "attention_core": fl.attn_core,
        "gate": fl.gate,
        "experts": fl.experts,
        "head": head_flops(m, tokens, tp),
    }


def optimizer_us(
    dense_params: float, expert_params: float, lanes: int, expert_dp: int, zero: int, cluster: Cluster
) -> float:
    """Adam's step on one rank: read and write its (ZeRO-sharded) state from HBM once."""
    sharded = (dense_params / lanes + expert_params / expert_dp) if zero >= 1 else (dense_params + expert_params)
    return sharded * (4 + 4 + 4 + 2 + 2) * 2 / (cluster.hbm_GBps * 1e3)
