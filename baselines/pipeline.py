"""Capacity-chunked MoE pipeline shared by the Lina and Lancet schedules: the exchange of chunk i+1
runs on a communication thread while the experts of chunk i run on the caller's thread.

Chunks are slot ranges of the [E, C, M] buffer; slots fill in token order, so chunk i carries
the capacity left by chunks < i and the kept tokens are exactly the unchunked layer's.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch

from monta.comm.exchange import chunk_sizes
from monta.model.transformer import timed_exchange


def capacity_chunks(capacity: int, tp: int, chunks: int) -> list[int]:
    """Chunk sizes along C, each a multiple of the TP size (every TP rank owns a slice of each)."""
    if capacity % tp:
        raise ValueError(f"expert capacity {capacity} is not divisible by the tensor-parallel size {tp}")
    if chunks > capacity // tp:
        raise ValueError(f"chunks={chunks} exceeds capacity/TP={capacity // tp}; use fewer chunks")
    return [s * tp for s in chunk_sizes(capacity // tp, chunks)]


_POOL = ThreadPoolExecutor(1, thread_name_prefix="moe-comm")  # one thread: collectives stay in order


def pipelined_experts(layer, x_ECM: torch.Tensor, chunks: int) -> torch.Tensor:
    """dispatch -> experts -> combine per capacity chunk, exchanges overlapped with expert compute.

    The exchange uses its own communicators (the layer's ProcessGroups), the experts the model's
    TP communicator, so the two threads never interleave collectives on one group.
    """
    tp = layer.exchange.groups.tp_size
    sizes = capacity_chunks(x_ECM.shape[1], tp, chunks)
    pieces = x_ECM.split(sizes, dim=1)
    grad_on = torch.is_grad_enabled()

    def comm(name, t):
        with torch.set_grad_enabled(grad_on):
            return timed_exchange(layer, name, t)

    times = {"dispatch": 0.0, "experts": 0.0, "combine": 0.0}
    pending = _POOL.submit(comm, "dispatch", pieces[0].contiguous())
    combined = []
    for i in range(len(pieces)):
        t0 = time.perf_counter()
        got = pending.result()
        times["dispatch"] += time.perf_counter() - t0
        if i + 1 < len(pieces):
            pending = _POOL.submit(comm, "dispatch", pieces[i + 1].contiguous())
        t0 = time.perf_counter()
        y = layer.run_experts(got)
        times["experts"] += time.perf_counter() - t0
        combined.append(_POOL.submit(comm, "combine", y))
    t0 = time.perf_counter()
    out = torch.cat([f.result() for f in combined], dim=1)
    times["combine"] += time.perf_counter() - t0
    if layer.record_times:
        for k, v in times.items():
            layer.times[k] = layer.times.get(k, 0.0) + v
    return out
