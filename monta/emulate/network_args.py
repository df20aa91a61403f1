"""The emulated network a command gets with no network flag, and its flags' help: shared by `monta bench`
and `monta emulate` (the emulator's own, so the emulator's CLI needs nothing from the benchmarks)."""

from __future__ import annotations

import argparse

# With no network flag, both benchmarks emulate the 4-NIC A800 (its NIC at the default emulated rate,
# its loopback at the A800's per-GPU ratio): the cluster the paper measures. `--topology unshaped` asks
# for no shaping at all.
DEFAULT_TOPOLOGY = "a800-4nic"
SHAPING = ("topology", "inter_gbps", "intra_gbps", "latency_us")

NETWORK_HELP = {
    "topology": f"the emulated network: a preset (`monta emulate presets`), PRESET@GBPS (its NIC at GBPS Gbit/s "
    f"per node), a cluster file PATH.yaml[@GBPS], or unshaped; the flags below override it (default: "
    f"{DEFAULT_TOPOLOGY} at its default rate when no network flag is given)",
    "inter_gbps": "inter-node NIC rate per node and direction, Gbit/s (default: the --topology's)",
    "intra_gbps": "intra-node (loopback) rate per node, Gbit/s (default: the --topology's)",
    "latency_us": "added one-way inter-node latency, us (default: the --topology's, 0)",
    "tcp_cc": "TCP congestion control inside the emulated nodes (default: reno; README's testbed notes)",
}


def default_network(args: argparse.Namespace) -> bool:
    """Whether no shaping flag was given (the emulator then runs the default profile)."""
    return all(getattr(args, k, None) is None for k in SHAPING)


def default_topology(args: argparse.Namespace):
    """The emulated network with no network flag, in `monta bench` and `monta emulate` alike."""
    from monta.emulate.topology import Topology

    overrides = {"tcp_cc": args.tcp_cc} if getattr(args, "tcp_cc", None) else {}
    return Topology.preset(DEFAULT_TOPOLOGY, **overrides)
