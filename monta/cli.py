"""The ``monta`` command line: thin subcommands that parse, call into the library, and print.

Each topic module exposes ``register(subparsers)``; it is imported lazily so ``monta --help``
stays fast and a missing optional dependency only breaks its own subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (subcommand, module). A module's register() adds its parser(s) and sets func=callable(args)->int.
_TOPICS = [
    ("bench", "monta.bench.cli"),
    ("emulate", "monta.emulate.cli"),
    ("plan", "monta.perfmodel.cli"),
    ("predict", "monta.perfmodel.cli"),
    ("regress", "monta.regress"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monta", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"monta {__import__('monta').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    seen: set[str] = set()
    for _, module in _TOPICS:
        if module in seen:
            continue
        seen.add(module)
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("monta"):
                continue  # topic not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
    except KeyboardInterrupt:
        print("monta: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
