"""The files `--out`, `--md` and `--summary-json` of the published-measurement commands write: atomic, with
the user's umask (monta.atomic), into a folder that must exist. Shared by the collective and the step tables."""

from __future__ import annotations

from pathlib import Path


def write_text(path: str, text: str) -> None:
    write_jsonl(path, [text], raw=True)


def write_jsonl(path: str, recs: list, raw: bool = False) -> None:
    """Atomic: a temp file in the same folder, renamed over the target (no half-written file on an error)."""
    import json

    from monta.atomic import write_atomic

    p = Path(path)
    if not p.parent.is_dir():
        raise FileNotFoundError(f"--out {p}: folder {p.parent} does not exist")
    write_atomic(p, "".join(r if raw else json.dumps(r) + "\n" for r in recs))
