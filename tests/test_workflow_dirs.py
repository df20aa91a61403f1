"""Two runs side by side: `snakemake --directory RUN_DIR` finds the workflow's own files (default
config, schema, notebooks, paper numbers, stored baseline) through the Snakefile's directory and
writes results under RUN_DIR, never into the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monta.results import read_records

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
pytestmark = pytest.mark.timeout(300)


def snakemake(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run(
        [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), *args], cwd=cwd, capture_output=True, text=True, timeout=240, env=env
    )


def _results_tree() -> set[str]:
    res = ROOT / "results"
    return {str(f.relative_to(res)) for f in res.rglob("*")} if res.is_dir() else set()


def test_dry_run_in_another_directory_plans_every_job_there(tmp_path):
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    proc = snakemake("-n", "--directory", str(run_dir), cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert f"Working directory: {run_dir}" in out
    # every job the full default run has, the notebooks (analysis/nb_*.py) and the report among them
    for rule in ("alltoall", "step", "notebook", "report", "regress"):
        assert f"\nrule {rule}:" in out, rule
    # outputs are relative to the run directory; nothing planned in the checkout by absolute path
    assert "output: results/report.md" in out
    assert f"{ROOT}/results" not in out


def test_two_run_directories_each_get_their_own_results(tmp_path):
    before = _results_tree()
    for name in ("run-1", "run-2"):
        run_dir = tmp_path / name
        run_dir.mkdir()
        # a --configfile given relative to where snakemake is started (the checkout), as a user types it
        proc = snakemake(
            "results/predict/paper.jsonl",
            "--cores",
            "1",
            "--directory",
            str(run_dir),
            "--configfile",
            "config/test.yaml",
            cwd=ROOT,
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        records = read_records(run_dir / "results" / "predict" / "paper.jsonl")
        assert records and all(r["source"] == "predicted" for r in records)
    assert _results_tree() == before
