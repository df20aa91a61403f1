"""What NCCL does at 256 KiB - 64 MiB: its protocols, latencies, channels and algorithm choice, for real clusters.

The link model (``collectives``) prices a collective's bytes at the large-message rate of its links. NCCL runs each
collective with one of three protocols, each with its own latency per step and share of the link's bandwidth, on a
number of channels that shrinks for small messages, and picks the algorithm (ring, tree, NVLink SHARP) and protocol
by its own cost model. This module is that cost model, with NCCL's constants, applied to the link model's bandwidth:

    time(algo, proto) = latency(algo, proto, steps) + bandwidth_time(algo) x rate_share(algo, proto) x channels_share

Every constant is NCCL's, from ``src/graph/tuning.cc`` (``ncclTunerConstantsDefaults``, ``ncclTopoTuneModel``,
``ncclTopoGetAlgoTime``), ``src/enqueue.cc`` (channel and protocol choice) and ``src/include/{comm,device}.h``
(thread counts and thresholds), NVIDIA/nccl master at 5067397 (2026-06-11); the two NCCL facts not in a constant
(channels per NIC, the p2p per-peer post) are named where they are used. It applies only to a cluster whose file
names a GPU generation (``Cluster.nccl_arch``, set by ``clusterfile`` from ``gpu.model``): an emulator profile
(gloo over TCP) and a calibrated curve (fitted end to end) keep the plain link model.
"""

from __future__ import annotations

import math

PROTOCOLS = ("LL", "LL128", "Simple")

# tuning.cc baseLatencies (us): Tree {LL, LL128, Simple}, Ring {LL, LL128, Simple}; NVLS/NVLSTree have 0.
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0), "nvlstree": (0.0, 0.0, 0.0)}
# tuning.cc hwLatencies (us per step) on NVLink and over the network; NVLS and NVLSTree run Simple only.
HW_LAT = {
    ("nvlink", "tree"): (0.6, 1.25, 4.0),
    ("nvlink", "ring"): (0.6, 1.9, 3.4),
    ("nvlink", "nvls"): (0.0, 0.0, 25.0),
    ("nvlink", "nvlstree"): (0.0, 0.0, 25.0),
    ("net", "tree"): (5.0, 8.5, 14.0),
    ("net", "ring"): (2.7, 4.0, 14.0),
    ("net", "nvls"): (0.0, 0.0, 18.0),
    ("net", "nvlstree"): (0.0, 0.0, 20.9),
}
# tuning.cc getNetOverhead(): the host's cost of posting one network operation (x86 Intel 1 us, AMD 2 us; Intel
# taken: the cluster files name no CPU). A ring step across nodes costs at least this, x3 with Simple. (NCCL 2.8's
# x1.8 on LL's NVLink steps across nodes is gone from the current tuner.)
NET_OVERHEAD_US = 1.0
# tuning.cc llMaxBws (GB/s): one node by GPU generation; across nodes by CPU vendor (Intel: 2 nodes, more).
LL_MAX_BW_ONE_NODE = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0}
LL_MAX_BW_NODES = (39.0, 20.4)
# tuning.cc per-channel caps (GB/s), by generation and {1 node, 2 nodes, more}.
PER_CH_RING_LL128 = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7}
PER_CH_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0)}
PER_CH_TREE_LL128 = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0)}
# tuning.cc treeCorrectionFactor[proto][log2(bytes / 64)]: "Trees are not perfectly sticking to the model for medium
# sizes"; it scales the tree's bandwidth, 64 B to 256 MiB.
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)  # fmt: skip
# device.h NCCL_{LL,LL128,SIMPLE}_MAX_NTHREADS and comm.h NCCL_*_THREAD_THRESHOLD: enqueue.cc drops a channel while
# bytes < channels x threads x threshold (a ring's LL threshold is x ranks).
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
MAX_CHANNELS = 32  # MAXCHANNELS of the common builds
# enqueue.cc: a p2p transfer runs LL when a peer's bytes fit NCCL_P2P_LL_THRESHOLD (16 KiB) per channel.
P2P_LL_THRESHOLD = 16384
# paths.cc ncclTopoGetNchannels: a peer across the network gets 2 p2p channels by default (more with several local
# NICs, fewer when many peers must fit one round); taken as 2.
P2P_CHANNELS_PER_PEER = 2
# The per-peer cost of a grouped send/recv across nodes: the proxy posts one send and one receive per peer, each a
# network post (NET_OVERHEAD_US), one after another on the rank's proxy thread. Sends inside the node go by NVLink
# on their own channels and overlap.
PEER_POST_US = 2 * NET_OVERHEAD_US

# A network plugin's stated latency, what NCCL's tuner chooses with. NCCL's search keeps the NIC's
# ``ncclNetProperties.latency`` as the graph's latencyInter (search.cc ``graph->latencyInter = net->net.latency``) and
# its tuner adds it to every network step, twice with Simple ("Also add the flush extra latency": tuning.cc, v2.25.1
# L301-303). NCCL's own IB and socket transports report 0 ("Not set": net_ib.cc, net_socket.cc), so an
# InfiniBand/RoCE cluster keeps the constants above. aws-ofi-nccl on EFA reports 75 us on p4d, p4de and p5 and 150 us
# on p3dn (src/platform-aws.c ``platform_data_map``, "Internode latency set at %.1f us"), and sets NCCL_PROTO=simple
# "whenever we know that the LL/LL128 protocols are not safe, such as on P4d/P4e" (``configure_nccl_proto``: EFA's
# first generation has no 128-byte in-order stores). By GPU generation, since the EC2 platform follows it: V100 =
# p3dn, A100 = p4d/p4de, Hopper = p5 (whose newer EFA keeps every protocol). (That plugin version also set
# NCCL_NVLS_ENABLE=0 for a bug "with EFA and NCCL 2.17/2.18 that is still under investigation"; a workaround of its
# time, not taken: the p5 rows at 256 MiB-16 GiB read NVLSTree's rate.)
#
# What a network step then takes on the wire is not that figure: the stated latency steers the choice (a 1 MiB
# AllReduce on two p5 takes 123 us in all, less than one of its 150 us Simple steps). AWS's own cost model of EFA,
# the plugin's tuner (src/tuner/nccl_ofi_model: ``TUNER_NET_LATENCY`` 20 us, plus ``TUNER_NET_COMP_OVERHEAD`` 3 us
# with Simple: "~2 usec cost in the device and ~1 usec cost to write that completion up to the host stack"), prices
# each network step at 20 us more than NCCL's InfiniBand constants; that is the time the chosen algorithm takes.
# That model covers P5/P5e/P5en only (Hopper); on p3dn and p4d/p4de the stated figure is the only one, kept.
NET_PLUGINS = {
    "": {"stated_us": {}, "wire_us": {}, "simple_us": 0.0, "simple_only": ()},
    "efa": {
        "stated_us": {"volta": 150.0, "ampere": 75.0, "hopper": 75.0},
        "wire_us": {"hopper": 20.0},
        "simple_us": 3.0,
        "simple_only": ("volta", "ampere"),
    },
}


def _plugin(name: str) -> dict:
    return NET_PLUGINS.get(name, NET_PLUGINS[""])


def net_latency_us(plugin: str, arch: str) -> float:
    """The latency the plugin states to NCCL (0: NCCL's own transports)."""
    return _plugin(plugin)["stated_us"].get(arch, 0.0)


def net_step_us(plugin: str, arch: str, proto: str, tuned: bool) -> float:
    """What a network step adds to NCCL's constants: in the tuner's model (``tuned``: the stated latency, x2 with
    Simple) or on the wire (AWS's model of EFA: 20 us, +3 us with Simple)."""
    p = _plugin(plugin)
    if tuned or arch not in p["wire_us"]:  # no model of the wire for this generation: the stated figure
        return net_latency_us(plugin, arch) * (2 if proto == "Simple" else 1)
    return p["wire_us"][arch] + (p["simple_us"] if proto == "Simple" else 0.0)


def protocols(plugin: str, arch: str) -> tuple[str, ...]:
    """The protocols NCCL may pick with this plugin (Simple alone where the plugin sets NCCL_PROTO=simple)."""
    return ("Simple",) if arch in _plugin(plugin)["simple_only"] else PROTOCOLS


def _node_index(m: int) -> int:
    return 0 if m == 1 else 1 if m == 2 else 2


def graph_channels(cluster, m: int) -> int:
    """The channels of NCCL's ring/tree graph, the count its tuner multiplies per-channel caps by. Across nodes the
    search (search.cc) finds one channel per NIC at the NIC's speed; ncclTopoDupChannels doubles them when that
    speed is at least 25 GB/s, except on Hopper below 50 GB/s with more than 4 channels. Inside a node: one per
    ~20 GB/s of NVLink (the search's per-channel speed on NVLink3/4, an approximation)."""
    if m > 1:
        nics, speed = cluster.nics_per_node, cluster.inter.bandwidth_GBps
        hopper_kept = cluster.nccl_arch == "hopper" and speed < 50 and nics > 4
        return min(MAX_CHANNELS, nics * (2 if speed >= 25 and not hopper_kept else 1))
    return min(MAX_CHANNELS, max(1, round(cluster.intra.bandwidth_GBps / 20)))


def channels(cluster, m: int) -> int:
    """The communicator's channels: the graph's, doubled by ncclTopoPostset (connect.cc), at most MAX_CHANNELS."""
    return min(MAX_CHANNELS, 2 * graph_channels(cluster, m))


def active_channels(nbytes: float, n_ch: int, algo: str, proto: str, n: int) -> float:
    """enqueue.cc: ``while (nBytes < nc * nt * threadThreshold) nc--``: small messages run on fewer channels. Taken
    as the continuous nbytes / (threads x threshold), so that time never falls as the size grows (NCCL's integer
    count makes a small saw-tooth around this line)."""
    if algo in ("nvls", "nvlstree"):
        return float(n_ch)
    per = MAX_THREADS[proto] * THREAD_THRESHOLD[proto] * (n if algo == "ring" and proto == "LL" else 1)
    return max(1.0, min(float(n_ch), nbytes / per))


def _log2i(x: int) -> int:
    return max(0, int(math.log2(x))) if x >= 1 else 0


def latency_us(
    algo: str, proto: str, op: str, n: int, m: int, arch: str, nbytes: float, n_ch: int, net_step: float = 0.0
) -> float:
    """ncclTopoTuneModel's latency of ``algo``/``proto`` for ``op`` on n ranks over m nodes (ncclTopoGetAlgoTime's
    ring plateau factor included); ``net_step``: what the network plugin adds to each network step
    (:func:`net_step_us`)."""
    i = PROTOCOLS.index(proto)
    ppn = n // m
    a = "tree" if algo == "tree" else algo
    intra = HW_LAT[("nvlink", a)][i]
    # "With ppn=1 latencies are fully exposed, use the Tree network latency"
    inter = HW_LAT[("net", "tree" if ppn == 1 and algo in ("ring", "tree") else a)][i]
    inter += net_step
    lat = BASE_LAT[algo][i]
    if algo == "ring":
        nsteps = 2 * (n - 1) if op == "allreduce" else n - 1
        inter_steps = 0 if m == 1 else 2 * (m - 1) if op == "allreduce" else m - 1
        if m > 1:
            intra = max(intra, NET_OVERHEAD_US * (3 if proto == "Simple" else 1))
        lat += (nsteps - inter_steps) * intra + inter_steps * inter
        if op == "allreduce" and m > 1 and proto == "Simple" and nbytes / (n_ch * n) >= 64:
            lat *= 1.9 if arch == "volta" else 1.4  # "Plateau effect of ring"
    elif algo == "tree":
        lat += 2 * ((ppn - 1) * intra + _log2i(m) * inter)
    elif algo == "nvls":
        lat = intra + (inter if m > 1 else 0.0)
    else:  # nvlstree
        lat += intra + 2 * _log2i(m) * inter
    return lat


def busbw_share(algo: str, proto: str, op: str, busbw: float, m: int, arch: str, n_ch: int) -> float:
    """The protocol's bus bandwidth from the algorithm's Simple bus bandwidth ``busbw`` (ncclTopoTuneModel's
    'model refinements'): LL moves 8 data bytes per 16-byte line (x 0.5, capped at llMaxBw), LL128 120 of 128
    (x 0.92), trees 0.92 of the graph's rate capped per channel."""
    k = _node_index(m)
    ll_max = LL_MAX_BW_ONE_NODE.get(arch, 39.0) if m == 1 else LL_MAX_BW_NODES[min(k, 2) - 1]
    if algo == "ring":
        if proto == "LL":
            return min(ll_max, 0.5 * busbw)
        if proto == "LL128":
            return min(0.92 * busbw, n_ch * PER_CH_RING_LL128.get(arch, 20.0))
        return busbw
    if algo == "tree":
        b = min(0.92 * busbw, n_ch * PER_CH_TREE.get(arch, PER_CH_TREE["ampere"])[k])
        if proto == "LL":
            return min(b / 3.8, ll_max)
        if proto == "LL128":
            cap = n_ch * PER_CH_TREE_LL128.get(arch, PER_CH_TREE_LL128["ampere"])[k]
            return min(b * (7 / 9 if m == 1 else 120 / 128), cap)
        return b
    return busbw  # NVLS, NVLSTree: the link model's own figure (Simple only)


def tree_correction(proto: str, nbytes: float) -> float:
    i = _log2i(int(nbytes) >> 6)
    row = TREE_CORRECTION[PROTOCOLS.index(proto)]
    return row[i] if 0 <= i < 23 else 1.0  # ncclTopoGetAlgoTime applies it to AllReduce trees below index 23
