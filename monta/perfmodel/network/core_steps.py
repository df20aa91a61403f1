"""The core exchanges' timelines as steps (what their registry entries' ``price`` hooks return,
``monta.exchanges``), scheduled by the same scheduler as every other exchange's (``schedule``).

Semantics (``monta.comm.exchange`` does the same): the dispatch buffer [E, C, M] of S bytes is identical
on every TP rank. The full buffer (legacy): every TP rank AllToAlls all S over the EP group (inter-node
bytes x TP), then copies the received buffer into place. The capacity slice (deepspeed, monta): pack the
own 1/TP slice -> AllToAll(EP) -> AllGather(TP) -> copy into place, in ``chunks`` pieces (their shares:
``monta.chunking.monta_weights``, the first half size from 4 chunks on): AllToAll(i+1) runs while
AllGather(i) and copy(i) run. Combine and both backward passes have the same shape.
"""

from __future__ import annotations

from monta.chunking import monta_weights
from monta.hardware.links import Cluster
from monta.parallel import GroupShape
from monta.perfmodel.network.collectives import allgather, alltoall
from monta.perfmodel.network.steps import ExchangeSteps, Step


def full_buffer_steps(S: float, ep: GroupShape, cluster: Cluster) -> ExchangeSteps:
    """AllToAll the whole buffer over EP, then copy what arrived into place; reported as itself."""
    steps = (Step("alltoall", "a2a", alltoall(S, ep, cluster), runs_empty=True), Step("copy", "copy", nbytes=S))
    return ExchangeSteps(steps, 1, steps)


def slice_steps(S: float, ep: GroupShape, tp: GroupShape, cluster: Cluster, chunks: int = 1) -> ExchangeSteps:
    """The 1/TP capacity slice in ``chunks`` pipelined pieces; its components (the ``Breakdown``'s role
    times) are the unchunked pass's steps alone. Without TP there is no slice: the full buffer's steps."""
    if tp.size == 1:
        return full_buffer_steps(S, ep, cluster)
    part = S / tp.size
    steps: list[Step] = []
    for i, w in enumerate(monta_weights(chunks)):
        a2a, ag = alltoall(part * w, ep, cluster), allgather(part * w, tp, cluster)
        before = (f"alltoall[{i - 1}]", f"allgather[{i - 1}]") if i else ()
        steps += [
            # the own slice is strided in [E, C, M]: packing it is a copy queued on the AllToAll's stream,
            # behind the previous chunk's AllToAll
            Step(f"pack[{i}]", "pack", nbytes=part * w, after=before[:1], stream="a2a_stream"),
            Step(f"alltoall[{i}]", "a2a", a2a, runs_empty=True),
            # the AllGather of chunk i waits for its AllToAll and for the previous chunk's AllGather
            Step(f"allgather[{i}]", "ag", ag, gather=True, msgs=tp.size - 1, after=(f"alltoall[{i}]", *before[1:])),
            Step(f"copy[{i}]", "copy", nbytes=S * w),
        ]
    components = tuple(steps) if chunks == 1 else slice_steps(S, ep, tp, cluster, 1).components
    return ExchangeSteps(tuple(steps), chunks, components)
