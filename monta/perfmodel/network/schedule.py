"""The one scheduler of the model's exchange timelines: every registered exchange's steps (``steps.Step``:
the core's chunked pipeline and the plugins' token-level chains alike) become a ``timeline.Breakdown`` here.

A step starts when the steps it waits for (``Step.after``; by default the one before it) have ended. On a
real cluster it also waits until its resources are free (list scheduling, ``timeline.Timeline``): a call
holds the intra- and inter-node links for their times, a copy its stream at ``copy_GBps``, so overlap
happens only across resources. On the emulator (``cluster.host_cores``) every rank shares the machine's
few cores: the steps share the CPU next to the NICs (the fluid timeline, ``fluid.FluidTimeline``) with the
demands of ``host_cpu``, the emulator's host-CPU terms, built in one place (``_host_demand``).
"""

from __future__ import annotations

from collections.abc import Sequence

from monta.hardware.links import Cluster
from monta.perfmodel.network import host_cpu
from monta.perfmodel.network.fluid import FluidTimeline, Op
from monta.perfmodel.network.steps import COPY_ROLES, ExchangeSteps, Step
from monta.perfmodel.network.timeline import Breakdown, Timeline


def schedule_steps(exchange: str, steps: Sequence[Step] | ExchangeSteps, cluster: Cluster) -> Breakdown:
    """``steps`` (a price hook's answer: a list, or an ``ExchangeSteps``) scheduled on ``cluster``, as
    ``exchange``'s ``Breakdown``: bytes of its calls (payload and routing metadata apart), its makespan,
    and per role the time of its steps as scheduled, or of its ``components`` alone."""
    plan = steps if isinstance(steps, ExchangeSteps) else ExchangeSteps(tuple(steps))
    waits = _graph(plan.steps)
    ops = (_on_host if cluster.host_cores else _on_links)(plan.steps, waits, cluster)
    if plan.components is None:
        role_steps = zip(plan.steps, (o.end_us - o.start_us for o in ops))
    else:
        role_steps = ((s, alone_us(s, cluster)) for s in plan.components)
    role = dict.fromkeys(("a2a", "ag", "copy", "pack"), 0.0)
    for s, us in role_steps:
        if s.role in role:
            role[s.role] += us
    payload, meta = [0.0, 0.0], [0.0, 0.0]  # inter, intra
    for s in plan.steps:
        if s.role in ("a2a", "ag", "meta"):
            into = meta if s.role == "meta" else payload
            into[0], into[1] = into[0] + s.ct.inter_bytes - s.riders[0], into[1] + s.ct.intra_bytes - s.riders[1]
            meta[0], meta[1] = meta[0] + s.riders[0], meta[1] + s.riders[1]
    return Breakdown(
        exchange,
        plan.chunks,
        max((o.end_us for o in ops), default=0.0),
        role["a2a"],
        role["ag"],
        role["copy"],
        payload[0],
        payload[1],
        ops,
        role["pack"],
        meta[0],
        meta[1],
    )


def alone_us(s: Step, cluster: Cluster) -> float:
    """A step's time with nothing beside it: a call's link time, a copy's time at ``copy_GBps`` (on the
    emulator the machine's CPU time of it: every rank copies at once)."""
    if not s.is_copy:
        return s.ct.time_us
    if cluster.host_cores:
        return host_cpu.copy_demand(s.nbytes, cluster)["cpu"]
    return s.nbytes / (cluster.copy_GBps * 1e3)


def _graph(steps: Sequence[Step]) -> list[tuple[int, ...]]:
    """For each step the positions of the steps it waits on; ValueError when a name repeats or a link
    names no earlier step."""
    index: dict[str, int] = {}
    waits: list[tuple[int, ...]] = []
    for i, s in enumerate(steps):
        if s.name in index:
            raise ValueError(f"step {s.name!r} appears twice in one timeline: name each step once")
        if s.after is None:
            waits.append((i - 1,) if i else ())
        else:
            missing = [a for a in s.after if a not in index]
            if missing:
                raise ValueError(f"step {s.name!r} waits on {missing}: no earlier step has that name")
            waits.append(tuple(index[a] for a in s.after))
        index[s.name] = i
    return waits


def _on_links(steps: Sequence[Step], waits: list[tuple[int, ...]], cluster: Cluster) -> tuple[Op, ...]:
    """A real cluster: list scheduling on the links and the copy streams (kept plain: the planner's hot loop)."""
    tl, ends, rate = Timeline(), [], cluster.copy_GBps * 1e3
    for s, deps in zip(steps, waits):
        if s.role in COPY_ROLES:
            durations = {s.stream: s.nbytes / rate}
        else:
            durations = {"intra": s.ct.intra_us, "inter": s.ct.inter_us}
        ends.append(tl.add(s.name, durations, after=tuple(ends[d] for d in deps)))
    return tuple(tl.ops)


def _on_host(steps: Sequence[Step], waits: list[tuple[int, ...]], cluster: Cluster) -> tuple[Op, ...]:
    """The emulator: the fluid timeline, the machine's CPU shared by the steps that overlap."""
    tl = FluidTimeline()
    for s, deps in zip(steps, waits):
        tl.add(s.name, _host_demand(s, cluster), after=deps)  # its ids are the steps' positions
    return tuple(tl.run())


def _host_demand(s: Step, cluster: Cluster) -> dict[str, float]:
    if s.is_copy:
        return host_cpu.copy_demand(s.nbytes, cluster)
    if s.gather:
        return host_cpu.gather_demand(s.ct, s.name, s.msgs, cluster)
    if s.ct.time_us > 0 or s.runs_empty:
        return host_cpu.alltoall_demand(s.ct, cluster)
    return {"inter": s.ct.inter_us, "cpu": 0.0}  # no call is made: no CPU (see Step.runs_empty)
