"""``monta predict contention``: every variant's moe-2x70b step on the paper's setup (2 x 8 A800, TP8 EP2,
``monta predict paper``'s step) at several contention factors c, and its gain over deepspeed at each."""

from __future__ import annotations

import argparse
from typing import Any

from monta.perfmodel.training import contention as K

FOOTER = "c = 0 is no contention: overlap gains are upper bounds"


def parse_values(text: str) -> list[float]:
    """'0,0.1,0.2' -> [0.0, 0.1, 0.2]; each a factor >= 0, at least one."""
    values = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            v = float(part)
        except ValueError:
            raise ValueError(f"--values {text}: {part!r} is not a number; give factors like 0,0.1,0.2") from None
        values.append(K.check(v, "--values"))
    if not values:
        raise ValueError("--values: give at least one contention factor, e.g. 0,0.1,0.2,0.3")
    return values


def ablation(cluster: str, values: list[float], layers: int | None = None, recompute: str = "none") -> dict[str, Any]:
    """The paper's step setup at each c: {"setups": {c: step_setup(...)}, "gain": {c: {variant: gain}}},
    gain = 1 - step / deepspeed's step at the same c."""
    from monta.perfmodel.reports.paper import step_setup

    setups = {c: step_setup(cluster, layers, recompute, contention=c) for c in values}
    gain = {
        c: {v: 1 - b.total_us / st["steps"]["deepspeed"].total_us for v, b in st["steps"].items()}
        for c, st in setups.items()
    }
    return {"setups": setups, "gain": gain}


def run(cluster: str, values: list[float], layers: int | None = None, recompute: str = "none") -> tuple[str, list]:
    """The printed table and the records (``source="predicted"``, experiment ``contention``)."""
    from monta.results import make_record

    res = ablation(cluster, values, layers, recompute)
    first = res["setups"][values[0]]
    c0, m, s = first["cluster"], first["model"], first["strategy"]
    out = [
        f"# moe-2x70b step, seq {first['seq']}, 16 x {c0.name} ({c0.source}): {s.describe()}, {m.num_layers} layers, "
        f"global batch {s.dp * s.micro_batch} sequences",
        "# contention c: compute overlapped by communication (a schedule's hidden exchange, the gradient sync) "
        "runs (1 + c) x as long; cells: step ms (gain vs deepspeed at the same c)",
    ]
    if not first["fits"]:
        out.append("# ** DOES NOT FIT in memory: a prediction of a step that cannot run **")
    w = max(len(v) for v in first["steps"])
    cells = [f"{'c = ' + format(c, 'g'):>18}" for c in values]
    out.append(f"{'variant':>{w}} " + " ".join(cells))
    recs = []
    for v in first["steps"]:
        row = []
        for c in values:
            b, g = res["setups"][c]["steps"][v], res["gain"][c][v]
            row.append(f"{f'{b.total_us / 1e3:.1f} ({g:+.1%})':>18}")
            recs.append(
                make_record(
                    kind="step",
                    source="predicted",
                    experiment="contention",
                    params={
                        **s.to_dict(),
                        "variant": v,
                        "model": m.name,
                        "layers": m.num_layers,
                        "seq": first["seq"],
                        "nodes": 2,
                        "gpus_per_node": 8,
                        "cluster": c0.name,
                        "contention": c,
                    },
                    metrics={**b.to_dict(), "step_time_us": b.total_us, "improvement_vs_deepspeed": g},
                    config={"cluster": c0.to_dict(), "model": m.to_dict()},
                )
            )
        out.append(f"{v:>{w}} " + " ".join(row))
    out.append(f"# {FOOTER}")
    return "\n".join(out), recs


def register(sub) -> None:
    """``monta predict contention`` (``sub``: the subparsers of ``monta predict``)."""
    p = sub.add_parser(
        "contention",
        help="every variant's 2x70B step on 2 x 8 A800 (TP8) at several contention factors c",
        description="Compute overlapped by communication runs (1 + c) x as long; c = 0 is no contention, where "
        "overlap gains are upper bounds.",
    )
    p.add_argument("--cluster", default="a800-4nic", help="cluster preset (default: the 4-NIC A800)")
    p.add_argument(
        "--values",
        default=",".join(format(c, "g") for c in K.ABLATION),
        help="comma list of contention factors >= 0 (default: %(default)s)",
    )
    p.add_argument("--layers", type=int, default=None, help="layers of the 2x70B step (default: the most that fit)")
    p.add_argument("--recompute", default="none", choices=("none", "selective", "full"), help="recomputation level")
    from monta.cli_args import add_out_arguments

    add_out_arguments(p, "JSONL records of the predictions", append=True)
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    from monta.cli_args import check_out
    from monta.validate import integer

    values = parse_values(args.values)
    if args.layers is not None:
        integer(args.layers, "layers", 1, 100_000)
    check_out(args)
    text, recs = run(args.cluster, values, args.layers, args.recompute)
    print(text)
    if args.out:
        from monta.results import write_records

        write_records(args.out, recs, append=args.append)
        print(f"wrote {len(recs)} records to {args.out}")
    return 0
