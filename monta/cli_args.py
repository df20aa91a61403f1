"""The grammar every ``monta`` subcommand shares, defined once: how ``--help`` shows defaults, how
``--out`` treats an existing file, and how an old flag spelling keeps working with a warning.

- ``--help``: every option's default, appended unless its help says it in words (:class:`HelpFormatter`;
  monta.cli's parser gives it to every subcommand).
- ``--out``: a file that exists is refused unless ``--force`` (replace it) or, where records
  accumulate, ``--append`` (add to it) is given (:func:`add_out_arguments`, :func:`check_out`).
- Old spellings (``--cf``, ``--size``, ``--variants`` for exchanges): accepted, with one line on stderr
  naming the new one (:func:`deprecated_alias`, :func:`add_exchanges_argument`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

# One default cluster shape for bench, predict and emulate (monta.runconfig: the run configs' too)
from monta.runconfig import DEFAULT_GPUS_PER_NODE, DEFAULT_NODES


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in ``--help``: appended, unless the help says it in words already (a
    default of None means something that needs words, e.g. "a whole node")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        # `is`, not `in`: a default of 0 or 0.0 equals False, yet is a value to show
        unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if "default" in text or not action.option_strings or unset:
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def add_out_arguments(p: argparse.ArgumentParser, what: str, *, append: bool) -> None:
    """``--out`` (``what`` it writes) and ``--force``; ``--append`` too where records accumulate."""
    p.add_argument("--out", default=None, help=f"{what}, written atomically (default: none, print only)")
    mode = p.add_mutually_exclusive_group() if append else p
    mode.add_argument("--force", action="store_true", help="replace --out if it exists")
    if append:
        mode.add_argument("--append", action="store_true", help="add to --out if it exists")


def check_outs(args: argparse.Namespace, *keys: str) -> list[Path | None]:
    """check_out for a command that writes several files (``--out``, ``--md``...): --force replaces any of
    them that exists, and needs at least one of them."""
    paths = [check_out(args, key, alone=False) for key in keys]
    if getattr(args, "force", False) and all(p is None for p in paths):
        from monta.validate import UsageError

        names = " or ".join("--" + k.replace("_", "-") for k in keys)
        raise UsageError(f"--force needs {names} FILE (the file to replace)")
    return paths


def check_out(args: argparse.Namespace, key: str = "out", alone: bool = True) -> Path | None:
    """``--out`` as a file this run may write: writable (monta.validate.out_path) and, when it exists
    already, replaced only with --force or added to only with --append (never silently overwritten).
    ``alone``: the command writes no other file, so --force without this one is a mistake."""
    from monta.validate import UsageError, out_path

    # --append adds records to --out; a table (--md) is never appended to
    append = bool(getattr(args, "append", False)) and key == "out"
    force = bool(getattr(args, "force", False))
    flag = "--" + key.replace("_", "-")
    path = out_path(getattr(args, key), key=key, append=append)
    if path is not None and path.exists() and not (force or append):
        also = " or --append to add to it" if hasattr(args, "append") else ""
        raise UsageError(f"{flag} {path}: exists already; add --force to replace it{also}, or give a new file")
    if force and path is None and alone:
        raise UsageError(f"--force needs {flag} FILE (the file to replace)")
    return path


def deprecated_alias(new: str):
    """An argparse action for an old spelling of ``new``: stores the value under ``new``'s dest and
    says once, on stderr, which flag to use instead."""

    class _Alias(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None):
            print(f"monta: warning: {option} is deprecated; use {new}", file=sys.stderr)
            setattr(namespace, self.dest, values)

    return _Alias


def add_exchanges_argument(p: argparse.ArgumentParser, default: str, help: str) -> None:
    """``--exchanges`` (dest ``exchanges``), and ``--variants``, its name before the exchanges were told
    apart from the step's variants (docs/design.md#names), read with a warning."""
    p.add_argument("--exchanges", default=default, help=help)
    p.add_argument("--variants", dest="exchanges", action=deprecated_alias("--exchanges"), help=argparse.SUPPRESS)


def add_shape_arguments(p: argparse.ArgumentParser, *, tp: bool = True, nodes_help: str = "nodes") -> None:
    """``--nodes``, ``--gpus-per-node`` and (with ``tp``) ``--tp``, defaulting alike in every command."""
    p.add_argument("--nodes", type=int, default=DEFAULT_NODES, help=nodes_help)
    p.add_argument("--gpus-per-node", type=int, default=DEFAULT_GPUS_PER_NODE, help="ranks (GPUs) per node")
    if tp:
        p.add_argument("--tp", type=int, default=None, help="tensor-parallel size (default: a whole node)")
