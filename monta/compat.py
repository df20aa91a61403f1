"""Compatibility shims for running stock DeepSpeed on the gloo backend, used only for references.

Kept tiny and explicit: the exchange strategies themselves never need them.
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def gloo_safe_deepspeed_gather():
    """Let stock ``deepspeed.moe.mappings._gather_tokens`` run on gloo under TP > 1.

    DeepSpeed passes a flat output buffer with an N-D input to ``all_gather_into_tensor``; NCCL
    only checks element counts, gloo rejects the shapes. Flattening the input reproduces NCCL's
    semantics exactly (same bytes, same order); the stock layer's code is otherwise untouched.
    """
    import deepspeed.comm as dcomm

    original = dcomm.all_gather_into_tensor

    def flat_gather(output_tensor, tensor, group=None, async_op=False, **kwargs):
        if output_tensor.dim() == 1 and tensor.dim() > 1:
            tensor = tensor.reshape(-1)
        return original(output_tensor, tensor, group=group, async_op=async_op, **kwargs)

    dcomm.all_gather_into_tensor = flat_gather
    try:
        yield
    finally:
        dcomm.all_gather_into_tensor = original
