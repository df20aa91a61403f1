"""The shaping spec of an emulated cluster (inter-/intra-node bandwidth, latency) and its presets (the
cluster files, ``clusters/*.yaml``, each slowed down by one factor).

Pure Python: validated here once, then turned into ``tc`` commands by ``monta.emulate.shaping``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from monta.hardware import clusterfile
from monta.hardware.links import Cluster

# An emulated profile is a real cluster (a cluster file, clusters/NAME.yaml, or a user's PATH.yaml) slowed
# by one factor: every node's NIC is shaped to ``inter_gbps`` and its loopback to ``inter_gbps x rho``,
# rho = per-GPU NVLink rate / per-GPU NIC share of the preset. A node's ranks share its loopback exactly
# as they share its NIC, so the per-GPU ratio of the real node is reproduced (docs/testbed.md). The
# default inter rate keeps the A800, A100 and Hopper clusters' loopback at or under ~1.7 Gbit/s, what gloo
# on 2 cores feeds for 2 x 4 ranks without the cores binding; 2 x 8 runs at half of it (``NAME@0.0625``).
# The AWS clusters' ratios are far higher (p4de 46, p3dn 96): give them a lower rate (``p4de@0.03``).
DEFAULT_INTER_GBPS = 0.125
# Removed profiles, and why (a name must say what it is).
RETIRED = {
    "a800-4nic-dilated": "it shaped intra:inter 7.27, an 8-NIC node's ratio (160 GB/s over a 2-node busbw)",
    "a800-4nic-dilated-half": "it shaped intra:inter 7.27, an 8-NIC node's ratio (160 GB/s over a 2-node busbw)",
}


def per_gpu_rates(cluster: Cluster) -> tuple[float, float]:
    """(NVLink GB/s, NIC share GB/s) of one GPU of ``cluster``: the rates a rank sees."""
    return cluster.per_gpu_GBps


def rho(cluster: str) -> float:
    """Per-GPU NVLink rate over per-GPU NIC share of a cluster (a name or a cluster file's path)."""
    nvlink, nic = per_gpu_rates(clusterfile.load_cluster(cluster))
    return nvlink / nic


MAX_GBPS = 400.0  # beyond this tc/tbf on a veth cannot be meant seriously on one machine
MAX_LATENCY_US = 1_000_000.0
TCP_CCS = ("reno", "bbr")  # the congestion controls a user namespace may set on this kernel class


@dataclass(frozen=True, kw_only=True)
class Topology:
    """How the emulated links are shaped. ``None`` rates mean "unshaped" (as fast as the box goes)."""

    name: str = "custom"
    """Label carried into results and link profiles."""
    inter_gbps: float | None = None
    """Each node's NIC rate in Gbit/s, per direction (tbf on the node's veth and its bridge peer)."""
    intra_gbps: float | None = None
    """Each node's loopback rate in Gbit/s (all intra-node traffic of that node shares it)."""
    latency_us: float = 0.0
    """Added one-way node-to-node latency in microseconds (netem, half on each side of the bridge)."""
    tcp_cc: str = "reno"
    """TCP congestion control inside the emulated nodes (reno or bbr; see ``netns._tune_tcp``)."""
    cluster: str = ""
    """The cluster these rates emulate: a name or a cluster file's path ('' = hand-set rates, no real cluster)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"topology name={self.name!r}: must be a non-empty string")
        for field_name in ("inter_gbps", "intra_gbps"):
            value = getattr(self, field_name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{field_name}={value!r}: must be a number of Gbit/s (or None for unshaped)")
            if not 0.001 <= value <= MAX_GBPS:
                raise ValueError(f"{field_name}={value!r}: must be between 0.001 and {MAX_GBPS:g} Gbit/s")
        if self.tcp_cc not in TCP_CCS:
            raise ValueError(f"tcp_cc={self.tcp_cc!r}: choose one of {', '.join(TCP_CCS)}")
        lat = self.latency_us
        if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not math.isfinite(lat):
            raise ValueError(f"latency_us={lat!r}: must be a number of microseconds")
        if not 0.0 <= lat <= MAX_LATENCY_US:
            raise ValueError(f"latency_us={lat!r}: must be between 0 and {MAX_LATENCY_US:g} us")
        if self.cluster:
            try:
                clusterfile.locate(self.cluster)
            except ValueError as e:
                raise ValueError(f"cluster={self.cluster!r}: {e}") from None

    @property
    def shaped(self) -> bool:
        return self.inter_gbps is not None or self.intra_gbps is not None or self.latency_us > 0

    @property
    def ratio(self) -> float | None:
        """intra:inter bandwidth ratio when both are shaped, else None (depends on the box)."""
        if self.inter_gbps is None or self.intra_gbps is None:
            return None
        return self.intra_gbps / self.inter_gbps

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def link_dilation(self, gpus_per_node: int) -> float | None:
        """How many times slower the emulated node's NIC is than the real node's (``gpus_per_node``
        GPUs, each with its NIC share of the preset); None for hand-set rates."""
        if not self.cluster or self.inter_gbps is None:
            return None
        _, nic = per_gpu_rates(clusterfile.load_cluster(self.cluster))
        return gpus_per_node * nic * 8.0 / self.inter_gbps

    def dilated(self, factor: float) -> Topology:
        """The same cluster on a clock ``factor`` x slower (``monta bench alltoall --dilation``): derived
        again from its cluster file at ``inter_gbps / factor``, so the loopback follows at rho and
        intra:inter stays the cluster's. ValueError for hand-set rates: they emulate no cluster."""
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1:
            raise ValueError(f"dilation {factor!r}: must be a factor >= 1")
        if factor == 1:
            return self
        if not self.cluster or self.inter_gbps is None:
            raise ValueError(
                f"topology {self.name!r} has no cluster file to slow down (hand-set or unshaped links); "
                "use --topology CLUSTER[@GBPS] or --dilation 1"
            )
        return Topology.emulating(self.cluster, self.inter_gbps / factor, tcp_cc=self.tcp_cc)

    def describe(self) -> str:
        def rate(v: float | None) -> str:
            return "unshaped" if v is None else f"{v:g} Gbit/s"

        text = f"{self.name}: inter {rate(self.inter_gbps)}, intra {rate(self.intra_gbps)}"
        if self.latency_us:
            text += f", +{self.latency_us:g} us one-way"
        if self.ratio is not None:
            text += f" (intra:inter {self.ratio:.2f}"
            text += f", the per-GPU rho of {self.cluster})" if self.cluster else ", hand-set)"
        return text

    @classmethod
    def emulating(cls, cluster: str, inter_gbps: float = DEFAULT_INTER_GBPS, **overrides: Any) -> Topology:
        """The cluster ``cluster`` (a name or a cluster file's path) slowed down so its NIC runs at
        ``inter_gbps`` per node; the loopback follows at ``inter_gbps x rho``. Named ``NAME@inter_gbps``
        (a file: the name inside it; the topology keeps the file's absolute path, so a record leads back)."""
        cf = clusterfile.read(cluster)
        if isinstance(inter_gbps, bool) or not isinstance(inter_gbps, (int, float)) or not inter_gbps > 0:
            raise ValueError(f"inter_gbps={inter_gbps!r}: must be a positive number of Gbit/s")
        is_file = clusterfile.is_path(cluster)
        label = cf.cluster.name if is_file else cluster
        cluster = str(cf.path.resolve()) if is_file else cluster
        return cls(
            name=f"{label}@{inter_gbps:g}",
            cluster=cluster,
            inter_gbps=float(inter_gbps),
            intra_gbps=round(inter_gbps * rho(cluster), 4),
            **overrides,
        )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Topology:
        """``unshaped``, a cluster (``a800-4nic`` or ``path/to/my.yaml``: its NIC at the default emulated
        rate), or ``CLUSTER@GBPS`` (its NIC at GBPS Gbit/s per node, the loopback at GBPS x rho)."""
        base_name, sep, at = name.rpartition("@")
        if not sep:
            base_name, at = name, ""
        if base_name in RETIRED:
            raise ValueError(
                f"topology preset {base_name!r} was removed: {RETIRED[base_name]}; use a800-4nic "
                f"(the 4-NIC A800, rho {rho('a800-4nic'):.1f}) or a800-8nic"
            )
        if name == "unshaped":
            base = Topology(name="unshaped")
        elif clusterfile.is_path(base_name) or base_name in {*clusterfile.cluster_names(), *clusterfile.aliases()}:
            try:
                inter = float(at) if at else DEFAULT_INTER_GBPS
            except ValueError:
                raise ValueError(
                    f"topology preset {name!r}: after '@' give the NIC rate in Gbit/s, e.g. {base_name}@0.0625"
                ) from None
            base = cls.emulating(base_name, inter)
        else:
            raise ValueError(
                f"unknown topology preset {name!r}; choose one of {', '.join(PRESETS)}, "
                "PRESET@GBPS (the NIC rate per node) or a cluster file PATH.yaml[@GBPS]"
            )
        if base.cluster and set(overrides) & {"inter_gbps", "intra_gbps"} == {"inter_gbps"}:
            # A cluster preset at another NIC rate is still that cluster: the loopback follows rho.
            base = cls.emulating(base.cluster, overrides.pop("inter_gbps"))
        if not overrides.keys() - {"tcp_cc"}:
            return replace(base, **overrides)
        # Rates or latency set by hand: no longer the preset; say so in its name.
        return replace(base, name=f"{base.name}+custom", cluster="", **overrides)


# The named presets: no shaping, and every cluster file (clusters/*.yaml) at the default rate.
PRESETS: tuple[str, ...] = ("unshaped", *clusterfile.cluster_names())


# -- command-line flags shared by `monta emulate ...` and `monta bench ...` -------------------
def add_topology_args(parser: argparse.ArgumentParser) -> None:
    """Add --topology/--inter-gbps/--intra-gbps/--latency-us to ``parser``."""
    g = parser.add_argument_group("emulated network")
    g.add_argument(
        "--topology",
        default=None,
        metavar="PRESET",
        help=f"named preset ({', '.join(PRESETS)}), PRESET@GBPS (its NIC at GBPS Gbit/s per node) or a "
        "cluster file PATH.yaml[@GBPS]; explicit flags below override it",
    )
    g.add_argument(
        "--inter-gbps",
        type=float,
        default=None,
        help="inter-node NIC rate per node and direction, Gbit/s (default: unshaped)",
    )
    g.add_argument(
        "--intra-gbps", type=float, default=None, help="intra-node (loopback) rate per node, Gbit/s (default: unshaped)"
    )
    g.add_argument("--latency-us", type=float, default=None, help="added one-way inter-node latency, us")
    g.add_argument(
        "--tcp-cc",
        default=None,
        choices=TCP_CCS,
        help="TCP congestion control inside the emulated nodes (default reno: see the README's testbed notes)",
    )


def topology_from_args(args: argparse.Namespace) -> Topology:
    """Build the Topology from flags added by :func:`add_topology_args` (ValueError on bad values)."""
    overrides = {
        k: getattr(args, k)
        for k in ("inter_gbps", "intra_gbps", "latency_us", "tcp_cc")
        if getattr(args, k, None) is not None
    }
    try:
        if args.topology:
            return Topology.preset(args.topology, **overrides)
        return Topology(name="custom" if overrides else "unshaped", **overrides)
    except ValueError as e:  # name the flag, not the field: "inter_gbps=-1.0: ..." -> "--inter-gbps -1.0: ..."
        text = str(e)
        for k in ("inter_gbps", "intra_gbps", "latency_us", "tcp_cc"):
            if text.startswith(f"{k}="):
                value, _, rest = text[len(k) + 1 :].partition(": ")
                text = f"--{k.replace('_', '-')} {value}: {rest}"
        if text.startswith(("unknown topology preset", "topology preset")):
            text = f"--topology {args.topology}: {text}"
        raise ValueError(text) from None
