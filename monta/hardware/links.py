"""Link cost model (latency + bytes / (bandwidth x efficiency(size))), ``Cluster`` and the named
efficiency curves.

A ``Cluster`` is a node type (links, NICs, compute, memory) times a node count. The real clusters are
files, ``clusters/NAME.yaml`` (read by ``monta.hardware.clusterfile``); the emulator's is read
from the link profile that ``monta emulate calibrate`` writes (``monta.hardware.profile``, which
also holds ``get_cluster``: a cluster name or file, a profile or its path -> a ``Cluster``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

# Efficiency form (documented decision). ``efficiency`` is a list of measured ``(size_bytes, eff)``
# points. Between points, eff is piecewise linear in log2(size); outside them it is clamped to the
# end values, so the cost of small messages comes from the latency term (time = latency + bytes /
# (bandwidth x eff)). Extrapolating a curve below its smallest measurement invented overheads of
# hundreds of microseconds, so calibrate down to the smallest chunk you care about. No points: 1.
# In a link profile the points are end to end (size / time / bandwidth, what calibrate measures) and
# the latency is taken out of them on load, then the curve is made non-decreasing in size (see
# profile.monotone()); the presets' SimAI ratios are used as they are.
# ``bandwidth_GBps`` is the effective large-message bandwidth (1 GB = 1e9 B):
# for ``intra`` the per-GPU NVLink bus bandwidth, for ``inter`` the bandwidth of ONE NIC (a node has
# ``nics_per_node`` of them, shared by its GPUs).

LINK_CLASSES = ("intra", "inter")


@dataclass(frozen=True)
class Link:
    """One link class: effective bandwidth (GB/s), latency (us) and the efficiency curve."""

    bandwidth_GBps: float
    latency_us: float
    efficiency: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if not self.bandwidth_GBps > 0:
            raise ValueError(f"link bandwidth_GBps={self.bandwidth_GBps!r}: must be > 0")
        if self.latency_us < 0:
            raise ValueError(f"link latency_us={self.latency_us!r}: must be >= 0")
        pts = tuple(sorted((float(s), float(e)) for s, e in self.efficiency))
        for s, e in pts:
            if s <= 0 or not 0 <= e < math.inf:
                # > 1 is legal: a shaper's token bucket lets mid-size bursts beat the fitted rate.
                raise ValueError(f"efficiency point ({s}, {e}): need size > 0 and a finite eff >= 0")
        # A latency-bound point rounded to 0 in the profile still means "very slow", not "infinite".
        pts = tuple((s, max(e, 1e-4)) for s, e in pts)
        object.__setattr__(self, "efficiency", pts)

    def eff(self, nbytes: float) -> float:
        pts = self.efficiency
        if not pts or nbytes <= 0:
            return pts[0][1] if pts else 1.0
        s0, e0 = pts[0]
        if nbytes <= s0:
            return e0
        if nbytes >= pts[-1][0]:
            return pts[-1][1]
        x = math.log2(nbytes)
        for (sa, ea), (sb, eb) in zip(pts, pts[1:]):
            if nbytes <= sb:
                xa, xb = math.log2(sa), math.log2(sb)
                return ea + (eb - ea) * (x - xa) / (xb - xa)
        return pts[-1][1]  # unreachable

    def transfer_us(self, nbytes: float, eff_size: float | None = None, share: float = 1.0) -> float:
        """Time to push ``nbytes`` through the link; efficiency looked up at ``eff_size`` (the
        collective's nccl-tests size) and bandwidth divided among ``share`` concurrent users."""
        if nbytes <= 0:
            return 0.0
        e = self.eff(nbytes if eff_size is None else eff_size)
        return nbytes * share / (self.bandwidth_GBps * 1e3 * e)  # GB/s = 1e3 B/us

    def time_us(self, nbytes: float) -> float:
        return (self.latency_us + self.transfer_us(nbytes)) if nbytes > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "bandwidth_GBps": self.bandwidth_GBps,
            "latency_us": self.latency_us,
            "efficiency": [[s, e] for s, e in self.efficiency],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "link") -> Link:
        try:
            return cls(
                float(d["bandwidth_GBps"]),
                float(d.get("latency_us", 0.0)),
                tuple((float(s), float(e)) for s, e in d.get("efficiency", [])),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(
                f"{where}: needs bandwidth_GBps, latency_us, efficiency [[size, eff], ...] ({e})"
            ) from None


@dataclass(frozen=True)
class Cluster:
    """A node type times a node count: what the model needs to know about the hardware."""

    name: str
    intra: Link
    inter: Link
    gpus_per_node: int = 8
    nodes: int = 1
    nics_per_node: int = 1
    peak_tflops: float = 312.0  # dense bf16 per GPU
    gemm_eff: float = 0.6  # fraction of peak a large GEMM reaches; measured numbers replace it
    attn_eff: float = 0.45  # flash-attention kernels reach less than GEMMs
    mem_GB: float = 80.0  # per GPU
    copy_GBps: float = 800.0  # device memcpy (read + write) for the chunk copy
    hbm_GBps: float = 2000.0
    # NVLink gives every GPU its own bandwidth; the emulator's node loopback is one link shared by
    # all ranks of the node, like a NIC.
    intra_shared: bool = False
    # The emulator's nodes are namespaces on one machine: every node's loopback is served by the same
    # CPU cores, so an intra-node collective running on all nodes at once is slowed by all of them.
    # Its calibration ran the intra collectives on node 0 only, hence the factor ``nodes`` at run time.
    intra_machine_shared: bool = False
    # Efficiency measured per collective replaces the link's point-to-point curve for it:
    # ((op, link class), Link) pairs, op in alltoall / allgather.
    collective_links: tuple[tuple[tuple[str, str], Link], ...] = ()
    source: str = ""
    # The AllReduce algorithms the collective library picks from (monta.perfmodel.network.collectives.allreduce):
    # "ring" always; "tree" (NCCL's double binary tree: on 2 nodes half the ring's network bytes); "nvls"
    # (NVLink SHARP, NVSwitch gen 3: the switch reduces, at ``nvls_algbw_GBps`` of algorithm bandwidth per GPU).
    # An emulator profile (gloo) runs rings only; a cluster file states what its NCCL runs.
    allreduce_algorithms: tuple[str, ...] = ("ring",)
    nvls_algbw_GBps: float = 0.0
    # The GPU generation whose NCCL constants price this cluster's collectives (volta / ampere / hopper:
    # monta.perfmodel.network.nccl_tuning): its protocols, latencies, channels and algorithm choice. Set by a
    # cluster file from its gpu.model; "" (an emulator profile: gloo over TCP; a fitted curve) keeps the link model.
    nccl_arch: str = ""
    # The network plugin NCCL runs over, as NCCL's tuner sees it (monta.perfmodel.network.nccl_tuning.NET_PLUGINS):
    # "" for NCCL's own InfiniBand/RoCE transport (it reports no latency of its own), "efa" for aws-ofi-nccl on
    # AWS EFA (its stated latency per network step; Simple only on EFA's first generation).
    net_plugin: str = ""
    # Emulator: every rank of every node runs on this many shared CPU cores (0 = each device has
    # its own host, as on real GPU nodes). Then the exchange timelines add the machine's CPU as a
    # resource that overlapping operations share (monta.perfmodel.network.fluid).
    host_cores: int = 0
    # CPU cost per rank of one inter-node AllToAll call: (fixed us, us per byte sent off the node),
    # from calibrate's concurrent AllToAll (it runs on every rank at once, as in the exchange).
    a2a_cpu_us: tuple[float, float] = (0.0, 0.0)
    # The same for one AllGather call: (fixed us per ring step, us per byte a rank forwards).
    ag_cpu_us: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        for name in ("gpus_per_node", "nodes", "nics_per_node"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"cluster {name}={v!r}: must be a positive integer")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def per_gpu_GBps(self) -> tuple[float, float]:
        """(NVLink GB/s, NIC share GB/s) of one GPU: the rates a rank sees (the emulator's profiles and
        the emulated clock are derived from them)."""
        return self.intra.bandwidth_GBps, self.inter.bandwidth_GBps * self.nics_per_node / self.gpus_per_node

    def with_nodes(self, nodes: int, gpus_per_node: int | None = None) -> Cluster:
        return replace(self, nodes=nodes, gpus_per_node=gpus_per_node or self.gpus_per_node)

    def link(self, cls: str, op: str | None = None) -> Link:
        if op is not None and self.collective_links:
            for key, lk in self.collective_links:
                if key == (op, cls):
                    return lk
        return self.intra if cls == "intra" else self.inter

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "nics_per_node": self.nics_per_node,
            "intra": self.intra.to_dict(),
            "inter": self.inter.to_dict(),
            "peak_tflops": self.peak_tflops,
            "gemm_eff": self.gemm_eff,
            "mem_GB": self.mem_GB,
        }


# SimAI (Alibaba, NSDI'25) measured AllToAll efficiency ratios on A800 (docs/design.md#a800-hardware):
# one node 0.44 / 0.65 / 0.74 at 16 MiB / 128 MiB / 1 GiB; two nodes 0.52 / 0.76 / 0.81.
# The cluster files' bandwidths are the *effective* large-message figures, so the ratios are
# normalised to their 1 GiB value (the curve's shape, not its absolute level, is what we take).
_SIMAI_INTRA = ((16 * 2**20, 0.44 / 0.74), (128 * 2**20, 0.65 / 0.74), (2**30, 1.0))
_SIMAI_INTER = ((16 * 2**20, 0.52 / 0.81), (128 * 2**20, 0.76 / 0.81), (2**30, 1.0))
# SimAI prices TP AllGather / ReduceScatter with its NVLink table (astra-sim-alibabacloud/inputs/
# ratio/nvlink_ratio.csv, one node), not with the AllToAll ratios: 0.45 at 16 MiB rising to 0.81 at
# 16 GiB. Normalised to its largest size, as above: at 160 GB/s ~89 / 128 / 136 / 152 GB/s at
# 16 MiB / 64 MiB / 128 MiB / 1 GiB (the AllToAll shape gave 95 / 123 / 141 / 160).
_SIMAI_NVLINK = tuple(
    (2**p, r / 0.81)
    for p, r in (
        (24, 0.45),
        (25, 0.55),
        (26, 0.65),
        (27, 0.69),
        (28, 0.73),
        (29, 0.76),
        (30, 0.77),
        (31, 0.78),
        (32, 0.79),
        (33, 0.80),
        (34, 0.81),
    )
)


# The named efficiency curves a cluster file (clusters/*.yaml, ``efficiency: NAME``) may use; the data
# and where it comes from stay here, in one table. A file may give its own ``[[size_bytes, eff], ...]``.
CURVES: dict[str, tuple[tuple[float, float], ...]] = {
    "simai-alltoall-intra": _SIMAI_INTRA,
    "simai-alltoall-inter": _SIMAI_INTER,
    # End to end (latency inside the ratios): a link using it takes latency_us 0, and below 16 MiB it
    # keeps the 16 MiB ratio (the table's smallest size).
    "simai-nvlink": _SIMAI_NVLINK,
}
