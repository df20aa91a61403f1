"""monta.pipeline_run, the way into Snakemake of `make reproduce` and the other pipeline targets: a lock
no live Snakemake holds is cleared by Snakemake's own --unlock with a one-line note; a lock a live one
holds is left alone and the run stops with one line naming it. (The crash itself, a SIGKILLed pipeline
brought back by the next run, is tests/test_pipeline.py::test_tiny_pipeline_end_to_end.)"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from monta import pipeline_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def work(tmp_path) -> Path:
    for name in ("Snakefile", "workflows", "config", "analysis", "profiles"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def _lock(work: Path) -> Path:
    locks = work / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("results/build/env.json\n")  # as a killed run leaves it
    return locks


def _wrapper(work: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "monta.pipeline_run", *args]
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=240)


def test_the_working_directory_of_a_command_line(tmp_path):
    assert pipeline_run.working_directory(["-n"], tmp_path) == tmp_path.resolve()
    assert pipeline_run.working_directory(["--directory", "run1", "-n"], tmp_path) == tmp_path / "run1"
    assert pipeline_run.working_directory(["-d", "/x/y"], tmp_path) == Path("/x/y")
    assert pipeline_run.working_directory(["--directory=run2"], tmp_path) == tmp_path / "run2"


def test_snakemake_processes_are_told_from_others():
    is_sm = pipeline_run._is_snakemake
    assert is_sm(["/v/bin/python3.11", "/v/bin/snakemake", "--cores", "2"]) == ["--cores", "2"]
    assert is_sm(["python", "-m", "snakemake", "-n"]) == ["-n"]
    assert is_sm(["snakemake", "-n"]) == ["-n"]
    assert is_sm(["python", "-m", "monta.pipeline_run", "snakemake"]) is None
    assert is_sm(["make", "reproduce"]) is None
    assert is_sm([]) is None


BUILD = ["results/build/env.json", "--cores", "1", "--configfile", "config/test.yaml"]  # one short local job


def test_runs_that_take_no_lock_and_the_arguments_that_name_the_workflow():
    assert pipeline_run.takes_lock(["--cores", "2", "--profile", "profiles/local"])
    for dry in (["-n"], ["--dry-run"], ["--report", "r.html"], ["--report=r.html"], ["--lint"], ["--list-rules"]):
        assert not pipeline_run.takes_lock(["--cores", "1", *dry]), dry
    args = ["--cores", "2", "--profile", "profiles/local", "--report", "results/report.html", "--configfile", "a.yaml"]
    args += ["b.yaml", "-d", "run1", "--config", "x=1", "y=2", "--keep-going"]
    assert pipeline_run.workflow_args(args) == [
        "--profile", "profiles/local", "--configfile", "a.yaml", "b.yaml", "-d", "run1", "--config", "x=1", "y=2"
    ]  # fmt: skip


def test_a_dry_run_or_a_report_leaves_a_lock_alone(work):
    locks = _lock(work)
    proc = _wrapper(work, "-n", "--configfile", "config/test.yaml")
    assert proc.returncode == 0 and "stale" not in proc.stderr, proc.stderr[-2000:]
    assert (locks / "0.output.lock").exists()  # Snakemake's dry run does not look at locks, nor do we


def test_no_lock_runs_snakemake_as_it_is(work):
    proc = _wrapper(work, "-n", "--configfile", "config/test.yaml")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "stale" not in proc.stderr and "This was a dry-run" in proc.stdout + proc.stderr


def test_a_stale_lock_is_cleared_with_one_line_and_the_run_goes_on(work):
    locks = _lock(work)
    # the case a crash leaves: Snakemake alone refuses to run (a dry run does not look at locks)
    cmd = [pipeline_run.SNAKEMAKE, "results/build/env.json", "--cores", "1", "--configfile", "config/test.yaml"]
    before = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=240)
    assert before.returncode != 0 and "LockException" in before.stdout + before.stderr, before.stderr[-2000:]
    assert not (work / "results" / "build" / "env.json").exists()
    proc = _wrapper(work, *BUILD)
    assert proc.returncode == 0, proc.stderr[-2000:]
    notes = [line for line in proc.stderr.splitlines() if "stale Snakemake lock" in line]
    assert notes == [f"note: {notes[0][6:]}"] and str(work) in notes[0]
    assert not locks.exists() or not any(locks.iterdir())
    assert (work / "results" / "build" / "env.json").exists()  # the run went on


def test_a_lock_a_live_snakemake_holds_is_left_alone(work):
    locks = _lock(work)
    # A process that looks like Snakemake working in this directory (argv[0] 'snakemake', cwd here).
    live = subprocess.Popen(["bash", "-c", "exec -a snakemake sleep 60"], cwd=work)
    try:
        deadline = time.monotonic() + 10
        while not any(p.pid == live.pid for p in pipeline_run.snakemake_processes()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc = _wrapper(work, *BUILD)
    finally:
        live.kill()
        live.wait()
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"pid {live.pid}" in lines[0], proc.stderr
    assert f"kill {live.pid}" in lines[0]
    assert (locks / "0.output.lock").exists()  # untouched


def test_a_live_snakemake_elsewhere_does_not_hold_this_directory(work, tmp_path_factory):
    _lock(work)
    other = tmp_path_factory.mktemp("elsewhere")
    live = subprocess.Popen(["bash", "-c", "exec -a snakemake sleep 60"], cwd=other)
    try:
        proc = _wrapper(work, *BUILD)
    finally:
        live.kill()
        live.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cleared a stale Snakemake lock" in proc.stderr
