"""Atomic file writes that a colleague can read: a temp file in the target's folder, renamed over it.

``tempfile.mkstemp`` creates its file mode 0600 whatever the umask (it must: it is a private temp
file), and the rename keeps that mode, so records written that way could not be read by a colleague,
a CI uploader or a web server on a shared file system. Every atomic writer of records and tables goes
through :func:`write_atomic`, which gives the file the mode ``open()`` would have given it: 0666
less the user's umask (0644 under umask 022, 0600 under 077).
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc/self/status, 4.7+);
    elsewhere set and restored at once, under a lock (os.umask is the only other way to read it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets from ``open()``: 0666 less the umask."""
    return 0o666 & ~current_umask()


def remove_orphaned_temps(path: Path) -> None:
    """Remove the temporary files of earlier writes of `path` whose writer is gone (a SIGKILL between
    mkstemp and the rename leaves one, `.NAME.PID.XXXX`): a live writer's file is left alone."""
    for tmp in path.parent.glob(f".{path.name}.*.*"):
        pid = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            tmp.unlink(missing_ok=True)


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` atomically (the previous file or the whole new one, never part of
    one), mode 0666 less the umask. The folder must exist. OSErrors propagate to the caller. The temp
    file carries the writer's pid, so the next write of `path` removes one that a killed writer left."""
    p = Path(path)
    remove_orphaned_temps(p)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.{os.getpid()}.", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
