"""``monta bench alltoall|step``: argument wiring for the benchmarks (the work lives in their modules)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="run a benchmark (alltoall, step)")
    bsub = bench.add_subparsers(dest="bench", metavar="BENCH")
    from monta.bench import alltoall

    p = bsub.add_parser("alltoall", help="TP AllToAll exchange sweep: legacy / deepspeed / monta (nccl-tests style)")
    alltoall.add_arguments(p)
    p.set_defaults(func=alltoall.main)
    try:
        from monta.bench import step
    except ImportError as e:  # the step benchmark needs deepspeed; keep alltoall usable without it
        step = None
        _step_error = str(e)
    if step is not None:
        p = bsub.add_parser(
            "step",
            help="MoE transformer training step per variant (`monta variants` lists "
            "them; compositions exchange=E,schedule=S,sync=Y)",
        )
        step.add_arguments(p)
        p.set_defaults(func=step.main)
    bench.set_defaults(func=lambda a: (bench.print_help(), 2)[1])
