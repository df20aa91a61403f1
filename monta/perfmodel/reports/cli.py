"""``monta plan`` and ``monta predict {paper,alltoall,accuracy}``: thin wrappers over the model.

Every command prints a table and, with ``--out FILE.jsonl``, writes ``source="predicted"`` records.
"""

from __future__ import annotations

import argparse
import time

from monta.cli_args import add_exchanges_argument, add_out_arguments, add_shape_arguments, check_out


def _size(text: str) -> int:
    from monta.units import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _write(args, records: list[dict]) -> None:
    """The records to ``--out`` (added to it with ``--append``), if given."""
    if args.out:
        from monta.results import write_records

        write_records(args.out, records, append=args.append)
        print(f"wrote {len(records)} records to {args.out}")


def register(subparsers) -> None:
    _register_plan(subparsers)
    from monta.cli import PREDICT_HELP

    pr = subparsers.add_parser("predict", help=PREDICT_HELP, description=PREDICT_HELP[0].upper() + PREDICT_HELP[1:])
    sub = pr.add_subparsers(dest="predict_command", metavar="WHAT", required=True)
    _register_paper(sub)
    from monta.perfmodel.reports import contention  # torch-free

    contention.register(sub)
    from monta.perfmodel.reports import published_cli  # torch-free

    published_cli.register(sub)
    from monta.perfmodel.reports import skew_cli  # torch-free at import

    skew_cli.register(sub)
    _register_alltoall(sub)
    _register_accuracy(sub)


def _register_plan(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="rank parallel strategies for a cluster, model and sequence length",
        description="Enumerate TP/CP/EP/DP/PP, micro-batch, recomputation and ZeRO stage; "
        "drop what does not fit; rank by predicted step time.",
    )
    p.add_argument(
        "--cluster",
        default="a800",
        help="cluster name (a file of clusters/, e.g. a800-8nic, h100, p4de), a cluster file PATH.yaml "
        "(clusters/README.md), or emulator:PROFILE.json",
    )
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, default=None, help="(default: the cluster's, 8)")
    from monta.model.config import PRESETS  # pure Python, no torch

    p.add_argument("--model", default="moe-2x70b", help=f"model preset: {', '.join(PRESETS)}")
    p.add_argument("--seq", type=_size, default=8192, help="sequence length, e.g. 8K, 32K, 128K")
    p.add_argument("--layers", type=int, default=None, help="override the preset's layer count")
    p.add_argument("--global-batch", type=int, default=None, help="sequences per step (default: 4M tokens' worth)")
    p.add_argument("--variant", default="monta", help="exchange/schedule variant to predict with")
    p.add_argument("--top", type=int, default=5, help="how many ranked choices to print")
    for deg in ("tp", "ep", "pp", "cp"):
        p.add_argument(f"--{deg}", type=int, default=None, help=f"pin the {deg.upper()} degree")
    p.add_argument("--recompute", default="none,selective,full", help="allowed recomputation levels, comma list")
    p.add_argument("--zero", default="1,2,3", help="allowed ZeRO stages")
    add_out_arguments(p, "JSONL records of the ranked choices", append=True)
    p.set_defaults(func=_cmd_plan)


def _register_paper(sub) -> None:
    pp = sub.add_parser("paper", help="the paper's two headline setups, predicted, next to the published numbers")
    pp.add_argument(
        "--cluster", default="a800-4nic,a800-8nic", help="comma list of cluster names or cluster files PATH.yaml"
    )
    pp.add_argument("--layers", type=int, default=None, help="layers of the 2x70B step (default: the most that fit)")
    pp.add_argument("--recompute", default="none", choices=("none", "selective", "full"), help="recomputation level")
    pp.add_argument(
        "--contention",
        type=float,
        default=0.0,
        help="the step's contention factor c: compute overlapped by communication runs (1 + c) x as long "
        "(default 0: no contention, overlap gains are an upper bound)",
    )
    add_out_arguments(pp, "JSONL records of the predictions", append=True)
    pp.set_defaults(func=_cmd_paper)


def _register_alltoall(sub) -> None:
    pa = sub.add_parser("alltoall", help="predicted TP AllToAll sweep in the benchmark's columns")
    pa.add_argument(
        "--cluster", default="a800", help="cluster name (clusters/), cluster file PATH.yaml, or emulator:PROFILE.json"
    )
    add_shape_arguments(pa)
    pa.add_argument("--ep", type=int, default=None, help="default: all data-parallel ranks (crosses nodes)")
    pa.add_argument("--sizes", default="1M:16M:2", help="per-rank dispatch buffer bytes, min:max:factor")
    add_exchanges_argument(
        pa,
        "legacy,deepspeed,monta",
        "comma list of exchanges (`monta variants` lists every registered one, plugins' too), or all",
    )
    pa.add_argument("--chunks", default="1,2,4,auto", help="monta chunk counts; 'auto' = the model's choice")
    add_out_arguments(pa, "JSONL records of the predictions", append=True)
    pa.set_defaults(func=_cmd_alltoall)


def _register_accuracy(sub) -> None:
    pc = sub.add_parser(
        "accuracy",
        help="predicted vs measured AllToAll and training-step times, MAPE, chunk-choice and step-ranking checks",
    )
    pc.add_argument(
        "--measured",
        nargs="+",
        required=True,
        help="JSONL records from `monta bench alltoall` and `monta bench step --compute modeled`",
    )
    which = pc.add_mutually_exclusive_group(required=True)
    which.add_argument("--profile", help="link profile JSON from `monta emulate calibrate` (emulated records)")
    which.add_argument(
        "--cluster",
        help="a real cluster's records, priced on a cluster name or file (e.g. one `monta calibrate` wrote)",
    )
    pc.add_argument(
        "--step-profile",
        default=None,
        help="link profile calibrated at the step's links, where they differ (default: --profile)",
    )
    add_out_arguments(pc, "JSONL records of the predictions", append=True)
    pc.set_defaults(func=_cmd_accuracy)


def _plan_choices(args) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``monta plan``'s arguments checked (ValueError naming the flag); the recomputation levels and
    ZeRO stages it may choose from."""
    from monta import validate as V
    from monta import variants as registry
    from monta.perfmodel.training.strategy import RECOMPUTE

    V.integer(args.nodes, "nodes", 1, 1_000_000)
    if args.gpus_per_node is not None:
        V.integer(args.gpus_per_node, "gpus_per_node", 1, V.MAX_GPUS_PER_NODE)
    V.integer(args.seq, "seq", 1, 2**30)
    V.integer(args.top, "top", 1, 10_000)
    for name in ("layers", "global_batch", "tp", "ep", "pp", "cp"):
        if getattr(args, name) is not None:
            V.integer(getattr(args, name), name, 1, 1_000_000)
    check_out(args)
    try:
        registry.check(args.variant)
    except ValueError as e:
        raise ValueError(f"--variant: {e}") from None
    recompute = tuple(x.strip() for x in args.recompute.split(",") if x.strip())
    if not recompute or any(r not in RECOMPUTE for r in recompute):
        raise ValueError(f"--recompute {args.recompute!r}: comma list of {', '.join(RECOMPUTE)}")
    try:
        zero = tuple(int(z) for z in args.zero.split(","))
    except ValueError:
        raise ValueError(f"--zero {args.zero!r}: comma list of ZeRO stages 0-3") from None
    if not zero or any(z not in (0, 1, 2, 3) for z in zero):
        raise ValueError(f"--zero {args.zero!r}: comma list of ZeRO stages 0-3")
    return recompute, zero


def _cmd_plan(args) -> int:
    from monta.hardware.profile import get_cluster
    from monta.model.config import resolve_config
    from monta.perfmodel.training.planner import plan

    recompute, zero = _plan_choices(args)
    cluster = get_cluster(args.cluster, args.nodes, args.gpus_per_node)
    # The preset's name: the records state layers and seq in columns of their own.
    model = resolve_config(args.model).with_overrides(layers=args.layers, seq=args.seq)
    t0 = time.perf_counter()
    result = plan(
        model,
        cluster,
        args.seq,
        args.global_batch,
        args.variant,
        args.top,
        pins={"tp": args.tp, "ep": args.ep, "pp": args.pp, "cp": args.cp},
        recompute=recompute,
        zero=zero,
    )
    dt = time.perf_counter() - t0
    _print_plan(args, model, cluster, result, dt)
    if args.out:
        _write(args, _plan_records(args, model, cluster, result))
    return 0


def _print_plan(args, model, cluster, result, dt: float) -> None:
    from monta.perfmodel.training.memory import GB

    print(
        f"plan: {model.name} ({model.num_layers} layers, {model.total_params / 1e9:.1f}B params), seq {args.seq}, "
        f"global batch {result.global_batch} sequences, variant {args.variant}"
    )
    print(
        f"      on {cluster.nodes} x {cluster.gpus_per_node} {cluster.name} ({cluster.mem_GB:g} GB/GPU): "
        f"{result.considered} layouts, {result.fitting} fitting options ranked, answered in {dt:.2f} s"
    )
    print(
        f"{'#':>2} {'strategy':<52} {'step(s)':>8} {'tok/s':>9} {'mem(GB)':>7} {'inter(GB)':>9} {'intra(GB)':>9}  why"
    )
    tokens = result.global_batch * args.seq
    for i, c in enumerate(result.choices, 1):
        st = c.step
        print(
            f"{i:>2} {c.strategy.describe():<52} {st.total_us / 1e6:>8.2f} {tokens / (st.total_us / 1e6):>9.0f} "
            f"{c.memory.total / GB:>7.1f} {st.inter_bytes / 1e9:>9.2f} {st.intra_bytes / 1e9:>9.2f}  {c.why}"
        )
    print("bytes are per GPU per step; 'why' compares each choice with #1 (and #1 with #2)")


def _plan_records(args, model, cluster, result) -> list[dict]:
    """The ranked choices as ``plan`` records."""
    from monta.results import make_record

    return [
        make_record(
            kind="plan",
            source="predicted",
            experiment="plan",
            params={
                "cluster": cluster.name,
                "nodes": cluster.nodes,
                "gpus_per_node": cluster.gpus_per_node,
                "model": model.name,
                "layers": model.num_layers,
                "seq": args.seq,
                "rank": i,
                **c.strategy.to_dict(),
            },
            metrics={"step_time_us": c.step.total_us, **c.step.to_dict(), **c.memory.to_dict()},
            config={
                "cluster": cluster.to_dict(),
                "model": model.to_dict(),
                "why": c.why,
                "global_batch": result.global_batch,
            },
        )
        for i, c in enumerate(result.choices, 1)
    ]


def _cmd_paper(args) -> int:
    from monta.perfmodel.reports.paper import run

    clusters = [c.strip() for c in args.cluster.split(",") if c.strip()]
    if not clusters:
        raise ValueError("--cluster: give at least one cluster name or file")
    from monta.validate import integer

    if args.layers is not None:
        integer(args.layers, "layers", 1, 100_000)
    check_out(args)
    text, recs = run(clusters, args.layers, args.recompute, args.contention)
    print(text)
    _write(args, recs)
    return 0


def _cmd_alltoall(args) -> int:
    from monta import validate as V
    from monta.chunking import Fixed, parse_chunks_list
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.network.alltoall import make_layout, parse_exchanges, sweep
    from monta.perfmodel.reports.sweep import format_table, records

    V.integer(args.nodes, "nodes", 1, 1_000_000)
    V.integer(args.gpus_per_node, "gpus_per_node", 1, V.MAX_GPUS_PER_NODE)
    if args.tp is None:
        args.tp = args.gpus_per_node  # TP a whole node unless given
    V.integer(args.tp, "tp", 1, args.gpus_per_node)
    if args.ep is not None:
        V.integer(args.ep, "ep", 1, args.nodes * args.gpus_per_node)
    sizes = V.sizes(args.sizes)
    exchanges = parse_exchanges(args.exchanges)
    try:
        chunks = parse_chunks_list(args.chunks)
    except ValueError as e:
        raise V.UsageError(f"--chunks {args.chunks}: {e}") from None
    if any(isinstance(c, Fixed) and c.n > V.MAX_CHUNKS for c in chunks):
        raise V.UsageError(f"--chunks {args.chunks}: at most {V.MAX_CHUNKS} chunks")
    check_out(args)
    layout = make_layout(args.nodes, args.gpus_per_node, args.tp, args.ep)
    cluster = get_cluster(args.cluster, args.nodes, args.gpus_per_node)
    rows = sweep(cluster, layout, sizes, exchanges, chunks)
    print(f"# predicted TP AllToAll: {layout.describe()} on {cluster.name} ({cluster.source})")
    print(
        f"# size = per-rank dispatch buffer; busbw = algbw x (n-1)/n with n = EP group size {layout.ep}; "
        "speedup vs legacy; * = chunks chosen by 'auto'"
    )
    print(format_table(rows))
    _write(args, records(rows, cluster, layout))
    return 0


def _cmd_accuracy(args) -> int:
    from monta.hardware.profile import LinkProfile
    from monta.perfmodel.reports.accuracy import evaluate, evaluate_steps, ranking_agrees, report, report_steps
    from monta.results import make_record, read_records

    check_out(args)
    measured = read_records(*args.measured)  # the validating loader: file:line of anything unusable
    if args.cluster is not None:
        return _accuracy_on_cluster(args, measured)
    profile = LinkProfile.load(args.profile)
    steps = evaluate_steps(measured, LinkProfile.load(args.step_profile) if args.step_profile else profile)
    has_a2a = any(r.get("kind") == "alltoall" for r in measured)
    points, checks = evaluate(measured, profile) if has_a2a or not steps else ([], [])
    print(f"# predicted with link profile {profile.name} ({profile.source}) vs {', '.join(args.measured)}")
    if points:
        print(report(points, checks))
    if steps:
        print(
            "# the training step on the emulated clock (compute is the model's by construction: this checks its "
            "exchanges, overlap and scheduling)"
        )
        print(report_steps(steps))
    if args.out:
        _write(
            args,
            [
                make_record(
                    kind="step",
                    source="predicted",
                    experiment="accuracy",
                    params={"variant": p.variant, "shape": p.shape, "cluster": f"emulator:{profile.name}"},
                    metrics={
                        "step_ms": p.predicted_ms,
                        "measured_ms": p.measured_ms,
                        "error": p.error,
                        "measured_cpu_bound": p.cpu_bound,
                        "ranking_agrees": ranking_agrees(steps),
                    },
                    config={"measured_run_id": p.run_id},
                )
                for p in steps
            ]
            + _alltoall_accuracy_records(points, f"emulator:{profile.name}", {"profile": profile.to_dict()}),
        )
    return 0


def _alltoall_accuracy_records(points, cluster: str, config: dict) -> list[dict]:
    """The priced AllToAll points as ``predicted`` records beside their measurements."""
    from monta.results import make_record

    keys = ("size_bytes", "variant", "chunks", "nodes", "gpus_per_node", "tp", "ep")
    return [
        make_record(
            kind="alltoall",
            source="predicted",
            experiment="accuracy",
            params={**{k: getattr(p, k) for k in keys}, "cluster": cluster},
            metrics={
                "time_us": p.predicted_us,
                "measured_us": p.measured_us,
                "error": p.error,
                "measured_cpu_bound": p.cpu_bound,
            },
            config=config,
        )
        for p in points
    ]


def _accuracy_on_cluster(args, measured: list[dict]) -> int:
    """``--cluster``: a real cluster's AllToAll records priced on a cluster (one rate: no clock to follow)."""
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.reports.accuracy import evaluate, report

    if args.step_profile:
        raise ValueError("--step-profile goes with --profile (the emulated step's clock), not --cluster")
    if args.cluster.startswith("emulator:") or args.cluster.endswith(".json"):  # a Cluster has no clock to follow
        path = args.cluster.removeprefix("emulator:")
        raise ValueError(
            f"--cluster {args.cluster}: a link profile prices emulated records at their clock: use --profile {path}"
        )
    cluster = get_cluster(args.cluster)
    points, checks = evaluate(measured, cluster)
    print(f"# predicted on cluster {cluster.name} ({cluster.source or args.cluster}) vs {', '.join(args.measured)}")
    print(report(points, checks))
    _write(args, _alltoall_accuracy_records(points, args.cluster, {"cluster": cluster.to_dict()}))
    return 0
