"""A ``monta ...`` command line's argument check, without running it: the pipeline's dry run hands each of
its commands here (tests/test_configs.py), so a config whose jobs would stop on their flags is caught
before any job starts.

Every command is parsed by the CLI's own parser (an unknown flag or a bad choice exits 2); the benchmarks
then run the checks their ``main`` runs before any rank starts: ``monta bench alltoall``'s flags into its
worker config, ``monta bench step``'s into its StepConfig and, with ``--compute modeled`` on the emulator, the
clock of the cluster its topology stands for. Nothing is launched; ``--out``'s folder gets only the
write probe every benchmark makes (monta.validate.out_path).
"""

from __future__ import annotations

import argparse


def check(argv: list[str]) -> argparse.Namespace:
    """Check ``argv`` (the words after ``monta``); ValueError (UsageError) or SystemExit(2) names the problem."""
    from monta.cli import build_parser

    args = build_parser(argv[0]).parse_args(argv)
    if argv[:2] == ["bench", "alltoall"]:
        from monta.bench.alltoall import build_config

        build_config(args)
    elif argv[:2] == ["bench", "step"]:
        _check_step(args)
    return args


def _check_step(args: argparse.Namespace) -> None:
    from monta.bench.step.args import step_config
    from monta.bench.step.launch import clock_of, topology

    run = step_config(args)
    if args.compute == "modeled" and args.launcher == "emulate":
        clock_of(topology(args), run.layout, run.model_config)
