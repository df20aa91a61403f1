"""AllReduce as NCCL runs it on a real cluster: the algorithms the cluster's NCCL has (ring; tree across nodes;
NVLink SHARP inside an NVSwitch-3 node, NVLSTree across such nodes), each with the link model's bandwidth, priced
and chosen with NCCL's cost model (``nccl_collectives.priced``)."""

from __future__ import annotations

from monta.perfmodel.network import collectives as C
from monta.perfmodel.network import nccl_collectives as N


def allreduce(S: float, g: C.GroupShape, cluster) -> C.CollTime:
    bare = N.bare(cluster)
    n, m = g.size, g.nodes
    half = C.reducescatter(S, g, bare, ("allreduce", "reducescatter", "allgather"))
    ring = half + half
    algos = {"ring": ring}
    have = cluster.allreduce_algorithms
    if m > 1 and "tree" in have:
        # On 2 nodes the tree sends each node's bytes over the network once (collectives._tree); on more it carries
        # about the ring's bytes, so the ring's rate stands for it (nccl_collectives: its per-channel cap).
        tree = C._tree(S, g, bare, nvls=False) if m == 2 else None
        algos["tree"] = tree if tree is not None else _as_tree(ring, S, n)
    if "nvls" in have and g.ranks_per_node > 1:
        if m == 1:
            t = C._nvls(S, g, bare)
        else:
            t = C._tree(S, g, bare, nvls=True) if m == 2 else None
        if t is not None:
            algos["nvls" if m == 1 else "nvlstree"] = t
    return N.priced("allreduce", S, n, m, cluster, algos)[0]


def _as_tree(ring: C.CollTime, S: float, n: int) -> C.CollTime:
    """A tree at the ring's bus bandwidth (NCCL's tree busbw is algbw / 0.5, the ring's algbw x 2(n-1)/n): the
    ring's time x n / (n - 1)."""
    k = n / (n - 1)
    return C.CollTime(ring.time_us * k, ring.intra_us * k, ring.inter_us * k, ring.intra_bytes, ring.inter_bytes)
