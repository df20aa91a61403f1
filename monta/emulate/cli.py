"""``monta emulate run|calibrate|probe|presets``: the emulated cluster from the command line.

Thin: parse flags into a Topology, call the library, print; emulator failures become one line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from monta.emulate.topology import PRESETS, add_topology_args, topology_from_args

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"size {text!r}: use a byte count with an optional K/M/G suffix, e.g. 16M")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def _common(p: argparse.ArgumentParser, gpus: int) -> None:
    p.add_argument("--nodes", type=int, default=2, help="emulated nodes (default 2)")
    p.add_argument("--gpus-per-node", type=int, default=gpus, help=f"ranks per node (default {gpus})")
    p.add_argument("--allow-unshaped", action="store_true",
                   help="if user namespaces are unavailable, run all ranks on 127.0.0.1 unshaped (warns)")
    add_topology_args(p)


def register(subparsers: argparse._SubParsersAction) -> None:
    top = subparsers.add_parser("emulate", help="emulated multi-node cluster (namespaces + tc)",
                                description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="emulate_command", metavar="ACTION", required=True)

    run = sub.add_parser("run", help="run a command once per rank on the emulated cluster",
                         description="Run CMD once per rank (torchrun-style environment); rank 0's stdout is "
                                     "shown, other ranks' output goes to per-rank logs.")
    _common(run, 4)
    run.add_argument("--timeout", type=float, default=None, help="kill all ranks after this many seconds")
    run.add_argument("--log-dir", default=None, help="keep per-rank logs here (default: temporary, kept on failure)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command and arguments")
    run.set_defaults(func=_run)

    cal = sub.add_parser("calibrate", help="measure the emulated links and write a link profile",
                         description="Point-to-point, AllToAll and AllGather sweeps over the emulated intra- and "
                                     "inter-node links; writes monta.linkprofile/1 JSON.")
    _common(cal, 4)
    cal.add_argument("--out", required=True, help="link profile JSON to write")
    cal.add_argument("--name", default=None, help="profile name (default: the topology's name)")
    cal.add_argument("--min-bytes", default="1K", help="smallest message (default 1K)")
    cal.add_argument("--max-bytes", default="16M", help="largest message (default 16M)")
    cal.set_defaults(func=_calibrate)

    probe = sub.add_parser("probe", help="raw TCP throughput within a node and between nodes")
    _common(probe, 2)
    probe.add_argument("--bytes", default="32M", help="bytes per transfer (default 32M)")
    probe.set_defaults(func=_probe)

    presets = sub.add_parser("presets", help="list the named topologies")
    presets.set_defaults(func=_presets)


def _report(e: Exception) -> int:
    from monta.emulate.launcher import RankFailed

    print(f"monta: error: {e}", file=sys.stderr)
    return 1 if isinstance(e, RankFailed) else 2


def _run(args: argparse.Namespace) -> int:
    from monta.emulate.launcher import EmulationError, launch

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise ValueError("no command given: monta emulate run [flags] -- CMD [ARGS...]")
    topo = topology_from_args(args)
    print(f"monta emulate: {args.nodes} nodes x {args.gpus_per_node} ranks, {topo.describe()}", file=sys.stderr)
    try:
        launch(cmd, args.nodes, args.gpus_per_node, topo, timeout_s=args.timeout, log_dir=args.log_dir,
               allow_unshaped=args.allow_unshaped)
    except EmulationError as e:
        return _report(e)
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from monta.emulate.calibrate import calibrate
    from monta.emulate.launcher import EmulationError

    topo = topology_from_args(args)
    print(f"monta emulate calibrate: {args.nodes} nodes x {args.gpus_per_node} ranks, {topo.describe()}",
          file=sys.stderr)
    try:
        profile = calibrate(args.nodes, args.gpus_per_node, topo, args.out, name=args.name,
                            min_bytes=parse_bytes(args.min_bytes), max_bytes=parse_bytes(args.max_bytes),
                            allow_unshaped=args.allow_unshaped)
    except EmulationError as e:
        return _report(e)
    for link, v in profile["links"].items():
        print(f"{link:>5}: {v['bandwidth_GBps']:.3f} GB/s, latency {v['latency_us']:.1f} us")
    for op, by_link in profile["collectives"].items():
        for link, points in by_link.items():
            s, t = points[-1]
            print(f"{op:>9} {link:>5}: {s} B in {t / 1e3:.2f} ms")
    print(f"wrote {args.out}")
    return 0


def _probe(args: argparse.Namespace) -> int:
    from monta.emulate.launcher import EmulationError, launch

    topo = topology_from_args(args)
    nbytes = parse_bytes(args.bytes)
    try:
        res = launch([sys.executable, "-m", "monta.emulate.probe", "--bytes", str(nbytes)], args.nodes,
                     args.gpus_per_node, topo, allow_unshaped=args.allow_unshaped, stdout=_Discard())
    except EmulationError as e:
        return _report(e)
    rates = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"{topo.describe()}; {nbytes} B per transfer")
    for link in ("intra", "inter"):
        if f"{link}_GBps" in rates:
            gbps = rates[f"{link}_GBps"]
            print(f"{link:>5}: {gbps:.3f} GB/s = {gbps * 8:.2f} Gbit/s")
    return 0


def _presets(args: argparse.Namespace) -> int:
    for topo in PRESETS.values():
        print(topo.describe())
    return 0


class _Discard:
    def write(self, _text: str) -> None:
        pass

    def flush(self) -> None:
        pass
