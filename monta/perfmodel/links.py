"""Link cost model (latency + bytes / (bandwidth x efficiency(size))), cluster presets, link profiles.

A ``Cluster`` is a node type (links, NICs, compute, memory) times a node count; the emulator's is
read from the link profile that ``monta emulate calibrate`` writes (schema ``monta.linkprofile/1``).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# Efficiency form (documented decision). ``efficiency`` is a list of measured ``(size_bytes, eff)``
# points. Between points, eff is piecewise linear in log2(size); outside them it is clamped to the
# end values, so the cost of small messages comes from the latency term (time = latency + bytes /
# (bandwidth x eff)). Extrapolating a curve below its smallest measurement invented overheads of
# hundreds of microseconds, so calibrate down to the smallest chunk you care about. No points: 1.
# In a link profile the points are end to end (size / time / bandwidth, what calibrate measures) and
# the latency is taken out of them on load, then the curve is made non-decreasing in size (see
# monotone()); the presets' SimAI ratios are used as they are.
# ``bandwidth_GBps`` is the effective large-message bandwidth (1 GB = 1e9 B):
# for ``intra`` the per-GPU NVLink bus bandwidth, for ``inter`` the bandwidth of ONE NIC (a node has
# ``nics_per_node`` of them, shared by its GPUs).

PROFILE_SCHEMA = "monta.linkprofile/1"
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
    # Emulator: every rank of every node runs on this many shared CPU cores (0 = each device has
    # its own host, as on real GPU nodes). Then the exchange timelines add the machine's CPU as a
    # resource that overlapping operations share (monta.perfmodel.fluid).
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
# Our bandwidths below are already the *effective* large-message figures, so the ratios are
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


def _nvlink_allgather(bandwidth_GBps: float) -> tuple:
    """The intra-node AllGather's own curve (SimAI's NVLink table), as a per-collective link. The
    table's ratios are end to end (latency inside them), so this link adds no latency of its own;
    below 16 MiB it keeps the 16 MiB ratio (the table's smallest size)."""
    return ((("allgather", "intra"), Link(bandwidth_GBps, 0.0, _SIMAI_NVLINK)),)


def _a800(nics: int) -> Cluster:
    # A800 SXM: 8 NVLinks x 25 GB/s per direction, ~20 GB/s effective each -> ~160 GB/s intra bus
    # bandwidth; HDR InfiniBand 200 Gb/s NICs at ~23.5 GB/s effective (SimAI, NSDI'25;
    # docs/design.md#a800-hardware).
    # 312 TFLOP/s dense bf16, 80 GB HBM2e at 2.0 TB/s.
    return Cluster(
        f"a800-{nics}nic",
        Link(160.0, 10.0, _SIMAI_INTRA),
        Link(23.5, 15.0, _SIMAI_INTER),
        collective_links=_nvlink_allgather(160.0),
        gpus_per_node=8,
        nics_per_node=nics,
        peak_tflops=312.0,
        mem_GB=80.0,
        copy_GBps=800.0,
        hbm_GBps=2039.0,
        source=f"A800 SXM, 8 NVLinks (~20 GB/s eff. each), {nics}x HDR 200 Gb/s; SimAI efficiency",
    )


def _a100() -> Cluster:
    # A100 SXM (DGX A100): 12 NVLinks x 25 GB/s per direction (~20 effective -> ~240 GB/s), 8x HDR.
    return Cluster(
        "a100",
        Link(240.0, 10.0, _SIMAI_INTRA),
        Link(23.5, 15.0, _SIMAI_INTER),
        gpus_per_node=8,
        collective_links=_nvlink_allgather(240.0),
        nics_per_node=8,
        peak_tflops=312.0,
        mem_GB=80.0,
        copy_GBps=800.0,
        hbm_GBps=2039.0,
        source="A100 SXM 80GB, 12 NVLinks, 8x HDR 200 Gb/s; SimAI efficiency shape",
    )


def _hopper(name: str, nvlink_eff_GBps: float, note: str) -> Cluster:
    # NDR 400 Gb/s = 50 GB/s per NIC, ~46 GB/s effective (DeepEP reports 43-58 GB/s inter on H800).
    # 989 TFLOP/s dense bf16, 80 GB HBM3 at 3.35 TB/s.
    return Cluster(
        name,
        Link(nvlink_eff_GBps, 8.0, _SIMAI_INTRA),
        Link(46.0, 12.0, _SIMAI_INTER),
        gpus_per_node=8,
        collective_links=_nvlink_allgather(nvlink_eff_GBps),
        nics_per_node=8,
        peak_tflops=989.0,
        mem_GB=80.0,
        copy_GBps=1300.0,
        hbm_GBps=3350.0,
        source=note,
    )


PRESETS = {
    "a800": lambda: _a800(4),  # decision: 4 NICs is the common A800 build; a800-8nic is the other
    "a800-4nic": lambda: _a800(4),
    "a800-8nic": lambda: _a800(8),
    "a100": _a100,
    # H100: NVLink 4, 900 GB/s bidirectional = 450 per direction, ~360 effective for AllToAll.
    "h100": lambda: _hopper("h100", 360.0, "H100 SXM, NVLink 900 GB/s bidir, 8x NDR 400 Gb/s"),
    # H800: NVLink cut to 400 GB/s bidirectional; DeepEP measures ~155 GB/s intra.
    "h800": lambda: _hopper("h800", 160.0, "H800 SXM, NVLink 400 GB/s bidir (DeepEP: ~155 GB/s), 8x NDR 400 Gb/s"),
}


@dataclass
class LinkProfile:
    """Measured link description (``monta.linkprofile/1``), e.g. from ``monta emulate calibrate``."""

    name: str
    source: str
    links: dict[str, Link]
    collectives: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)
    compute: dict[str, float] = field(default_factory=dict)
    nics_per_node: int = 1  # optional links.inter.nics_per_node; the emulator shapes one veth per node
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys survive a round trip

    def to_dict(self) -> dict[str, Any]:
        d = {
            "schema": PROFILE_SCHEMA,
            "name": self.name,
            "source": self.source,
            "links": {k: v.to_dict() for k, v in self.links.items()},
        }
        if self.nics_per_node != 1:
            d["links"]["inter"]["nics_per_node"] = self.nics_per_node
        if self.collectives:
            d["collectives"] = self.collectives
        if self.compute:
            d["compute"] = self.compute
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "link profile") -> LinkProfile:
        if not isinstance(d, dict) or d.get("schema") != PROFILE_SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ValueError(
                f"{where}: schema is {got!r}, expected {PROFILE_SCHEMA!r} (write it with `monta emulate calibrate`)"
            )
        links = d.get("links") or {}
        missing = [c for c in LINK_CLASSES if c not in links]
        if missing:
            raise ValueError(f"{where}: links.{missing[0]} is missing (need both intra and inter)")
        known = {"schema", "name", "source", "links", "collectives", "compute"}
        return cls(
            name=str(d.get("name", "profile")),
            source=str(d.get("source", "")),
            links={c: Link.from_dict(links[c], f"{where}: links.{c}") for c in LINK_CLASSES},
            collectives=dict(d.get("collectives") or {}),
            compute=dict(d.get("compute") or {}),
            nics_per_node=int(links["inter"].get("nics_per_node", 1)),
            extra={k: v for k, v in d.items() if k not in known},
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> LinkProfile:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"link profile {p} not found (write one with `monta emulate calibrate`)")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"link profile {p}: not JSON ({e.msg} at line {e.lineno})") from None
        return cls.from_dict(data, where=f"link profile {p}")

    def save(self, path: str | os.PathLike) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, p)
        return p

    def cluster(self, nodes: int | None = None, gpus_per_node: int | None = None) -> Cluster:
        """The emulated cluster: one shaped veth per node (one 'NIC' unless the profile says more),
        one shared loopback per node, and per-collective efficiency from the measured sweeps."""
        topo = self.extra.get("topology") or {}
        nodes = int(nodes or topo.get("nodes", 2))
        gpn = int(gpus_per_node or topo.get("gpus_per_node", 4))
        shared = bool(self.extra.get("intra_shared", self.source == "emulated" or bool(topo)))
        host = self.extra.get("host") or {}
        c = self.compute
        intra, inter = (_without_latency(self.links[k]) for k in LINK_CLASSES)
        base = Cluster(
            f"emulator:{self.name}",
            intra,
            inter,
            gpus_per_node=gpn,
            nodes=nodes,
            nics_per_node=self.nics_per_node,
            peak_tflops=float(c.get("gemm_tflops", 0.05)),
            gemm_eff=1.0,
            attn_eff=1.0,
            mem_GB=float(c.get("mem_GB", 8.0)),
            copy_GBps=float(c.get("copy_GBps", 5.0)),
            hbm_GBps=float(c.get("copy_GBps", 5.0)) * 2,
            intra_shared=shared,
            intra_machine_shared=shared,
            source=f"link profile {self.name}: {self.source}",
            host_cores=int(host.get("cores", 0)) if shared else 0,
            a2a_cpu_us=_fit_cpu(host, "alltoall.inter_all", int(topo.get("nodes", 2))),
            ag_cpu_us=_fit_cpu(host, "allgather.intra_all", int(topo.get("gpus_per_node", 4))),
        )
        return replace(base, collective_links=self._collective_links(base, topo))

    def _collective_links(self, cl: Cluster, topo: dict) -> tuple:
        """Turn measured (size, time_us) collective points into efficiency curves.

        Calibration groups (``monta emulate calibrate``): intra = all ranks of node 0, inter =
        local rank 0 of every node. The bytes each group pushes through its bottleneck link are
        computed exactly as :mod:`monta.perfmodel.collectives` does, so the curve is consistent."""
        out = []
        n_intra = len(topo.get("intra_group") or []) or cl.gpus_per_node
        n_inter = len(topo.get("inter_group") or []) or cl.nodes
        n_nodes_cal = int(topo.get("nodes", cl.nodes))
        gpn_cal = int(topo.get("gpus_per_node", cl.gpus_per_node))
        measured_all = {
            (op, name.removesuffix("_all"))
            for op, by_link in (self.collectives or {}).items()
            for name in (by_link or {})
            if name.endswith("_all")
        }
        for op, by_link in (self.collectives or {}).items():
            if op not in ("alltoall", "allgather"):
                continue
            for name, points in (by_link or {}).items():
                if name == "inter_all" and op == "alltoall" and points:
                    out.append(((op, "inter"), self._inter_all_link(cl, points, n_nodes_cal, gpn_cal)))
                    continue
                if name == "intra_all" and op == "allgather" and points:
                    out.append(((op, "intra"), self._intra_all_link(cl, points, n_nodes_cal, gpn_cal)))
                    continue
                cls = name
                if (op, cls) in measured_all:  # the all-ranks-busy measurement is the better one
                    continue
                # The inter-node link keeps its point-to-point curve (one direction, as calibrate's
                # ping-pong measures it): the shaped veth limits each direction on its own, and the
                # calibration's inter collective is ONE rank pair whose single TCP flow each way is
                # window-bound (its ACKs queue behind the opposite direction's data): 0.5 of the
                # link at every size. That is a property of that one flow, not of the NIC: the
                # c ranks of a node running the exchange together keep it busy. Taking the pair's
                # curve for them predicted the drop-side AllToAll at 2x its measured time.
                if cls != "intra" or not points:
                    continue
                link = cl.link(cls)
                n = n_intra if cls == "intra" else n_inter
                if n < 2:
                    continue
                pts = []
                for size, t_us in points:
                    size, t_us = float(size), float(t_us)
                    if op == "alltoall":  # size = bytes each rank sends
                        per_rank = size * (n - 1) / n
                    else:  # size = gathered output per rank; each rank forwards (n-1)/n of it
                        per_rank = size * (n - 1) / n
                    if cls == "intra":
                        moved, bw = per_rank * (n if cl.intra_shared else 1), link.bandwidth_GBps
                    else:
                        moved, bw = per_rank, link.bandwidth_GBps * cl.nics_per_node
                    busy = max(t_us - link.latency_us, 0.05 * t_us)
                    pts.append((size, moved / (busy * bw * 1e3)))
                out.append(((op, cls), Link(link.bandwidth_GBps, link.latency_us, monotone(pts))))
        return tuple(out)

    @staticmethod
    def _inter_all_link(cl: Cluster, points, nodes_cal: int, gpn_cal: int) -> Link:
        """Inter-node AllToAll with every rank of a node in its own strided group at once (the
        exchange's pattern): the node's NIC carries gpn_cal x S x (nodes-1)/nodes bytes each way.
        Many TCP flows through one shaped link reach less than one flow does (~0.7 here)."""
        link = cl.inter
        pts = []
        for size, t_us in points:
            node_bytes = gpn_cal * float(size) * (nodes_cal - 1) / nodes_cal
            busy = max(float(t_us) - link.latency_us, 0.05 * float(t_us))
            pts.append((float(size), node_bytes / (busy * link.bandwidth_GBps * cl.nics_per_node * 1e3)))
        # Not made monotone: with many flows the efficiency really falls at large sizes (losses in
        # the shaper's queue), and a chunk cut below such a size really does run faster.
        return Link(link.bandwidth_GBps, link.latency_us, tuple(pts))

    @staticmethod
    def _intra_all_link(cl: Cluster, points, nodes_cal: int, gpn_cal: int) -> Link:
        """AllGather on every node's group at once: measured with all ``nodes_cal`` nodes sharing the
        cores, while the model multiplies by the node count itself, so take that factor out."""
        link, n = cl.intra, gpn_cal
        pts = []
        for size, t_us in points:
            moved = float(size) * (n - 1) / n * n  # each rank forwards (n-1)/n; the node's n share it
            busy = max(float(t_us) / nodes_cal - link.latency_us, 0.05 * float(t_us) / nodes_cal)
            pts.append((float(size), moved / (busy * link.bandwidth_GBps * 1e3)))
        return Link(link.bandwidth_GBps, link.latency_us, monotone(pts))


def _fit_cpu(host: dict, key: str, n: int) -> tuple[float, float]:
    """Least-squares line cpu_us = fixed + per_byte x (bytes a rank sends) through calibrate's CPU
    points for ``key`` (group of n ranks: a rank sends (n-1)/n of the size). For the AllGather the
    fixed part is per ring step (n-1 of them), so other group sizes scale. (0, 0) without points."""
    pts = (host.get("cpu_us") or {}).get(key) or []
    xs = [float(s) * (n - 1) / n for s, _ in pts]
    ys = [float(c) for _, c in pts]
    if len(xs) < 2 or n < 2:
        return (0.0, 0.0)
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = max(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var, 0.0) if var else 0.0
    fixed = max(my - slope * mx, 0.0)
    return (fixed / (n - 1) if key.startswith("allgather") else fixed, slope)


def _without_latency(link: Link) -> Link:
    """A profile's efficiency is end to end (size / time / bandwidth, as calibrate measures it);
    the model adds the latency itself, so take it out of the curve once here."""
    pts = []
    for size, eff in link.efficiency:
        t_us = size / (link.bandwidth_GBps * 1e3 * eff)
        busy = max(t_us - link.latency_us, 0.05 * t_us)
        pts.append((size, size / (busy * link.bandwidth_GBps * 1e3)))
    return Link(link.bandwidth_GBps, link.latency_us, monotone(pts))


def monotone(points) -> tuple[tuple[float, float], ...]:
    """Make efficiency non-decreasing in size (running minimum from the largest size down).

    A measured bump (a shaper's token bucket passing a mid-size burst unthrottled, noise) must not
    let the model win by cutting a transfer into pieces that each ride the bump."""
    out, floor = [], float("inf")
    for size, eff in sorted(points, reverse=True):
        floor = min(floor, eff)
        out.append((size, floor))
    return tuple(sorted(out))


def get_cluster(
    spec: str | Cluster | LinkProfile | None = None, nodes: int | None = None, gpus_per_node: int | None = None
) -> Cluster:
    """A preset name, a link-profile path (``emulator:PATH`` or ``*.json``), a profile, or a Cluster.

    ``None`` reads ``$MONTA_CLUSTER`` (same forms), defaulting to the A800 preset.
    """
    if spec is None:
        spec = os.environ.get("MONTA_CLUSTER", "a800")
    if isinstance(spec, Cluster):
        c = spec
    elif isinstance(spec, LinkProfile):
        c = spec.cluster()
    else:
        s = str(spec)
        if s.startswith("emulator:") or s.endswith(".json"):
            c = LinkProfile.load(s.removeprefix("emulator:")).cluster()
        elif s == "emulator":
            raise ValueError(
                "cluster 'emulator' needs a link profile: use emulator:PATH/TO/linkprofile.json "
                "(written by `monta emulate calibrate`)"
            )
        elif s in PRESETS:
            c = PRESETS[s]()
        else:
            raise ValueError(
                f"unknown cluster preset {s!r}: choose one of {', '.join(PRESETS)} or emulator:PATH/TO/linkprofile.json"
            )
    if nodes is not None or gpus_per_node is not None:
        c = c.with_nodes(nodes or c.nodes, gpus_per_node or c.gpus_per_node)
    return c
