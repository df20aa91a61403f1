"""Capacity-chunked MoE pipeline shared by the Lina and Lancet schedules, in both passes: the exchange of
chunk i+1 runs on a communication thread while the experts (forward or backward) of chunk i run.

Chunks are slot ranges of the [E, C, M] buffer; slots fill in token order, so chunk i carries
the capacity left by chunks < i and the kept tokens are exactly the unchunked layer's.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch.autograd.function import once_differentiable

from monta.chunking import equal_split
from monta.comm.timing import timed_combine, timed_dispatch, timed_pass, timed_pass_backward


def capacity_chunks(capacity: int, tp: int, chunks: int) -> list[int]:
    """Chunk sizes along C, each a multiple of the TP size (every TP rank owns a slice of each)."""
    if capacity % tp:
        raise ValueError(f"expert capacity {capacity} is not divisible by the tensor-parallel size {tp}")
    if chunks > capacity // tp:
        raise ValueError(f"chunks={chunks} exceeds capacity/TP={capacity // tp}; use fewer chunks")
    return [s * tp for s in equal_split(capacity // tp, chunks)]


_POOL = ThreadPoolExecutor(1, thread_name_prefix="moe-comm")  # one thread: collectives stay in order


def _on_comm_thread(layer, fn, *args) -> Future:
    """``fn(*args)`` on the exchange's thread, as an exchange in flight on the layer's compute clock (its
    contention window, through the layer's observers)."""
    return _POOL.submit(layer.observers.run_exchange, fn, *args)


def capacity_passes(layer):
    """The layer's exchange's passes over capacity windows (the capability these pipelines need);
    ValueError for an exchange without them (the registry refuses such a composition up front)."""
    passes = layer.exchange.capacity_passes
    if passes is None:
        raise ValueError(f"exchange {layer.exchange.name!r} offers no passes over capacity windows to pipeline")
    return passes


def pipelined_experts(
    layer, x_ECM: torch.Tensor, chunks: int, pipeline_backward: bool = True, exchange_chunks: int | None = None
) -> torch.Tensor:
    """dispatch -> experts -> combine per capacity chunk, exchanges overlapped with expert compute.

    The exchange uses its own communicators (the layer's mesh), the experts the model's
    TP communicator, so the two threads never interleave collectives on one group. With
    ``pipeline_backward`` (and a graph to build) the backward is pipelined too
    (``_PipelinedMoE``); without it autograd replays the chunks one after another (the reference).
    ``exchange_chunks``: each piece's exchange chunks (the plan's; None: the exchange's default).
    """
    tp = capacity_passes(layer).mesh.tp.size
    sizes = capacity_chunks(x_ECM.shape[1], tp, chunks)
    pieces = list(x_ECM.split(sizes, dim=1))
    return pipeline_pieces(layer, pieces, pipeline_backward=pipeline_backward, exchange_chunks=exchange_chunks)


def _record(layer, times: dict[str, float]) -> None:
    """Add a pipeline's phase seconds to the layer's breakdown (its observers keep them when recording)."""
    layer.observers.add_times(times)


def window_plan(plan, lo: int, hi: int):
    """The routing restricted to capacity slots [lo, hi) of every expert, as a plan of capacity hi - lo
    (the other routes parked on the scratch slot, as DeepSpeed parks dropped ones)."""
    E, C, w = plan.num_experts, plan.capacity, hi - lo
    c = plan.slots % C
    keep = (plan.slots < E * C) & (c >= lo) & (c < hi)
    slots = torch.where(keep, (plan.slots // C) * w + c - lo, torch.full_like(plan.slots, E * w))
    return dataclasses.replace(plan, slots=slots, capacity=w)


def routing_windows(layer, x_SM: torch.Tensor, plan, chunks: int) -> torch.Tensor:
    """Lina's split through the exchange's own dispatch and combine (any exchange; the one for those
    without capacity passes): capacity windows of the routing (slots fill in token order, so a window is
    a run of tokens), the dispatch of window i+1 on the comm thread while the experts of window i run,
    each window's combine queued behind it, the windows' outputs summed. The forward is pipelined; the
    backward is autograd's, window after window (the exchange's backward runs inside autograd, not on
    the comm thread)."""
    if chunks > plan.capacity:
        raise ValueError(f"chunks={chunks} exceeds the expert capacity {plan.capacity}; use fewer chunks")
    bounds = [0]
    for w in equal_split(plan.capacity, chunks):
        bounds.append(bounds[-1] + w)
    plans = [window_plan(plan, lo, hi) for lo, hi in zip(bounds, bounds[1:])]
    grad_on = torch.is_grad_enabled()
    times = {"dispatch": 0.0, "experts": 0.0, "combine": 0.0}

    def comm(name, *args):
        with torch.set_grad_enabled(grad_on):  # grad mode is per thread
            fn = timed_dispatch if name == "dispatch" else timed_combine
            return fn(layer.observers.backward, layer.exchange, *args)

    pending = _on_comm_thread(layer, comm, "dispatch", x_SM, plans[0])
    parts = []
    for i, p in enumerate(plans):
        t0 = time.perf_counter()
        got, handle = pending.result()
        layer.observers.restart()  # waited for the comm thread: not compute
        times["dispatch"] += time.perf_counter() - t0
        if i + 1 < len(plans):
            pending = _on_comm_thread(layer, comm, "dispatch", x_SM, plans[i + 1])
        t0 = time.perf_counter()
        y = layer.run_experts(got)
        times["experts"] += time.perf_counter() - t0
        parts.append(_on_comm_thread(layer, comm, "combine", y, p, handle))
    t0 = time.perf_counter()
    outs = [f.result() for f in parts]
    layer.observers.restart()
    times["combine"] += time.perf_counter() - t0
    _record(layer, times)
    out = outs[0]
    for o in outs[1:]:  # window by window, in order
        out = out + o
    return out


def launch_dispatch(layer, piece: torch.Tensor) -> Future:
    """Start ``piece``'s dispatch on the comm thread now (no graph: ``pipeline_pieces`` runs its
    transposed exchange in the pipelined backward). Lancet sends its early capacity windows so."""
    passes = capacity_passes(layer)

    def run():
        with torch.no_grad():
            return passes.dispatch_pass(piece)

    return _on_comm_thread(layer, run)


def pipeline_pieces(
    layer,
    pieces: list[torch.Tensor],
    launched: list[Future] = (),
    pipeline_backward: bool = True,
    exchange_chunks: int | None = None,
) -> torch.Tensor:
    """The pipeline over capacity pieces [E, c_i, M] (returned concatenated along C); ``launched``
    holds the dispatches already started (``launch_dispatch``) for the first pieces; every piece's
    exchange runs ``exchange_chunks`` chunks (None: the exchange's default)."""
    launched = list(launched)
    passes = capacity_passes(layer)
    if pipeline_backward and torch.is_grad_enabled() and any(p.requires_grad for p in pieces):
        return _PipelinedMoE.apply(layer, launched, exchange_chunks, *pieces)
    grad_on = torch.is_grad_enabled()
    if launched and grad_on and any(p.requires_grad for p in pieces):
        raise ValueError("dispatches launched ahead build no graph: they need the pipelined backward")

    def comm(name, t):
        with torch.set_grad_enabled(grad_on):  # grad mode is per thread
            return timed_pass(layer.observers.backward, passes, name, t, exchange_chunks)

    return _forward(layer, pieces, comm, layer.run_experts, launched)


def _forward(layer, pieces, comm, experts, launched=()) -> torch.Tensor:
    """The forward pipeline: dispatch(i+1) and combine(i) queued on the comm thread around experts(i)."""
    times = {"dispatch": 0.0, "experts": 0.0, "combine": 0.0}

    def start(i):
        return launched[i] if i < len(launched) else _on_comm_thread(layer, comm, "dispatch", pieces[i].contiguous())

    pending = start(0)
    combined = []
    for i in range(len(pieces)):
        t0 = time.perf_counter()
        got = pending.result()
        layer.observers.restart()  # waited for the comm thread: not compute
        times["dispatch"] += time.perf_counter() - t0
        if i + 1 < len(pieces):
            pending = start(i + 1)
        t0 = time.perf_counter()
        y = experts(got)
        times["experts"] += time.perf_counter() - t0
        combined.append(_on_comm_thread(layer, comm, "combine", y))
    t0 = time.perf_counter()
    out = torch.cat([f.result() for f in combined], dim=1)
    layer.observers.restart()
    times["combine"] += time.perf_counter() - t0
    _record(layer, times)
    return out


class _PipelinedMoE(torch.autograd.Function):
    """The chunked dispatch -> experts -> combine as one autograd node, so its backward can be pipelined.

    Forward keeps each chunk's expert subgraph (experts run on a detached input that requires
    grad); the exchanges build no graph. Backward runs, per chunk, the combine-gradient exchange
    of the next chunk on the comm thread while this chunk's expert backward runs here, then queues
    this chunk's dispatch-gradient exchange behind it. The arithmetic is autograd's: the same
    transposed passes, the same expert backward, dW accumulated in the order autograd replays the
    chunks (last first), so the gradients equal the unpipelined ones bit for bit.
    """

    @staticmethod
    def forward(ctx, layer, launched, exchange_chunks, *pieces):
        graphs = []
        passes = capacity_passes(layer)

        def comm(name, t):
            with torch.no_grad():  # the backward below runs the transposed exchanges itself
                return getattr(passes, f"{name}_pass")(t, exchange_chunks)

        def experts(got):
            with torch.enable_grad():  # Function.forward runs without grad; this subgraph is kept
                d = got.detach().requires_grad_()
                y = layer.run_experts(d)
            graphs.append((d, y))
            return y.detach()

        out = _forward(layer, pieces, comm, experts, launched)
        ctx.layer, ctx.sizes, ctx.graphs = layer, [p.shape[1] for p in pieces], graphs
        ctx.exchange_chunks = exchange_chunks
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_ECM):
        layer, graphs, exchange_chunks = ctx.layer, ctx.graphs, ctx.exchange_chunks
        if graphs is None:
            raise RuntimeError("the pipelined MoE backward ran twice; retain_graph=True is not supported")
        ctx.graphs = None  # each expert subgraph is freed as its backward runs
        passes = capacity_passes(layer)

        def comm(name, g):
            with torch.no_grad():
                return timed_pass_backward(layer.observers.backward, passes, name, g, exchange_chunks)

        # Last chunk first: the order autograd's replay takes (the comm thread's nodes carry lower
        # sequence numbers than the experts'), so dW sums in the same order and equal bitwise.
        order = list(range(len(graphs) - 1, -1, -1))
        params = [p for p in layer.experts.parameters() if p.requires_grad]
        param_grads: list = [None] * len(params)
        g_pieces = grad_ECM.split(ctx.sizes, dim=1)
        pending = _on_comm_thread(layer, comm, "combine", g_pieces[order[0]])
        dx = [None] * len(graphs)
        waited = {"combine_bwd_wait": 0.0, "dispatch_bwd_wait": 0.0}  # exposed: this thread blocked on comm
        for j, i in enumerate(order):
            t0 = time.perf_counter()
            g_y = pending.result()
            layer.observers.restart()
            waited["combine_bwd_wait"] += time.perf_counter() - t0
            if j + 1 < len(order):
                pending = _on_comm_thread(layer, comm, "combine", g_pieces[order[j + 1]])
            d, y = graphs[i]
            graphs[i] = None
            # Reentrant backward on this thread (the experts' TP all-reduce stays on the caller's
            # communicator). autograd.grad, not backward: running the weights' AccumulateGrad once
            # per chunk would fire their post-accumulate hooks (Lina's "gradient ready") per chunk.
            # _Linear weights get no grad here: their dW goes to .grad or Lancet's sink directly.
            got = torch.autograd.grad(y, [d, *params], g_y, allow_unused=True)
            dx[i] = _on_comm_thread(layer, comm, "dispatch", got[0])
            for k, g in enumerate(got[1:]):
                if g is not None:
                    param_grads[k] = g if param_grads[k] is None else param_grads[k] + g
        # Any other expert parameter: accumulated once, hooks fired once, as the outer graph would.
        ready = [(p, g) for p, g in zip(params, param_grads) if g is not None]
        if ready:
            torch.autograd.backward([p for p, _ in ready], [g for _, g in ready])
        t0 = time.perf_counter()
        grads = [f.result() for f in dx]
        layer.observers.restart()
        waited["dispatch_bwd_wait"] += time.perf_counter() - t0
        _record(layer, waited)
        return None, None, None, *grads
