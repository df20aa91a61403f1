"""The pass of the buffer exchanges for the MoE dispatch/combine under tensor parallelism: ``legacy``
(redundant full AllToAll), ``deepspeed`` (drop, AllToAll, AllGather) and ``monta`` (chunked pipeline),
and the mesh every exchange binds (``exchange_mesh``: the ``monta.mesh.Mesh`` with its EP and TP axes on
the exchange's communicators). A rank's exchange is built around it as a ``monta.comm.dispatcher.Dispatcher``.

Notation: E experts (all EP ranks), C capacity, Cl = C / TP the capacity slice a TP rank owns,
M model dim, n chunks. Buffers are [E, C, M]; dim 0 splits evenly over the EP group.

One pass of an exchange is ``[drop] -> AllToAll(EP) -> [AllGather(TP)]`` (``PassSpec``). Its
transpose swaps drop and gather, because the gradient of a drop is a gather and vice versa, and
an AllToAll is its own transpose. So backward runs the same pipeline with the transposed spec:
MoNTA's chunked overlap applies to dispatch and combine, forward and backward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from monta.chunking import monta_split
from monta.comm import activity
from monta.comm.accounting import TrafficMeter
from monta.comm.collectives import Streams, all_gather, all_to_all
from monta.mesh import Mesh


@dataclass(frozen=True)
class PassSpec:
    """What one exchange pass does around its AllToAll."""

    drop_in: bool  # input is TP-replicated at full capacity: keep only this TP rank's slice
    gather_out: bool  # rebuild full capacity over the TP group after the AllToAll

    def transpose(self) -> PassSpec:
        return PassSpec(drop_in=self.gather_out, gather_out=self.drop_in)


def flat_all_to_all(recv: torch.Tensor, send: torch.Tensor, g: Mesh, meter, phase: str):
    """The pass's AllToAll over the EP group (one collective); returns its async handle."""
    if meter is not None:
        meter.all_to_all(g.ep.ranks, send.numel() * send.element_size(), phase)
    return all_to_all(recv, send, g.ep.group)


def _own_slice(x: torch.Tensor, spec: PassSpec, g: Mesh, chunks: int) -> tuple[torch.Tensor, int]:
    """The part of ``x`` [E, Cin, M] this rank sends (its 1/TP capacity slice when the pass drops to it)
    and that part's capacity; ValueError when the shapes, TP, EP or ``chunks`` do not fit together."""
    tp = g.tp.size
    drop = spec.drop_in and tp > 1
    E, c_in, M = x.shape
    if drop and c_in % tp:
        raise ValueError(f"capacity {c_in} is not divisible by the tensor-parallel size {tp}")
    cl = c_in // tp if drop else c_in
    if not 1 <= chunks <= cl:
        raise ValueError(f"chunks={chunks} must be between 1 and the capacity slice {cl}")
    if E % g.ep.size:
        raise ValueError(f"{E} experts do not split over the expert-parallel group of {g.ep.size}")
    return (x.view(E, tp, cl, M)[:, g.tp.index] if drop else x), cl


def _gather_over_tp(recv: torch.Tensor, g: Mesh, streams, meter, phase: str, alive: list) -> torch.Tensor:
    """The AllGather of one received chunk over the TP group on the "ag" stream, the copy stream waiting
    for it; the gathered [TP, ...] chunk (kept in ``alive`` until the pass joins)."""
    with streams.use("ag"):
        gathered = recv.new_empty((g.tp.size,) + tuple(recv.shape))
        alive.append(gathered)
        if meter is not None:
            meter.all_gather(g.tp.ranks, recv.numel() * recv.element_size(), phase)
        work_ag = all_gather(gathered, recv, g.tp.group)
    with streams.use("copy"):
        work_ag.wait()
    return gathered


def run_pass(
    x: torch.Tensor,
    spec: PassSpec,
    g: Mesh,
    chunks: int,
    meter: TrafficMeter | None = None,
    phase: str = "",
    alltoall=flat_all_to_all,
) -> torch.Tensor:
    """One exchange pass over ``x`` [E, Cin, M]; ``chunks`` > 1 pipelines AllToAll and AllGather.

    AllToAll(i+1) on the EP group (inter-node link) runs while AllGather(i) on the TP group
    (intra-node link) and the copy of chunk i into place run. On CPU/gloo each group's work
    runs on that group's own threads; on CUDA each step has its own stream. ``alltoall(recv, send,
    g, meter, phase)``: how the EP AllToAll runs (a plugin's hierarchical one, say); returns a handle.
    """
    tp = g.tp.size
    gather = spec.gather_out and tp > 1
    x_local, cl = _own_slice(x, spec, g, chunks)
    E, M = x.shape[0], x.shape[2]
    out = x.new_empty(E, cl * tp if gather else cl, M)
    out_view = out.view(E, tp, cl, M) if gather else out.view(E, 1, cl, M)
    sizes = monta_split(cl, chunks)  # the first chunk half size: it halves the pipeline's fill
    offsets = [sum(sizes[:i]) for i in range(chunks)]
    streams = Streams.for_device(x.device)
    streams.wait_current("a2a")  # the input was produced on the current stream
    # Every chunk buffer stays referenced until the pass has joined the current stream: on CUDA a
    # side-stream allocation freed early could be reused while a collective on the communicator's
    # own stream still reads it (record_stream cannot name that stream).
    alive: list[torch.Tensor] = []

    def start_a2a(i: int):
        with streams.use("a2a"):
            send = x_local[:, offsets[i] : offsets[i] + sizes[i]].contiguous()
            alive.append(send)
            if g.ep.size == 1:
                return send, None
            recv = torch.empty_like(send)
            alive.append(recv)
            return recv, alltoall(recv, send, g, meter, phase)

    def place(i: int, chunk: torch.Tensor, stream: str) -> None:
        # chunk is [tp or 1, E, c_i, M]; the final place is out[:, t*cl + off_i : ...].
        with streams.use(stream):
            out_view[:, :, offsets[i] : offsets[i] + sizes[i]].copy_(chunk.transpose(0, 1))
            streams.keep(chunk, stream)
            streams.keep(out, stream)
            if meter is not None and meter.fault is not None:  # TEST AID (monta.testaids.Fault)
                meter.fault.corrupt(out_view, i, g.rank)

    busy = g.ep.size > 1
    if busy:
        activity.ALLTOALL.enter()
    try:
        pending = start_a2a(0)
        for i in range(chunks):
            recv, work = pending
            with streams.use("ag" if gather else "copy"):
                if work is not None:
                    work.wait()  # CPU: blocks; CUDA: the side stream waits for the AllToAll
                streams.keep(recv, "ag" if gather else "copy")
            if i + 1 < chunks:
                pending = start_a2a(i + 1)  # overlaps this chunk's AllGather and copy
            elif busy:
                activity.ALLTOALL.exit()
                busy = False
            if gather:
                place(i, _gather_over_tp(recv, g, streams, meter, phase, alive), "copy")
            else:
                place(i, recv.unsqueeze(0), "copy")
    finally:
        if busy:
            activity.ALLTOALL.exit()
    streams.join()
    alive.clear()
    return out


class _PassFn(torch.autograd.Function):
    """Autograd wrapper: backward is the transposed pass, pipelined the same way (``fn``: the
    exchange's pass function, ``run_pass`` or a plugin's)."""

    @staticmethod
    def forward(ctx, x, spec, mesh, chunks, meter, phase, fn):  # noqa: D401
        ctx.spec, ctx.mesh, ctx.chunks, ctx.meter, ctx.phase, ctx.fn = spec, mesh, chunks, meter, phase, fn
        return fn(x, spec, mesh, chunks, meter, phase + "/fwd")

    @staticmethod
    def backward(ctx, grad):
        dx = transpose_pass(grad, ctx.spec, ctx.mesh, ctx.chunks, ctx.meter, ctx.phase, ctx.fn)
        return dx, None, None, None, None, None, None


def transpose_pass(
    grad: torch.Tensor,
    spec: PassSpec,
    g: Mesh,
    chunks: int,
    meter: TrafficMeter | None = None,
    phase: str = "",
    fn=None,
) -> torch.Tensor:
    """The backward of pass ``spec``: the transposed pass over the output gradient (no autograd)."""
    return (fn or run_pass)(grad.contiguous(), spec.transpose(), g, chunks, meter, phase + "/bwd")


def validate_exchange(name: str, chunks: Any) -> None:
    from monta import variants as registry

    registry.exchange(name)  # ValueError naming the core's and the plugins' exchanges
    if isinstance(chunks, bool) or not isinstance(chunks, int):
        raise ValueError(f"chunks={chunks!r} must be an integer >= 1 (or 'auto' where supported)")
    if chunks < 1:
        raise ValueError(f"chunks={chunks} must be >= 1")


def exchange_mesh(mesh: Mesh, ep: Any = None, transport: str | None = None, tp: Any = None) -> Mesh:
    """The mesh an exchange binds: ``mesh`` with its EP axis on ``ep`` (a communicator: DeepSpeed's expert
    group; None: the mesh's own) and its TP axis on ``tp`` (None: the mesh's), checked against the layout
    before any collective runs.

    On gloo the exchange's collectives then run over ``DuplexGroup``s (one TCP connection per
    direction, ``monta.comm.duplex``); building them is collective, so every rank of the world
    must call this at the same point (as it does for the layer's groups). ``transport``: 'duplex'
    | 'native' (default: ``transport_for`` the backend, $MONTA_GLOO_TRANSPORT).
    """
    from monta.comm.duplex import TRANSPORTS, duplex_groups, transport_for

    layout, rank = mesh.layout, mesh.rank
    transport = transport or transport_for()
    if transport not in TRANSPORTS:
        raise ValueError(f"transport={transport!r}: choose one of {', '.join(TRANSPORTS)}")
    ep_group = mesh.ep.group if ep is None else ep
    tp_group = mesh.tp.group if tp is None else tp
    ep_ranks = tuple(dist.get_process_group_ranks(ep_group)) if ep_group is not None else (rank,)
    tp_ranks = tuple(dist.get_process_group_ranks(tp_group)) if tp_group is not None else (rank,)
    if tuple(sorted(ep_ranks)) != tuple(sorted(mesh.ep.ranks)):
        raise ValueError(
            f"rank {rank}: EP group {list(ep_ranks)} does not match the layout's "
            f"{list(mesh.ep.ranks)} ({layout.describe()}); build groups from the same layout"
        )
    if tuple(sorted(tp_ranks)) != tuple(sorted(mesh.tp.ranks)):
        raise ValueError(f"rank {rank}: TP group {list(tp_ranks)} does not match the layout's {list(mesh.tp.ranks)}")
    if transport == "duplex":
        # Members in sorted order, as new_group orders them: block p of a duplex AllToAll goes
        # where all_to_all_single would send it.
        if len(ep_ranks) > 1:
            ep_group = duplex_groups([sorted(g.ranks) for g in layout.groups_of("ep")], rank)
            ep_ranks = ep_group.ranks
        if len(tp_ranks) > 1:
            tp_group = duplex_groups([sorted(g.ranks) for g in layout.groups_of("tp")], rank)
            tp_ranks = tp_group.ranks
    return mesh.replace(ep=mesh.ep.rebind(ep_group, ep_ranks), tp=mesh.tp.rebind(tp_group, tp_ranks))
