"""Exchanges priced by their own timeline steps: a registered exchange's ``price`` hook
(``monta.exchanges``; the baselines' are in ``monta_baselines.models``) returns the steps of ONE dispatch
pass of one rank (the combine is its mirror: the same bytes the other way), and this module schedules
them (``routed_shapes``) with the building blocks the hooks price their steps with (``call``,
``gather``, ``counts``, ``flat_a2a``) and the flat reference (an entry flagged ``reference``, the core's
deepspeed, under these conventions).

Inputs: ``S`` = bytes of one rank's DeepSpeed dispatch buffer [E, C, M]; ``experts`` E (the whole EP
group; default one per member); ``top_k`` k; the EP group (P members on N nodes, L = P/N per node) and
the TP group (TP ranks, inside a node). Routing is the benchmark's BALANCED routing: every expert gets
exactly C routes, each token a uniformly random k-subset of distinct experts. So a rank holds
T = E C / k tokens of S / k bytes (``S_tok``); each TP rank moves its 1/TP token shard (S_tok / TP).
A node of E/N experts is touched by a token with probability 1 - C(E - E/N, k) / C(E, k)
(:func:`touch_probability`), a rank of E/P experts with 1 - C(E - E/P, k) / C(E, k).

Conventions (documented decisions):

* Bytes (``Breakdown.inter_bytes`` / ``intra_bytes``) are what the rank delivers to each peer,
  classified by link: ``monta.comm.accounting.TrafficMeter``'s count without the routing metadata
  (``payload``). Metadata (the count exchanges, slots, gates, token indices; op ``meta``) goes to
  ``Breakdown.meta_inter_bytes`` / ``meta_intra_bytes`` and its calls are priced in the time.
* Time: messages. On the emulator each call costs the link's latency once per message the rank sends
  on that link (gloo's sends, one after another); on a real cluster once per call plus
  :data:`NIC_MESSAGE_US` per message to another node (NCCL groups a call's sends). Bytes go at the
  link's bandwidth and efficiency (the collectives model's size convention: an AllToAll's efficiency
  at its nccl-tests size, the rank's buffer; a hierarchical AllToAll's inter phase on the emulator at
  the size of a flat one with the same message size, S x L, as the shaper's bursts see it), so fewer,
  larger messages pay off. The core's steps (``core_steps``) charge one latency per
  collective, so the flat reference these models are compared with (an entry flagged ``reference``: the
  core's deepspeed) is priced here under the same convention in :func:`routed_shapes` (at large sizes it is
  the core's deepspeed to within the latencies).
* Metadata rows: a step priced from ``row_bytes`` (one token row) is left out when it is None.
* EP AllGathers that span nodes: a ring on real clusters (NCCL: the NICs carry the ring's bytes,
  ``collectives.allgather``; one latency per ring step), direct on the emulator (its duplex transport
  sends the shard to every peer: an AllToAll of the same block to all).
* The emulator (``cluster.host_cores``): the fluid timeline, with the core's calibrated demands: an
  AllToAll-like call its ``a2a_cpu_us`` (fixed per call, per inter-node byte), a gather its
  ``ag_cpu_us`` (per message, per byte), copies at ``copy_GBps``; all in machine time.
* Every step runs after the previous one (none is chunked or overlapped); one scheduler runs these
  steps and the core exchanges' (``schedule.schedule_steps``).
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

from monta import variants as registry
from monta.hardware.links import Cluster
from monta.perfmodel.network import collectives
from monta.perfmodel.network.collectives import ZERO, CollTime, GroupShape
from monta.perfmodel.network.schedule import schedule_steps
from monta.perfmodel.network.steps import Step  # the plugins' price hooks import it from here

COUNT_BYTES = 8  # int64 row count per peer (the 'notify' of every uneven exchange)
SLOT_BYTES = 8  # int64 slot (or token index, or source member) per route / row
GATE_BYTES = 4  # fp32 gate per route
# A real cluster's cost per message a rank sends to another node (us), beside the once-per-call latency:
# an assumption (NCCL's proxy posts a work request chain per peer; no public table isolates it), chosen
# inside the range over which the published crossover keeps its direction: Tutel's 2DH is slower than the
# flat AllToAll at 16 GPUs and faster beyond a crossover at 1, 4 and 16 MiB per GPU for any value in
# 0.5-2 us (tests/test_perfmodel.py; from 3 us on, 2DH wins at 16 GPUs at 1 MiB). The crossover moves
# with it: at 16 MiB per GPU 512 GPUs at 0.5 us, 256 at 1, 128 at 2. Tutel's maintainers put it at about
# 256 A100s (microsoft/Tutel#214, message size not stated).
NIC_MESSAGE_US = 1.0


def routed_exchanges() -> tuple[str, ...]:
    """The registered token-level exchanges: those priced by their own steps that read the routing
    (``reads_routing``; the core's do not), in registration order."""
    return tuple(n for n, e in registry.exchanges().items() if e.price is not None and e.reads_routing)


def reference_exchanges() -> tuple[str, ...]:
    """The registered exchanges flagged ``reference`` (the core's deepspeed): the flat exchanges the
    token-level ones are compared with, priced here under the same conventions (:func:`reference_price`)."""
    return tuple(n for n, e in registry.exchanges().items() if e.reference)


def touch_probability(experts: int, top_k: int, groups: int) -> float:
    """P(a token's uniformly random k-subset of ``experts`` hits a given one of ``groups`` equal groups
    of experts): 1 - C(E - E/groups, k) / C(E, k)."""
    check_routing(experts, top_k, groups)
    return 1.0 - comb(experts - experts // groups, top_k) / comb(experts, top_k)


def check_routing(experts: int, top_k: int, members: int) -> None:
    if not isinstance(experts, int) or experts < 1 or experts % members:
        raise ValueError(f"experts={experts!r}: need a positive multiple of the EP group size {members}")
    if not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ValueError(f"top_k={top_k!r}: need 1 <= top_k <= experts ({experts})")


def latency(cluster: Cluster, cls: str, op: str | None) -> float:
    return cluster.link(cls, op).latency_us


def call(
    cluster: Cluster,
    c: int,
    *,
    intra_msgs: int = 0,
    inter_msgs: int = 0,
    intra_bytes: float = 0.0,
    inter_bytes: float = 0.0,
    size: float,
    op: str = "alltoall",
) -> CollTime:
    """A direct exchange: the rank sends ``intra_msgs`` messages (``intra_bytes`` in all) inside its node
    and ``inter_msgs`` (``inter_bytes``) to other nodes, while the ``c`` ranks of every node do the same.
    The ``collectives`` model's link terms; the latency as the cluster's library pays it:

    * the emulator (``cluster.host_cores``): once per message, one after another (gloo's sends, as
      calibrated);
    * a real cluster: NCCL posts a call's sends as one group, so the link latency is paid once per call,
      and each message to another node costs the sender :data:`NIC_MESSAGE_US` (its proxy posts one work
      request chain per peer). Without this term a flat AllToAll over P ranks paid P - L serial latencies
      and every hierarchical exchange looked faster from 16 GPUs on, against Tutel's measurements."""
    serial = bool(cluster.host_cores)
    ti = tn = 0.0
    if intra_msgs and intra_bytes > 0:
        link = cluster.link("intra", op)
        moved = intra_bytes * (c if cluster.intra_shared else 1)
        ti = (intra_msgs if serial else 1) * link.latency_us + link.transfer_us(moved, size)
        if cluster.intra_machine_shared:
            ti *= cluster.nodes
    if inter_msgs and inter_bytes > 0:
        link = cluster.link("inter", op)
        lat = inter_msgs * link.latency_us if serial else link.latency_us + inter_msgs * NIC_MESSAGE_US
        tn = lat + link.transfer_us(inter_bytes * c, size) / cluster.nics_per_node
    return CollTime(max(ti, tn), ti, tn, intra_bytes, inter_bytes)


def gather(in_bytes: float, g: GroupShape, cluster: Cluster) -> CollTime:
    """AllGather of ``in_bytes`` per member over ``g``; bytes as delivered per peer (intra: members of the
    node, inter: the others). Inside a node (or on real clusters) the ring of ``collectives.allgather``
    with one latency per ring step; across the emulator's nodes direct (every peer gets the shard)."""
    n, p = g.size, g.ranks_per_node
    if n == 1 or in_bytes <= 0:
        return ZERO
    intra_b, inter_b = (p - 1) * in_bytes, (n - p) * in_bytes
    if g.nodes > 1 and cluster.host_cores:
        return call(
            cluster,
            g.concurrent_per_node,
            intra_msgs=p - 1,
            inter_msgs=n - p,
            intra_bytes=intra_b,
            inter_bytes=inter_b,
            size=n * in_bytes,
            op="allgather",
        )
    ring = collectives.allgather(in_bytes, g, cluster)
    ti, tn = ring.intra_us, ring.inter_us
    if g.nodes > 1:  # the ring's steps wait for its slowest edge: the inter-node one
        tn += (n - 2) * latency(cluster, "inter", "allgather")
    elif ti > 0:
        extra = (n - 2) * latency(cluster, "intra", "allgather")
        ti += extra * cluster.nodes if cluster.intra_machine_shared else extra
    return CollTime(max(ti, tn), ti, tn, intra_b, inter_b)


def counts(g: GroupShape, cluster: Cluster) -> CollTime:
    """The int64 count exchange of an uneven exchange over ``g`` (8 B to every peer)."""
    n, p = g.size, g.ranks_per_node
    if n == 1:
        return ZERO
    return call(
        cluster,
        g.concurrent_per_node,
        intra_msgs=p - 1,
        inter_msgs=n - p,
        intra_bytes=COUNT_BYTES * (p - 1),
        inter_bytes=COUNT_BYTES * (n - p),
        size=COUNT_BYTES * n,
    )


def flat_a2a(part: float, ep: GroupShape, cluster: Cluster) -> CollTime:
    P, L = ep.size, ep.ranks_per_node
    return call(
        cluster,
        ep.concurrent_per_node,
        intra_msgs=L - 1,
        inter_msgs=P - L,
        intra_bytes=part * (L - 1) / P,
        inter_bytes=part * (P - L) / P,
        size=part,
    )


def reference_steps(S: float, ep: GroupShape, tp: GroupShape, cluster: Cluster) -> list[Step]:
    """The flat exchange (deepspeed: pack the 1/TP capacity slice, AllToAll over EP, AllGather over TP,
    copy into place) under this module's conventions."""
    part, TP = S / tp.size, tp.size
    out: list[Step] = []
    if TP > 1:
        out.append(Step("pack", "pack", nbytes=part))
    out.append(Step("alltoall", "a2a", flat_a2a(part, ep, cluster)))
    if TP > 1:
        out.append(Step("allgather", "ag", gather(part, tp, cluster), gather=True, msgs=TP - 1))
    out.append(Step("copy", "copy", nbytes=S))
    return out


def reference_price(S, ep, tp, cluster, top_k, experts, row_bytes, chunks) -> list[Step]:
    """A reference exchange's price under this module's conventions (the one price signature)."""
    return reference_steps(S, ep, tp, cluster)


def token_level_price(exchange: str):
    """The price of ``exchange`` under this module's conventions: a reference's (:func:`reference_price`),
    or a token-level exchange's registered ``price`` hook."""
    e = registry.exchanges().get(exchange)
    if e is not None and e.reference:
        return reference_price
    if exchange not in routed_exchanges():
        have = routed_exchanges() + reference_exchanges()
        raise ValueError(f"no token-level model for {exchange!r}: choose one of {', '.join(have)}")
    return e.price


@lru_cache(maxsize=16384)
def routed_shapes(
    exchange: str,
    S: float,
    ep: GroupShape,
    tp: GroupShape,
    cluster: Cluster,
    top_k: int = 1,
    experts: int | None = None,
    row_bytes: float | None = None,
):
    """One dispatch pass of ``exchange`` (one of :func:`routed_exchanges`, or a reference: the flat
    exchange under the same conventions) for a buffer of ``S`` bytes per rank, as a
    ``exchange.Breakdown``: its steps, scheduled. ``experts``: E (default: one per EP member);
    ``row_bytes``: bytes of one token row (hidden x element size), which the row metadata needs (None:
    only the count exchanges are priced as metadata)."""
    price = token_level_price(exchange)
    if S < 0:
        raise ValueError(f"S={S}: must be >= 0")
    top_k, E, row_bytes = checked_routing(ep, top_k, experts, row_bytes)
    return schedule_steps(exchange, price(float(S), ep, tp, cluster, top_k, E, row_bytes, 1), cluster)


def checked_routing(ep: GroupShape, top_k: int, experts: int | None, row_bytes: float | None):
    """(top_k, experts, row_bytes) with ``experts`` defaulting to one per EP member; ValueError for a
    routing the EP group cannot hold or a row size that is not positive."""
    experts = ep.size if experts is None else experts
    check_routing(experts, top_k, ep.size)
    if row_bytes is not None and not row_bytes > 0:
        raise ValueError(f"row_bytes={row_bytes!r}: must be > 0 (or None)")
    return top_k, experts, row_bytes


def routed_exchange_time(
    exchange: str,
    bytes_per_rank: float,
    layout,
    cluster: Cluster | str | None = None,
    *,
    top_k: int = 1,
    experts: int | None = None,
    row_bytes: float | None = None,
):
    """:func:`routed_shapes` on a ``monta.parallel.ParallelLayout`` (``cluster``: as ``exchange_time``)."""
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.network.timeline import layout_shapes

    cluster = get_cluster(cluster, layout.nodes, layout.gpus_per_node)
    ep, tp = layout_shapes(layout)
    return routed_shapes(exchange, float(bytes_per_rank), ep, tp, cluster, top_k, experts, row_bytes)


def inter_bytes_formula(
    exchange: str, bytes_per_rank: float, layout, *, top_k: int = 1, experts: int | None = None
) -> tuple[str, float]:
    """Expected inter-node payload bytes one rank sends in one dispatch pass of ``exchange`` (any registered
    exchange with an ``inter_bytes`` formula): the formula as text (S: ``bytes_per_rank``, N nodes, L EP
    members per node, TP, E experts, k top-k) and its value on ``layout``."""
    from monta import variants as registry
    from monta.exchanges import LayoutBytes
    from monta.perfmodel.network.timeline import layout_shapes

    ep, tp = layout_shapes(layout)
    E = ep.size if experts is None else experts
    check_routing(E, top_k, ep.size)
    e = registry.exchanges().get(exchange)
    if e is None or e.inter_bytes is None:
        have = [n for n, x in registry.exchanges().items() if x.inter_bytes is not None]
        raise ValueError(f"no inter-node byte formula for {exchange!r}: choose one of {', '.join(have)}")
    return e.inter_bytes(LayoutBytes(float(bytes_per_rank), ep.nodes, ep.ranks_per_node, tp.size, E, top_k))
