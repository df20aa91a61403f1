"""tools/gpu_check.py (what a session with a GPU runs) on this CPU machine: its commands are the bench's
flags, its refusals are one line (exit 2), and its gloo case runs here on CPU tensors with every record
checked and the machine named in gpu-check.json (the NCCL case says why it did not run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from monta.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
TOOL = [sys.executable, str(ROOT / "tools" / "gpu_check.py")]


def _run(*args, timeout=600, env=None):
    return subprocess.run([*TOOL, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def test_dry_run_commands_are_the_benchs_flags():
    proc = _run("--dry-run")
    assert proc.returncode == 0, proc.stderr
    commands = [line.split() for line in proc.stdout.splitlines()]
    assert len(commands) == 4
    for cmd in commands:
        bench = cmd[cmd.index("monta.cli") + 1 :]
        build_parser("bench").parse_args(bench)  # an unknown flag exits 2
        assert cmd[cmd.index("--device") + 1] == "cuda" and "--check" in cmd
    gloo = [c for c in commands if c[c.index("--backend") + 1] == "gloo"]
    nccl = [c for c in commands if c[c.index("--backend") + 1] == "nccl"]
    assert len(gloo) == 3 and all(c[c.index("--nproc-per-node") + 1] == "4" for c in gloo)
    assert len(nccl) == 1 and nccl[0][nccl[0].index("--nproc-per-node") + 1] == "1"
    exchanges = {v for c in commands for v in c[c.index("--exchanges") + 1].split(",")}
    assert exchanges == {"legacy", "deepspeed", "monta", "2dh", "allgather", "node-dedup"}


def test_eight_ranks_make_two_nodes_of_four():
    proc = _run("--ranks", "8", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    gloo = [c.split() for c in proc.stdout.splitlines() if "--backend gloo" in c]
    assert gloo and all(c[c.index("--gpus-per-node") + 1] == "4" and c[c.index("--tp") + 1] == "2" for c in gloo)


@pytest.mark.parametrize(
    "args, said",
    [
        (["--ranks", "3", "--dry-run"], "--ranks 3: give a multiple of 4"),
        (["--ranks", "2", "--dry-run"], "--ranks 2: give a multiple of 4"),  # TP 2 on nodes of 1 rank
        (["--ranks", "6", "--dry-run"], "--ranks 6: give a multiple of 4"),  # nodes of 3 ranks: TP 2 divides none
        (["--only", "bogus", "--dry-run"], "unknown case 'bogus'"),
        ([], "--out DIR is needed"),
        (["--out", "OUT"], "no CUDA device here"),
    ],
)
def test_refusals_are_one_line(args, said, tmp_path):
    # No GPU seen even on a machine with one (else the last case runs every case for real), and --out in tmp.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = _run(*(str(tmp_path / "out") if a == "OUT" else a for a in args), env=env)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "gpu-check.json").exists()


def test_a_gloo_case_runs_on_cpu_and_names_the_machine(tmp_path):
    proc = _run("--device", "cpu", "--only", "core,nccl-one-rank", "--out", str(tmp_path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["gpu"] == "cpu" and report["device"] == "cpu" and report["ok"] is True
    core, nccl = report["cases"]
    assert core["name"] == "core" and core["ok"] and core["rc"] == 0
    # 2 sizes x (legacy, deepspeed, monta at 1/2/4 chunks, a2a, ag), every one verified after timing
    assert core["records"] == core["checked"] == 14 and core["wrong"] == 0 and core["devices"] == ["cpu"]
    assert nccl["name"] == "nccl-one-rank" and nccl["ok"] is None and "NCCL needs a GPU" in nccl["skipped"]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--device", "cpu", "--backend", "nccl", "--launcher", "env"], "NCCL moves CUDA tensors only"),
        (["--device", "cuda"], "the emulated ranks are CPU processes"),
    ],
)
def test_bench_device_refusals(args, said, capsys):
    from monta.cli import main

    assert main(["bench", "alltoall", "--sizes", "1M", *args]) == 2
    assert said in capsys.readouterr().err
