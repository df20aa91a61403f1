"""Thin wrappers over torch.distributed collectives that the exchange pipelines: async handles,
gloo-safe shapes, and lazily created CUDA streams (no CUDA call happens at import).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist

from monta.comm.duplex import DuplexGroup

# torch >= 2.8 names it all_gather_single; the old name is deprecated but equivalent.
_all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def all_to_all(out: torch.Tensor, inp: torch.Tensor, group: Any) -> Any:
    """Start an even-split AllToAll along dim 0; returns the async work handle.

    ``group`` is a process group (the backend's own collective) or a ``DuplexGroup`` (gloo:
    one TCP connection per direction, see ``monta.comm.duplex``)."""
    if isinstance(group, DuplexGroup):
        return group.all_to_all(out, inp)
    return dist.all_to_all_single(out, inp, group=group, async_op=True)


def all_gather(out: torch.Tensor, inp: torch.Tensor, group: Any) -> Any:
    """Start an AllGather of ``inp`` into ``out`` (group_size x inp.numel() elements).

    Both sides are passed flat: gloo insists that the output be shaped (n * d0, ...) like the
    input, which is exactly the check DeepSpeed's ``_gather_tokens`` trips; NCCL accepts flat too.
    """
    if isinstance(group, DuplexGroup):
        return group.all_gather(out, inp)
    return _all_gather_flat(out.view(-1), inp.reshape(-1), group=group, async_op=True)


def group_backend(backend: str) -> str:
    """NCCL moves CUDA tensors only, and the bench's bookkeeping (per-round times, the go/stop broadcast,
    the check's counts) lives in CPU tensors: on NCCL those go over gloo beside it (torch's per-device
    backends), as a one-rank NCCL run of the AllToAll bench on an H200 showed ("No backend type
    associated with device type cpu")."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


class Streams:
    """Side streams for the AllToAll, the AllGather and the copies; CPU gets null contexts.

    Created on first use for a device, never at import, so importing monta needs no GPU.
    """

    _cache: dict[Any, Streams] = {}

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.a2a = torch.cuda.Stream(device)
            self.ag = torch.cuda.Stream(device)
            self.copy = torch.cuda.Stream(device)

    @classmethod
    def for_device(cls, device: torch.device) -> Streams:
        key = (device.type, device.index)
        if key not in cls._cache:
            cls._cache[key] = cls(device)
        return cls._cache[key]

    def use(self, name: str):
        return torch.cuda.stream(getattr(self, name)) if self.cuda else nullcontext()

    def wait_current(self, name: str) -> None:
        """Make side stream ``name`` wait for work already queued on the current stream."""
        if self.cuda:
            getattr(self, name).wait_stream(torch.cuda.current_stream())

    def join(self) -> None:
        """Make the current stream wait for every side stream (end of an exchange)."""
        if self.cuda:
            cur = torch.cuda.current_stream()
            for s in (self.a2a, self.ag, self.copy):
                cur.wait_stream(s)

    def keep(self, tensor: torch.Tensor, name: str) -> None:
        """``record_stream``: ``tensor`` is used on side stream ``name``; delay its reuse until then."""
        if self.cuda and tensor.is_cuda:
            tensor.record_stream(getattr(self, name))
