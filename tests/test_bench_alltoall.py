"""``monta bench alltoall`` end to end on a small emulated cluster: the table, the records, the
``--check`` that catches a corrupted exchange (test-only fault injection), and flag validation."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monta.results import read_records

pytestmark = pytest.mark.slow


def bench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "monta.cli",
        "bench",
        "alltoall",
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
        "1",
        "--warmup",
        "0",
        "--no-wandb",
        "--allow-unshaped",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(600)
def test_check_counts_zero_wrong_and_catches_an_injected_fault(tmp_path):
    # toy-exchange: the test plugin's exchange (tests/plugins/monta_toy_variant), checked like the core's
    good = bench("--check", "--exchanges", "legacy,deepspeed,monta,toy-exchange", "--out", str(tmp_path / "good.jsonl"))
    assert good.returncode == 0, good.stderr[-3000:]
    assert "algbw(GB/s)" in good.stdout and "Out of bounds values : 0 OK" in good.stdout
    recs = read_records(tmp_path / "good.jsonl")
    assert {r["params"]["variant"] for r in recs} == {"legacy", "deepspeed", "monta", "toy-exchange", "a2a", "ag"}
    assert all(r["metrics"]["wrong"] == 0 and r["metrics"]["checked"] for r in recs)
    by = {r["params"]["variant"]: r["metrics"] for r in recs}
    assert by["legacy"]["inter_bytes"] == 2 * by["monta"]["inter_bytes"]  # TP = 2
    assert by["toy-exchange"]["inter_bytes"] == by["deepspeed"]["inter_bytes"]  # the toy drops, then AllToAlls
    assert by["toy-exchange"]["speedup_vs_legacy"] > 0
    assert any(line.split()[:3] == ["64", "KiB", "toy-exchange"] for line in good.stdout.splitlines()), good.stdout
    # the overlap efficiency is recomputed from the records' own paired samples: ideal = deepspeed / max(halves)
    import numpy as np

    from monta.bench.stats import overlap_efficiency

    t = {v: np.asarray(m["samples_us"]) for v, m in by.items()}
    m = by["monta"]
    assert m["overlap_efficiency"] == pytest.approx(overlap_efficiency(t["deepspeed"], t["monta"], t["a2a"], t["ag"]))
    assert m["ideal_vs_deepspeed"] == pytest.approx(np.median(t["deepspeed"] / np.maximum(t["a2a"], t["ag"])))
    assert m["deepspeed_vs_halves"] == pytest.approx(np.median(t["deepspeed"] / (t["a2a"] + t["ag"])))
    assert "ideal = t_deepspeed / max(t_a2a, t_ag)" in good.stdout

    # the chunk floor in the same run: at 64 KiB two chunks of 32 KiB are under --min-chunk 64K, at 128 KiB not
    bad = bench(
        "--check", "--inject-fault", "--sizes", "64K,128K", "--chunks", "1,2", "--min-chunk", "64K",
        "--out", str(tmp_path / "bad.jsonl"),
    )  # fmt: skip
    assert bad.returncode == 0, bad.stderr[-3000:]
    recs = read_records(tmp_path / "bad.jsonl")
    rows = {(r["params"]["size_bytes"], r["params"]["variant"], r["params"]["chunks"]) for r in recs}
    assert (65536, "monta", 2) not in rows and {(65536, "monta", 1), (131072, "monta", 2)} <= rows
    assert all(r["metrics"]["not_run"]["rows"] == ["monta2"] for r in recs if r["params"]["size_bytes"] == 65536)
    assert not any("not_run" in r["metrics"] for r in recs if r["params"]["size_bytes"] == 131072)
    assert "# NOT RUN (a chunk under --min-chunk 64 KiB" in bad.stdout and "64 KiB: monta2" in bad.stdout
    assert all(r["config"]["min_chunk"] == 65536 for r in recs)
    wrong = {(r["params"]["variant"], r["params"]["chunks"]): r["metrics"]["wrong"] for r in recs}
    # rank 0 corrupts one element of its first chunk in every exchange pass it places
    assert wrong[("legacy", 1)] > 0 and wrong[("deepspeed", 1)] > 0 and wrong[("monta", 2)] > 0
    assert "Out of bounds values : 0 OK" not in bad.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (("--chunks", "0"), "--chunks 0: expected 1 to 64 integers, each from 1 to 4096"),
        (("--chunks", "64"), "--chunks 64: 64 chunks exceed the capacity slice 16"),
        (
            ("--exchanges", "legacy,tutel"),
            "--exchanges legacy,tutel: unknown 'tutel'; choose from legacy, deepspeed, monta, 2dh, allgather, "
            "node-dedup, toy-exchange",
        ),
        (
            ("--tp", "3"),
            "--tp 3: must be an integer from 1 to gpus_per_node=2 (tensor parallelism stays inside a node)",
        ),
        (("--sizes", "1000"), "is not a whole [E=2, C, M=256]"),
        (("--adaptive", "--max-iters", "0"), "--max-iters 0 is below --iters 1"),
        (
            ("--max-iters", "8", "--budget-s", "9"),
            "--max-iters, --budget-s only apply with --adaptive; without it, --iters "
            "is the exact number of timed iterations per size (here 1)",
        ),
        (("--target-ci", "-1"), "--target-ci -1.0: must be a finite number at least 0 and at most 10"),
        (("--inject-slowdown", "monta"), "--inject-slowdown monta: use VARIANT:FRACTION"),
        (("--min-chunk", "1X"), "--min-chunk 1X: give a byte count such as 512K or 1M (0: run every chunk count)"),
        (("--inject-slowdown", "tutel:0.1"), "VARIANT one of legacy, deepspeed, monta"),
    ],
)
def test_bad_flags_fail_fast_with_one_line(args, message):
    proc = bench(*args, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.timeout(600)
def test_paired_ratios_adaptive_iterations_and_an_injected_slowdown(tmp_path):
    """With --adaptive, iterations go on until every paired ratio's CI is within the target (or the
    cap); without it, --iters N is exactly N. The records carry paired speedups with CIs, host CPU
    figures and the testbed's tuning; --inject-slowdown slows exactly the named variant by about the
    asked fraction and marks it."""
    # one clock for both runs (their times are compared): --dilation auto may rerun a CPU-bound size slower
    common = ("--inter-gbps", "0.5", "--sizes", "1M", "--no-components", "--dilation", "1")
    plain = bench(
        *common,
        "--adaptive",
        "--iters",
        "4",
        "--max-iters",
        "12",
        "--target-ci",
        "0.5",
        "--out",
        str(tmp_path / "a.jsonl"),
        timeout=400,
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "vs deepspeed" in plain.stdout and "CPU" in plain.stdout and "TEST AID" not in plain.stdout
    recs = read_records(tmp_path / "a.jsonl")
    by = {r["params"]["variant"]: r["metrics"] for r in recs}
    n = by["monta"]["iters"]
    assert 4 <= n <= 12 and all(m["iters"] == n and len(m["samples_us"]) == n for m in by.values())
    # a 50% target is usually met from the first iterations, but the CI may end a size only from 10 on
    # (on a loaded machine the CI may stay wider until the cap: then the cap is what stopped it)
    stop = by["monta"]["stop"]
    assert n >= 10 and ("CI within 50%" in stop or (n == 12 and "max 12 iterations" in stop)), stop
    lo, hi = by["monta"]["speedup_vs_deepspeed_ci"]
    assert lo <= by["monta"]["speedup_vs_deepspeed"] <= hi and by["legacy"]["speedup_vs_legacy"] == 1.0
    for m in by.values():
        assert m["host_cpu"]["busy"] is not None and 0 <= m["host_cpu"]["busy"] <= 1
        assert m["cpu_bound"] in (True, False) and "injected_slowdown" not in m
    # the emulated ranks share one kernel's clock: each call also from the first rank's start to the last one's
    # end, never shorter than the slowest rank's own time in the same iteration
    for m in by.values():
        assert len(m["span_samples_us"]) == n
        assert all(s >= t for s, t in zip(m["span_samples_us"], m["samples_us"], strict=True))
    lo, hi = by["monta"]["span_speedup_vs_legacy_ci"]
    assert lo <= by["monta"]["span_speedup_vs_legacy"] <= hi and "span_speedup_vs_legacy" not in by["legacy"]
    assert "from the first rank's start to the last one's end (one host clock): vs legacy" in plain.stdout
    env = recs[0]["env"]
    assert env["transport"] == "duplex" and env["net_tuning"]["tcp_cc"] == "reno"
    assert env["net_tuning"]["quickack"] is True
    assert by["legacy"]["link_delivery"]["link"] == "inter" and by["legacy"]["link_delivery"]["share"] > 0.5

    slow = bench(
        *common, "--iters", "4", "--inject-slowdown", "deepspeed:0.5", "--out", str(tmp_path / "b.jsonl"), timeout=400
    )
    assert slow.returncode == 0, slow.stderr[-3000:]
    assert "TEST AID" in slow.stdout
    by2 = {r["params"]["variant"]: r["metrics"] for r in read_records(tmp_path / "b.jsonl")}
    # plain --iters 4: exactly 4 timed iterations (the adaptive run above went on to 10 or more)
    assert all(m["iters"] == 4 and len(m["samples_us"]) == 4 for m in by2.values())
    assert all(m["stop"] == "4 iterations as asked" for m in by2.values())
    assert "iterations: exactly --iters" in slow.stdout and "adaptive=False" in slow.stdout
    assert by2["deepspeed"]["injected_slowdown"] == 0.5 and "injected_slowdown" not in by2["monta"]
    # its times before the delay come with it: every delayed iteration is 1.5x its own clean median so far
    clean = by2["deepspeed"]["samples_clean_us"]
    assert len(clean) == len(by2["deepspeed"]["samples_us"]) and "samples_clean_us" not in by2["monta"]
    assert by2["deepspeed"]["time_us"] > 1.3 * by2["deepspeed"]["time_clean_us"]
    # asked: 1.5x. Against the other run, relative to legacy in each: a drift of a whole run (this machine
    # moves a few % between runs) cancels, so the check reads the injection, not the machine
    rel = lambda b: b["deepspeed"]["time_us"] / b["legacy"]["time_us"]  # noqa: E731
    assert rel(by2) > 1.3 * rel(by)
    assert by2["legacy"]["time_us"] < 1.2 * by["legacy"]["time_us"]  # the others are not slowed
