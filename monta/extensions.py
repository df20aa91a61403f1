"""DeepSpeed's JIT-built CPU ops: one build folder per virtual environment, built once at set-up,
and the build locks that killed ranks leave behind, found and removed before a run starts.

Why: on CPU, ``deepspeed.init_distributed`` loads its shm comm op through
``torch.utils.cpp_extension.load``, which holds a ``FileBaton`` (a bare ``lock`` file in the build
folder) while it checks or builds the op (44 s to build on 2 cores). A rank killed inside that
window leaves the file, and every later rank on the machine spins on it forever at 0% CPU. With
torch's default folder (``~/.cache/torch_extensions``) shared by every clone, each clone's venv also
rebuilt the op over the others' (its include paths differ), inside a rank.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path

ENV = "TORCH_EXTENSIONS_DIR"
# A lock younger than this may have been created while our /proc scan ran (its holder scanned before it
# opened the file); a scan takes well under a second. A build holds its fd open the whole time, so age alone
# never removes one. (It was 30 s: a pipeline killed mid-load and rerun at once started its ranks within
# 30 s of the kill, the orphaned lock was kept, and every rank of the next step waited on it until the
# stall limit ended the run: tests/test_pipeline.py's crash test saw it.)
MIN_STALE_AGE_S = 5.0


def default_dir() -> Path | None:
    """``<venv>/torch-extensions`` when running from a virtual environment we may write to, else None
    (torch's default: a read-only shared install keeps ~/.cache)."""
    if sys.prefix != sys.base_prefix and os.access(sys.prefix, os.W_OK):
        return Path(sys.prefix) / "torch-extensions"
    return None


def ninja_dir() -> Path | None:
    """The folder of this interpreter's ``ninja`` (the pip one DeepSpeed depends on), or None."""
    d = Path(sys.executable).parent
    return d if os.access(d / "ninja", os.X_OK) else None


def configure(env: MutableMapping[str, str]) -> None:
    """Point ``env`` at this venv's build folder unless it already names one, and at this venv's ninja.

    torch runs the first ``ninja`` on PATH. The venv's (1.13) and a system one (1.11) keep build logs of
    different versions, and each throws the other's away and rebuilds the op ("build log version is too
    old; starting over"): the set-up's build ran the system ninja, ranks started by snakemake (which puts
    the venv first) the venv's, so a rank rebuilt the op, for minutes on a loaded machine, and was killed
    as stalled while holding the build lock. One ninja for every process: the venv's."""
    if not env.get(ENV):
        d = default_dir()
        if d is not None:
            env[ENV] = str(d)
    nd = ninja_dir()
    path = env.get("PATH", "")
    if nd is not None and path.split(os.pathsep)[0] != str(nd):
        env["PATH"] = os.pathsep.join(filter(None, [str(nd), path]))


def build_root(env: MutableMapping[str, str] | None = None) -> Path:
    """Where torch builds extensions for ``env`` (its ``$TORCH_EXTENSIONS_DIR`` or torch's default root)."""
    env = os.environ if env is None else env
    if env.get(ENV):
        return Path(env[ENV])
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "torch_extensions"


def _open_files() -> set[str] | None:
    """Every path some process on this machine holds open, or None if /proc cannot tell us."""
    held: set[str] = set()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    unreadable = 0
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            unreadable += 1
            continue
        except OSError:  # the process ended meanwhile
            continue
        for fd in fds:
            try:
                held.add(os.readlink(f"{fd_dir}/{fd}"))
            except OSError:
                pass
    # Other users' processes we cannot see could hold a lock: then we cannot call any lock stale.
    return None if unreadable else held


def locks(root: Path) -> list[Path]:
    """The build locks under ``root`` (``root/<op>/lock`` or torch's ``root/<py-accel>/<op>/lock``)."""
    return sorted(set(root.glob("*/lock")) | set(root.glob("*/*/lock"))) if root.is_dir() else []


def stale_locks(root: Path, min_age_s: float = MIN_STALE_AGE_S) -> list[Path]:
    """Locks under ``root`` that no process holds open and that are older than ``min_age_s``.

    torch's FileBaton keeps the lock's file descriptor open from creation to release, so a lock that
    no live process holds was left by one that died (SIGKILL, OOM) inside the build window."""
    found = [p for p in locks(root) if time.time() - _mtime(p) >= min_age_s]
    if not found:
        return []
    held = _open_files()
    if held is None:
        return []
    return [p for p in found if str(p.resolve()) not in held and str(p) not in held]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def clear_stale_locks(env: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove the stale locks of ``env``'s build folder; one line per lock removed, for the caller to print."""
    notes = []
    root = build_root(env)
    # an orphan younger than the age limit (a run killed a moment ago): wait until it is old enough to judge
    young = [time.time() - _mtime(p) for p in stale_locks(root, min_age_s=0.0)]
    if young and min(young) < MIN_STALE_AGE_S:
        time.sleep(MIN_STALE_AGE_S - min(young))
    for lock in stale_locks(root):
        try:
            age = time.time() - _mtime(lock)
            lock.unlink()
        except FileNotFoundError:
            continue
        notes.append(
            f"monta: removed {lock}, a torch-extension build lock {age:.0f} s old that no process "
            "holds (left by a process killed while loading a DeepSpeed op; it would hang every rank)"
        )
    return notes


def stuck_note(env: MutableMapping[str, str] | None = None) -> str:
    """For a stall message: the build locks present now, and what to do about them ('' if none)."""
    present = locks(build_root(env))
    if not present:
        return ""
    return (
        f"; a torch-extension build lock exists ({', '.join(map(str, present))}): if no build is running, "
        f"a killed process left it and every rank waits on it: rm {' '.join(map(str, present))}"
    )


def build_ops() -> int:
    """Build (or check) DeepSpeed's CPU comm op once, in this process, so that ranks only load it."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    configure(os.environ)
    for note in clear_stale_locks():
        print(note, file=sys.stderr)
    t0 = time.monotonic()
    try:
        from deepspeed.comm.torch import build_shm_op

        op = build_shm_op()
    except Exception as e:  # noqa: BLE001 - a missing compiler is DeepSpeed's to report; ranks will say it again
        print(
            f"monta: could not build DeepSpeed's CPU comm op in {build_root()} ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); ranks will try again at start-up",
            file=sys.stderr,
        )
        return 0
    what = "built or up to date" if op is not None else "not used by this DeepSpeed/accelerator"
    print(f"monta: DeepSpeed CPU comm op {what} in {build_root()} ({time.monotonic() - t0:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monta.extensions", description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="build DeepSpeed's CPU comm op now (make setup does)")
    parser.add_argument("--clear-stale", action="store_true", help="remove build locks no process holds")
    args = parser.parse_args(argv)
    configure(os.environ)
    if args.clear_stale:
        for note in clear_stale_locks():
            print(note)
    if args.build:
        return build_ops()
    if not args.clear_stale:
        print(build_root())
    return 0


if __name__ == "__main__":
    sys.exit(main())
