"""Fault injection, as a user meets faults: bad flags, corrupt inputs, damaged files, bad pipeline
configs, and (with the emulator) killed, stopped and unprivileged ranks and killed runs.

    python tools/faults.py                 # every case (`make faults`)
    python tools/faults.py --no-emulator   # only the cases that start no rank (seconds)
    python tools/faults.py -k append       # cases whose name contains 'append'

Each case runs the real command line (`monta ...`, `snakemake -n`) in a scratch folder and checks
what docs/reliability.md promises: a clear one-line error naming the culprit (exit 2 for usage errors, no
traceback), or a correct result; never a hang or lost records. One line per case, then `N/M handled`;
the exit status is 0 only when every case was handled.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MONTA = [sys.executable, "-m", "monta.cli"]
ENV = {**os.environ, "MONTA_WANDB": "0", "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
SMALL = [
    "--nodes",
    "2",
    "--gpus-per-node",
    "2",
    "--sizes",
    "64K",
    "--hidden",
    "256",
    "--chunks",
    "2",
    "--iters",
    "2",
    "--warmup",
    "0",
    "--no-wandb",
]

CASES: list[tuple[str, str, bool, Callable[[Path], str]]] = []  # (class, name, needs emulator, check)


class NotHandled(Exception):
    pass


def case(klass: str, name: str, emulator: bool = False):
    def add(fn):
        CASES.append((klass, name, emulator, fn))
        return fn

    return add


def run(argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=kw.pop("env", ENV), **kw)


def one_line_error(proc: subprocess.CompletedProcess, *needles: str, code: int = 2) -> str:
    err = proc.stderr.strip()
    if "Traceback" in proc.stderr or "Traceback" in proc.stdout:
        raise NotHandled(f"traceback: {err.splitlines()[-1] if err else ''}")
    if proc.returncode != code:
        raise NotHandled(f"exit {proc.returncode}, wanted {code}: {err[-200:]}")
    last = err.splitlines()[-1] if err else ""
    missing = [n for n in needles if n not in err]
    if missing:
        raise NotHandled(f"error does not say {missing}: {err[-300:]}")
    return last


def record(time_us: float = 100.0, variant: str = "monta", **metrics) -> dict:
    sys.path.insert(0, str(ROOT))
    from monta.results import make_record

    return make_record(
        kind="alltoall",
        source="emulated",
        experiment="faults",
        env={"python": "3.11"},
        params={
            "size_bytes": 1 << 20,
            "variant": variant,
            "chunks": 2,
            "nodes": 2,
            "gpus_per_node": 4,
            "tp": 4,
            "ep": 2,
        },
        metrics={"time_us": time_us, **metrics},
    )


def records_file(path: Path, *recs: dict, tail: bytes = b"") -> Path:
    path.write_bytes(b"".join((json.dumps(r) + "\n").encode() for r in recs) + tail)
    return path


# -- class 1: bad flags, named before anything starts ----------------------------------------------
def _flag_case(name: str, argv: list[str], *needles: str, within: float | None = None):
    @case("1 flags", name)
    def check(tmp: Path) -> str:
        t0 = time.monotonic()
        line = one_line_error(run(MONTA + argv, timeout=60), *needles)
        if within is not None and time.monotonic() - t0 > within:
            raise NotHandled(f"took {time.monotonic() - t0:.1f} s")
        return line


A2A = ["bench", "alltoall", "--nodes", "2", "--gpus-per-node", "2", "--no-wandb"]
_flag_case("alltoall --hidden 0", A2A + ["--hidden", "0"], "--hidden 0")
_flag_case("alltoall --hidden -1", A2A + ["--hidden", "-1"], "--hidden -1")
_flag_case("alltoall --experts -2", A2A + ["--experts", "-2"], "--experts -2")
_flag_case("alltoall --experts 0", A2A + ["--experts", "0"], "--experts 0")
_flag_case(
    "alltoall --sizes 1M:1T:1.0000001 (10^8 sizes)",
    A2A + ["--sizes", "1M:1T:1.0000001"],
    "--sizes",
    "at most 64",
    within=10,
)
_flag_case("alltoall --sizes 0", A2A + ["--sizes", "0", "--exchanges", "legacy,deepspeed"], "--sizes 0")
_flag_case("alltoall --sizes 128K:64K:2", A2A + ["--sizes", "128K:64K:2"], "--sizes 128K:64K:2", "min 128K is above")
_flag_case(
    "alltoall --chunks 64 beyond the capacity slice",
    A2A + ["--sizes", "64K", "--hidden", "256", "--chunks", "64"],
    "--chunks 64",
    "capacity slice",
)
_flag_case("alltoall --tp 3", A2A + ["--tp", "3"], "--tp 3")
_flag_case("alltoall --nodes 0", ["bench", "alltoall", "--nodes", "0"], "--nodes 0")
_flag_case(
    "alltoall --inter-gbps -1", A2A + ["--sizes", "64K", "--hidden", "256", "--inter-gbps", "-1"], "--inter-gbps -1"
)
_flag_case("alltoall --timeout nan", A2A + ["--sizes", "64K", "--hidden", "256", "--timeout", "nan"], "--timeout nan")
_flag_case("alltoall --append without --out", A2A + ["--sizes", "64K", "--hidden", "256", "--append"], "--append")
_flag_case("step --steps 0", ["bench", "step", "--steps", "0", "--no-wandb"], "--steps 0")
_flag_case(
    "step --capacity-factor nan", ["bench", "step", "--capacity-factor", "nan", "--no-wandb"], "--capacity-factor nan"
)
_flag_case("predict alltoall --sizes 0", ["predict", "alltoall", "--sizes", "0"], "--sizes 0")
_flag_case("plan --seq 0", ["plan", "--nodes", "2", "--seq", "0"], "--seq 0")
_flag_case("emulate run --nodes 0", ["emulate", "run", "--nodes", "0", "--", "true"], "--nodes 0")


@case("1 flags", "alltoall --out <an existing directory>")
def _(tmp: Path) -> str:
    return one_line_error(
        run(MONTA + A2A + ["--sizes", "64K", "--hidden", "256", "--out", str(tmp)]), f"--out {tmp}", "is a directory"
    )


@case("1 flags", "alltoall --out in a read-only (555) directory")
def _(tmp: Path) -> str:
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        return one_line_error(
            run(MONTA + A2A + ["--sizes", "64K", "--hidden", "256", "--out", str(ro / "r.jsonl")]),
            "cannot write in",
            "mode 555",
        )
    finally:
        ro.chmod(0o755)


for _flag, _value in (
    ("--threshold", "nan"),
    ("--threshold", "inf"),
    ("--threshold", "-1"),
    ("--threshold", "0"),
    ("--bootstrap", "0"),
    ("--confidence", "nan"),
):

    def _regress_flag(tmp: Path, flag=_flag, value=_value) -> str:
        f = records_file(tmp / "r.jsonl", record())
        return one_line_error(
            run(MONTA + ["regress", "--baseline", str(f), "--current", str(f), flag, value]), f"{flag} "
        )

    case("1 flags", f"regress {_flag} {_value}")(_regress_flag)


# -- class 2: corrupt or odd inputs to the analysis commands --------------------------------------
def _bad_input(name: str, make: Callable[[Path], Path], *needles: str):
    @case("2 inputs", f"regress --current {name}")
    def check(tmp: Path) -> str:
        base = records_file(tmp / "base.jsonl", record())
        bad = make(tmp)
        return one_line_error(
            run(MONTA + ["regress", "--baseline", str(base), "--current", str(bad)]), str(bad), *needles
        )


_bad_input(
    "non-UTF-8 bytes", lambda t: records_file(t / "c.jsonl", record(), tail=b"\xff\xfe garbage\n"), ":2:", "not UTF-8"
)
_bad_input(
    "JSON that is not a record", lambda t: records_file(t / "c.jsonl", tail=b'{"a": 1}\n[1, 2]\n'), ":1:", "missing"
)
_bad_input(
    "metrics: null", lambda t: records_file(t / "c.jsonl", {**record(), "metrics": None}), ":1:", "metrics is null"
)
_bad_input("a directory", lambda t: (t / "d").mkdir() or t / "d", "is a directory")
_bad_input(
    "all times NaN",
    lambda t: records_file(
        t / "c.jsonl", record(math.nan, samples_us=[math.nan] * 3), record(math.nan, variant="legacy")
    ),
    ":1:",
    "NaN",
)
_bad_input("a zero time", lambda t: records_file(t / "c.jsonl", record(0.0)), ":1:", "above zero")
_bad_input("an empty file", lambda t: records_file(t / "c.jsonl"), "holds no records")


@case("2 inputs", "predict accuracy --measured with NaN times")
def _(tmp: Path) -> str:
    bad = records_file(tmp / "m.jsonl", record(math.nan))
    prof = tmp / "p.json"
    prof.write_text("{}")
    return one_line_error(
        run(MONTA + ["predict", "accuracy", "--measured", str(bad), "--profile", str(prof)]), f"{bad}:1:", "NaN"
    )


# -- class 3: appending never makes a file worse ----------------------------------------------------
@case("3 append", "bench --append onto a file whose last line is cut off")
def _(tmp: Path) -> str:
    out = records_file(tmp / "r.jsonl", record(), tail=json.dumps(record()).encode()[:60])
    before = out.read_bytes()
    line = one_line_error(
        run(MONTA + A2A + ["--sizes", "64K", "--hidden", "256", "--out", str(out), "--append"]),
        f"{out}:2:",
        "refusing to append",
    )
    if out.read_bytes() != before:
        raise NotHandled("the file changed")
    return line


@case("3 append", "a record appended after a cut-off line (file damaged during the run)")
def _(tmp: Path) -> str:
    out = records_file(tmp / "r.jsonl", record(1.0), tail=json.dumps(record(2.0)).encode()[:60])
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]); from monta.results import write_records, make_record; "
        "import json; write_records(sys.argv[1], [json.loads(sys.argv[3])], append=True)"
    )
    proc = run([sys.executable, "-c", code, str(out), str(ROOT), json.dumps(record(3.0))])
    lines = out.read_text().splitlines()
    if proc.returncode or len(lines) != 3 or json.loads(lines[2])["metrics"]["time_us"] != 3.0:
        raise NotHandled(f"new record lost or glued: {lines[-1][:80]!r} {proc.stderr[-200:]}")
    if f"{out}:2: the last line is cut off" not in proc.stderr:
        raise NotHandled(f"no warning naming the line: {proc.stderr[-200:]}")
    return proc.stderr.strip().splitlines()[-1][:160]


# -- class 4: the pipeline refuses configs that cannot run; takes what Snakemake users type --------
def _snakemake(tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    for name in ("Snakefile", "config", "workflows", "analysis", "profiles"):
        if not (work / name).exists():
            (work / name).symlink_to(ROOT / name)
    return run(
        [str(BIN / "snakemake"), "-n", "--cores", "1", "--profile", "profiles/local", *extra], cwd=work, timeout=180
    )


def _config_case(name: str, override: str, *needles: str):
    @case("4 config", name)
    def check(tmp: Path) -> str:
        proc = _snakemake(tmp, "--config", override)
        text = proc.stdout + proc.stderr
        if proc.returncode == 0:
            raise NotHandled("the dry run accepted it")
        missing = [n for n in needles if n not in text]
        if missing:
            raise NotHandled(f"does not say {missing}: {text.strip()[-300:]}")
        return next(line for line in text.splitlines() if needles[0] in line).strip()[:200]


_config_case("alltoall.sizes min > max", "alltoall={sizes: '128K:64K:2'}", "alltoall.sizes", "min 128K is above")
_config_case(
    "alltoall.chunks beyond the capacity slice", "alltoall={chunks: [64]}", "alltoall.chunks", "capacity slice"
)


@case("4 config", "nested override --config 'alltoall={iters: 3}' is accepted")
def _(tmp: Path) -> str:
    proc = _snakemake(tmp, "--config", "alltoall={iters: 3, check: false}")
    if proc.returncode != 0:
        raise NotHandled((proc.stdout + proc.stderr).strip()[-300:])
    return "dry run accepted it (iters read as 3, check as false)"


# -- classes 5-7: ranks and runs on the emulated cluster --------------------------------------------
def _bench_proc(tmp: Path, *extra: str) -> subprocess.Popen:
    """A long bench run; its stdout (the live progress lines) to ``tmp/stdout`` for ``_wait_for_timing``."""
    out = tmp / "stdout"
    with out.open("w") as f:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            MONTA + ["bench", "alltoall", *SMALL, "--iters", "1000", *extra],
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            env={**ENV, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    proc.progress_file = out
    return proc


def _rank_pids(parent: int) -> list[int]:
    """Host pids of this run's rank processes: descendants of ``parent`` (never another run's
    ranks) whose command line runs monta.bench.alltoall.worker, or forked from the supervisor and named
    monta-rankN (monta.emulate.forkstart)."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, list[bytes]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdlines[int(d.name)] = (d / "cmdline").read_bytes().split(b"\0") + [(d / "comm").read_bytes()]
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [parent]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            todo.append(c)
            words = cmdlines.get(c, [])
            if b"monta.bench.alltoall.worker" in words or any(w.startswith(b"monta-rank") for w in words):
                out.append(c)
    return sorted(out)


def _wait_for_timing(proc: subprocess.Popen, limit: float = 180) -> None:
    """Until the ranks are in their timed iterations: rank 0's "warmed up" progress line, or (should the
    line not come through) 25 s after the four ranks started."""
    t0, up = time.monotonic(), None
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None:
            raise NotHandled(f"the run ended early: {proc.stderr.read()[-300:]}")
        if up is None and len(_rank_pids(proc.pid)) >= 4:
            up = time.monotonic()
        if up is not None:
            if "progress: warmed up" in proc.progress_file.read_text(errors="replace"):
                time.sleep(1)  # into the timed iterations
                return
            if time.monotonic() - up > 25:
                return
        time.sleep(0.5)
    raise NotHandled("the ranks never started")


@case("5 stall", "SIGSTOP one rank mid-run: named well before the collective timeout", emulator=True)
def _(tmp: Path) -> str:
    proc = _bench_proc(tmp)
    try:
        _wait_for_timing(proc)
        victim = _rank_pids(proc.pid)[-1]
        os.kill(victim, signal.SIGSTOP)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    line = next((ln for ln in err.splitlines() if "stalled" in ln), "")
    if proc.returncode == 0 or "stopped by a signal" not in line:
        raise NotHandled(f"exit {proc.returncode}: {err.strip()[-300:]}")
    return f"after {took:.0f} s: {line.strip()[:200]}"


@case("5 stall", "SIGKILL one rank mid-run: named, nothing left running", emulator=True)
def _(tmp: Path) -> str:
    proc = _bench_proc(tmp)
    try:
        _wait_for_timing(proc)
        os.kill(_rank_pids(proc.pid)[-1], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    line = next((ln for ln in err.splitlines() if "exited with signal 9" in ln), "")
    if proc.returncode == 0 or not line:
        raise NotHandled(f"exit {proc.returncode}: {err.strip()[-300:]}")
    time.sleep(1)
    if _rank_pids(proc.pid):
        raise NotHandled("ranks still running")
    return line.strip()[:200]


@case("6 privileges", "a rank cannot write into the user's read-only (555) directory", emulator=True)
def _(tmp: Path) -> str:
    ro = tmp / "ro"
    ro.mkdir()
    (ro / "old.jsonl").write_text("older result\n")
    ro.chmod(0o555)
    # What rank 0 of a benchmark does with --out: write the records file atomically (a new file in
    # the folder, renamed over the old one), which the folder's 555 must forbid.
    code = (
        "import os, sys, json; p = sys.argv[1]; sys.path.insert(0, sys.argv[2])\n"
        "from monta.results import RecordWriteError, write_records\n"
        "try:\n    write_records(os.path.join(p, 'old.jsonl'), [json.loads(sys.argv[3])]); print('WROTE')\n"
        "except (PermissionError, RecordWriteError) as e:\n    print('refused', e)\n"
        "caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')]; print(caps[0].strip())"
    )
    try:
        proc = run(
            MONTA
            + [
                "emulate",
                "run",
                "--nodes",
                "1",
                "--gpus-per-node",
                "1",
                "--",
                sys.executable,
                "-c",
                code,
                str(ro),
                str(ROOT),
                json.dumps(record()),
            ],
            timeout=120,
        )
    finally:
        ro.chmod(0o755)
    if "refused" not in proc.stdout or (ro / "old.jsonl").read_text() != "older result\n":
        raise NotHandled(f"rank wrote into the 555 directory: {proc.stdout.strip()[-200:]} {proc.stderr[-200:]}")
    return " ".join(proc.stdout.split())[:200]


@case("7 leftovers", "a SIGKILLed run's work directory is cleaned at the next start", emulator=True)
def _(tmp: Path) -> str:
    tmpdir = Path(tempfile.gettempdir())
    proc = subprocess.Popen(
        MONTA + ["emulate", "run", "--nodes", "1", "--gpus-per-node", "1", "--", "sleep", "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
        start_new_session=True,
    )

    def ours(d: Path) -> bool:  # this run's folder only (other runs may be going on at the same time)
        try:
            return json.loads((d / ".monta-owner").read_text())["pid"] == proc.pid
        except (OSError, ValueError, KeyError):
            return False

    left = set()
    for _ in range(60):
        time.sleep(0.5)
        left = {p.name for p in tmpdir.glob("monta-emulate-*") if ours(p)}
        if left:
            break
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1)
    if not left or not all((tmpdir / n).exists() for n in left):
        raise NotHandled("no work directory to clean (the run did not get as far)")
    nxt = run(MONTA + ["emulate", "run", "--nodes", "1", "--gpus-per-node", "1", "--", "true"], timeout=120)
    still = [n for n in left if (tmpdir / n).exists()]
    if nxt.returncode or still:
        raise NotHandled(f"still there after the next run: {still} {nxt.stderr[-200:]}")
    return f"{len(left)} left by SIGKILL ({', '.join(sorted(left))}), removed by the next run"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-emulator", action="store_true", help="only the cases that start no rank")
    ap.add_argument("-k", default=None, help="only cases whose class or name contains this")
    args = ap.parse_args()
    from monta.emulate.launcher import namespace_problem

    problem = None if args.no_emulator else namespace_problem()
    handled = total = 0
    for klass, name, emulator, fn in CASES:
        if args.k and args.k not in name and args.k not in klass:
            continue
        if emulator and (args.no_emulator or problem):
            print(f"skip     [{klass}] {name}: {'--no-emulator' if args.no_emulator else problem}", flush=True)
            continue
        total += 1
        tmp = Path(tempfile.mkdtemp(prefix="monta-faults-"))
        t0 = time.monotonic()
        try:
            detail = fn(tmp)
            handled += 1
            print(f"handled  [{klass}] {name} ({time.monotonic() - t0:.1f} s): {detail}", flush=True)
        except (NotHandled, subprocess.TimeoutExpired, StopIteration) as e:
            print(f"NOT      [{klass}] {name} ({time.monotonic() - t0:.1f} s): {type(e).__name__}: {e}", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{handled}/{total} handled")
    return 0 if handled == total else 1


if __name__ == "__main__":
    sys.exit(main())
