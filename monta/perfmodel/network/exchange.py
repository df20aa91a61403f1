"""The model's price of one token exchange (``exchange_time``) and MoNTA's chunk choice (``best_chunks``).

Every exchange is priced the same way: its registry entry's ``price`` hook (one signature for all,
``monta.exchanges``) gives the steps of one dispatch pass of one rank (the core's: ``core_steps``; a
plugin's: its own, ``routed``), and the one scheduler (``schedule.schedule_steps``) runs them on the
cluster's links, or on the emulator's shared CPU. What differs between exchanges is read from their entries
(``chunked``, ``reads_routing``, ``model_as``), never from their names.
"""

from __future__ import annotations

from functools import lru_cache

from monta import variants as registry
from monta.chunking import CHUNK_TIE, Auto, parse_chunks
from monta.hardware.links import Cluster
from monta.parallel import GroupShape
from monta.perfmodel.network.routed import checked_routing
from monta.perfmodel.network.schedule import schedule_steps
from monta.perfmodel.network.timeline import Breakdown, layout_shapes  # noqa: F401 (re-exported)


def priced_entry(exchange: str):
    """The registry entry whose ``price`` prices ``exchange``: its own, or the one it declared
    (``model_as``); ValueError when it has none or the name is unknown."""
    e = registry.exchange(exchange)  # ValueError naming the registered ones
    if e.price is not None:
        return e
    if e.model_as is None:
        priced = [n for n, x in registry.exchanges().items() if x.price is not None]
        raise ValueError(
            f"exchange {exchange!r} (plugin {e.origin}) has no performance model: its plugin can "
            f"register it with price= (its steps) or model_as= one of {', '.join(priced)}"
        )
    return registry.exchange(e.model_as)


def modelled_as(exchange: str) -> str:
    """The name of the exchange whose price prices ``exchange`` (:func:`priced_entry`)."""
    return priced_entry(exchange).name


def takes_chunks(exchange: str) -> bool:
    """Whether the model varies ``exchange``'s chunk count: the entry that prices it is ``chunked``."""
    return priced_entry(exchange).chunked


@lru_cache(maxsize=65536)
def exchange_shapes(
    exchange: str,
    S: float,
    ep: GroupShape,
    tp: GroupShape,
    cluster: Cluster,
    chunks: int = 1,
    top_k: int = 1,
    experts: int | None = None,
    row_bytes: float | None = None,
) -> Breakdown:
    """Core of :func:`exchange_time` on group shapes (cached: the planner calls it thousands of times):
    the steps of the entry that prices ``exchange``, scheduled. ``chunks`` reaches a ``chunked`` entry
    (else 1); ``top_k``, ``experts`` (default one per EP member), ``row_bytes`` (one token row, for the
    routing metadata; None: not priced) reach an entry that ``reads_routing`` (else the balanced top-1
    routing)."""
    e = priced_entry(exchange)
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks={chunks!r}: must be a positive integer (or 'auto')")
    if S < 0:
        raise ValueError(f"S={S}: must be >= 0")
    top_k, experts, row_bytes = routing_read(e, ep, top_k, experts, row_bytes)
    steps = e.price(float(S), ep, tp, cluster, top_k, experts, row_bytes, chunks if e.chunked else 1)
    return schedule_steps(e.name, steps, cluster)


def routing_read(e, ep: GroupShape, top_k: int, experts: int | None, row_bytes: float | None):
    """The routing ``e``'s price sees, checked: the run's when it ``reads_routing``, else the balanced
    top-1 routing over one expert per EP member with no row metadata."""
    if not e.reads_routing:
        return 1, ep.size, None
    return checked_routing(ep, top_k, experts, row_bytes)


def exchange_time(
    exchange: str,
    bytes_per_rank: float,
    layout,
    cluster: Cluster | str | None = None,
    chunks=1,
    *,
    top_k: int = 1,
    experts: int | None = None,
    row_bytes: float | None = None,
) -> Breakdown:
    """Predicted time and bytes of one token exchange (dispatch or combine) of ``bytes_per_rank``.

    ``chunks``: anything ``monta.chunking.parse_chunks`` reads; ``Auto`` is the model's own choice
    among its candidates (:func:`best_chunks`). ``top_k``, ``experts`` (default: one per EP member),
    ``row_bytes`` (one token row's bytes, for the routing metadata): the routing, which only the
    entries that ``reads_routing`` read (the token-level ones, ``monta.perfmodel.network.routed``).
    """
    from monta.hardware.profile import get_cluster

    cluster = get_cluster(cluster, layout.nodes, layout.gpus_per_node)
    if bytes_per_rank < 0:
        raise ValueError(f"bytes_per_rank={bytes_per_rank}: must be >= 0")
    ep, tp = layout_shapes(layout)
    asked = parse_chunks(chunks)
    e = priced_entry(exchange)
    if isinstance(asked, Auto):
        S = float(bytes_per_rank)
        chunks = best_chunks(S, ep, tp, cluster, candidates=asked.candidates, exchange=e.name) if e.chunked else 1
    else:
        chunks = asked.n
    # an entry that does not read the routing keeps one cache key whatever the run's routing
    routing = (top_k, experts, row_bytes) if e.reads_routing else ()
    return exchange_shapes(exchange, float(bytes_per_rank), ep, tp, cluster, int(chunks), *routing)


@lru_cache(maxsize=8192)
def best_chunks(
    S: float,
    ep: GroupShape,
    tp: GroupShape,
    cluster: Cluster,
    max_chunks: int = 16,
    candidates: tuple[int, ...] | None = None,
    exchange: str | None = None,
) -> int:
    """The chunk count among ``candidates`` (default 1..``max_chunks``) with the least predicted time of
    ``exchange`` (default: the registry's first chunked exchange, the core's ``monta``) for a buffer of
    ``S`` bytes (fewer chunks win within ``CHUNK_TIE``)."""
    exchange = exchange or registry.chunked_exchanges()[0]
    cands = candidates or tuple(range(1, max_chunks + 1))
    best_n, best_t = None, float("inf")
    for n in sorted(cands):
        t = exchange_shapes(exchange, S, ep, tp, cluster, n).total_us
        if best_n is None or t < best_t * (1 - CHUNK_TIE):
            best_n, best_t = n, t
    return best_n
