"""The building blocks of the exchange timelines: list scheduling on resources (``Timeline``), one
exchange's predicted ``Breakdown``, and a layout's EP/TP group shapes; the scheduler of every exchange's
steps (``schedule``) builds on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monta.perfmodel.network.collectives import GroupShape
from monta.perfmodel.network.fluid import Op


class Timeline:
    """List scheduling in issue order: an op starts after its deps and when its resources are free."""

    def __init__(self) -> None:
        self.free: dict[str, float] = {}
        self.ops: list[Op] = []

    def add(self, name: str, durations: dict[str, float], after: tuple[float, ...] = ()) -> float:
        free = self.free
        start = max(after) if after else 0.0
        used = []
        longest = 0.0
        for r, d in durations.items():  # hot loop of the planner: kept plain on purpose
            if d > 0:
                used.append(r)
                t = free.get(r, 0.0)
                if t > start:
                    start = t
                if d > longest:
                    longest = d
        for r in used:
            free[r] = start + durations[r]
        end = start + longest
        self.ops.append(Op(name, start, end, tuple(used)))
        return end

    @property
    def makespan(self) -> float:
        return max((o.end_us for o in self.ops), default=0.0)


@dataclass(frozen=True)
class Breakdown:
    """One exchange (e.g. the forward dispatch) for one rank; bytes are what the rank sends."""

    variant: str
    chunks: int
    total_us: float
    a2a_us: float  # the AllToAll of this variant alone, unchunked
    ag_us: float  # the AllGather alone, unchunked (0 for legacy)
    copy_us: float
    inter_bytes: float
    intra_bytes: float
    ops: tuple[Op, ...] = field(default=(), compare=False, repr=False)
    pack_us: float = 0.0  # gathering the own capacity slice into a contiguous send buffer
    # Routing metadata (counts, slots, gates) of the token-level exchanges (monta.perfmodel.network.routed)
    meta_inter_bytes: float = 0.0
    meta_intra_bytes: float = 0.0

    def to_dict(self) -> dict:
        meta = {"meta_inter_bytes": self.meta_inter_bytes, "meta_intra_bytes": self.meta_intra_bytes}
        return {
            "variant": self.variant,
            "chunks": self.chunks,
            "time_us": self.total_us,
            "a2a_us": self.a2a_us,
            "ag_us": self.ag_us,
            "copy_us": self.copy_us,
            "pack_us": self.pack_us,
            "inter_bytes": self.inter_bytes,
            "intra_bytes": self.intra_bytes,
            **(meta if self.meta_inter_bytes or self.meta_intra_bytes else {}),
        }


def layout_shapes(layout) -> tuple[GroupShape, GroupShape]:
    """EP and TP group shapes of a ``monta.parallel.ParallelLayout`` (rank 0's groups; layouts are symmetric)."""
    return layout.shape("ep"), layout.shape("tp")
