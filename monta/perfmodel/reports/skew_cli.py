"""``monta predict skew``: every exchange under skewed routings from the command line (the model is
monta.perfmodel.network.skew; this parses, prices and prints)."""

from __future__ import annotations

from monta.perfmodel.network.skew import DEFAULT_ROUTINGS, format_table, skew_table, split_specs


def register(sub) -> None:
    """``monta predict skew`` (``sub``: the subparsers of ``monta predict``)."""
    import argparse

    from monta.cli_args import add_exchanges_argument, add_out_arguments, add_shape_arguments, deprecated_alias

    p = sub.add_parser(
        "skew",
        help="every exchange under skewed routings: worst-rank time and dropped routes (docs/routing.md)",
        description="One routing per workload, priced for every exchange: capacity buffers keep their time "
        "and drop routes past the capacity; token-level exchanges are dropless and wait for the most-loaded "
        "rank, link and node.",
    )
    p.add_argument("--cluster", default="a800", help="cluster name (clusters/), PATH.yaml, or emulator:PROFILE.json")
    add_shape_arguments(p)
    p.add_argument(
        "--experts", type=int, default=None, help="experts E (default: 16, or 2 per EP rank where that is more)"
    )
    p.add_argument("--topk", type=int, default=2, help="routes per token")
    p.add_argument("--hidden", type=int, default=1024, help="model dim M")
    p.add_argument("--dtype", default="float32", help="element type of the buffer")
    p.add_argument("--sizes", default="4M", help="bytes of one rank's balanced [E, C, M] dispatch buffer (one size)")
    p.add_argument("--size", dest="sizes", action=deprecated_alias("--sizes"), help=argparse.SUPPRESS)
    p.add_argument(
        "--capacity-factor",
        type=float,
        default=1.0,
        metavar="CF",
        help="capacity factor of the buffer (docs/routing.md, as the bench's)",
    )
    p.add_argument(
        "--cf", dest="capacity_factor", type=float, action=deprecated_alias("--capacity-factor"), help=argparse.SUPPRESS
    )
    p.add_argument("--routing", default=DEFAULT_ROUTINGS, help="comma list of routing specs (docs/routing.md)")
    add_exchanges_argument(p, "all", "comma list of exchanges (default: every registered one)")
    add_out_arguments(p, "JSONL records of the predictions", append=True)
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    from monta import validate as V
    from monta import variants as registry
    from monta.cli_args import check_out
    from monta.dtypes import DTYPE_BYTES
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.network.alltoall import make_layout
    from monta.units import format_bytes

    V.integer(args.nodes, "nodes", 1, V.MAX_NODES)
    V.integer(args.gpus_per_node, "gpus_per_node", 1, V.MAX_GPUS_PER_NODE)
    if args.tp is None:
        args.tp = args.gpus_per_node  # TP a whole node unless given
    V.integer(args.tp, "tp", 1, args.gpus_per_node)
    V.integer(args.topk, "topk", 1, V.MAX_EXPERTS)
    V.integer(args.hidden, "hidden", 1, V.MAX_HIDDEN)
    if args.dtype not in DTYPE_BYTES:
        raise V.UsageError(f"--dtype {args.dtype}: choose one of {', '.join(DTYPE_BYTES)}")
    if not args.capacity_factor > 0:
        raise V.UsageError(f"--capacity-factor {args.capacity_factor}: must be > 0")
    sizes = V.sizes(args.sizes)
    if len(sizes) != 1:
        raise V.UsageError(f"--sizes {args.sizes}: predict skew prices one buffer size; give one, e.g. --sizes 4M")
    check_out(args)
    layout = make_layout(args.nodes, args.gpus_per_node, args.tp)
    experts = args.experts if args.experts is not None else max(16, 2 * layout.ep)  # the skew map's 16 on 2 x 4
    V.integer(experts, "experts", 1, V.MAX_EXPERTS)
    known = list(registry.exchanges())
    exchanges = known if args.exchanges == "all" else [v.strip() for v in args.exchanges.split(",") if v.strip()]
    bad = [v for v in exchanges if v not in known]
    if bad or not exchanges:
        raise V.UsageError(f"--exchanges {args.exchanges}: choose from {', '.join(known)} (or all)")
    cluster = get_cluster(args.cluster, args.nodes, args.gpus_per_node)
    size = sizes[0]
    rows = skew_table(
        split_specs(args.routing),
        exchanges,
        layout,
        cluster,
        size,
        experts,
        args.hidden,
        DTYPE_BYTES[args.dtype],
        args.topk,
        args.capacity_factor,
    )
    print(
        f"# skewed routing: {layout.describe()} on {cluster.name}, {experts} experts top-{args.topk}, "
        f"{format_bytes(size)} per rank"
    )
    print("# worst us: the most-loaded rank's dispatch; x bal: over the balanced price; dropped: routes past capacity")
    print(format_table(rows, args.capacity_factor))
    if args.out:
        from monta.results import make_record, write_records

        recs = [
            make_record(
                kind="alltoall",
                source="predicted",
                experiment="skew",
                params={
                    "variant": p.variant,
                    "routing": r.spec,
                    "size_bytes": size,
                    "tp": args.tp,
                    "nodes": args.nodes,
                    "gpus_per_node": args.gpus_per_node,
                    "experts": experts,
                    "topk": args.topk,
                    "cf": args.capacity_factor,
                },
                metrics={**p.to_dict(), "time_us": p.worst_us, "maxvio": r.maxvio()},
                config={"cluster": cluster.to_dict()},
            )
            for r, prices in rows
            for p in prices
        ]
        write_records(args.out, recs, append=args.append)
        print(f"wrote {len(recs)} records to {args.out}")
    return 0
