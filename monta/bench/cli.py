"""``monta bench alltoall|step``: argument wiring for the benchmarks (the work lives in their modules)."""

from __future__ import annotations

import argparse

# One line per benchmark: what it measures, as `monta bench --help` and each one's --help show it.
ALLTOALL = "time the MoE AllToAll exchanges (legacy, deepspeed, monta) over buffer sizes, nccl-tests style"
STEP = "time a MoE transformer training step per variant (`monta variants` lists them), variants interleaved"


def register(sub: argparse._SubParsersAction) -> None:
    from monta.bench.common_args import HelpFormatter

    bench = sub.add_parser("bench", help="run a benchmark (alltoall, step)", description="Run a benchmark.")
    bsub = bench.add_subparsers(dest="bench", metavar="BENCH")
    from monta.bench import alltoall

    p = bsub.add_parser(
        "alltoall", help=ALLTOALL, description=ALLTOALL[0].upper() + ALLTOALL[1:] + ".", formatter_class=HelpFormatter
    )
    alltoall.add_arguments(p)
    p.set_defaults(func=alltoall.main)
    try:
        from monta.bench import step
    except ImportError:  # the step benchmark needs deepspeed; keep alltoall usable without it
        step = None
    if step is not None:
        p = bsub.add_parser(
            "step", help=STEP, description=STEP[0].upper() + STEP[1:] + ".", formatter_class=HelpFormatter
        )
        step.add_arguments(p)
        p.set_defaults(func=step.main)
    bench.set_defaults(func=lambda a: (bench.print_help(), 2)[1])
