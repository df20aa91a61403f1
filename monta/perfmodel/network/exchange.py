"""The model's price of one token exchange (``exchange_time``) and MoNTA's chunk choice (``best_chunks``).

Every exchange is priced the same way: its registry entry's ``price`` hook gives the steps of one dispatch
pass of one rank (the core's: ``core_steps``; a plugin's: its own, ``routed``), and the one scheduler
(``schedule.schedule_steps``) runs them on the cluster's links, or on the emulator's shared CPU.
"""

from __future__ import annotations

from functools import lru_cache

from monta.chunking import CHUNK_TIE, Auto, parse_chunks
from monta.hardware.links import Cluster
from monta.perfmodel.network.collectives import GroupShape
from monta.perfmodel.network.routed import routed_shapes
from monta.perfmodel.network.schedule import schedule_steps
from monta.perfmodel.network.steps import ExchangeSteps
from monta.perfmodel.network.timeline import Breakdown, layout_shapes  # noqa: F401 (re-exported)
from monta.variants import EXCHANGES as VARIANTS  # the core exchanges, the ones priced without a routing
from monta.variants import is_chunked as registry_is_chunked


def modelled_as(variant: str) -> str:
    """The model that prices ``variant``: a core exchange's own steps, an exchange's own steps (a registered
    ``price``: itself, token-level, ``routed``), or the core exchange it declared (``model_as``);
    ValueError when it has none or the name is unknown."""
    if variant in VARIANTS:
        return variant
    from monta import variants as registry

    try:
        e = registry.exchange(variant)
    except ValueError as err:
        raise ValueError(
            f"unknown exchange variant {variant!r}: choose one of {', '.join(VARIANTS)} or a plugin's ({err})"
        ) from None
    if e.price is not None:
        return variant
    if e.model_as is None:
        raise ValueError(
            f"exchange {variant!r} (plugin {e.origin}) has no performance model: its plugin can "
            f"register it with price= (its steps) or model_as= one of {', '.join(VARIANTS)}"
        )
    return e.model_as


def takes_chunks(variant: str) -> bool:
    """Whether the model varies ``variant``'s chunk count: the core exchange that prices it pipelines its
    capacity slice in chunks (the registry's ``chunked``); an exchange priced by its own steps never is."""
    xv = modelled_as(variant)
    return xv in VARIANTS and registry_is_chunked(xv)


@lru_cache(maxsize=65536)
def exchange_shapes(
    variant: str,
    S: float,
    ep: GroupShape,
    tp: GroupShape,
    cluster: Cluster,
    chunks: int = 1,
    top_k: int = 1,
    experts: int | None = None,
    row_bytes: float | None = None,
) -> Breakdown:
    """Core of :func:`exchange_time` on group shapes (cached: the planner calls it thousands of times).
    ``top_k``, ``experts``, ``row_bytes``: the routing, for the exchanges priced by their own steps
    (``monta.perfmodel.network.routed``; never chunked); the core exchanges ignore them."""
    variant = modelled_as(variant)
    if variant not in VARIANTS:  # a token-level exchange: its own steps, which read the routing
        return routed_shapes(variant, S, ep, tp, cluster, top_k, experts, row_bytes)
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks={chunks!r}: must be a positive integer (or 'auto')")
    return schedule_steps(variant, core_exchange_steps(variant, S, ep, tp, cluster, chunks), cluster)


def core_exchange_steps(
    variant: str, S: float, ep: GroupShape, tp: GroupShape, cluster: Cluster, chunks: int
) -> ExchangeSteps:
    """A core exchange's steps from its registry entry's ``price`` hook (no routing: one expert per EP
    member, top-1); a chunked one also takes the chunk count."""
    from monta import variants as registry

    price = registry.exchange(variant).price
    return price(S, ep, tp, cluster, 1, ep.size, None, *((chunks,) if registry_is_chunked(variant) else ()))


def exchange_time(
    variant: str,
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
    exchanges priced by their own steps read (``monta.perfmodel.network.routed``).
    """
    from monta.hardware.profile import get_cluster

    cluster = get_cluster(cluster, layout.nodes, layout.gpus_per_node)
    if bytes_per_rank < 0:
        raise ValueError(f"bytes_per_rank={bytes_per_rank}: must be >= 0")
    ep, tp = layout_shapes(layout)
    asked = parse_chunks(chunks)
    if isinstance(asked, Auto):
        S = float(bytes_per_rank)
        chunks = best_chunks(S, ep, tp, cluster, candidates=asked.candidates) if takes_chunks(variant) else 1
    else:
        chunks = asked.n
    # the routing reaches the exchanges priced by their own steps; a core model's cache key stays without it
    routing = (top_k, experts, row_bytes) if modelled_as(variant) not in VARIANTS else ()
    return exchange_shapes(variant, float(bytes_per_rank), ep, tp, cluster, int(chunks), *routing)


@lru_cache(maxsize=8192)
def best_chunks(
    S: float,
    ep: GroupShape,
    tp: GroupShape,
    cluster: Cluster,
    max_chunks: int = 16,
    candidates: tuple[int, ...] | None = None,
) -> int:
    """The chunk count among ``candidates`` (default 1..``max_chunks``) with the least predicted
    ``monta`` exchange time for a buffer of ``S`` bytes (fewer chunks win within ``CHUNK_TIE``)."""
    cands = candidates or tuple(range(1, max_chunks + 1))
    best_k, best_t = None, float("inf")
    for k in sorted(cands):
        t = exchange_shapes("monta", S, ep, tp, cluster, k).total_us
        if best_k is None or t < best_t * (1 - CHUNK_TIE):
            best_k, best_t = k, t
    return best_k
