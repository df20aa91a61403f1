"""The steps of an exchange's timeline: what one dispatch pass of one rank does and what each step costs
(a call's link times, a copy's bytes). Every registered exchange is priced as a list of these, the core's
(``core_steps``) as the plugins' token-level ones, and one scheduler runs them all
(``schedule.schedule_steps``).
"""

from __future__ import annotations

from dataclasses import dataclass

from monta.perfmodel.network.collectives import ZERO, CollTime

COPY_ROLES = ("pack", "copy")  # the roles that are memory copies (``nbytes``); the others are calls (``ct``)


@dataclass(frozen=True)
class Step:
    """One step of an exchange's timeline. It starts when the steps named in ``after`` have ended (None:
    the step before it; ``()``: at once) and, on a real cluster, its resources are free."""

    name: str  # unique in its list: ``after`` names it
    role: str  # a2a | ag | pack | copy | meta
    ct: CollTime = ZERO  # a call (role a2a, ag or meta)
    nbytes: float = 0.0  # a copy (role pack or copy)
    gather: bool = False  # a call priced as a gather on the emulator's CPU (ag_cpu_us)
    msgs: int = 0  # its messages (the emulator's per-message CPU step)
    after: tuple[str, ...] | None = None
    # A copy's resource on a real cluster: the copy engine, or the stream the copy is queued on (the core
    # packs its slice on the AllToAll's stream, so a pack waits for the AllToAll before it, not for a copy).
    stream: str = "copy"
    # A collective called even when it moves nothing (the core's AllToAll over its buffer): the emulator
    # charges its fixed per-call CPU anyway. A token-level step with nothing to send is no call: no CPU.
    runs_empty: bool = False
    # Routing data (gates, routes) sent in the same batch as a call's rows: (inter, intra) bytes of ``ct``
    # that are metadata, not payload (the bench meters them as ``meta``).
    riders: tuple[float, float] = (0.0, 0.0)

    @property
    def is_copy(self) -> bool:
        return self.role in COPY_ROLES


@dataclass(frozen=True)
class ExchangeSteps:
    """A price hook's answer when a list of steps is not all it says: the ``chunks`` its steps pipeline,
    and ``components``: the steps whose times alone the ``Breakdown`` reports per role (``a2a_us``,
    ``ag_us``, ``copy_us``, ``pack_us``). The core's are its unchunked pass, so a chunked exchange reports
    the whole AllToAll and the whole AllGather as the benchmark's component rows measure them; None (a
    plain list's): each role's time as scheduled."""

    steps: tuple[Step, ...]
    chunks: int = 1
    components: tuple[Step, ...] | None = None
