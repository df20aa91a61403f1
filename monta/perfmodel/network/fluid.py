"""A fluid resource-sharing timeline: operations that run at the same time share each resource
(max-min fair), as the emulator's ranks share the machine's CPU cores with each other.

Each operation has a demand per resource: the time it would hold that resource alone at full rate
(e.g. {"inter": 80 ms of NIC, "cpu": 16 ms of the whole machine}). Alone it takes its largest
demand; overlapped, the resources are split by progressive filling, so an op bound elsewhere leaves
its unused share to the others (work-conserving). Ops start when their dependencies have ended.
"""

from __future__ import annotations

from dataclasses import dataclass

_EPS = 1e-12


@dataclass(frozen=True)
class Op:
    """One scheduled operation: when it ran and the resources it used."""

    name: str
    start_us: float
    end_us: float
    resources: tuple[str, ...]


@dataclass
class _Task:
    name: str
    demand: dict[str, float]
    deps: tuple[int, ...]
    remaining: float = 1.0  # fraction of the work left
    start: float | None = None
    end: float | None = None

    @property
    def bottleneck(self) -> float:
        return max(self.demand.values(), default=0.0)


class FluidTimeline:
    """Add ops (``add`` returns an id to depend on), then ``run()`` for the schedule."""

    def __init__(self) -> None:
        self.tasks: list[_Task] = []

    def add(self, name: str, demand: dict[str, float], after: tuple[int | None, ...] = ()) -> int:
        deps = tuple(d for d in after if d is not None)
        self.tasks.append(_Task(name, {r: d for r, d in demand.items() if d > 0}, deps))
        return len(self.tasks) - 1

    def run(self) -> list[Op]:
        tasks, t = self.tasks, 0.0
        done = 0
        active: list[int] = []
        while done < len(tasks):
            for i, task in enumerate(tasks):  # start everything whose dependencies have ended
                if task.start is None and all(tasks[d].end is not None for d in task.deps):
                    task.start = t
                    if task.bottleneck <= 0:
                        task.end, task.remaining = t, 0.0
                        done += 1
                    else:
                        active.append(i)
            if not active:
                if done < len(tasks):
                    raise ValueError("fluid timeline: a dependency cycle (an op waits on a later op)")
                break
            rates = _share([tasks[i] for i in active])
            dt = min(tasks[i].remaining / r for i, r in zip(active, rates) if r > 0)
            t += dt
            still = []
            for i, r in zip(active, rates):
                task = tasks[i]
                task.remaining -= r * dt
                if task.remaining <= 1e-9:
                    task.end, task.remaining = t, 0.0
                    done += 1
                else:
                    still.append(i)
            active = still
        return [Op(k.name, k.start, k.end, tuple(k.demand)) for k in tasks]


def _share(tasks: list[_Task]) -> list[float]:
    """Progress rates (fraction of the op per us). Each resource is split max-min fairly among the
    ops using it, by what each would use at the speed its other resources allow (an OS scheduler
    gives a process that wants less than its fair share all it wants, the rest to the others);
    iterated to a fixed point. An op never beats its alone-speed (1 / its largest demand)."""
    alone = [1.0 / k.bottleneck for k in tasks]
    lim = [{r: alone[i] for r in k.demand} for i, k in enumerate(tasks)]
    users: dict[str, list[int]] = {}
    for i, k in enumerate(tasks):
        for r in k.demand:
            users.setdefault(r, []).append(i)
    for _ in range(100):
        changed = 0.0
        for r, idx in users.items():
            if len(idx) == 1:
                continue
            want = {i: tasks[i].demand[r] * min([alone[i]] + [v for q, v in lim[i].items() if q != r]) for i in idx}
            for i, got in _waterfill(want).items():
                new = got / tasks[i].demand[r]
                changed = max(changed, abs(new - lim[i][r]) / alone[i])
                lim[i][r] = new
        if changed < 1e-9:
            break
    return [min(v.values()) for v in lim]


def _waterfill(want: dict[int, float], capacity: float = 1.0) -> dict[int, float]:
    """Max-min fair split of ``capacity``: nobody gets more than it wants."""
    got, left, pending = {}, capacity, sorted(want, key=want.get)
    while pending:
        fair = left / len(pending)
        i = pending[0]
        if want[i] <= fair:
            got[i] = want[i]
            left -= want[i]
            pending.pop(0)
        else:
            for j in pending:
                got[j] = fair
            break
    return got
