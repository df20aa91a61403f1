"""tools/gpu_host_ops.py, run on CPU: the JSON it writes (every op kind timed, the router sequence per op)
and its one-line usage errors. On a lent GPU it also times the sequence as one CUDA graph (docs/gpu.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "gpu_host_ops.py"


def test_host_time_per_op_on_cpu(tmp_path):
    out = tmp_path / "ops.json"
    res = subprocess.run(
        [sys.executable, str(TOOL), "--out", str(out), "--device", "cpu", "--iters", "20"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(out.read_text())
    assert got["device"] == "cpu" and got["gpu"] is None and got["iters"] == 20 and got["router_ops"] == 13
    assert set(got["us_per_op"]) >= {"add", "softmax", "topk", "scatter", "cumsum", "matmul"}
    assert all(us > 0 for us in got["us_per_op"].values()) and got["router_us_per_op_eager"] > 0
    ops = sorted(got["us_per_op"].values())
    assert ops[0] <= got["median_us_per_op"] <= ops[-1]
    assert "router_us_per_op_graph" not in got  # a CUDA graph only where a GPU is lent
    assert "host time per eager op on" in res.stdout and "a router's 13 ops" in res.stdout


def test_bad_flags_say_what_to_change(tmp_path):
    for args, said in (
        (["--out", str(tmp_path / "x.json"), "--iters", "0", "--device", "cpu"], "--iters 0"),
        (["--out", str(tmp_path / "x.json"), "--device", "tpu"], "give cuda or cpu"),
        (["--iters", "3"], "usage: --out FILE"),
        (["--out", str(tmp_path / "x.json"), "--bogus", "1"], "unknown --bogus 1"),
        (["--out", str(tmp_path / "x.json"), "--iters", "many"], "invalid int value"),
    ):
        res = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
