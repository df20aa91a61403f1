"""The parts of a training-step variant besides its exchange (``monta.exchanges``): an MoE schedule, a
gradient synchronization, and what a schedule sees when it is built on a rank and when the performance
model prices it. Registered in ``monta.variants``, which re-exports them; torch-free."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OverlapInputs:
    """What a schedule's performance model sees of one layer (microseconds, per micro-batch):
    the exchange's forward and backward time (dispatch + combine), attention and MoE compute forward,
    top-k, the micro-batch in sequences and the pipeline's chunk count."""

    ex_fwd_us: float
    ex_bwd_us: float
    attn_fwd_us: float
    moe_fwd_us: float
    top_k: int
    micro_batch: int
    partitions: int


@dataclass
class ScheduleContext:
    """What a schedule's ``build`` gets on each rank: the model (``MoETransformer``), its config, the
    exchange's mesh (``monta.mesh.Mesh``), the pipeline's chunk count and Lancet-style batch partitions."""

    model: Any
    cfg: Any
    mesh: Any
    chunks: int
    partitions: int


@dataclass(frozen=True)
class Schedule:
    """An MoE schedule. ``build(ctx)`` (on every rank, collective where it makes groups) returns the
    object ``MoETransformer.set_schedule`` takes, or ``None`` for DeepSpeed's own forward; an object with
    ``begin_backward``/``end_backward`` gets them called around each backward. ``check_model(cfg)``
    raises ValueError for a model the schedule cannot run. ``hidden_us(OverlapInputs)`` returns the
    (forward, backward) exchange time per layer the schedule hides behind compute (performance model).
    ``needs``: the exchange capabilities it cannot run without (``monta.exchanges``, e.g.
    ``CAPACITY_PASSES``); a composition with an exchange that lacks one is refused up front. ``own_gate``:
    it gates with its own router, which ``bench step --routing`` cannot replace (refused up front)."""

    name: str
    build: Callable[[Any], Any] | None = None
    check_model: Callable[[Any], None] | None = None
    own_gate: bool = False
    hidden_us: Callable[[OverlapInputs], tuple[float, float]] | None = None
    needs: frozenset[str] = frozenset()
    about: str = ""
    origin: str = "monta"


@dataclass(frozen=True)
class Sync:
    """A gradient synchronization. ``priority``: gradient AllReduce on a background thread that starts a
    micro-op only while no AllToAll waits or runs (``monta.comm.priority.PriorityGradSync``);
    ``chunk_bytes``: its micro-op size (``None`` = one per gradient). Without priority: DeepSpeed's
    reduction after backward."""

    name: str
    priority: bool = False
    chunk_bytes: int | None = None
    about: str = ""
    origin: str = "monta"
