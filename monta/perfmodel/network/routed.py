"""Performance models of the token-level and hierarchical exchanges ``2dh`` (Tutel's 2D hierarchical
AllToAll), ``allgather`` (Megatron-Core's AllGather dispatcher) and ``node-dedup`` (DeepEP normal /
DeepSeek-V3 node-limited dispatch), each priced for ONE dispatch pass of one rank (the combine is its
mirror: the same bytes the other way) as the baselines implement them (``baselines/hier2d.py``,
``agdispatch.py``, ``dedup.py``).

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
* Time: per-message latency. Each call costs the link's latency once per message the rank sends on
  that link (messages posted one after another), plus the bytes at the link's bandwidth and
  efficiency (the collectives model's size convention: an AllToAll's efficiency at its nccl-tests
  size; the 2D AllToAll's inter phase at the size of a flat one with the same message size, S x L,
  as ``collectives.alltoall(hierarchical=True)``). Fewer, larger messages are 2dh's advantage. The
  core model (``exchange.exchange_shapes``) charges one latency per collective, so the flat reference
  these models are compared with is priced here under the same convention: ``"deepspeed"`` in
  :func:`routed_shapes` (at large sizes it is the core's deepspeed to within the latencies).
* EP AllGathers that span nodes: a ring on real clusters (NCCL: the NICs carry the ring's bytes,
  ``collectives.allgather``; one latency per ring step), direct on the emulator (its duplex transport
  sends the shard to every peer: an AllToAll of the same block to all).
* The emulator (``cluster.host_cores``): the fluid timeline, with the core's calibrated demands: an
  AllToAll-like call its ``a2a_cpu_us`` (fixed per call, per inter-node byte), a gather its
  ``ag_cpu_us`` (per message, per byte), copies at ``copy_GBps``; all in machine time.
* Every step of these exchanges runs after the previous one (none is chunked or overlapped).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import comb

from monta.perfmodel.network import collectives as C
from monta.perfmodel.network.collectives import ZERO, CollTime, GroupShape
from monta.perfmodel.network.links import Cluster

ROUTED = ("2dh", "allgather", "node-dedup")
REFERENCE = "deepspeed"  # the flat exchange priced under the same conventions (see above)
CORE_FORMULAS = ("legacy", "deepspeed", "monta")

COUNT_BYTES = 8  # int64 row count per peer (the 'notify' of every uneven exchange)
SLOT_BYTES = 8  # int64 slot (or token index, or source member) per route / row
GATE_BYTES = 4  # fp32 gate per route


def routed_exchanges() -> tuple[str, ...]:
    """The exchanges priced by this module's own models."""
    return ROUTED


def touch_probability(experts: int, top_k: int, groups: int) -> float:
    """P(a token's uniformly random k-subset of ``experts`` hits a given one of ``groups`` equal groups
    of experts): 1 - C(E - E/groups, k) / C(E, k)."""
    _check_routing(experts, top_k, groups)
    return 1.0 - comb(experts - experts // groups, top_k) / comb(experts, top_k)


def _check_routing(experts: int, top_k: int, members: int) -> None:
    if not isinstance(experts, int) or experts < 1 or experts % members:
        raise ValueError(f"experts={experts!r}: need a positive multiple of the EP group size {members}")
    if not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ValueError(f"top_k={top_k!r}: need 1 <= top_k <= experts ({experts})")


@dataclass(frozen=True)
class _Step:
    name: str
    role: str  # a2a | ag | pack | copy | meta
    ct: CollTime = ZERO  # a call (role a2a, ag or meta)
    nbytes: float = 0.0  # a copy (role pack or copy)
    gather: bool = False  # a call priced as a gather on the emulator's CPU (ag_cpu_us)
    msgs: int = 0  # its messages (the emulator's per-message CPU step)


def _lat(cluster: Cluster, cls: str, op: str | None) -> float:
    return cluster.link(cls, op).latency_us


def _call(
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
    The ``collectives`` model's link terms, with the latency once per message."""
    ti = tn = 0.0
    if intra_msgs and intra_bytes > 0:
        link = cluster.link("intra", op)
        moved = intra_bytes * (c if cluster.intra_shared else 1)
        ti = intra_msgs * link.latency_us + link.transfer_us(moved, size)
        if cluster.intra_machine_shared:
            ti *= cluster.nodes
    if inter_msgs and inter_bytes > 0:
        link = cluster.link("inter", op)
        tn = inter_msgs * link.latency_us + link.transfer_us(inter_bytes * c, size) / cluster.nics_per_node
    return CollTime(max(ti, tn), ti, tn, intra_bytes, inter_bytes)


def _gather(in_bytes: float, g: GroupShape, cluster: Cluster) -> CollTime:
    """AllGather of ``in_bytes`` per member over ``g``; bytes as delivered per peer (intra: members of the
    node, inter: the others). Inside a node (or on real clusters) the ring of ``collectives.allgather``
    with one latency per ring step; across the emulator's nodes direct (every peer gets the shard)."""
    n, p = g.size, g.ranks_per_node
    if n == 1 or in_bytes <= 0:
        return ZERO
    intra_b, inter_b = (p - 1) * in_bytes, (n - p) * in_bytes
    if g.nodes > 1 and cluster.host_cores:
        return _call(
            cluster,
            g.concurrent_per_node,
            intra_msgs=p - 1,
            inter_msgs=n - p,
            intra_bytes=intra_b,
            inter_bytes=inter_b,
            size=n * in_bytes,
            op="allgather",
        )
    ring = C.allgather(in_bytes, g, cluster)
    ti, tn = ring.intra_us, ring.inter_us
    if g.nodes > 1:  # the ring's steps wait for its slowest edge: the inter-node one
        tn += (n - 2) * _lat(cluster, "inter", "allgather")
    elif ti > 0:
        extra = (n - 2) * _lat(cluster, "intra", "allgather")
        ti += extra * cluster.nodes if cluster.intra_machine_shared else extra
    return CollTime(max(ti, tn), ti, tn, intra_b, inter_b)


def _counts(g: GroupShape, cluster: Cluster) -> CollTime:
    """The int64 count exchange of an uneven exchange over ``g`` (8 B to every peer)."""
    n, p = g.size, g.ranks_per_node
    if n == 1:
        return ZERO
    return _call(
        cluster,
        g.concurrent_per_node,
        intra_msgs=p - 1,
        inter_msgs=n - p,
        intra_bytes=COUNT_BYTES * (p - 1),
        inter_bytes=COUNT_BYTES * (n - p),
        size=COUNT_BYTES * n,
    )


def _flat_a2a(part: float, ep: GroupShape, cluster: Cluster) -> CollTime:
    P, L = ep.size, ep.ranks_per_node
    return _call(
        cluster,
        ep.concurrent_per_node,
        intra_msgs=L - 1,
        inter_msgs=P - L,
        intra_bytes=part * (L - 1) / P,
        inter_bytes=part * (P - L) / P,
        size=part,
    )


def _steps(
    variant: str, S: float, ep: GroupShape, tp: GroupShape, cluster: Cluster, k: int, E: int, row: float | None
) -> list[_Step]:
    P, L, N, TP, c = ep.size, ep.ranks_per_node, ep.nodes, tp.size, ep.concurrent_per_node
    out: list[_Step] = []
    if variant in (REFERENCE, "2dh"):
        part = S / TP
        if TP > 1:
            out.append(_Step("pack", "pack", nbytes=part))
        if variant == REFERENCE:
            out.append(_Step("alltoall", "a2a", _flat_a2a(part, ep, cluster)))
        else:
            # Phase 1, intra: to each local peer j the blocks of every node's local-j member (part / L);
            # phase 2, inter: to each same-local-index peer the node's blocks for it (part / N, L x the
            # flat message). Re-laid out before, between and after (three copies of the part).
            out.append(_Step("regroup[0]", "pack", nbytes=part))
            out.append(
                _Step(
                    "alltoall[intra]",
                    "a2a",
                    _call(cluster, c, intra_msgs=L - 1, intra_bytes=part * (L - 1) / L, size=part),
                )
            )
            out.append(_Step("regroup[1]", "pack", nbytes=part))
            out.append(
                _Step(
                    "alltoall[inter]",
                    "a2a",
                    _call(cluster, c, inter_msgs=N - 1, inter_bytes=part * (N - 1) / N, size=part * L),
                )
            )
            out.append(_Step("regroup[2]", "pack", nbytes=part))
        if TP > 1:
            out.append(_Step("allgather", "ag", _gather(part, tp, cluster), gather=True, msgs=TP - 1))
        out.append(_Step("copy", "copy", nbytes=S))
        return out

    sh = S / (k * TP)  # this TP rank's token shard
    rows = sh / row if row else 0.0  # its tokens (0: row size unknown, row metadata not priced)
    if TP > 1:
        out.append(_Step("shard", "pack", nbytes=sh))
    if variant == "allgather":
        out.append(_Step("allgather[ep]", "ag", _gather(sh, ep, cluster), gather=True, msgs=P - 1))
        if TP > 1:
            out.append(_Step("allgather[tp]", "ag", _gather(P * sh, tp, cluster), gather=True, msgs=TP - 1))
        if rows:
            slots = SLOT_BYTES * k * rows
            out.append(_Step("slots[ep]", "meta", _gather(slots, ep, cluster), gather=True, msgs=P - 1))
            if TP > 1:
                out.append(_Step("slots[tp]", "meta", _gather(P * slots, tp, cluster), gather=True, msgs=TP - 1))
        out.append(_Step("copy", "copy", nbytes=S))  # the local experts' slots of every source, gathered
        if rows:
            gates = GATE_BYTES * k * rows
            out.append(_Step("gates[ep]", "meta", _gather(gates, ep, cluster), gather=True, msgs=P - 1))
        return out

    if variant != "node-dedup":
        raise ValueError(f"no routed model for {variant!r}: choose one of {', '.join(ROUTED + (REFERENCE,))}")
    p_node, p_rank = touch_probability(E, k, N), touch_probability(E, k, P)
    # 1. rails: each token once to every node it touches, to that node's member of this local index.
    out.append(_Step("counts[1]", "meta", _counts(ep, cluster)))
    out.append(_Step("pack[1]", "pack", nbytes=sh * N * p_node))
    out.append(
        _Step(
            "rails",
            "a2a",
            _call(cluster, c, inter_msgs=N - 1, inter_bytes=sh * (N - 1) * p_node, size=sh * N * p_node),
        )
    )
    if rows:
        r1 = rows * (N - 1) * p_node
        for name, nb in (("gates[1]", GATE_BYTES * k), ("routes[1]", SLOT_BYTES * (1 + k))):
            out.append(_Step(name, "meta", _call(cluster, c, inter_msgs=N - 1, inter_bytes=r1 * nb, size=r1 * nb)))
    # 2. forward: the gateway's rows (from the N members of its rail) to the node's members that hold
    # one of their experts, one copy per (row, member); its own need no send.
    out.append(_Step("counts[2]", "meta", _counts(ep, cluster)))
    out.append(_Step("pack[2]", "pack", nbytes=N * sh * L * p_rank))
    out.append(
        _Step(
            "forward",
            "a2a",
            _call(cluster, c, intra_msgs=L - 1, intra_bytes=N * sh * (L - 1) * p_rank, size=N * sh * L * p_rank),
        )
    )
    if rows:
        r2 = N * rows * (L - 1) * p_rank
        for name, nb in (("gates[2]", GATE_BYTES * k), ("routes[2]", SLOT_BYTES * (1 + k))):
            out.append(_Step(name, "meta", _call(cluster, c, intra_msgs=L - 1, intra_bytes=r2 * nb, size=r2 * nb)))
    # 3. the rows every TP rank received (P x its shard x p_rank), gathered over TP (uneven).
    if TP > 1:
        got = P * sh * p_rank
        out.append(_Step("counts[tp]", "meta", _counts(tp, cluster)))
        out.append(_Step("allgather[tp]", "ag", _gather(got, tp, cluster), gather=True, msgs=TP - 1))
        if rows:
            meta = SLOT_BYTES * (1 + k) * P * rows * p_rank  # source member + k slots per row
            out.append(_Step("routes[tp]", "meta", _gather(meta, tp, cluster), gather=True, msgs=TP - 1))
    out.append(_Step("copy", "copy", nbytes=S))
    return out


@lru_cache(maxsize=16384)
def routed_shapes(
    variant: str,
    S: float,
    ep: GroupShape,
    tp: GroupShape,
    cluster: Cluster,
    top_k: int = 1,
    experts: int | None = None,
    row_bytes: float | None = None,
):
    """One dispatch pass of ``variant`` (one of :func:`routed_exchanges`, or ``"deepspeed"``: the flat
    reference under the same conventions) for a buffer of ``S`` bytes per rank, as a
    ``exchange.Breakdown``. ``experts``: E (default: one per EP member); ``row_bytes``: bytes of one
    token row (hidden x element size), which the row metadata needs (None: only the count exchanges
    are priced as metadata)."""
    from monta.perfmodel.network.timeline import Breakdown, Timeline, _res

    if variant not in ROUTED and variant != REFERENCE:
        raise ValueError(f"no routed model for {variant!r}: choose one of {', '.join(ROUTED + (REFERENCE,))}")
    if S < 0:
        raise ValueError(f"S={S}: must be >= 0")
    E = ep.size if experts is None else experts
    _check_routing(E, top_k, ep.size)
    if row_bytes is not None and not row_bytes > 0:
        raise ValueError(f"row_bytes={row_bytes!r}: must be > 0 (or None)")
    steps = _steps(variant, float(S), ep, tp, cluster, top_k, E, row_bytes)

    inter = intra = meta_inter = meta_intra = 0.0
    for s in steps:
        if s.role in ("a2a", "ag"):
            inter, intra = inter + s.ct.inter_bytes, intra + s.ct.intra_bytes
        elif s.role == "meta":
            meta_inter, meta_intra = meta_inter + s.ct.inter_bytes, meta_intra + s.ct.intra_bytes

    if cluster.host_cores:
        ops, times = _fluid(steps, cluster, tp.size)
    else:
        tl, prev, times = Timeline(), 0.0, {}
        for s in steps:
            dur = {"copy": s.nbytes / (cluster.copy_GBps * 1e3)} if s.role in ("pack", "copy") else _res(s.ct)
            end = tl.add(s.name, dur, after=(prev,))
            times[s.name], prev = end - prev, end
        ops = tuple(tl.ops)
    total = max((o.end_us for o in ops), default=0.0)

    def role_us(role: str) -> float:
        return sum(times[s.name] for s in steps if s.role == role)

    return Breakdown(
        variant,
        1,
        total,
        role_us("a2a"),
        role_us("ag"),
        role_us("copy"),
        inter,
        intra,
        ops,
        role_us("pack"),
        meta_inter,
        meta_intra,
    )


def _fluid(steps: list[_Step], cluster: Cluster, tp_size: int):
    """The emulator's schedule (one op after the other) with the core's calibrated CPU demands."""
    from monta.perfmodel.network.fluid import FluidTimeline

    ptm = cluster.world_size / cluster.host_cores
    fixed, a2a_byte = cluster.a2a_cpu_us
    step_us, ag_byte = cluster.ag_cpu_us
    tl, prev = FluidTimeline(), None
    for s in steps:
        if s.role in ("pack", "copy"):
            demand = {"cpu": s.nbytes / (cluster.copy_GBps * 1e3) * ptm}
        elif s.gather:
            ct = s.ct
            cpu = (step_us * s.msgs + ag_byte * (ct.intra_bytes + ct.inter_bytes)) * ptm
            if cpu <= 0:
                cpu = ct.intra_us
            demand = {"cpu": min(cpu, ct.time_us), f"own:{s.name}": ct.intra_us, "inter": ct.inter_us}
        else:
            ct = s.ct
            cpu = ct.intra_us + (fixed + a2a_byte * ct.inter_bytes) * ptm if ct.time_us > 0 else 0.0
            demand = {"inter": ct.inter_us, "cpu": cpu}
        prev = tl.add(s.name, demand, after=(prev,))
    ops = tuple(tl.run())
    return ops, {o.name: o.end_us - o.start_us for o in ops}


def routed_exchange_time(
    variant: str,
    bytes_per_rank: float,
    layout,
    cluster: Cluster | str | None = None,
    *,
    top_k: int = 1,
    experts: int | None = None,
    row_bytes: float | None = None,
):
    """:func:`routed_shapes` on a ``monta.parallel.ParallelLayout`` (``cluster``: as ``exchange_time``)."""
    from monta.perfmodel.network.profile import get_cluster
    from monta.perfmodel.network.timeline import layout_shapes

    cluster = get_cluster(cluster, layout.nodes, layout.gpus_per_node)
    ep, tp = layout_shapes(layout)
    return routed_shapes(variant, float(bytes_per_rank), ep, tp, cluster, top_k, experts, row_bytes)


def inter_bytes_formula(
    variant: str, bytes_per_rank: float, layout, *, top_k: int = 1, experts: int | None = None
) -> tuple[str, float]:
    """Expected inter-node payload bytes one rank sends in one dispatch pass of ``variant`` (any core or
    routed exchange): the formula as text (S: ``bytes_per_rank``, N nodes, L EP members per node,
    TP, E experts, k top-k) and its value on ``layout``."""
    from monta.perfmodel.network.timeline import layout_shapes

    ep, tp = layout_shapes(layout)
    S, N, L, TP = float(bytes_per_rank), ep.nodes, ep.ranks_per_node, tp.size
    E = ep.size if experts is None else experts
    _check_routing(E, top_k, ep.size)
    if variant == "legacy":
        return "S x (N-1)/N", S * (N - 1) / N
    if variant in ("deepspeed", "monta", "2dh"):
        return "S/TP x (N-1)/N", S / TP * (N - 1) / N
    if variant == "allgather":
        return "S/(k TP) x (N-1) L", S / (top_k * TP) * (N - 1) * L
    if variant == "node-dedup":
        p = touch_probability(E, top_k, N)
        return "S/(k TP) x (N-1) x [1 - C(E-E/N, k)/C(E, k)]", S / (top_k * TP) * (N - 1) * p
    raise ValueError(f"no inter-node byte formula for {variant!r}: choose one of {', '.join(CORE_FORMULAS + ROUTED)}")
