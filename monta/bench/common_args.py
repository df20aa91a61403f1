"""The flags ``monta bench alltoall`` and ``monta bench step`` share, built here once so they mean the same
in both: where the ranks run (``--launcher``, ``--backend``, ``--nodes``, ``--gpus-per-node``), on which
emulated network (``--topology`` and its overrides; by default the 4-NIC A800 profile), where the records
go (``--out``, never silently replaced: ``--force`` or ``--append``) and the performance model's cluster
(``--cluster``, as in ``monta predict``).
"""

from __future__ import annotations

import argparse

from monta.cli_args import HelpFormatter, add_out_arguments, add_shape_arguments, check_out  # noqa: F401  (the benchmarks import them here)
from monta.emulate.network_args import NETWORK_HELP, default_network, default_topology

LAUNCHER_HELP = {
    "emulate": "start the ranks on the emulated cluster (network namespaces, shaped links)",
    "local": "start the ranks here on 127.0.0.1, unshaped",
    "env": "this process is one rank started by torchrun/srun (reads RANK, WORLD_SIZE, MASTER_ADDR...)",
}


def add_shared_arguments(p: argparse.ArgumentParser, *, launchers: tuple[str, ...]) -> None:
    """The cluster shape, the launcher, the network and the output flags of a benchmark."""
    from monta.emulate.topology import add_topology_args

    g = p.add_argument_group("where the ranks run")
    add_shape_arguments(g, tp=False, nodes_help="nodes (emulated, or of the torchrun/srun job)")
    g.add_argument(
        "--launcher",
        choices=launchers,
        default="emulate",
        help="; ".join(f"{k}: {LAUNCHER_HELP[k]}" for k in launchers),
    )
    g.add_argument(
        "--backend",
        choices=("auto", "gloo", "nccl"),
        default="auto",
        help="torch.distributed backend; auto: nccl where the ranks have CUDA, else gloo",
    )
    g.add_argument(
        "--allow-unshaped",
        action="store_true",
        help="if user namespaces are unavailable, run the emulated ranks unshaped on 127.0.0.1 (loud warning)",
    )
    add_topology_args(p)
    for action in p._actions:  # the benchmarks' defaults differ from `monta emulate run`'s: say them
        action.help = NETWORK_HELP.get(action.dest, action.help)
    o = p.add_argument_group("output")
    add_out_arguments(o, "JSONL records file", append=True)
    o.add_argument("--no-wandb", action="store_true", help="do not log to wandb")


def add_cluster_argument(p: argparse.ArgumentParser, default_text: str) -> None:
    """``--cluster``: the performance model's cluster, as every command takes it (``monta predict``)."""
    p.add_argument(
        "--cluster",
        default=None,
        help="the performance model's cluster for --chunks auto: a cluster name (clusters/), a cluster file "
        f"PATH.yaml, or emulator:PROFILE.json ({default_text})",
    )


def network(args: argparse.Namespace):
    """The emulated network of the flags: the default profile when no shaping flag was given. Ranks
    that are not emulated (torchrun/srun, local) run on whatever network they have: unshaped, unless
    flags say otherwise (a record must not claim a profile its run never had)."""
    from monta.emulate.topology import topology_from_args

    if default_network(args) and args.launcher == "emulate":
        return default_topology(args)
    return topology_from_args(args)


def network_line(bench: str, args: argparse.Namespace, description: str) -> str:
    """The run's first line: what runs, on which network, and whether that network is the default."""
    how = {"emulate": "emulated", "local": "local ranks on 127.0.0.1", "env": "torchrun/srun ranks"}[args.launcher]
    shape = f"{args.nodes} nodes x {args.gpus_per_node} ranks"
    if args.launcher != "emulate":
        return f"# monta bench {bench}: {shape}, {how} (no emulated network)"
    why = " (the default profile; --topology unshaped for none)" if default_network(args) else ""
    return f"# monta bench {bench}: {shape}, {how}, network {description}{why}"


def resolve_backend(backend: str, launcher: str) -> str:
    """``auto``: nccl for ranks that have CUDA (torchrun/srun ranks on GPUs), gloo otherwise (the
    emulated and local ranks are CPU processes)."""
    if backend != "auto":
        return backend
    if launcher != "env":
        return "gloo"
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"
