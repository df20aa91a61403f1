"""The ``monta`` command line: thin subcommands that parse, call into the library, and print.

Each topic module exposes ``register(subparsers)``; it is imported lazily so ``monta --help``
stays fast and a missing optional dependency only breaks its own subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# What `monta predict` offers, one line for `monta --help` (tests/test_cli_grammar.py checks it names
# every predict command the parser has).
PREDICT_HELP = "performance-model predictions: paper, alltoall, accuracy, contention, published, skew"

# (subcommand, module, help). A module's register() adds its parser(s) and sets func=callable(args)->int.
# Only the module of the subcommand being run is imported: torch/deepspeed take seconds to load.
_TOPICS = [
    ("bench", "monta.bench.cli", "run a benchmark: alltoall (TP exchange sweep), step (MoE training step)"),
    ("calibrate", "monta.perfmodel.reports.calibrate", "fit the model's link curves to your cluster's nccl-tests logs"),
    ("doctor", "monta.doctor", "check this machine can run the emulated cluster (namespaces, ip/tc, torch)"),
    ("emulate", "monta.emulate.cli", "emulated multi-node cluster: run, probe, calibrate, presets"),
    ("plan", "monta.perfmodel.reports.cli", "rank parallel strategies for a cluster, model and sequence length"),
    ("predict", "monta.perfmodel.reports.cli", PREDICT_HELP),
    ("regress", "monta.regress", "compare two record files and fail on a performance regression"),
    ("variants", "monta.variants", "list the training-step variants and their parts (plugins included)"),
]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``monta bench alltoall: error: argument --hidden: invalid int
    value: 'x' (see --help)`` instead of a usage block and the error (exit 2 as before)."""

    def __init__(self, *args, **kwargs):
        # Every subcommand's parser is one of these (argparse makes subparsers of the parent's class), so
        # every --help shows its options' defaults (monta.cli_args.HelpFormatter).
        from monta.cli_args import HelpFormatter

        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s topic module is imported (all of them when ``command`` is None)."""
    parser = _Parser(prog="monta", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"monta {__import__('monta').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = {module for name, module, _ in _TOPICS if command is None or name == command}
    for module in dict.fromkeys(m for _, m, _ in _TOPICS if m in wanted):
        importlib.import_module(module).register(sub)
    for name, module, help_text in _TOPICS:
        if module not in wanted:
            sub.add_parser(name, help=help_text, add_help=False)  # listed in --help, loaded on use
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names = {name for name, _, _ in _TOPICS}
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in names else "")
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as e:
        # User-caused errors: one line that says what to change, no traceback.
        print(f"monta: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        from monta.emulate.launcher import EmulationError

        if not isinstance(e, EmulationError):
            raise
        # An emulated run that failed (a rank died or stalled, a timeout): its message names the
        # rank and the log; no traceback (bench step raised it, bench alltoall printed it itself).
        print(f"monta: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        # A file the command cannot read or write (permissions, a full disk, a directory): one line.
        name = f" {e.filename}" if getattr(e, "filename", None) else ""
        print(f"monta: error:{name} {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("monta: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
