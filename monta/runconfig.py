"""Typed run configs, one default per setting: a field of a frozen dataclass (``setting``) carries its
default and its help, and the command line reads both from it (``add_flag``), so a flag's default and
help live once. A config crosses the process boundary as plain JSON (``plain``) and is read back strictly
(each config's ``from_dict`` calls ``check_keys``: an unknown key is a one-line error, not a silently
dropped setting).

Torch-free at import.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

# One default cluster shape for bench, predict, emulate and the run configs: the pipeline's 2 x 4
# (config/default.yaml), with TP a whole node unless --tp says otherwise.
DEFAULT_NODES = 2
DEFAULT_GPUS_PER_NODE = 4


def setting(default: Any = None, help: str = "", *, text: str | None = None, factory: Any = None) -> Any:
    """A config field with its default and help. ``text``: the flag's spelling of the default where the
    flag takes text the config holds parsed (``--sizes 1M:16M:2`` -> a tuple of bytes); a test checks that
    the text parses to the default. ``factory``: a mutable default (a dict)."""
    meta = {"help": help, **({"text": text} if text is not None else {})}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_of(cls: type, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def default_of(cls: type, name: str) -> Any:
    f = field_of(cls, name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def flag_default(cls: type, name: str) -> Any:
    """The flag's default: the field's text spelling where it has one, else the field's default."""
    return field_of(cls, name).metadata.get("text", default_of(cls, name))


def help_of(cls: type, name: str) -> str:
    return field_of(cls, name).metadata["help"]


def add_flag(p: Any, cls: type, name: str, *flags: str, extra: str = "", **kw: Any) -> argparse.Action:
    """``--name`` (or ``flags``) with the field's default and help (``extra`` appended to the help)."""
    kw.setdefault("default", flag_default(cls, name))
    help_text = help_of(cls, name) + extra
    return p.add_argument(*(flags or ("--" + name.replace("_", "-"),)), help=help_text, **kw)


def plain(value: Any) -> Any:
    """Plain JSON types: tuples as lists, nested configs as dicts (their ``to_dict`` where they have one)."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def check_keys(cls: type, data: dict[str, Any], known: set[str] | None = None) -> None:
    """ValueError (one line) for a key ``cls`` has no field for (``known``: the accepted keys, default its
    fields' names)."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected a mapping of settings, got {type(data).__name__}")
    known = known if known is not None else {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"{cls.__name__}: unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))}); remove {'them' if len(unknown) > 1 else 'it'}"
        )
