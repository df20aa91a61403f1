"""``monta bench alltoall`` end to end on a small emulated cluster: the table, the records, the
``--check`` that catches a corrupted exchange (test-only fault injection), and flag validation."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monta.results import read_records

pytestmark = pytest.mark.slow


def bench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "monta.cli", "bench", "alltoall", "--nodes", "2", "--gpus-per-node", "2",
           "--sizes", "64K", "--hidden", "256", "--chunks", "2", "--iters", "1", "--warmup", "0", "--no-wandb",
           "--allow-unshaped", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(600)
def test_check_counts_zero_wrong_and_catches_an_injected_fault(tmp_path):
    good = bench("--check", "--out", str(tmp_path / "good.jsonl"))
    assert good.returncode == 0, good.stderr[-3000:]
    assert "size(B)" in good.stdout and "Out of bounds values : 0 OK" in good.stdout
    recs = read_records(tmp_path / "good.jsonl")
    assert {r["params"]["variant"] for r in recs} == {"legacy", "deepspeed", "monta", "a2a", "ag"}
    assert all(r["metrics"]["wrong"] == 0 and r["metrics"]["checked"] for r in recs)
    by = {r["params"]["variant"]: r["metrics"] for r in recs}
    assert by["legacy"]["inter_bytes"] == 2 * by["monta"]["inter_bytes"]  # TP = 2

    bad = bench("--check", "--inject-fault", "--out", str(tmp_path / "bad.jsonl"))
    assert bad.returncode == 0, bad.stderr[-3000:]
    wrong = {r["params"]["variant"]: r["metrics"]["wrong"] for r in read_records(tmp_path / "bad.jsonl")}
    # rank 0 corrupts one element of its first chunk in every exchange pass it places
    assert wrong["legacy"] > 0 and wrong["deepspeed"] > 0 and wrong["monta"] > 0
    assert "Out of bounds values : 0 OK" not in bad.stdout


@pytest.mark.parametrize("args,message", [
    (("--chunks", "0"), "every value must be >= 1"),
    (("--chunks", "64"), "exceeds the capacity slice"),
    (("--variants", "legacy,tutel"), "unknown exchange 'tutel'"),
    (("--tp", "3"), "tp=3 is larger than a node"),
    (("--sizes", "1000"), "is not a whole [E=2, C, M=256]"),
])
def test_bad_flags_fail_fast_with_one_line(args, message):
    proc = bench(*args, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
