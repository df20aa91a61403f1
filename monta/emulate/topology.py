"""The shaping spec of an emulated cluster (inter-/intra-node bandwidth, latency) and its presets.

Pure Python: validated here once, then turned into ``tc`` commands by ``monta.emulate.shaping``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

# A800 (BRIEF.md section 3): ~160 GB/s intra-node AllToAll busbw per GPU over NVLink, ~22 GB/s
# (4 HDR NICs) or ~44 GB/s (8 NICs) inter-node for 2 nodes x 8. The emulated node's loopback is
# shared by all its ranks exactly as its NIC is, so the per-rank ratio equals the ratio of the
# two node-level rates; we keep that ratio and scale the absolute rates down to what a 2-core box
# carries (gloo over loopback measured ~1-2 GB/s = 8-16 Gbit/s here, see the emulate report).
A800_INTRA_GBPS_SCALED = 8.0  # node loopback, Gbit/s: below what the box reaches, so it binds
_A800_INTRA_GBs, _A800_INTER_4NIC_GBs, _A800_INTER_8NIC_GBs = 160.0, 22.0, 44.0

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

    def describe(self) -> str:
        def rate(v: float | None) -> str:
            return "unshaped" if v is None else f"{v:g} Gbit/s"
        text = f"{self.name}: inter {rate(self.inter_gbps)}, intra {rate(self.intra_gbps)}"
        if self.latency_us:
            text += f", +{self.latency_us:g} us one-way"
        if self.ratio is not None:
            text += f" (intra:inter {self.ratio:.2f})"
        return text

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "Topology":
        try:
            base = PRESETS[name]
        except KeyError:
            raise ValueError(f"unknown topology preset {name!r}; choose one of {', '.join(PRESETS)}") from None
        # An overridden preset is no longer the preset: say so in its name.
        return replace(base, name=f"{name}+custom", **overrides) if overrides else base


def _a800(name: str, inter_GBs: float) -> Topology:
    return Topology(name=name, intra_gbps=A800_INTRA_GBPS_SCALED,
                    inter_gbps=round(A800_INTRA_GBPS_SCALED * inter_GBs / _A800_INTRA_GBs, 3))


# Time-dilated A800 (4 NICs) for this 2-core box: the intra:inter ratio of a real node (7.27), at
# rates where the shaped links, not the cores that every emulated rank shares, bound an exchange.
# Every byte takes ~700x longer than on the real node, so CPU work per byte (copies, TCP) is a
# small share of the wall time: on 2 x 8 ranks the ranks' main threads waited for a core 1-4% of
# the time where 8 : 1.1 Gbit/s left the AllGather CPU-bound (README, testbed section).
DILATED_INTER_GBPS = 0.25
A800_4NIC_DILATED = Topology(name="a800-4nic-dilated", inter_gbps=DILATED_INTER_GBPS,
                             intra_gbps=round(DILATED_INTER_GBPS * _A800_INTRA_GBs / _A800_INTER_4NIC_GBs, 3))

# The same at half the rates, for 2 x 8 ranks: there the default rates leave MoNTA's chunked exchange
# CPU-bound (its 16 ranks waited for a core 15-20% of the time at 16 MiB); at half the rates 1-5%.
A800_4NIC_DILATED_HALF = replace(A800_4NIC_DILATED, name="a800-4nic-dilated-half",
                                 inter_gbps=DILATED_INTER_GBPS / 2, intra_gbps=A800_4NIC_DILATED.intra_gbps / 2)

PRESETS: dict[str, Topology] = {
    "unshaped": Topology(name="unshaped"),
    "a800-4nic-dilated": A800_4NIC_DILATED,  # 1.818 : 0.25 Gbit/s, ratio 7.27 (the default profile)
    "a800-4nic-dilated-half": A800_4NIC_DILATED_HALF,  # 0.909 : 0.125 Gbit/s, ratio 7.27 (link-bound on 2 x 8)
    "a800-4nic": _a800("a800-4nic", _A800_INTER_4NIC_GBs),  # 8 : 1.1 Gbit/s, ratio 7.27
    "a800-8nic": _a800("a800-8nic", _A800_INTER_8NIC_GBs),  # 8 : 2.2 Gbit/s, ratio 3.64
}


# -- command-line flags shared by `monta emulate ...` and `monta bench ...` -------------------
def add_topology_args(parser: argparse.ArgumentParser) -> None:
    """Add --topology/--inter-gbps/--intra-gbps/--latency-us to ``parser``."""
    g = parser.add_argument_group("emulated network")
    g.add_argument("--topology", default=None, metavar="PRESET",
                   help=f"named preset ({', '.join(PRESETS)}); explicit flags below override it")
    g.add_argument("--inter-gbps", type=float, default=None,
                   help="inter-node NIC rate per node and direction, Gbit/s (default: unshaped)")
    g.add_argument("--intra-gbps", type=float, default=None,
                   help="intra-node (loopback) rate per node, Gbit/s (default: unshaped)")
    g.add_argument("--latency-us", type=float, default=None, help="added one-way inter-node latency, us")
    g.add_argument("--tcp-cc", default=None, choices=TCP_CCS,
                   help="TCP congestion control inside the emulated nodes (default reno: see the README's testbed notes)")


def topology_from_args(args: argparse.Namespace) -> Topology:
    """Build the Topology from flags added by :func:`add_topology_args` (ValueError on bad values)."""
    overrides = {k: getattr(args, k) for k in ("inter_gbps", "intra_gbps", "latency_us", "tcp_cc")
                 if getattr(args, k, None) is not None}
    try:
        if args.topology:
            return Topology.preset(args.topology, **overrides)
        return Topology(name="custom" if overrides else "unshaped", **overrides)
    except ValueError as e:  # name the flag, not the field: "inter_gbps=-1.0: ..." -> "--inter-gbps -1.0: ..."
        text = str(e)
        for k in ("inter_gbps", "intra_gbps", "latency_us", "tcp_cc"):
            if text.startswith(f"{k}="):
                value, _, rest = text[len(k) + 1:].partition(": ")
                text = f"--{k.replace('_', '-')} {value}: {rest}"
        if text.startswith("unknown topology preset"):
            text = f"--topology {args.topology}: {text}"
        raise ValueError(text) from None
