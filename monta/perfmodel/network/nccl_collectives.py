"""Collectives as NCCL runs them on a real cluster: the link model's bandwidth terms (``collectives`` on the
cluster with its latencies taken out) priced with NCCL's protocols, latencies and channels (``nccl_tuning``), and
the algorithm/protocol NCCL's tuner picks: the least time in its model (enqueue.cc ``topoGetAlgoInfo``), which is
this one with NCCL's own constants.

When the two-node tree runs, and what it gains on few NICs: on two nodes a tree sends each node's bytes over the
network once where the ring sends them twice (NCCL's maintainers, data/published/claims.csv C14), but NCCL caps a
tree's bus bandwidth per graph channel (tuning.cc ``perChMaxTreeBws``: 23.6 GB/s on Ampere, 41.4 on Hopper, 18.5 on
Volta at 2 nodes) and its graph has one channel per NIC below 25 GB/s. So the tree's saving shows where each NIC is
slow for the cap (4 x 100 Gb/s: the tree at ~1.7x the ring's busbw), while 8 HDR NICs or 4 HDR NICs at 23.5 GB/s
each leave the tree at or below the ring (the ring runs large messages). At small and medium sizes its
log2(nodes) latency wins, scaled by NCCL's tree correction factors.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from monta.hardware.links import Cluster
from monta.perfmodel.network import nccl_tuning as T


@lru_cache(maxsize=512)
def bare(cluster: Cluster) -> Cluster:
    """The cluster's links without their latencies, and without NCCL: the link model's bandwidth terms alone. The
    efficiency curves stay: SimAI's ratios were measured end to end (their latency inside), but normalised to their
    largest size they are the shape of the rate, and NCCL's latency is added on top; the one-node rows of
    data/published favour it (P60, P61, P64, P68: -15% to +19% blind, against +22% to +41% with the curve as a floor
    under NCCL's model at the link's full rate)."""

    def z(lk):
        return replace(lk, latency_us=0.0)

    links = tuple((k, z(lk)) for k, lk in cluster.collective_links)
    return replace(cluster, intra=z(cluster.intra), inter=z(cluster.inter), collective_links=links, nccl_arch="")


def ring(op: str, nbytes: float, g, cluster: Cluster, price_on):
    """A ring collective (AllGather, ReduceScatter): ``price_on(cluster)`` is its link-model CollTime."""
    return priced(op, nbytes, g.size, g.nodes, cluster, {"ring": price_on(bare(cluster))})[0]


def _scaled(t, time_us: float):
    """``t`` (a bandwidth-only CollTime) stretched to ``time_us``, its link shares kept in proportion."""
    k = time_us / t.time_us if t.time_us > 0 else 1.0  # (replace: this module sits below collectives)
    return replace(t, time_us=time_us, intra_us=t.intra_us * k, inter_us=t.inter_us * k)


def _busbw(op: str, nbytes: float, t_us: float, n: int, algo: str) -> float:
    """NCCL's bus bandwidth (GB/s) of a bandwidth-only time: ring algbw x nsteps/n, tree algbw / 0.5."""
    alg = nbytes / (t_us * 1e3)
    if algo == "ring":
        nsteps = 2 * (n - 1) if op == "allreduce" else n - 1
        return alg * nsteps / n
    return alg * 2.0


def _alg_rate(op: str, algo: str, busbw: float, n: int) -> float:
    if algo == "ring":
        nsteps = 2 * (n - 1) if op == "allreduce" else n - 1
        return busbw * n / nsteps
    return busbw * 0.5


def _time(op, algo, proto, nbytes, n, m, cluster, busbw, tuned: bool) -> float:
    """One algorithm/protocol's time; ``busbw`` is its Simple bus bandwidth at full channels; ``tuned``: as NCCL's
    tuner sees it (the network plugin's stated latency), else as it runs (``nccl_tuning.net_step_us``)."""
    arch, n_ch, g_ch = cluster.nccl_arch, T.channels(cluster, m), T.graph_channels(cluster, m)
    net_step = T.net_step_us(cluster.net_plugin, arch, proto, tuned) if m > 1 else 0.0
    lat = T.latency_us(algo, proto, op, n, m, arch, nbytes, n_ch, net_step)
    if algo not in ("ring", "tree"):  # NVLS, NVLSTree: Simple only, the link model's rate and NCCL's latency
        return lat + busbw
    nc = T.active_channels(nbytes, n_ch, algo, proto, n)
    corr = T.tree_correction(proto, nbytes) if algo == "tree" else 1.0
    share = T.busbw_share(algo, proto, op, busbw, m, arch, g_ch) * nc / n_ch * corr
    return lat + nbytes / (_alg_rate(op, algo, share, n) * 1e3)


def priced(op: str, nbytes: float, n: int, m: int, cluster: Cluster, algos: dict):
    """(CollTime, algorithm, protocol) NCCL gives ``op`` of ``nbytes`` (NCCL's count: AllGather's output,
    ReduceScatter's input) on n ranks over m nodes; ``algos``: name -> the link model's bandwidth-only CollTime.
    The tuner picks by its model (a network plugin's stated latency in it); the pick then takes its time on the wire
    (the same where the plugin states none)."""
    best = None
    protos = T.protocols(cluster.net_plugin, cluster.nccl_arch) if m > 1 else T.PROTOCOLS
    for algo, t_bw in algos.items():
        ring_tree = algo in ("ring", "tree")
        # NVLS/NVLSTree carry the link model's own time where ring and tree carry their Simple bus bandwidth
        arg = _busbw(op, nbytes, t_bw.time_us, n, algo) if ring_tree else t_bw.time_us
        for proto in protos if ring_tree else ("Simple",):
            t = _time(op, algo, proto, nbytes, n, m, cluster, arg, tuned=True)
            if best is None or t < best[0]:
                best = (t, t_bw, algo, proto, arg)
    _, t_bw, algo, proto, arg = best
    return _scaled(t_bw, _time(op, algo, proto, nbytes, n, m, cluster, arg, tuned=False)), algo, proto


def alltoall(S: float, g, cluster: Cluster, t_bw, hierarchical: bool):
    """A grouped send/recv to every peer (NCCL has no AllToAll algorithm: nccl-tests' alltoall is n sends and n
    receives in one group). The call pays the protocol's base latency and one step of its slowest link once (the
    sends run concurrently on their channels), plus PEER_POST_US per peer on another node (the proxy posts each
    one's send and receive). A peer's bytes go LL when they fit its channels' LL threshold, at half the rate.
    2DH (``hierarchical``) runs two such calls: p - 1 peers inside the node, then m - 1 larger ones across."""
    n, p, m = g.size, g.ranks_per_node, g.nodes
    net_protos = T.protocols(cluster.net_plugin, cluster.nccl_arch)

    def call(peers_net: int, per_peer: float, net: bool) -> tuple[float, float]:
        fits_ll = per_peer <= T.P2P_CHANNELS_PER_PEER * T.P2P_LL_THRESHOLD
        # A plugin that makes LL unsafe (NCCL_PROTO=simple) leaves a network peer's bytes on Simple.
        proto = "LL" if fits_ll and (not net or "LL" in net_protos) else "Simple"
        i = T.PROTOCOLS.index(proto)
        lat = T.BASE_LAT["ring"][i] + T.HW_LAT[("net" if net else "nvlink", "ring")][i] + peers_net * T.PEER_POST_US
        if net:  # the network's step once (the peers' sends run concurrently), as it runs (AWS's model of EFA)
            lat += T.net_step_us(cluster.net_plugin, cluster.nccl_arch, proto, tuned=False)
        return lat, (2.0 if proto == "LL" else 1.0)

    if not hierarchical or m == 1 or p == 1:
        lat, slow = call(n - p, S / n, m > 1)
        return _scaled(t_bw, lat + t_bw.time_us * slow)
    lat_i, slow_i = call(0, S / p, False)
    lat_n, slow_n = call(m - 1, S * p / n, True)
    return _scaled(t_bw, lat_i + t_bw.intra_us * slow_i + lat_n + t_bw.inter_us * slow_n)
