"""Token-exchange timelines for ``legacy``, ``deepspeed`` and ``monta(chunks)`` on a resource model.

Resources are the inter-node link, the intra-node link and the copy engine; an operation starts when
its dependencies are done and every resource it uses is free, so overlap happens only across links.
"""

from __future__ import annotations

from functools import lru_cache

from monta.chunking import Auto, monta_weights, parse_chunks
from monta.perfmodel.network import host_cpu
from monta.perfmodel.network.collectives import CollTime, GroupShape, allgather, alltoall
from monta.perfmodel.network.fluid import FluidTimeline
from monta.perfmodel.network.links import Cluster
from monta.perfmodel.network.routed import routed_shapes
from monta.perfmodel.network.timeline import Breakdown, Timeline, _res, layout_shapes  # noqa: F401 (re-exported)
from monta.variants import EXCHANGES as VARIANTS  # the core exchanges, the ones modelled here
from monta.variants import is_chunked as registry_is_chunked

# Semantics (the lead's monta.comm does the same): the dispatch buffer [E, C, M] of S bytes is
# identical on every TP rank. legacy: every TP rank AllToAlls all S over the EP group (inter-node
# bytes x TP), then copies the received buffer into place. deepspeed: pack the own 1/TP capacity
# slice -> AllToAll(EP) -> AllGather(TP) -> copy into place, sequentially. monta: the slice cut into
# `chunks` pieces, AllToAll(i+1) runs while AllGather(i) and copy(i) run. Combine and both backward
# passes have the same shape.


def modelled_as(variant: str) -> str:
    """The model that prices ``variant``: a core exchange's own, an exchange's own steps (a registered
    ``price``: itself, scheduled by ``routed``), or the core exchange it declared (``model_as``);
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
    if variant not in VARIANTS:  # priced by its own registered steps
        return routed_shapes(variant, S, ep, tp, cluster, top_k, experts, row_bytes)
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks={chunks!r}: must be a positive integer (or 'auto')")
    if cluster.host_cores:
        return _host_shared_exchange(variant, S, ep, tp, cluster, chunks)
    ntp = tp.size
    copy_us = S / (cluster.copy_GBps * 1e3)  # the received (and gathered) buffer copied into place
    tl = Timeline()
    if variant == "legacy" or ntp == 1:
        a2a = alltoall(S, ep, cluster)
        end = tl.add("alltoall", _res(a2a))
        tl.add("copy", {"copy": copy_us}, after=(end,))
        return Breakdown(
            variant, 1, tl.makespan, a2a.time_us, 0.0, copy_us, a2a.inter_bytes, a2a.intra_bytes, tuple(tl.ops)
        )
    part = S / ntp
    whole_a2a, whole_ag = alltoall(part, ep, cluster), allgather(part, tp, cluster)
    k = 1 if variant == "deepspeed" else chunks
    shares = monta_weights(k)  # the exchange's own split (first chunk half size)
    # The own capacity slice is strided in [E, C, M]: packing it is a copy on the AllToAll's stream.
    pack_us = part / (cluster.copy_GBps * 1e3)
    prev_a2a = prev_ag = 0.0
    inter = intra = 0.0
    for i, w in enumerate(shares):
        a2a, ag = alltoall(part * w, ep, cluster), allgather(part * w, tp, cluster)
        inter, intra = inter + a2a.inter_bytes + ag.inter_bytes, intra + a2a.intra_bytes + ag.intra_bytes
        packed = tl.add(f"pack[{i}]", {"a2a_stream": pack_us * w}, after=(prev_a2a,))
        prev_a2a = tl.add(f"alltoall[{i}]", _res(a2a), after=(packed,))
        prev_ag = tl.add(f"allgather[{i}]", _res(ag), after=(prev_a2a, prev_ag))
        tl.add(f"copy[{i}]", {"copy": copy_us * w}, after=(prev_ag,))
    return Breakdown(
        variant, k, tl.makespan, whole_a2a.time_us, whole_ag.time_us, copy_us, inter, intra, tuple(tl.ops), pack_us
    )


def _host_shared_exchange(
    variant: str, S: float, ep: GroupShape, tp: GroupShape, cluster: Cluster, chunks: int
) -> Breakdown:
    """The emulator: every rank runs on the same few cores, so the machine's CPU is a resource that
    overlapping operations share (a fluid timeline), next to the nodes' NICs (``host_cpu``: its terms)."""

    def a2a_demand(ct: CollTime) -> dict[str, float]:
        return host_cpu.alltoall_demand(ct, cluster)

    def ag_demand(ct: CollTime, name: str) -> dict[str, float]:
        return host_cpu.gather_demand(ct, name, tp.size - 1, cluster)

    def copy_demand(nbytes: float) -> dict[str, float]:
        return host_cpu.copy_demand(nbytes, cluster)

    tl = FluidTimeline()
    copy_us = copy_demand(S)["cpu"]
    if variant == "legacy" or tp.size == 1:
        a2a = alltoall(S, ep, cluster)
        tl.add("copy", copy_demand(S), after=(tl.add("alltoall", a2a_demand(a2a)),))
        ops = tl.run()
        return Breakdown(
            variant,
            1,
            max(o.end_us for o in ops),
            a2a.time_us,
            0.0,
            copy_us,
            a2a.inter_bytes,
            a2a.intra_bytes,
            tuple(ops),
        )
    part = S / tp.size
    whole_a2a, whole_ag = alltoall(part, ep, cluster), allgather(part, tp, cluster)
    k = 1 if variant == "deepspeed" else chunks
    prev_a2a = prev_ag = None
    inter = intra = 0.0
    for i, w in enumerate(monta_weights(k)):
        a2a, ag = alltoall(part * w, ep, cluster), allgather(part * w, tp, cluster)
        inter, intra = inter + a2a.inter_bytes + ag.inter_bytes, intra + a2a.intra_bytes + ag.intra_bytes
        packed = tl.add(f"pack[{i}]", copy_demand(part * w), after=(prev_a2a,))
        prev_a2a = tl.add(f"alltoall[{i}]", a2a_demand(a2a), after=(packed,))
        prev_ag = tl.add(f"allgather[{i}]", ag_demand(ag, f"allgather[{i}]"), after=(prev_a2a, prev_ag))
        tl.add(f"copy[{i}]", copy_demand(S * w), after=(prev_ag,))
    ops = tl.run()
    return Breakdown(
        variant,
        k,
        max(o.end_us for o in ops),
        whole_a2a.time_us,
        whole_ag.time_us,
        copy_us,
        inter,
        intra,
        tuple(ops),
        copy_demand(part)["cpu"],
    )


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
    from monta.perfmodel.network.profile import get_cluster

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


# Fewer chunks win ties: a chunk count has to buy at least this much to be worth its launches.
_TIE = 0.005


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
    ``monta`` exchange time for a buffer of ``S`` bytes (fewer chunks win within ``_TIE``)."""
    cands = candidates or tuple(range(1, max_chunks + 1))
    best_k, best_t = None, float("inf")
    for k in sorted(cands):
        t = exchange_shapes("monta", S, ep, tp, cluster, k).total_us
        if best_k is None or t < best_t * (1 - _TIE):
            best_k, best_t = k, t
    return best_k
