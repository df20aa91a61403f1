"""``monta emulate run|calibrate|probe|presets``: the emulated cluster from the command line.

Thin: parse flags into a Topology, call the library, print; emulator failures become one line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from monta.atomic import write_atomic
from monta.cli_args import add_shape_arguments, check_out
from monta.emulate.network_args import NETWORK_HELP, default_network, default_topology
from monta.emulate.topology import PRESETS, add_topology_args, topology_from_args

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"size {text!r}: use a byte count with an optional K/M/G suffix, e.g. 16M")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def _common(p: argparse.ArgumentParser) -> None:
    add_shape_arguments(p, tp=False, nodes_help="emulated nodes")
    p.add_argument(
        "--allow-unshaped",
        action="store_true",
        help="if user namespaces are unavailable, run all ranks on 127.0.0.1 unshaped (warns)",
    )
    add_topology_args(p)
    for action in p._actions:  # with no network flag: the benchmarks' default network, said so in --help
        action.help = NETWORK_HELP.get(action.dest, action.help)


def _check_common(args: argparse.Namespace):
    """The flags every emulate action shares, checked before anything starts; returns the Topology."""
    from monta import validate as V

    V.integer(args.nodes, "nodes", 1, V.MAX_NODES)
    V.integer(args.gpus_per_node, "gpus_per_node", 1, V.MAX_GPUS_PER_NODE)
    return default_topology(args) if default_network(args) else topology_from_args(args)


def register(subparsers: argparse._SubParsersAction) -> None:
    top = subparsers.add_parser(
        "emulate", help="emulated multi-node cluster (namespaces + tc)", description=__doc__.splitlines()[0]
    )
    sub = top.add_subparsers(dest="emulate_command", metavar="ACTION", required=True)

    run = sub.add_parser(
        "run",
        help="run a command once per rank on the emulated cluster",
        description="Run CMD once per rank (torchrun-style environment); rank 0's stdout is "
        "shown, other ranks' output goes to per-rank logs.",
    )
    _common(run)
    run.add_argument("--timeout", type=float, default=None, help="kill all ranks after this many seconds")
    run.add_argument("--log-dir", default=None, help="keep per-rank logs here (default: temporary, kept on failure)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command and arguments")
    run.set_defaults(func=_run)

    cal = sub.add_parser(
        "calibrate",
        help="measure the emulated links and write a link profile",
        description="Point-to-point, AllToAll and AllGather sweeps over the emulated intra- and "
        "inter-node links; writes monta.linkprofile/1 JSON.",
    )
    _common(cal)
    cal.add_argument("--out", required=True, help="link profile JSON to write")
    cal.add_argument("--force", action="store_true", help="replace --out if it exists")
    cal.add_argument("--name", default=None, help="profile name (default: the topology's name)")
    cal.add_argument("--min-bytes", default="1K", help="smallest message")
    cal.add_argument("--max-bytes", default="16M", help="largest message")
    cal.set_defaults(func=_calibrate)

    probe = sub.add_parser(
        "probe",
        help="what the links deliver: TCP goodput per concurrency level, both directions",
        description="Goodput of the inter-node link (node 0 <-> node 1) and of a node's "
        "intra-node link at 1..N concurrent flows per direction, both directions "
        "loaded at once, repeated: p10/p50/p90 and the share of the configured rate.",
    )
    _common(probe)
    probe.add_argument(
        "--bytes",
        default=None,
        help="bytes per direction and repetition (default: 0.4 s at the configured rate, 32M unshaped)",
    )
    probe.add_argument("--flows", default="1,2,4,8,16", help="concurrency levels, flows per direction")
    probe.add_argument("--reps", type=int, default=5, help="timed repetitions per level (plus one warm-up)")
    probe.add_argument("--json", default=None, help="also write the raw rates and the summary here")
    probe.add_argument("--force", action="store_true", help="replace --json if it exists")
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
    topo = _check_common(args)
    if args.timeout is not None:
        from monta.validate import number

        number(args.timeout, "timeout", 0, 30 * 86400, lo_open=True, unit="seconds")
    if args.log_dir is not None and Path(args.log_dir).exists() and not Path(args.log_dir).is_dir():
        raise ValueError(f"--log-dir {args.log_dir}: is a file, not a directory")
    print(f"monta emulate: {args.nodes} nodes x {args.gpus_per_node} ranks, {topo.describe()}", file=sys.stderr)
    try:
        launch(
            cmd,
            args.nodes,
            args.gpus_per_node,
            topo,
            timeout_s=args.timeout,
            log_dir=args.log_dir,
            allow_unshaped=args.allow_unshaped,
        )
    except EmulationError as e:
        return _report(e)
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from monta.emulate.calibrate import calibrate
    from monta.emulate.launcher import EmulationError

    topo = _check_common(args)
    check_out(args)
    lo, hi = parse_bytes(args.min_bytes), parse_bytes(args.max_bytes)
    if not 1 <= lo <= hi <= 1 << 34:
        raise ValueError(f"--min-bytes {args.min_bytes} --max-bytes {args.max_bytes}: need 1 <= min <= max <= 16G")
    print(
        f"monta emulate calibrate: {args.nodes} nodes x {args.gpus_per_node} ranks, {topo.describe()}", file=sys.stderr
    )
    try:
        profile = calibrate(
            args.nodes,
            args.gpus_per_node,
            topo,
            args.out,
            name=args.name,
            min_bytes=parse_bytes(args.min_bytes),
            max_bytes=parse_bytes(args.max_bytes),
            allow_unshaped=args.allow_unshaped,
        )
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


def _probe_bytes(gbps: float | None, text: str | None) -> int:
    if text is not None:
        return parse_bytes(text)
    if gbps is None:
        return 32 << 20
    # ~0.4 s per repetition: long against the htb bucket and a round trip, short enough for 5 levels x 6 rounds
    return max(1 << 20, int(gbps * 1e9 / 8 * 0.4))


def _probe(args: argparse.Namespace) -> int:
    from monta.emulate.launcher import EmulationError, launch
    from monta.emulate.probe import summarize

    topo = _check_common(args)
    check_out(args, "json")
    flows = _positive_list(args.flows, "--flows")
    if args.reps < 2:
        raise ValueError(f"--reps {args.reps}: need at least 2 repetitions for a spread")
    if args.nodes < 2 and args.gpus_per_node < 2:
        raise ValueError("--nodes 1 --gpus-per-node 1 has no link to probe; use 2 nodes or 2 ranks per node")
    inter_b, intra_b = _probe_bytes(topo.inter_gbps, args.bytes), _probe_bytes(topo.intra_gbps, args.bytes)
    cmd = [
        sys.executable,
        "-m",
        "monta.emulate.probe",
        "--bytes",
        str(inter_b),
        "--intra-bytes",
        str(intra_b),
        "--flows",
        ",".join(map(str, flows)),
        "--reps",
        str(args.reps),
    ]
    try:
        res = launch(
            cmd,
            args.nodes,
            args.gpus_per_node,
            topo,
            allow_unshaped=args.allow_unshaped,
            stdout=_Discard(),
            timeout_s=1800,
        )
    except EmulationError as e:
        return _report(e)
    raw = json.loads(res.stdout.strip().splitlines()[-1])
    rows = summarize(raw, {"inter": topo.inter_gbps, "intra": topo.intra_gbps})
    print(f"# monta emulate probe: {topo.describe()}")
    print(
        f"# {args.reps} repetitions per level after one warm-up, both directions at once, one TCP connection per "
        f"flow and direction; bytes per direction: inter {inter_b}, intra {intra_b}"
    )
    print(
        "# goodput in Gbit/s: inter = per direction (each direction of each repetition a sample), intra = "
        "both directions together (a node's loopback is one shared queue);"
    )
    print("# share = of the configured (frame) rate, payload ceiling 95.6% on the NIC; spread = p90/p10")
    print(
        f"{'link':>5} {'flows':>5} {'n':>3} {'p10':>8} {'p50':>8} {'p90':>8} {'share p10':>9} {'share p50':>9} "
        f"{'spread':>7}"
    )
    for r in rows:
        share = lambda v: f"{100 * v:8.1f}%" if v is not None else f"{'-':>9}"  # noqa: E731
        print(
            f"{r['link']:>5} {r['flows']:>5} {r['n']:>3} {r['p10_gbps']:>8.4g} {r['p50_gbps']:>8.4g} "
            f"{r['p90_gbps']:>8.4g} {share(r['share_p10'])} {share(r['share_p50'])} {r['spread']:>7.3f}"
        )
    if args.json:
        write_atomic(args.json, json.dumps({"topology": topo.to_dict(), "raw": raw, "summary": rows}, indent=1))
    return 0


def _positive_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected a comma list of positive integers, e.g. 1,4,8") from None
    if not values or any(v < 1 or v > 256 for v in values):
        raise ValueError(f"{flag} {text!r}: every value must be between 1 and 256")
    return values


def _presets(args: argparse.Namespace) -> int:
    from monta.emulate.topology import Topology

    for name in PRESETS:
        topo = Topology.preset(name)
        dil = topo.link_dilation(8)
        print(topo.describe() + (f"; an 8-GPU node's NIC {dil:.0f}x slower than the real one" if dil else ""))
    print("PRESET@GBPS: the same cluster with its NIC at GBPS Gbit/s per node (the loopback follows its ratio)")
    return 0


class _Discard:
    def write(self, _text: str) -> None:
        pass

    def flush(self) -> None:
        pass
