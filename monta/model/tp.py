"""Megatron-style tensor parallelism: the copy/reduce region pair and column/row-parallel linears.

The TP group is the mesh's ``tp`` axis (``monta.mesh.MeshAxis``), which deep-copies to itself, because
DeepSpeed's ``Experts`` deep-copies the expert module and a process-group handle cannot be copied.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from monta.mesh import MeshAxis


def _all_reduce(x: torch.Tensor, tp: MeshAxis) -> torch.Tensor:
    if tp.size == 1:
        return x
    x = x.contiguous()
    dist.all_reduce(x, group=tp.group)
    return x


class _CopyToTP(torch.autograd.Function):
    """Identity forward, all-reduce backward (Megatron's copy_to_tensor_model_parallel_region)."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad.clone(), ctx.tp), None


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce forward, identity backward (Megatron's reduce_from_tensor_model_parallel_region)."""

    @staticmethod
    def forward(ctx, x, tp):
        return _all_reduce(x.clone(), tp)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x: torch.Tensor, tp: MeshAxis) -> torch.Tensor:
    return _CopyToTP.apply(x, tp) if tp.size > 1 else x


def reduce_from_tp(x: torch.Tensor, tp: MeshAxis) -> torch.Tensor:
    return _ReduceFromTP.apply(x, tp) if tp.size > 1 else x


def accumulate_grad(param: nn.Parameter, g: torch.Tensor) -> None:
    """Add one use's dW; when the last use of this forward is in, the gradient is final."""
    if param.grad is None:
        param.grad = g
    else:
        param.grad.add_(g)
    param._pending_dw = getattr(param, "_pending_dw", 1) - 1
    if param._pending_dw <= 0:
        from monta.comm.priority import GradReadiness

        GradReadiness.notify(param)


def _charge(weight: torch.Tensor, x: torch.Tensor, t0: float) -> None:
    """One GEMM of x [.., in] by weight [out, in] (forward, dX or dW: the same FLOPs) on the emulated
    clock, as the piece its weight belongs to (``weight.clock_piece``, a ``monta.model.clock.ClockPiece``
    naming the model's clock; none: not priced)."""
    piece = getattr(weight, "clock_piece", None)
    if piece is not None:
        piece.charge(t0, 2.0 * (x.numel() // x.shape[-1]) * weight.numel())


class _Linear(torch.autograd.Function):
    """y = x W^T whose backward splits dX (now) from dW (now, or deferred: the weight's ``clock_piece`` names
    the model's observers, which hand it to a schedule that defers dW, Lancet's; an untagged weight's dW
    is computed at once).

    dW is written straight into ``weight.grad`` (the engine reads ``.grad``), so deferring it
    changes when it is computed, never what is computed.
    """

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        t0 = time.perf_counter()
        y = F.linear(x, weight)
        _charge(weight, x, t0)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        t0 = time.perf_counter()
        dx = grad.matmul(weight)
        _charge(weight, x, t0)

        def dw():
            t0 = time.perf_counter()
            g2 = grad.reshape(-1, grad.shape[-1])
            x2 = x.reshape(-1, x.shape[-1])
            accumulate_grad(weight, g2.t().matmul(x2))
            _charge(weight, x, t0)

        piece = getattr(weight, "clock_piece", None)
        if piece is None:
            dw()
        else:
            piece.weight_grad(dw)
        return dx, None


def linear(x: torch.Tensor, weight: nn.Parameter) -> torch.Tensor:
    if torch.is_grad_enabled() and weight.requires_grad:
        # a weight used n times in a forward (chunks, partitions) is final after n dW
        weight._pending_dw = getattr(weight, "_pending_dw", 0) + 1
    return _Linear.apply(x, weight)


class ColumnParallelLinear(nn.Module):
    """Output features split over TP; input is TP-replicated (copy region in front)."""

    def __init__(self, in_features: int, out_features: int, tp: MeshAxis):
        super().__init__()
        if out_features % tp.size:
            raise ValueError(f"out_features={out_features} is not divisible by tp={tp.size}")
        self.tp = tp
        self.full_shape = (out_features, in_features)
        self.weight = nn.Parameter(torch.empty(out_features // tp.size, in_features))

    def load_full(self, full: torch.Tensor) -> None:
        """Take this rank's rows of the full [out, in] matrix (so init is TP-size independent)."""
        n = self.weight.shape[0]
        with torch.no_grad():
            self.weight.copy_(full[self.tp.index * n : (self.tp.index + 1) * n])

    def forward(self, x: torch.Tensor, copied: bool = False) -> torch.Tensor:
        # copied=True: the caller already entered the copy region once for several linears
        # (q/k/v, w1/w3), so backward does one TP all-reduce for them, as Megatron's fused QKV.
        return linear(x if copied else copy_to_tp(x, self.tp), self.weight)


class RowParallelLinear(nn.Module):
    """Input features split over TP; partial outputs summed by a TP all-reduce (reduce region)."""

    def __init__(self, in_features: int, out_features: int, tp: MeshAxis):
        super().__init__()
        if in_features % tp.size:
            raise ValueError(f"in_features={in_features} is not divisible by tp={tp.size}")
        self.tp = tp
        self.full_shape = (out_features, in_features)
        self.weight = nn.Parameter(torch.empty(out_features, in_features // tp.size))

    def load_full(self, full: torch.Tensor) -> None:
        n = self.weight.shape[1]
        with torch.no_grad():
            self.weight.copy_(full[:, self.tp.index * n : (self.tp.index + 1) * n])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return reduce_from_tp(linear(x, self.weight), self.tp)
