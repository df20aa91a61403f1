"""Temporary work directories that say who owns them, and the cleanup of those whose owner is gone.

A run ended by SIGKILL cannot remove its work directory. Each directory made here holds an owner
file (pid, the process's start time, host); the next run removes the directories of this user
whose owner process no longer exists (or whose pid now belongs to another process). A directory
kept on purpose (the logs of a failed run, named in its error) has its owner file removed, so it
stays until the user deletes it; directories without an owner file are never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

OWNER = ".monta-owner"
PREFIXES = ("monta-emulate-", "monta-a2a-")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def make(prefix: str) -> Path:
    """mkdtemp(prefix) with an owner file naming this process."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    (d / OWNER).write_text(
        json.dumps({"pid": os.getpid(), "start": _start_time(os.getpid()), "host": socket.gethostname()})
    )
    return d


def keep(d: Path) -> None:
    """The directory is kept on purpose (e.g. logs named in an error): never clean it up."""
    try:
        (Path(d) / OWNER).unlink()
    except OSError:
        pass


def owner_alive(d: Path) -> bool | None:
    """True/False whether the directory's owner process still runs; None when it names no owner
    (no owner file, unreadable, or made on another host)."""
    try:
        owner = json.loads((Path(d) / OWNER).read_text())
        pid, start = int(owner["pid"]), owner.get("start")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if owner.get("host") != socket.gethostname():
        return None
    now = _start_time(pid)
    return now is not None and (start is None or now == start)


def clean_stale(prefixes: tuple[str, ...] = PREFIXES, root: str | os.PathLike | None = None) -> list[Path]:
    """Remove this user's work directories whose owner process is gone; returns what was removed."""
    removed = []
    base = Path(root or tempfile.gettempdir())
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for d in entries:
        if not d.name.startswith(prefixes) or d.is_symlink() or not d.is_dir():
            continue
        try:
            if d.stat().st_uid != os.geteuid():
                continue
        except OSError:
            continue
        if owner_alive(d) is False:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed
