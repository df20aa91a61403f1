"""The statistics and CPU accounting behind every emulated number: paired ratios with bootstrap CIs,
overlap efficiency, the host-load windows and the CPU-bound verdict, the link probe's summary."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from monta.bench import hostload
from monta.bench.stats import bootstrap, median_ratio, overlap_efficiency, overlap_efficiency_vs_sum, rel_width
from monta.emulate.probe import summarize


def test_paired_ratio_ci_covers_the_true_ratio_and_narrows_with_samples():
    rng = np.random.default_rng(0)
    drift = 1 + 0.3 * rng.standard_normal(40).cumsum() / 40  # shared by both variants in an iteration
    num = 3.0 * drift * (1 + 0.01 * rng.standard_normal(40))
    den = 1.0 * drift * (1 + 0.01 * rng.standard_normal(40))
    point, lo, hi = bootstrap(median_ratio, [num, den])
    assert lo <= point <= hi and lo < 3.0 < hi and hi - lo < 0.06
    # Pairing is what makes it narrow: the same values unpaired (ratio of medians) swing with the drift.
    assert abs(np.median(num) / np.median(den) - 3.0) < 0.1
    short = bootstrap(median_ratio, [num[:6], den[:6]])
    assert rel_width(short) > rel_width((point, lo, hi))
    assert math.isnan(bootstrap(median_ratio, [num[:2], den[:2]])[1])  # < 3 iterations: no interval
    assert rel_width((1.0, float("nan"), float("nan"))) == math.inf
    with pytest.raises(ValueError, match="same length"):
        bootstrap(median_ratio, [num, den[:5]])


def test_overlap_efficiency_is_the_share_of_the_ideal_gain():
    a2a, ag = np.full(10, 100.0), np.full(10, 60.0)  # ideal: 160 / 100 = 1.6x over deepspeed
    ds = a2a + ag
    assert overlap_efficiency(ds, np.full(10, 100.0), a2a, ag) == pytest.approx(1.0)  # perfect overlap
    assert overlap_efficiency(ds, np.full(10, 160.0), a2a, ag) == pytest.approx(0.0)  # none
    assert overlap_efficiency(ds, np.full(10, 130.0), a2a, ag) == pytest.approx((160 / 130 - 1) / 0.6)
    point, lo, hi = bootstrap(overlap_efficiency, [ds, np.full(10, 115.0), a2a, ag])
    assert lo == pytest.approx(point) == pytest.approx(hi)  # no noise, no width


def test_a_perfect_overlap_reads_100_percent_whatever_deepspeed_overlapped_by_itself():
    # deepspeed runs the halves back to back yet measures 5% under their sum (it overlaps a little
    # by itself): the ideal is what a perfect overlap gains over deepspeed, so max(a2a, ag) reads 100%
    a2a, ag = np.full(10, 100.0), np.full(10, 60.0)
    ds = 0.95 * (a2a + ag)
    assert overlap_efficiency(ds, np.full(10, 100.0), a2a, ag) == pytest.approx(1.0)
    assert overlap_efficiency(ds, ds, a2a, ag) == pytest.approx(0.0)
    # the earlier ideal, (a2a + ag) / max, could not reach 100% here (and passed 100% when deepspeed was slower)
    assert overlap_efficiency_vs_sum(ds, np.full(10, 100.0), a2a, ag) == pytest.approx(0.52 / 0.6)
    assert overlap_efficiency_vs_sum(1.05 * (a2a + ag), np.full(10, 100.0), a2a, ag) > 1.0


def _samples(busy_shares, psi_shares, dt=0.02):
    out, busy, total, psi, t = [], 0.0, 0.0, 0.0, 0.0
    out.append(hostload.Sample(t, busy, total, psi))
    for b, p in zip(busy_shares, psi_shares):
        t += dt
        busy += 2 * dt * b
        total += 2 * dt
        psi += p * dt * 1e6
        out.append(hostload.Sample(t, busy, total, psi))
    return out


def test_host_load_windows_and_the_cpu_bound_verdict():
    load = hostload.HostLoad()
    load.samples = _samples([0.2] * 10 + [1.0] * 10, [0.0] * 10 + [0.5] * 10)
    quiet = load.window([(0.0, 0.2)])
    assert (
        quiet["busy"] == pytest.approx(0.2)
        and quiet["saturated"] == pytest.approx(0)
        and quiet["psi_some"] == pytest.approx(0)
    )
    busy = load.window([(0.2, 0.4)])
    assert busy["saturated"] == pytest.approx(1.0) and busy["psi_some"] == pytest.approx(0.5)
    both = load.window([(0.0, 0.1), (0.3, 0.4)])  # two spans, half quiet half busy
    assert both["busy"] == pytest.approx(0.6) and both["sampled_s"] == pytest.approx(0.2)
    assert load.window([(5.0, 6.0)])["busy"] is None
    # a span shorter than one sample interval still gets the interval's figure, weighted by its cover
    short = load.window([(0.301, 0.308)])  # holds no interval's midpoint (0.31)
    assert short["busy"] == pytest.approx(1.0) and short["sampled_s"] == pytest.approx(0.007)
    # The ranks' own wait decides; machine-wide figures decide only without it.
    assert hostload.is_cpu_bound({**busy, "rank_wait": 0.02}) is False
    assert hostload.is_cpu_bound({**quiet, "rank_wait": 0.3}) is True
    assert hostload.is_cpu_bound(busy) is True and hostload.is_cpu_bound(quiet) is False
    assert hostload.is_cpu_bound(None) is None
    assert hostload.verdict({**quiet, "rank_wait": 0.3}).startswith(
        "CPU-BOUND: ranks' main threads waited for a core 30.0%"
    )
    assert hostload.verdict({**quiet, "rank_wait": 0.01}).startswith("CPU: not bound")


def test_host_load_sees_a_busy_core_and_own_run_delay_is_read():
    load = hostload.HostLoad(interval_s=0.01).start()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.3:
        pass
    t1 = time.perf_counter()
    load.stop()
    w = load.window([(t0, t1)])
    assert w["busy"] >= 0.9 / hostload.cores() - 0.1 and w["sampled_s"] > 0.2
    assert hostload.own_run_delay_s() is not None and hostload.own_run_delay_s() >= 0


def test_probe_summary_per_link_and_level():
    raw = {
        "links": {
            "inter": {"1": [[30e6, 29e6], [30e6, 30e6]], "8": [[20e6, 30e6], [30e6, 30e6]]},
            "intra": {"4": [[100e6, 150e6], [125e6, 125e6]]},
        }
    }
    rows = {(r["link"], r["flows"]): r for r in summarize(raw, {"inter": 0.25, "intra": 2.0})}
    one = rows[("inter", 1)]
    assert one["n"] == 4 and one["p50_gbps"] == pytest.approx(0.24) and one["share_p50"] == pytest.approx(0.96)
    assert rows[("inter", 8)]["spread"] > 1.3 and rows[("inter", 8)]["min_gbps"] == pytest.approx(0.16)
    intra = rows[("intra", 4)]  # a node's loopback is one queue: both directions add up
    assert intra["n"] == 2 and intra["p50_gbps"] == pytest.approx(2.0) and intra["spread"] == pytest.approx(1.0)


def test_the_footers_pipeline_bound_is_that_of_monta_split():
    """The bench footer's bound is MoNTA's own split (half-size first chunk from 4 chunks on), read from a
    stored sweep: at its ag/a2a under 1 it is below the equal-chunk TP / (1 + r/k)."""
    import json
    from pathlib import Path

    from monta.bench.alltoall.table import summary_rows
    from monta.chunking import monta_split, pipeline_bound

    lines = (Path(__file__).resolve().parent.parent / "analysis/baselines/default-alltoall.jsonl").read_text()
    records = [json.loads(line) for line in lines.splitlines() if line.strip()]
    first_run = [r for r in records if r["run_id"] == records[0]["run_id"]]
    rows = summary_rows(first_run)
    assert rows
    below = []
    for row in rows:
        k, r, tp = row["best_chunks"], row["ag_over_a2a"], row["tp"]
        cap = row["size_bytes"] // (2 * 1024 * 4) // tp  # E = 2, M = 1024, float32 in the stored sweep
        assert row["pipeline_bound"] == pytest.approx(pipeline_bound(tp, r, k, cap))
        drain = monta_split(cap, k)[-1] / cap  # the last chunk's share: what nothing hides at r < 1
        assert r < 1 and row["pipeline_bound"] == pytest.approx(tp / (1 + r * drain))
        assert (row["pipeline_bound"] < tp / (1 + r / k)) == (drain > 1 / k)
        below.append(row["pipeline_bound"] < tp / (1 + r / k))
    assert any(below)  # 4-16 MiB with 8 chunks: the last chunk holds more than 1/8 of the slice
