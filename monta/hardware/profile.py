"""Calibrated link profiles (schema ``monta.linkprofile/1``): what ``monta emulate calibrate`` measures
and writes, read back as a ``Cluster`` of the cost model (``monta.hardware.links``); and
``get_cluster``, the one door to a ``Cluster`` (a cluster name or file, ``clusters/*.yaml``, read by
``monta.hardware.clusterfile``; a profile or its path; or a Cluster). It lives here, above both,
because a profile is built from the cost model's ``Link`` and ``Cluster``.

A profile's efficiency points are end to end (size / time / bandwidth, what calibrate measures); the
latency is taken out of them on load, then the curve is made non-decreasing in size (``monotone``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from monta.atomic import write_atomic
from monta.hardware.links import LINK_CLASSES, Cluster, Link

PROFILE_SCHEMA = "monta.linkprofile/1"


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
        write_atomic(p, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return p

    @property
    def clock_factor(self) -> float:
        """How many times slower than its calibration this profile's links are (``rescaled``; 1 = as measured)."""
        return float(self.extra.get("clock_factor", 1.0))

    def rescaled(self, factor: float) -> LinkProfile:
        """This profile on a clock ``factor`` x slower, for a record the emulator ran at the calibrated rates
        / ``factor`` (``monta bench alltoall --dilation``, or 2 x 8 at half the 2 x 4 rates): every link's
        bandwidth / factor; latencies unchanged, because the shaping adds no delay of its own (netem 0); each
        efficiency curve read at the size that takes as long at the calibrated rate (``_slower``: its shortfall
        is the host's time per message, which the slower link does not stretch); the host's CPU terms unchanged
        (the same work per byte). docs/testbed.md, "the model follows the clock"."""
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
            raise ValueError(f"rescaled({factor!r}): the factor must be a positive number")
        if factor == 1:
            return self
        topo = dict(self.extra.get("topology") or {})
        for key in ("inter_gbps", "intra_gbps"):
            if topo.get(key) is not None:
                topo[key] = float(topo[key]) / factor
        total = self.clock_factor * factor
        calibrated = self.extra.get("calibrated_name", self.name)
        extra = {**self.extra, "topology": topo, "clock_factor": total, "calibrated_name": calibrated}
        return replace(self, name=f"{calibrated}/{total:g}", extra=extra)

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
        # The curves come from the calibration's measured times at its own rates; then the clock applies.
        base = replace(base, collective_links=self._collective_links(base, topo))
        return _slower(base, self.clock_factor)

    def _collective_links(self, cl: Cluster, topo: dict) -> tuple:
        """Turn measured (size, time_us) collective points into efficiency curves.

        Calibration groups (``monta emulate calibrate``): intra = all ranks of node 0, inter =
        local rank 0 of every node. The bytes each group pushes through its bottleneck link are
        computed exactly as :mod:`monta.perfmodel.network.collectives` does, so the curve is consistent."""
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


def _slower(cl: Cluster, factor: float) -> Cluster:
    """``cl`` with every link's bandwidth / ``factor``, its latency kept, and its efficiency curve read at
    the size that takes as long at the calibrated rate (a point (s, e) moves to (s / factor, e)): what a
    curve's shortfall holds is time the host spends per message (posting, waking, copying), which a
    slower link does not stretch, so a message of s / factor bytes on the slower link loses the share a
    message of s bytes lost at the calibrated rate. Keeping the curve per size priced the exchange map's
    top-8 points at x4 10-28% slow (docs/testbed.md, the chunk floor)."""
    if factor == 1:
        return cl

    def slow(link: Link) -> Link:
        curve = tuple((s / factor, e) for s, e in link.efficiency)
        return replace(link, bandwidth_GBps=link.bandwidth_GBps / factor, efficiency=curve)

    return replace(
        cl,
        intra=slow(cl.intra),
        inter=slow(cl.inter),
        collective_links=tuple((key, slow(link)) for key, link in cl.collective_links),
    )


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
    spec: str | os.PathLike | Cluster | LinkProfile | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
) -> Cluster:
    """A cluster name (``clusters/NAME.yaml`` or an alias), a cluster file's path (``*.yaml``), a link
    profile's path (``emulator:PATH`` or ``*.json``), a profile, or a Cluster.

    ``None`` reads ``$MONTA_CLUSTER`` (same forms), defaulting to the A800 cluster (``a800``).
    """
    from monta.hardware import clusterfile

    if spec is None:
        spec = os.environ.get("MONTA_CLUSTER", "a800")
    if isinstance(spec, Cluster):
        c = spec
    elif isinstance(spec, LinkProfile):
        c = spec.cluster()
    else:
        s = os.fspath(spec)
        if s.startswith("emulator:") or s.endswith(".json"):
            c = LinkProfile.load(s.removeprefix("emulator:")).cluster()
        elif s == "emulator":
            raise ValueError(
                "cluster 'emulator' needs a link profile: use emulator:PATH/TO/linkprofile.json "
                "(written by `monta emulate calibrate`)"
            )
        else:
            c = clusterfile.load_cluster(s)
    if nodes is not None or gpus_per_node is not None:
        c = c.with_nodes(nodes or c.nodes, gpus_per_node or c.gpus_per_node)
    return c
