"""Run Snakemake after clearing a lock that a crashed run left behind.

Snakemake locks its working directory (`.snakemake/locks/`) for the length of a run and removes the
lock when it exits. A run that is killed outright (an OOM kill, a lost SSH session, SIGKILL to its process
group, a power loss) never removes it, and the next run then stops with `LockException` until somebody
runs `snakemake --unlock`. This wrapper does what that somebody would check first: is a Snakemake process
still working in this directory? If none is, the lock is stale and Snakemake's own `--unlock` clears it
(one line says so); if one is, its lock is left alone and the run stops with one line naming the process.
Incomplete outputs of the crashed run are then rerun by Snakemake itself (the profiles set
`rerun-incomplete`).

    python -m monta.pipeline_run [SNAKEMAKE ARGS...]   # what `make reproduce` and the other targets run
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


@dataclass(frozen=True)
class SnakemakeProcess:
    pid: int
    directory: Path
    command: str


def working_directory(args: list[str], cwd: Path) -> Path:
    """The directory a Snakemake command line works in: its --directory/-d, else where it was started."""
    for i, arg in enumerate(args):
        if arg in ("--directory", "-d") and i + 1 < len(args):
            return (cwd / args[i + 1]).resolve()
        if arg.startswith("--directory="):
            return (cwd / arg.split("=", 1)[1]).resolve()
    return cwd.resolve()


def _is_snakemake(argv: list[str]) -> list[str] | None:
    """Snakemake's own arguments when argv runs Snakemake (its script, or `python [-m] snakemake`)."""
    if not argv:
        return None
    if os.path.basename(argv[0]) == "snakemake":
        return argv[1:]
    if "python" in os.path.basename(argv[0]) and len(argv) > 1:
        if os.path.basename(argv[1]) == "snakemake":
            return argv[2:]
        if argv[1:3] == ["-m", "snakemake"]:
            return argv[3:]
    return None


def snakemake_processes(proc: Path = Path("/proc")) -> list[SnakemakeProcess]:
    """Every Snakemake process this user can see, with the directory it works in (the job processes a
    run spawns count too: a job still running is still writing the directory's outputs)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            args = _is_snakemake(argv)
            if args is None or "--unlock" in args:
                continue
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:  # gone meanwhile, or another user's
            continue
        found.append(SnakemakeProcess(int(entry.name), working_directory(args, cwd), " ".join(argv)))
    return found


# Snakemake runs that take no lock: their wrapper leaves any lock alone (a dry run beside a live run is fine)
_NO_LOCK = ("-n", "--dry-run", "--dryrun", "--report", "--lint", "--unlock", "--nolock", "--summary", "-D")
# The arguments that name the workflow (and so its lock): the unlock gets these and no others (not --report,
# whose branch Snakemake takes before --unlock's, nor targets)
_WORKFLOW = ("-s", "--snakefile", "-d", "--directory", "--profile", "--configfile", "--configfiles", "--config", "-C")


def takes_lock(args: list[str]) -> bool:
    return not any(a in _NO_LOCK or a.startswith(("--list", "--report=")) for a in args)


def workflow_args(args: list[str]) -> list[str]:
    """The arguments of ``args`` that name the workflow, each with its values (up to the next option)."""
    out, keep = [], False
    for a in args:
        if a.startswith("-"):
            keep = a.split("=", 1)[0] in _WORKFLOW
        if keep:
            out.append(a)
    return out


def has_lock(directory: Path) -> bool:
    locks = directory / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


def clear_stale_lock(args: list[str], cwd: Path) -> str | None:
    """Clear the working directory's lock when no live Snakemake holds it. Returns the one-line note to
    print, or None when there was no lock. Raises RuntimeError (one line) when a live process holds it."""
    directory = working_directory(args, cwd)
    if not takes_lock(args) or not has_lock(directory):
        return None
    live = [p for p in snakemake_processes() if p.directory == directory]
    if live:
        p = live[0]
        cmd = p.command if len(p.command) <= 120 else p.command[:117] + "..."
        raise RuntimeError(
            f"{directory} is locked by a running Snakemake (pid {p.pid}: {cmd}); wait for it to finish or stop it "
            f"(kill {p.pid}), then run again"
        )
    # Snakemake's own unlock, with the run's workflow (same Snakefile, directory, profile and config)
    unlock = subprocess.run([SNAKEMAKE, *workflow_args(args), "--unlock"], cwd=cwd, capture_output=True, text=True)
    if unlock.returncode != 0 or has_lock(directory):
        tail = (unlock.stderr or unlock.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"could not clear the stale lock in {directory}/.snakemake/locks: {tail[0]}")
    return (
        f"note: cleared a stale Snakemake lock in {directory} (no Snakemake process is running there: an earlier "
        "run was killed); unfinished outputs rerun"
    )


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    try:
        note = clear_stale_lock(args, Path.cwd())
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if note:
        print(note, file=sys.stderr, flush=True)
    os.execv(SNAKEMAKE, [SNAKEMAKE, *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
