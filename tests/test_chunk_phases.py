"""tools/chunk_phases.py on the emulator: per-rank stamps of MoNTA's chunk pipeline (the project's run_pass),
the AllToAll alone beside it, and the report built from them (docs/testbed.md, the chunk pipeline's drain)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from monta.emulate import Topology, launch, namespace_problem

PROBLEM = namespace_problem()
TOOL = Path(__file__).resolve().parents[1] / "tools" / "chunk_phases.py"


def _stamp(out: Path, args: list[str], nodes: int, gpus_per_node: int) -> dict:
    """The tool's ``rank`` mode on an emulated nodes x gpus_per_node cluster (0.5 / 2 Gbit/s); its JSON."""
    launch(
        [sys.executable, str(TOOL), "rank", *args[:3], str(out), *args[3:]],
        nodes,
        gpus_per_node,
        Topology(inter_gbps=0.5, intra_gbps=2.0),
        timeout_s=120,
        stdout=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())


def _report(out: Path) -> list[str]:
    """The tool's report of ``out`` at 2 Gbit/s, line by line."""
    return subprocess.run(
        [sys.executable, str(TOOL), "report", str(out), "2.0"], capture_output=True, text=True, check=True
    ).stdout.splitlines()


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_chunk_stamps_and_the_report_from_them(tmp_path):
    out = tmp_path / "chunks.json"
    got = _stamp(out, ["256K", "4", "1"], 2, 2)
    # 256 KiB of [2 experts, capacity, 1024 floats] rows: capacity 32, 16 slots per TP rank, MoNTA's split of 4
    assert got["meta"] == {
        "size": 256 << 10,
        "tp": 2,
        "nodes": 2,
        "chunks": 4,
        "split": [2, 5, 5, 4],
        "row_bytes": 8192,
        "gpus_per_node": 2,
    }
    rows = got["rows"]
    assert sorted((r["mode"], r["rank"]) for r in rows) == sorted((m, k) for m in ("monta", "a2a") for k in range(4))
    for r in rows:
        # the pass left one AllToAll per chunk, in order, before it ended; the AllToAll alone is not stamped
        assert len(r["leaves"]) == (4 if r["mode"] == "monta" else 0)
        assert r["t0"] < min(r["leaves"] + [r["end"]]) and r["leaves"] == sorted(r["leaves"])
        assert all(t <= r["end"] for t in r["leaves"])
    assert set(got["samples"]) == {"0", "2"}  # local rank 0 of each node sampled its counters
    lines = _report(out)
    assert lines[0] == "0.25 MiB per rank, 4 chunks cut [2, 5, 5, 4]"
    assert lines[1].startswith("iteration 1: monta ") and "the AllToAll alone" in lines[1]
    assert lines[1].count("(the slowest rank's own ") == 2
    # the bound's drain: 2 ranks x 1 peer x 4 slots x 8 KiB at 2 Gbit/s = 0.26 ms
    assert [line.split(":")[0] for line in lines[2:]] == ["  node 0", "  node 1"]
    assert all("the bound's drain 0.3 ms" in line and "of the last AllGather's 64 KiB" in line for line in lines[2:])


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_tp_smaller_than_the_node(tmp_path):
    # 2 x 4 at TP2: EP 4 (the DP degree, as the bench), 4 experts; each node's two TP pairs gather on its loopback
    out = tmp_path / "tp2.json"
    got = _stamp(out, ["512K", "2", "1", "2"], 2, 4)
    # 512 KiB of [4 experts, capacity, 1024 floats] rows: capacity 32, 16 slots per TP rank, split [8, 8]
    assert got["meta"] == {
        "size": 512 << 10,
        "tp": 2,
        "nodes": 2,
        "chunks": 2,
        "split": [8, 8],
        "row_bytes": 16384,
        "gpus_per_node": 4,
    }
    assert set(got["samples"]) == {"0", "4"} and all(len(r["leaves"]) in (0, 2) for r in got["rows"])
    lines = _report(out)
    # the node's last AllGathers: 4 ranks x 1 peer x 8 slots x 16 KiB = 512 KiB, 2.1 ms at 2 Gbit/s
    assert [line.split(":")[0] for line in lines[2:]] == ["  node 0", "  node 1"]
    assert all("the bound's drain 2.1 ms" in line and "of the last AllGather's 512 KiB" in line for line in lines[2:])


def test_the_tool_says_how_to_call_it(tmp_path):
    def run(*args, **env):
        clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
        return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, env={**clean, **env})

    cases = [
        ((), "usage: chunk_phases.py rank SIZE CHUNKS ITERS OUT.json"),
        (("rank", "4M", "8", "3", "x.json"), "rank mode needs RANK, WORLD_SIZE, LOCAL_WORLD_SIZE"),
        (("report", "/nonexistent/c.json", "2.0"), "c.json: no such file"),
    ]
    for args, said in cases:
        res = run(*args)
        assert res.returncode == 2 and said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    res = run("rank", "12Q", "8", "3", "x.json", **env)
    assert res.returncode == 2 and "SIZE '12Q'" in res.stderr
    res = run("rank", "4M", "0", "3", "x.json", **env)
    assert res.returncode == 2 and "CHUNKS '0': give a positive whole number" in res.stderr
    # a report of a file the rank mode did not write, or at a rate that is no number: one line each
    (tmp_path / "notes.txt").write_text("not json")
    (tmp_path / "other.json").write_text('{"a": 1}')
    for args, said in (
        (("report", str(tmp_path / "notes.txt"), "0.5"), "notes.txt: not a file the rank mode wrote"),
        (("report", str(tmp_path / "other.json"), "0.5"), "other.json: no meta, rows and samples in it"),
        (("report", str(tmp_path / "other.json"), "nan"), "LOOPBACK_GBPS 'nan': give a positive number"),
    ):
        res = run(*args)
        assert res.returncode == 2 and said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
