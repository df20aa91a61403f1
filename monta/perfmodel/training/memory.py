"""Memory per rank of the MoE transformer: weights, gradients, Adam states (by ZeRO stage),
activations (by sequence length, micro-batch, recomputation and pipeline depth), logits."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from monta.model.config import ModelConfig
from monta.perfmodel.training.strategy import Strategy

GB = 1e9
# Mixed precision: bf16 weights and gradients (2 B each), fp32 master weights + Adam m and v (12 B).
W_BYTES, G_BYTES, OPT_BYTES = 2, 2, 12
RESERVE_GB = 3.0  # CUDA context, NCCL buffers, allocator fragmentation


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the most loaded rank (the first pipeline stage, with the head counted as well)."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    logits: float
    reserve: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.logits + self.reserve

    def fits(self, mem_GB: float) -> bool:
        return self.total <= mem_GB * GB

    def to_dict(self) -> dict[str, float]:
        d = {k: getattr(self, k) / GB for k in ("weights", "grads", "optimizer", "activations", "logits", "reserve")}
        d["total"] = self.total / GB
        return {f"{k}_GB": round(v, 3) for k, v in d.items()}


def params_per_rank(m: ModelConfig, s: Strategy) -> tuple[float, float]:
    """(dense, expert) parameters held by one rank before ZeRO sharding."""
    return _params(m, s.tp, s.ep, s.pp)


@lru_cache(maxsize=4096)  # the planner asks for the same (tp, ep, pp) many times
def _params(m: ModelConfig, tp: int, ep: int, pp: int) -> tuple[float, float]:
    layers = math.ceil(m.num_layers / pp)
    emb = m.embedding_params if pp == 1 else m.vocab * m.hidden  # first stage: embedding only
    dense = (layers * m.dense_params_per_layer + emb) / tp
    expert = layers * m.expert_params_per_layer / (ep * tp)
    return dense, expert


def _states(params: float, shards: int, zero: int) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes for ``params`` sharded ``shards`` ways at ZeRO ``zero``."""
    w, g, o = params * W_BYTES, params * G_BYTES, params * OPT_BYTES
    if zero >= 1:
        o /= shards
    if zero >= 2:
        g /= shards
    if zero >= 3:
        w /= shards
    return w, g, o


@lru_cache(maxsize=1024)
def activation_bytes_per_token(m: ModelConfig, tp: int, recompute: str) -> float:
    """Bytes one layer keeps per token for the backward pass (flash attention: no seq^2 term)."""
    h, f = m.hidden, m.ffn
    if recompute == "full":
        return 2 * h  # the layer input only
    # Replicated on the TP group: norm inputs and outputs (4 x 2h). Split by TP: QKV, the attention
    # output and its fp32 log-sum-exp.
    attn = 8 * h + (2 * (h + 2 * m.kv_dim) + 2 * h + 4 * m.num_heads) / tp
    slots = m.capacity_factor * m.top_k  # expert slots per token (the [E, C, M] buffer, padded)
    # Per slot: expert input and output (2h each, identical on the TP group); SwiGLU gate, up and
    # product (2F each, split by TP) unless 'selective' recomputes them from the input.
    inner = 0.0 if recompute == "selective" else 6 * f / tp
    moe = 4 * m.num_experts + slots * (4 * h + inner)
    return attn + moe


def memory_per_rank(
    m: ModelConfig, s: Strategy, seq: int, num_micro: int = 1, reserve_GB: float = RESERVE_GB
) -> MemoryBreakdown:
    dense, expert = params_per_rank(m, s)
    dw, dg, do = _states(dense, s.lanes, s.zero)
    ew, eg, eo = _states(expert, s.expert_dp, s.zero)
    tokens = s.micro_batch * seq // s.cp
    layers = math.ceil(m.num_layers / s.pp)
    in_flight = min(s.pp, max(1, num_micro))  # 1F1B: stage 0 holds pp micro-batches
    acts = in_flight * layers * tokens * activation_bytes_per_token(m, s.tp, s.recompute)
    if s.recompute != "none":  # the layer being recomputed holds its full activations once
        acts += tokens * activation_bytes_per_token(m, s.tp, "none")
    logits = 2 * tokens * m.vocab * 4 / s.tp  # fp32 logits and their gradient (last stage)
    return MemoryBreakdown(dw + ew, dg + eg, do + eo, acts, logits, reserve_GB * GB)
