"""Collective costs (AllToAll flat/hierarchical, AllGather, ReduceScatter, AllReduce) on a group shape.

Bus-bandwidth conventions follow nccl-tests; the inter-node share is the node's NIC bandwidth
divided among every rank of the node that runs a same-shaped collective at the same time.
"""

from __future__ import annotations

from dataclasses import dataclass

from monta.hardware.links import Cluster
from monta.parallel import GroupShape

# Notation: S = bytes each rank sends in total (nccl-tests "size" for AllToAll), n = group size,
# p = ranks of the group on each node it spans, m = n / p nodes spanned, c = ranks of one node
# running a same-shaped collective concurrently (every rank of the node in SPMD code).


@dataclass(frozen=True)
class CollTime:
    """Predicted time of one collective and the bytes one rank sends over each link class."""

    time_us: float
    intra_us: float = 0.0
    inter_us: float = 0.0
    intra_bytes: float = 0.0
    inter_bytes: float = 0.0

    def __add__(self, o: CollTime) -> CollTime:
        return CollTime(
            self.time_us + o.time_us,
            self.intra_us + o.intra_us,
            self.inter_us + o.inter_us,
            self.intra_bytes + o.intra_bytes,
            self.inter_bytes + o.inter_bytes,
        )


ZERO = CollTime(0.0)


def _inter_us(cluster: Cluster, node_bytes: float, eff_size: float, op: str | None = None) -> float:
    """Time for one node to push ``node_bytes`` through all its NICs."""
    if node_bytes <= 0:
        return 0.0
    link = cluster.link("inter", op)
    return link.latency_us + link.transfer_us(node_bytes, eff_size) / cluster.nics_per_node


def _intra_us(
    cluster: Cluster, rank_bytes: float, eff_size: float, op: str | None = None, concurrent: int = 1
) -> float:
    """Time for one rank's intra-node bytes; on a shared node link (the emulator's loopback) the
    ``concurrent`` ranks of the node push theirs through the same link."""
    if rank_bytes <= 0:
        return 0.0
    link = cluster.link("intra", op)
    moved = rank_bytes * (concurrent if cluster.intra_shared else 1)
    t = link.latency_us + link.transfer_us(moved, eff_size)
    # Emulator: one machine's cores serve every node's loopback; SPMD code runs the same intra-node
    # collective on all nodes at once, and calibration measured it with one node busy.
    return t * cluster.nodes if cluster.intra_machine_shared else t


def _nccl(cluster: Cluster, op: str = "") -> bool:
    """NCCL's protocols price this cluster's collectives (a real cluster's file; ``nccl_collectives``). Never on the
    emulator (``host_cores``: gloo over TCP on shared cores, priced as calibrated), nor for an AllReduce or
    ReduceScatter with its own curve (only a calibration gives one: measured end to end, NCCL inside)."""
    measured = op in ("allreduce", "reducescatter") and any(o == op for (o, _), _ in cluster.collective_links)
    return bool(cluster.nccl_arch) and not cluster.host_cores and not measured


def alltoall(S: float, g: GroupShape, cluster: Cluster, hierarchical: bool = False) -> CollTime:
    """AllToAll where each rank sends S bytes in total (S/n to every member, itself included)."""
    n, p, c = g.size, g.ranks_per_node, g.concurrent_per_node
    if n == 1 or S <= 0:
        return ZERO
    if _nccl(cluster):
        from monta.perfmodel.network import nccl_collectives as N

        return N.alltoall(S, g, cluster, alltoall(S, g, N.bare(cluster), hierarchical), hierarchical)
    local = S * (p - 1) / n
    remote = S * (n - p) / n
    if not hierarchical or g.nodes == 1 or p == 1:
        ti = _intra_us(cluster, local, S, "alltoall", c)
        tn = _inter_us(cluster, remote * c, S, "alltoall")
        return CollTime(max(ti, tn), ti, tn, local, remote)
    # 2D (Tutel-style): regroup inside the node first so each rank sends one p-times larger
    # message per remote node; the same NIC bytes plus an extra NVLink phase. The larger messages pay off
    # as routed.py prices them: on the emulator (gloo's serial sends, host_cores) the inter phase's
    # efficiency is a flat AllToAll's with that message size (S x p); on a real cluster both phases key it
    # to the rank's buffer and the fewer messages save their per-peer cost (nccl_collectives.alltoall).
    shuffle = S * (p - 1) / p
    ti = _intra_us(cluster, shuffle, S, "alltoall", c)
    tn = _inter_us(cluster, remote * c, S * p if cluster.host_cores else S, "alltoall")
    return CollTime(ti + tn, ti, tn, shuffle, remote)


def _ring_op(cluster: Cluster, cls: str, ops: tuple[str, ...]) -> str:
    """The first of ``ops`` with its own measured curve on ``cls`` (nccl-tests calibration of a
    ReduceScatter or AllReduce); the last one otherwise, whose lookup falls back to the plain link."""
    have = {key for key, _ in cluster.collective_links}
    return next((op for op in ops if (op, cls) in have), ops[-1])


def allgather(in_bytes: float, g: GroupShape, cluster: Cluster, _ops: tuple[str, ...] = ("allgather",)) -> CollTime:
    """Ring AllGather of ``in_bytes`` per rank (output n x in_bytes); each rank forwards (n-1) x in.

    ``_ops``: the curves to look up, most specific first (ReduceScatter and AllReduce reuse this ring)."""
    n, p, c = g.size, g.ranks_per_node, g.concurrent_per_node
    if n == 1 or in_bytes <= 0:
        return ZERO
    if _ops[0] != "allreduce" and _nccl(cluster, _ops[0]):  # AllReduce prices its own ring (below)
        from monta.perfmodel.network import nccl_collectives as N

        # NCCL's count: AllGather's output, ReduceScatter's input (in_bytes = its output)
        return N.ring(_ops[0], n * in_bytes, g, cluster, lambda cl: allgather(in_bytes, g, cl, _ops))
    sent = (n - 1) * in_bytes
    size = n * in_bytes  # nccl-tests size of an AllGather is the output
    m = g.nodes
    ti = _intra_us(cluster, sent, size, _ring_op(cluster, "intra", _ops), c) if p > 1 else 0.0
    # One ring edge per spanned node leaves the node; c/p rings pass through each node.
    tn = _inter_us(cluster, sent * c / p, size, _ring_op(cluster, "inter", _ops)) if m > 1 else 0.0
    if m == 1:
        return CollTime(ti, ti, 0.0, sent, 0.0)
    # Ring order keeps a node's ranks adjacent: m of the n ring edges cross a node boundary.
    return CollTime(max(ti, tn), ti, tn, sent * (n - m) / n, sent * m / n)


def reducescatter(
    in_bytes: float, g: GroupShape, cluster: Cluster, _ops: tuple[str, ...] = ("reducescatter", "allgather")
) -> CollTime:
    """Ring ReduceScatter of ``in_bytes`` per rank (output in_bytes / n): the mirror of AllGather.
    A curve calibrated on reduce_scatter_perf is used where present, AllGather's otherwise."""
    return allgather(in_bytes / g.size, g, cluster, _ops)


def allreduce(S: float, g: GroupShape, cluster: Cluster) -> CollTime:
    """AllReduce as the collective library runs it: the fastest of the algorithms the cluster's library has
    (``Cluster.allreduce_algorithms``; NCCL's tuner picks by its own model of the same kind). The ring is
    ReduceScatter + AllGather, busbw = algbw x 2(n-1)/n. A curve calibrated on all_reduce_perf (per link
    class) is used where present, then ReduceScatter's, then AllGather's; a calibrated AllReduce (or
    ReduceScatter) is the measured one, whatever algorithm ran, so no other is tried."""
    if g.size == 1 or S <= 0:
        return ZERO
    measured = any(op in ("allreduce", "reducescatter") for (op, _), _ in cluster.collective_links)
    if _nccl(cluster) and not measured:  # a measured ReduceScatter curve is what the ring rides (below)
        return _nccl_allreduce(S, g, cluster)
    half = reducescatter(S, g, cluster, ("allreduce", "reducescatter", "allgather"))
    best = half + half
    if measured:
        return best  # measured curves describe what this cluster's library ran, end to end; other algorithms' unknown
    for algo in cluster.allreduce_algorithms:
        t = _ALLREDUCE.get(algo, lambda *_: None)(S, g, cluster)
        if t is not None and t.time_us < best.time_us:
            best = t
    return best


def _nccl_allreduce(S: float, g: GroupShape, cluster: Cluster) -> CollTime:
    """AllReduce as NCCL runs it on a real cluster: the algorithms the cluster's NCCL has (ring; tree across
    nodes; NVLink SHARP inside an NVSwitch-3 node, NVLSTree across such nodes), each with the link model's
    bandwidth, priced and chosen with NCCL's cost model (``nccl_collectives.priced``)."""
    from monta.perfmodel.network import nccl_collectives as N

    bare = N.bare(cluster)
    n, m = g.size, g.nodes
    half = reducescatter(S, g, bare, ("allreduce", "reducescatter", "allgather"))
    ring = half + half
    algos = {"ring": ring}
    have = cluster.allreduce_algorithms
    if m > 1 and "tree" in have:
        # On 2 nodes the tree sends each node's bytes over the network once (_tree); on more it carries about the
        # ring's bytes, so the ring's rate stands for it (nccl_collectives: its per-channel cap): the ring's time x
        # n / (n - 1) (NCCL's tree busbw is algbw / 0.5, the ring's algbw x 2(n-1)/n).
        tree = _tree(S, g, bare, nvls=False) if m == 2 else None
        k = n / (n - 1)
        as_tree = CollTime(ring.time_us * k, ring.intra_us * k, ring.inter_us * k, ring.intra_bytes, ring.inter_bytes)
        algos["tree"] = tree if tree is not None else as_tree
    if "nvls" in have and g.ranks_per_node > 1:
        t = _nvls(S, g, bare) if m == 1 else (_tree(S, g, bare, nvls=True) if m == 2 else None)
        if t is not None:
            algos["nvls" if m == 1 else "nvlstree"] = t
    return N.priced("allreduce", S, n, m, cluster, algos)[0]


def _nvls_us(S: float, g: GroupShape, cluster: Cluster) -> float | None:
    """NVLink SHARP inside a node: every GPU pushes S to the switch, which reduces and multicasts the result
    back, at ``nvls_algbw_GBps`` of algorithm bandwidth (the NVLink table's efficiency at S)."""
    if not cluster.nvls_algbw_GBps or g.ranks_per_node < 2:
        return None
    link = cluster.link("intra", "allgather")
    return link.latency_us + S / (cluster.nvls_algbw_GBps * 1e3 * link.eff(S))


def _tree(S: float, g: GroupShape, cluster: Cluster, nvls: bool | None = None) -> CollTime | None:
    """NCCL's double binary tree across nodes, a chain (or NVLS) inside each node. Its bandwidth gain is on
    2 nodes: each node sends S over its NICs instead of the ring's 2 S (n-1)/n ("2x less traffic on the
    network than on the intra-node connections", NCCL's maintainers, data/published/claims.csv C14); on
    more nodes it carries about the ring's bytes, so the ring stands for it."""
    p, c = g.ranks_per_node, g.concurrent_per_node
    if g.nodes != 2:
        return None
    # The reduce climbs the tree and the broadcast comes down it: a latency each, as the ring's two halves.
    tn = _inter_us(cluster, S * c / p, S, "allreduce") + cluster.link("inter", "allreduce").latency_us
    # Inside the node the reduce climbs the chain and the broadcast comes down it: a rank sends S up and S
    # down, 2 S through its NVLink port, as much as the ring's 2 S (n-1)/n (the tree gains on the network only).
    chain = _intra_us(cluster, 2 * S, S, "allgather", c) if p > 1 else 0.0
    if nvls is None:
        nvls = "nvls" in cluster.allreduce_algorithms
    nvls_us = _nvls_us(S, g, cluster) if nvls else None
    ti = min(chain, nvls_us) if nvls_us is not None else chain
    return CollTime(max(ti, tn), ti, tn, 2 * S if p > 1 else 0.0, S / p)


def _nvls(S: float, g: GroupShape, cluster: Cluster) -> CollTime | None:
    if g.nodes != 1:
        return None  # across nodes NVLS runs inside the tree (NVLSTree), priced there
    t = _nvls_us(S, g, cluster)
    return None if t is None else CollTime(t, t, 0.0, S, 0.0)


_ALLREDUCE = {"tree": _tree, "nvls": _nvls}


def p2p(nbytes: float, link: str, cluster: Cluster, concurrent_per_node: int = 1) -> CollTime:
    """One send between neighbours (pipeline stages, context-parallel ring)."""
    if nbytes <= 0:
        return ZERO
    if link == "intra":
        t = _intra_us(cluster, nbytes, nbytes, None, concurrent_per_node)
        return CollTime(t, t, 0.0, nbytes, 0.0)
    t = _inter_us(cluster, nbytes * concurrent_per_node, nbytes)
    return CollTime(t, 0.0, t, 0.0, nbytes)


def algbw_GBps(size_bytes: float, time_us: float) -> float:
    return size_bytes / (time_us * 1e3) if time_us > 0 else 0.0


def busbw_GBps(kind: str, size_bytes: float, time_us: float, n: int) -> float:
    """nccl-tests bus bandwidth: (n-1)/n for AllToAll/AllGather/ReduceScatter, 2(n-1)/n for AllReduce."""
    factor = {
        "alltoall": (n - 1) / n,
        "allgather": (n - 1) / n,
        "reducescatter": (n - 1) / n,
        "allreduce": 2 * (n - 1) / n,
    }.get(kind)
    if factor is None:
        raise ValueError(f"unknown collective {kind!r}")
    return algbw_GBps(size_bytes, time_us) * factor
