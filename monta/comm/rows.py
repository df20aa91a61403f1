"""Row collectives for exchanges that route tokens themselves: an uneven AllToAll (``a2av``), TP shards
and gathers, an EP AllGather and its mirror ReduceScatter; each differentiable and metered per peer.

TP semantics are the core's (``PassSpec``): tokens and the expert side are replicated over the TP group,
so taking the own TP shard and gathering over TP are each other's transpose (the backward of a TP
gather takes the own part; that of a shard gathers). EP gathers are real: their backward sums.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from monta.comm.accounting import TrafficMeter
from monta.comm.collectives import all_gather, all_to_all
from monta.comm.duplex import DuplexGroup
from monta.mesh import MeshAxis


def _meter(meter: TrafficMeter | None, c: MeshAxis, nbytes: list[int], op: str, phase: str) -> None:
    if meter is not None:
        meter.sends({c.ranks[p]: n for p, n in enumerate(nbytes)}, op, phase)


def exchange_counts(
    counts: list[int], c: MeshAxis, meter: TrafficMeter | None, phase: str, device: torch.device | str = "cpu"
) -> list[int]:
    """Rows this rank will receive from each member, given the rows it sends to each (an int64
    AllToAll: the 'notify' step of an uneven exchange; metered as ``meta``; on ``device``, the data's:
    NCCL moves CUDA tensors only)."""
    if c.size == 1:
        return list(counts)
    send = torch.tensor(counts, dtype=torch.int64, device=device)
    recv = torch.empty_like(send)
    _meter(meter, c, [8] * c.size, "meta", phase)
    all_to_all(recv, send, c.group).wait()
    return [int(v) for v in recv]


def a2av(
    sends: list[torch.Tensor],
    c: MeshAxis,
    recv_rows: list[int] | None = None,
    meter: TrafficMeter | None = None,
    op: str = "alltoall",
    phase: str = "",
) -> list[torch.Tensor]:
    """Uneven AllToAll: ``sends[p]`` (rows [n_p, ...], any n_p >= 0) goes to member p; returns what each
    member sent here. ``recv_rows``: the counts when known (else exchanged first). No autograd."""
    if recv_rows is None:
        recv_rows = exchange_counts([int(s.shape[0]) for s in sends], c, meter, phase, sends[0].device)
    return a2av_parts([sends], c, recv_rows, meter, [op], phase)[0]


def a2av_parts(
    parts: list[list[torch.Tensor]],
    c: MeshAxis,
    recv_rows: list[int],
    meter: TrafficMeter | None = None,
    ops: list[str] | None = None,
    phase: str = "",
) -> list[list[torch.Tensor]]:
    """``a2av`` of several tensors with the same rows per member (a token's row, its gates, its routes)
    in one batch: ``parts[i][p]`` goes to member p; returns, per part, what each member sent here.
    One wait for all of them, where one ``a2av`` each would wait (and on the emulator wake every rank)
    once per part. ``ops[i]``: how the meter books part i (the rows' op, ``meta`` for routing data)."""
    me, ops = c.index, ops or ["alltoall"] * len(parts)
    got = []
    for sends in parts:
        tail = tuple(sends[0].shape[1:])
        got.append(
            [s.clone() if p == me else s.new_empty((n,) + tail) for p, (s, n) in enumerate(zip(sends, recv_rows))]
        )
    if c.size == 1:
        return got
    batch = []
    for sends, recvs, op in zip(parts, got, ops):
        _meter(meter, c, [0 if p == me else s.numel() * s.element_size() for p, s in enumerate(sends)], op, phase)
        src = [None if p == me or s.shape[0] == 0 else s.contiguous() for p, s in enumerate(sends)]
        dst = [None if p == me or r.shape[0] == 0 else r for p, r in enumerate(recvs)]
        batch.append((src, dst))
    if isinstance(c.group, DuplexGroup):
        c.group.all_to_all_v(*batch[0], *batch[1:]).wait()
        return got
    for (src, dst), sends in zip(batch, parts):  # the backend's own (NCCL): empty tensors for the peers without rows
        empty = sends[0].new_empty((0,) + tuple(sends[0].shape[1:]))
        dist.all_to_all(
            [r if r is not None else empty for r in dst],
            [s if s is not None else empty for s in src],
            group=c.group,
        )
    return got


def _cat_rows(got: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    return torch.cat(got) if got else like.new_empty((0,) + tuple(like.shape[1:]))


class _A2AV(torch.autograd.Function):
    """``a2av_parts`` on tensors cut into rows per member; backward sends the gradients of those that
    need one back the same way, in one batch. Integer parts (routes) carry no gradient."""

    @staticmethod
    def forward(ctx, send_rows, recv_rows, c, meter, ops, phase, *xs):  # noqa: D401
        ctx.args = (send_rows, recv_rows, c, meter, ops, phase)
        got = a2av_parts([list(x.split(send_rows)) for x in xs], c, recv_rows, meter, ops, phase + "/fwd")
        out = tuple(_cat_rows(g, x) for g, x in zip(got, xs))
        ctx.mark_non_differentiable(*(o for o in out if not o.is_floating_point()))
        return out

    @staticmethod
    def backward(ctx, *grads):
        send_rows, recv_rows, c, meter, ops, phase = ctx.args
        want = [i for i, need in enumerate(ctx.needs_input_grad[6:]) if need]
        parts = [list(grads[i].contiguous().split(recv_rows)) for i in want]
        back = a2av_parts(parts, c, send_rows, meter, [ops[i] for i in want], phase + "/bwd") if want else []
        dx: list[torch.Tensor | None] = [None] * len(grads)
        for i, b in zip(want, back):
            dx[i] = torch.cat(b)
        return (None,) * 6 + tuple(dx)


def a2av_rows(
    x: torch.Tensor,
    send_rows: list[int],
    c: MeshAxis,
    recv_rows: list[int],
    meter: TrafficMeter | None = None,
    op: str = "alltoall",
    phase: str = "",
) -> torch.Tensor:
    """Differentiable uneven AllToAll of ``x`` cut into ``send_rows`` per member; returns the received
    rows concatenated in member order (``recv_rows`` of each)."""
    return a2av_rows_with(x, (), send_rows, c, recv_rows, meter, op, phase)[0]


def a2av_rows_with(
    x: torch.Tensor,
    riders: tuple[torch.Tensor, ...],
    send_rows: list[int],
    c: MeshAxis,
    recv_rows: list[int],
    meter: TrafficMeter | None = None,
    op: str = "alltoall",
    phase: str = "",
) -> tuple[torch.Tensor, ...]:
    """``a2av_rows`` of ``x`` with ``riders`` (the same rows' gates, routes) in the same batch, metered
    as ``meta``; returns x's received rows and each rider's."""
    ops = [op] + ["meta"] * len(riders)
    return _A2AV.apply(list(send_rows), list(recv_rows), c, meter, ops, phase, x, *riders)


class _TPShard(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, c, meter, phase):  # noqa: D401
        ctx.args = (c, meter, phase)
        return x.reshape((c.size, -1) + tuple(x.shape[1:]))[c.index].clone()

    @staticmethod
    def backward(ctx, grad):
        c, meter, phase = ctx.args
        return _gather_even(grad.contiguous(), c, meter, "allgather", phase + "/bwd"), None, None, None


class _TPGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, c, meter, phase):  # noqa: D401
        ctx.args = (c, x.shape[0])
        return _gather_even(x.contiguous(), c, meter, "allgather", phase + "/fwd")

    @staticmethod
    def backward(ctx, grad):
        c, n = ctx.args
        return grad[c.index * n : (c.index + 1) * n].clone(), None, None, None


def _gather_even(x: torch.Tensor, c: MeshAxis, meter, op: str, phase: str) -> torch.Tensor:
    if c.size == 1:
        return x.clone()
    out = x.new_empty((c.size * x.shape[0],) + tuple(x.shape[1:]))
    _meter(meter, c, [x.numel() * x.element_size()] * c.size, op, phase)
    all_gather(out, x, c.group).wait()
    return out


def _reduce_scatter(x: torch.Tensor, c: MeshAxis, meter, phase: str) -> torch.Tensor:
    """Sum over members of block ``index`` of every member's ``x`` (blocks along dim 0): the direct
    algorithm, one AllToAll then a sum in member order (the per-rank bytes of a ring ReduceScatter)."""
    if c.size == 1:
        return x.clone()
    x = x.contiguous()
    recv = torch.empty_like(x)
    block = x.numel() * x.element_size() // c.size
    _meter(meter, c, [0 if p == c.index else block for p in range(c.size)], "reducescatter", phase)
    all_to_all(recv, x, c.group).wait()
    return recv.view((c.size, -1) + tuple(x.shape[1:])).sum(0)


class _EPGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, c, meter, phase, op):  # noqa: D401
        ctx.args = (c, meter, phase)
        return _gather_even(x.contiguous(), c, meter, op, phase + "/fwd")

    @staticmethod
    def backward(ctx, grad):
        c, meter, phase = ctx.args
        return _reduce_scatter(grad, c, meter, phase + "/bwd"), None, None, None, None


class _EPReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, c, meter, phase):  # noqa: D401
        ctx.args = (c, meter, phase)
        return _reduce_scatter(x, c, meter, phase + "/fwd")

    @staticmethod
    def backward(ctx, grad):
        c, meter, phase = ctx.args
        return _gather_even(grad.contiguous(), c, meter, "allgather", phase + "/bwd"), None, None, None


class _TPGatherV(torch.autograd.Function):
    """Uneven AllGather over TP (each member's own rows to every member), riders (routes, no gradient)
    in the same batch; backward: the own rows."""

    @staticmethod
    def forward(ctx, c, recv_rows, meter, phase, x, *riders):  # noqa: D401
        ctx.args = (c, recv_rows)
        ops = ["allgather"] + ["meta"] * len(riders)
        got = a2av_parts([[t] * c.size for t in (x, *riders)], c, recv_rows, meter, ops, phase + "/fwd")
        out = tuple(torch.cat(g) for g in got)
        ctx.mark_non_differentiable(*out[1:])
        return out

    @staticmethod
    def backward(ctx, grad, *rest):
        c, rows = ctx.args
        lo = sum(rows[: c.index])
        return (None,) * 4 + (grad[lo : lo + rows[c.index]].clone(),) + (None,) * len(rest)


def tp_gather_v(x: torch.Tensor, c: MeshAxis, meter=None, phase: str = "") -> tuple[torch.Tensor, list[int]]:
    """Every TP member's rows (any count each), concatenated in member order, and the counts."""
    (out, *_), rows = tp_gather_v_with(x, (), c, meter, phase)
    return out, rows


def tp_gather_v_with(
    x: torch.Tensor, riders: tuple[torch.Tensor, ...], c: MeshAxis, meter=None, phase: str = ""
) -> tuple[tuple[torch.Tensor, ...], list[int]]:
    """``tp_gather_v`` of ``x`` and, in the same batch, ``riders`` with the same rows (routes; metered as
    ``meta``, no gradient): every member's rows of each, and the counts."""
    if c.size == 1:
        return (x, *riders), [int(x.shape[0])]
    rows = exchange_counts([int(x.shape[0])] * c.size, c, meter, phase + "/fwd", x.device)
    return _TPGatherV.apply(c, rows, meter, phase, x, *riders), rows


class _TPSelect(torch.autograd.Function):
    """Rows ``used[own]`` of a TP-replicated tensor; each TP member uses its own disjoint rows, so the
    backward gathers every member's row gradients into the whole (uneven AllGather over TP)."""

    @staticmethod
    def forward(ctx, x, used, c, meter, phase):  # noqa: D401
        ctx.args = (used, c, meter, phase, x.shape)
        return x.index_select(0, used[c.index])

    @staticmethod
    def backward(ctx, grad):
        used, c, meter, phase, shape = ctx.args
        got = a2av([grad.contiguous()] * c.size, c, [int(u.numel()) for u in used], meter, "allgather", phase + "/bwd")
        full = grad.new_zeros(shape)
        for u, g in zip(used, got):
            full.index_copy_(0, u, g)
        return full, None, None, None, None


def tp_select(x: torch.Tensor, used: list[torch.Tensor], c: MeshAxis, meter=None, phase: str = "") -> torch.Tensor:
    """``x[used[own member]]`` of a TP-replicated ``x`` whose rows the TP members divide among them
    (``used``: every member's row indices, disjoint); backward: the members' gradients gathered."""
    if c.size == 1:
        return x.index_select(0, used[0])
    return _TPSelect.apply(x, list(used), c, meter, phase)


def tp_shard(x: torch.Tensor, c: MeshAxis, meter=None, phase: str = "") -> torch.Tensor:
    """This TP rank's 1/TP of the rows of a TP-replicated ``x`` (backward: AllGather over TP)."""
    if x.shape[0] % c.size:
        raise ValueError(f"{x.shape[0]} tokens do not split over the tensor-parallel group of {c.size}")
    return _TPShard.apply(x, c, meter, phase) if c.size > 1 else x


def tp_gather(x: torch.Tensor, c: MeshAxis, meter=None, phase: str = "") -> torch.Tensor:
    """AllGather over TP of equal shards into a TP-replicated whole (backward: the own shard)."""
    return _TPGather.apply(x, c, meter, phase) if c.size > 1 else x


def ep_gather(x: torch.Tensor, c: MeshAxis, meter=None, phase: str = "", op: str = "allgather") -> torch.Tensor:
    """AllGather over EP (members' rows in member order); backward: ReduceScatter (sum). ``op``: how the
    meter books it (``meta`` for routing data such as gates)."""
    return _EPGather.apply(x, c, meter, phase, op) if c.size > 1 else x


def ep_reduce_scatter(x: torch.Tensor, c: MeshAxis, meter=None, phase: str = "") -> torch.Tensor:
    """ReduceScatter over EP of ``x`` = [members x rows]; backward: AllGather."""
    return _EPReduceScatter.apply(x, c, meter, phase) if c.size > 1 else x


def gather_ints(x: torch.Tensor, c: MeshAxis, meter=None, phase: str = "") -> torch.Tensor:
    """AllGather of routing metadata (no autograd), metered as ``meta``."""
    if c.size == 1:
        return x.clone()
    out = x.new_empty((c.size * x.shape[0],) + tuple(x.shape[1:]))
    _meter(meter, c, [x.numel() * x.element_size()] * c.size, "meta", phase)
    all_gather(out, x.contiguous(), c.group).wait()
    return out
