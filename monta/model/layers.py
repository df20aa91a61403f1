"""Building blocks of the decoder: RMSNorm, RoPE, grouped-query attention and the SwiGLU expert,
with Megatron-style tensor parallelism (column- then row-parallel) inside a node.

Notation (as in monta.comm): B micro-batch, S sequence, M model (hidden) dim, N heads on this TP rank
(``hq``/``hkv``: its query/KV heads), D head dim.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from monta.mesh import MeshAxis
from monta.model.tp import ColumnParallelLinear, RowParallelLinear, copy_to_tp


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


def rope_tables(seq: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [S, D/2]; computed in fp64 then cast so every rank gets identical bits."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    return ang.cos().float().to(device), ang.sin().float().to(device)


def apply_rope(x_BSND: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x_BSND[..., 0::2], x_BSND[..., 1::2]
    c, s = cos[None, :, None, :].to(x_BSND.dtype), sin[None, :, None, :].to(x_BSND.dtype)
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


def _core_flops(q_BNSD: torch.Tensor) -> float:
    """Causal attention's FLOPs as the performance model counts them: 2 x S^2 x (heads x D) a sequence."""
    B, N, S, D = q_BNSD.shape
    return 2.0 * S * S * N * D * B


class _ClockedCore(torch.autograd.Function):
    """Causal SDPA whose forward and backward each run on the emulated clock (``observers``: the model's
    ``monta.moe.Observers``, which carry it; the same math and grads: the backward differentiates the
    forward's own graph)."""

    @staticmethod
    def forward(ctx, q, k, v, observers):
        t0 = time.perf_counter()
        with torch.enable_grad():
            ins = [t.detach().requires_grad_(t.requires_grad) for t in (q, k, v)]
            o = F.scaled_dot_product_attention(*ins, is_causal=True)
        ctx.graph, ctx.watch = (ins, o), observers  # ("observers" is the layer's constructed name)
        observers.charge("attention_core", t0, _core_flops(q))
        return o.detach()

    @staticmethod
    def backward(ctx, grad):
        t0 = time.perf_counter()
        ins, o = ctx.graph
        need = [t for t in ins if t.requires_grad]
        got = iter(torch.autograd.grad(o, need, grad))
        grads = tuple(next(got) if t.requires_grad else None for t in ins)
        del ctx.graph
        ctx.watch.charge("attention_core", t0, _core_flops(ins[0]), factor=2.0)
        return (*grads, None)


def attention_core(q_BNSD: torch.Tensor, k_BNSD: torch.Tensor, v_BNSD: torch.Tensor, observers=None) -> torch.Tensor:
    """softmax(QK^T / sqrt(D)) V, causal; on the emulated clock when ``observers`` (the model's
    ``monta.moe.Observers``) carry one that prices it."""
    if observers is None or not observers.priced("attention_core"):
        return F.scaled_dot_product_attention(q_BNSD, k_BNSD, v_BNSD, is_causal=True)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q_BNSD, k_BNSD, v_BNSD)):
        return _ClockedCore.apply(q_BNSD, k_BNSD, v_BNSD, observers)
    t0 = time.perf_counter()
    o = F.scaled_dot_product_attention(q_BNSD, k_BNSD, v_BNSD, is_causal=True)
    observers.charge("attention_core", t0, _core_flops(q_BNSD))
    return o


class Attention(nn.Module):
    """Causal grouped-query attention; heads split over TP (q/k/v column-, o row-parallel). ``observers``:
    the model's ``monta.moe.Observers``, whose clock prices the attention core (None: not priced)."""

    def __init__(
        self, hidden: int, num_heads: int, num_kv_heads: int, tp: MeshAxis, rope: bool, theta: float, observers=None
    ):
        super().__init__()
        self.observers = observers
        self.head_dim = hidden // num_heads
        self.hq, self.hkv = num_heads // tp.size, num_kv_heads // tp.size
        self.rope, self.theta = rope, theta
        self.wq = ColumnParallelLinear(hidden, num_heads * self.head_dim, tp)
        self.wk = ColumnParallelLinear(hidden, num_kv_heads * self.head_dim, tp)
        self.wv = ColumnParallelLinear(hidden, num_kv_heads * self.head_dim, tp)
        self.wo = RowParallelLinear(num_heads * self.head_dim, hidden, tp)

    def forward(self, x_BSM: torch.Tensor) -> torch.Tensor:
        B, S, _ = x_BSM.shape
        x_BSM = copy_to_tp(x_BSM, self.wq.tp)
        q = self.wq(x_BSM, copied=True).view(B, S, self.hq, self.head_dim)
        k = self.wk(x_BSM, copied=True).view(B, S, self.hkv, self.head_dim)
        v = self.wv(x_BSM, copied=True).view(B, S, self.hkv, self.head_dim)
        if self.rope:
            cos, sin = rope_tables(S, self.head_dim, self.theta, x_BSM.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.hq // self.hkv
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        o = attention_core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.observers)
        return self.wo(o.transpose(1, 2).reshape(B, S, self.hq * self.head_dim))


class SwiGLUExpert(nn.Module):
    """One expert: w2(silu(w1 x) * w3 x), ffn split over TP (w1/w3 column-, w2 row-parallel)."""

    def __init__(self, hidden: int, ffn: int, tp: MeshAxis):
        super().__init__()
        self.w1 = ColumnParallelLinear(hidden, ffn, tp)
        self.w3 = ColumnParallelLinear(hidden, ffn, tp)
        self.w2 = RowParallelLinear(ffn, hidden, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_tp(x, self.w1.tp)
        return self.w2(F.silu(self.w1(x, copied=True)) * self.w3(x, copied=True))
