"""tools/a2a_phases.py on the emulator: per-rank phase timestamps of deepspeed's two calls, each half alone,
and the report built from them (docs/testbed.md, the early AllGather)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from monta.emulate import Topology, launch, namespace_problem

PROBLEM = namespace_problem()
TOOL = Path(__file__).resolve().parents[1] / "tools" / "a2a_phases.py"


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_phase_timestamps_and_the_report_from_them(tmp_path):
    out = tmp_path / "phases.json"
    launch(
        [sys.executable, str(TOOL), "rank", "256K", "1", str(out)],
        2,
        2,
        Topology(inter_gbps=0.5, intra_gbps=2.0),
        timeout_s=120,
        stdout=subprocess.DEVNULL,
    )
    got = json.loads(out.read_text())
    assert got["meta"] == {"size": 256 << 10, "tp": 2, "nodes": 2}
    rows = got["rows"]
    # one timed iteration: every rank, every mode; a phase's end after its start, the AllGather after the AllToAll
    assert sorted((r["mode"], r["rank"]) for r in rows) == sorted(
        (m, k) for m in ("composite", "a2a", "ag") for k in range(4)
    )
    for r in rows:
        assert (r["ta"] is None) == (r["mode"] == "ag") and (r["tg"] is None) == (r["mode"] == "a2a")
        assert r["t0"] < (r["ta"] or r["tg"]) and (r["mode"] != "composite" or r["ta"] < r["tg"])
    assert set(got["samples"]) == {"0", "2"}  # local rank 0 of each node sampled its counters
    lines = subprocess.run(
        [sys.executable, str(TOOL), "report", str(out), "2.0"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert lines[0].startswith("iteration 1: composite ") and "AllToAll alone" in lines[0]
    assert lines[1].startswith("  left the AllToAll (ms, rank:time): ")
    assert [line.split(":")[0] for line in lines[2:]] == ["  node 0", "  node 1"]


def test_the_tool_says_how_to_call_it(tmp_path):
    def run(*args, **env):
        clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
        return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, env={**clean, **env})

    cases = [
        ((), "usage: a2a_phases.py rank SIZE ITERS OUT.json"),
        (("rank", "16M", "3", "x.json"), "rank mode needs RANK, WORLD_SIZE, LOCAL_WORLD_SIZE"),
        (("report", str(tmp_path / "none.json"), "2.0"), "none.json: no such file"),
    ]
    for args, said in cases:
        res = run(*args)
        assert res.returncode == 2 and said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    (tmp_path / "p.json").write_text("{}")
    res = run("report", str(tmp_path / "p.json"), "fast")
    assert res.returncode == 2 and "LOOPBACK_GBPS 'fast': give a positive number" in res.stderr
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    res = run("rank", "12Q", "3", "x.json", **env)
    assert res.returncode == 2 and "SIZE '12Q': size '12Q': expected a byte count" in res.stderr
    res = run("rank", "16M", "-1", "x.json", **env)
    assert res.returncode == 2 and "ITERS '-1': give a positive whole number" in res.stderr
