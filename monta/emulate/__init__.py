"""An emulated multi-node cluster on one machine: namespaces per node, tc-shaped NICs, a rank launcher.

Entry points: ``launch(argv, nodes, gpus_per_node, Topology(...))`` and ``monta emulate run|calibrate|probe``.
"""

from monta.emulate.launcher import (
    EmulationError,
    LaunchResult,
    NamespaceUnavailable,
    RankFailed,
    launch,
    namespace_problem,
)
from monta.emulate.ranks import RankInfo
from monta.emulate.topology import PRESETS, Topology, add_topology_args, topology_from_args

__all__ = [
    "EmulationError",
    "LaunchResult",
    "NamespaceUnavailable",
    "PRESETS",
    "RankFailed",
    "RankInfo",
    "Topology",
    "add_topology_args",
    "launch",
    "namespace_problem",
    "topology_from_args",
]
