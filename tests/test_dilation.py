"""Time dilation: which sizes of a sweep rerun on a slower clock, the factor sequence and its stops
(monta.bench.dilation, on synthetic records), the slower topology derived from the same cluster, one
emulated run at ``--dilation 2``, and the model following the clock (``LinkProfile.rescaled``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monta.bench import dilation
from monta.emulate.topology import Topology
from monta.hardware.profile import LinkProfile
from monta.parallel import ParallelLayout
from monta.perfmodel.network.exchange import exchange_time
from monta.perfmodel.reports.accuracy import clock_factor, evaluate
from monta.results import make_record, read_records

MiB = 2**20


def _rec(size: int, variant: str, wait: float | None, samples=(100_000.0,), **params) -> dict:
    bound = None if wait is None else wait > 0.15
    return make_record(
        kind="alltoall",
        source="emulated",
        experiment="t",
        env={},
        params={"size_bytes": size, "variant": variant, "chunks": 1, "nodes": 2, "gpus_per_node": 4, "tp": 4} | params,
        metrics={
            "time_us": samples[0],
            "samples_us": list(samples),
            "host_cpu": {"rank_wait": wait},
            "cpu_bound": bound,
        },
    )


def _sweep(waits: dict[int, tuple[float, float]], samples=(100_000.0,)) -> list[dict]:
    """Two variants per size with the given rank waits."""
    return [_rec(s, v, w, samples) for s, pair in waits.items() for v, w in zip(("legacy", "monta"), pair)]


class Reruns:
    """A stand-in for the emulated launch: each (size, factor) rerun returns records with the rank wait
    ``waits[factor]`` and 1 s x factor of timed calls per variant (the rule under test is what is asked
    for, not how a launch runs)."""

    def __init__(self, waits: dict[float, float], wall_s: float = 1.0):
        self.waits, self.wall_s, self.calls = waits, wall_s, []

    def __call__(self, size: int, factor: float):
        self.calls.append((size, factor))
        return _sweep({size: (0.05, self.waits[factor])}, samples=(1e6 * factor,)), self.wall_s


def test_only_cpu_bound_sizes_rerun_and_their_records_replace_the_first_try():
    first = _sweep({MiB: (0.05, 0.10), 2 * MiB: (0.05, 0.22), 4 * MiB: (0.03, 0.04)})
    assert dilation.bound_sizes(first) == [2 * MiB]  # any variant of a size bound: the size reruns
    lines, rerun = [], Reruns({2.0: 0.08})
    out = dilation.adapt(first, rerun, budget_s=0, say=lines.append)
    assert rerun.calls == [(2 * MiB, 2.0)]
    assert [(r["params"]["size_bytes"], r["params"]["dilation"]) for r in out] == [
        (MiB, 1.0),
        (MiB, 1.0),
        (2 * MiB, 2.0),
        (2 * MiB, 2.0),
    ] + [(4 * MiB, 1.0)] * 2
    by = {r["params"]["size_bytes"]: r["metrics"] for r in out if r["params"]["variant"] == "monta"}
    assert by[2 * MiB]["host_cpu"]["rank_wait"] == 0.08 and by[2 * MiB]["cpu_bound"] is False  # as measured
    assert by[2 * MiB]["dilation_reason"] == "rank wait 22% > 15% at x1; rank wait 8% <= 15% at x2"
    assert by[MiB]["dilation_reason"] == "rank wait 10% <= 15% at x1"
    assert len(lines) == 1 and "rerunning this size alone at x2" in lines[0]
    assert all("dilation" not in r["params"] for r in first)  # the input is left as it was


def test_factor_doubles_per_retry_up_to_the_limit_and_a_last_bound_try_stays_flagged():
    first = _sweep({4 * MiB: (0.30, 0.25)})
    lines, rerun = [], Reruns({2.0: 0.20, 4.0: 0.18})
    out = dilation.adapt(first, rerun, budget_s=0, say=lines.append)
    assert rerun.calls == [(4 * MiB, 2.0), (4 * MiB, 4.0)]  # MAX_RETRIES = 2: x4 at most
    assert {r["params"]["dilation"] for r in out} == {4.0}
    assert any(r["metrics"]["cpu_bound"] for r in out)  # kept flagged
    reason = out[0]["metrics"]["dilation_reason"]
    assert reason.startswith("rank wait 30% > 15% at x1; rank wait 20% > 15% at x2; rank wait 18% > 15% at x4")
    assert "still CPU-bound at x4: retry limit" in reason
    assert len(lines) == 3 and lines[-1].endswith("kept flagged")


def test_the_budget_stops_a_retry_that_would_pass_it():
    # 2 variants x 1 s of timed calls at x1: a retry at x2 costs at least 4 s (fits 10 s); it took 5 s
    # and timed 4 s, so one at x4 (at least 8 s more) would pass the budget.
    first = [_rec(MiB, v, 0.3, samples=(1e6,)) for v in ("legacy", "monta")]
    assert dilation.timed_s(first) == pytest.approx(2.0) and dilation.retry_s(first) == pytest.approx(4.0)
    # 40 iterations of which the run asked for 5 at least: a retry costs 5 of them, twice as slow
    many = [_rec(MiB, v, 0.3, samples=(1e5,) * 40) for v in ("legacy", "monta")]
    for r in many:
        r["config"] = {"iters": 5}
    assert dilation.retry_s(many) == pytest.approx(2 * 2 * 0.1 * 5)
    rerun = Reruns({2.0: 0.3, 4.0: 0.1}, wall_s=5.0)
    out = dilation.adapt(first, rerun, budget_s=10.0, say=lambda _: None)
    assert rerun.calls == [(MiB, 2.0)]
    assert out[0]["params"]["dilation"] == 2.0 and "budget (5 s of 10 s spent" in out[0]["metrics"]["dilation_reason"]
    # no time budget (0): the retry limit alone
    assert dilation.next_factor(2.0, 1, spent_s=1e9, retry_cost_s=1e9, budget_s=0) == 4.0
    assert dilation.next_factor(4.0, 2, spent_s=0, retry_cost_s=0, budget_s=0) is None
    assert dilation.next_factor(1.0, 0, spent_s=0, retry_cost_s=12.0, budget_s=10.0) is None


def test_hand_set_links_are_not_dilated_and_the_records_say_why():
    first = _sweep({MiB: (0.3, 0.3)})
    out = dilation.adapt(first, Reruns({}), budget_s=0, say=lambda _: None, why_not="hand-set links")
    assert {r["params"]["dilation"] for r in out} == {1.0}
    assert out[0]["metrics"]["dilation_reason"] == "rank wait 30% > 15% at x1; not dilated: hand-set links"


def test_parse_and_the_slower_topology_come_from_the_same_cluster_file():
    assert dilation.parse("auto") is None and dilation.parse("2") == 2.0 and dilation.parse("1") == 1.0
    for bad in ("0.5", "x", "0", "nan", "-2"):
        with pytest.raises(ValueError, match="--dilation"):
            dilation.parse(bad)
    base = Topology.preset("a800-4nic")
    slow = base.dilated(2)
    assert slow == Topology.preset("a800-4nic@0.0625")  # derived, not a hand-set rate
    assert slow.inter_gbps == base.inter_gbps / 2 and slow.ratio == pytest.approx(base.ratio, rel=1e-4)
    assert base.dilated(1) is base
    with pytest.raises(ValueError, match="no cluster file"):
        Topology(name="custom", inter_gbps=1.0, intra_gbps=8.0).dilated(2)


# -- the model follows the clock -------------------------------------------------------------------
def _profile() -> LinkProfile:
    """A profile as `monta emulate calibrate` writes one at 1 / 8 Gbit/s (2 x 4), with all-ranks curves."""
    return LinkProfile.from_dict(
        {
            "schema": "monta.linkprofile/1",
            "name": "t",
            "source": "emulated",
            "topology": {
                "nodes": 2,
                "gpus_per_node": 4,
                "inter_gbps": 1.0,
                "intra_gbps": 8.0,
                "intra_group": [0, 1, 2, 3],
                "inter_group": [0, 4],
            },
            "links": {
                "intra": {"bandwidth_GBps": 1.0, "latency_us": 60.0, "efficiency": [[65536, 0.7], [MiB, 1.0]]},
                "inter": {"bandwidth_GBps": 0.12, "latency_us": 120.0, "efficiency": [[65536, 0.8], [MiB, 1.0]]},
            },
            "collectives": {
                "alltoall": {"inter_all": [[MiB, 40000.0], [4 * MiB, 150000.0]]},
                "allgather": {"intra_all": [[MiB, 9000.0], [4 * MiB, 30000.0]]},
            },
        }
    )


def test_a_rescaled_profile_divides_every_bandwidth_keeps_latency_and_reads_curves_at_equal_time():
    prof = _profile()
    base, slow = prof.cluster(2, 4), prof.rescaled(2).cluster(2, 4)
    for a, b in [(base.intra, slow.intra), (base.inter, slow.inter)] + [
        (x, y) for (_, x), (_, y) in zip(base.collective_links, slow.collective_links)
    ]:
        assert b.bandwidth_GBps == pytest.approx(a.bandwidth_GBps / 2)
        assert b.latency_us == a.latency_us
        # a curve's point moves to half the size: half the bytes take as long on the slower link, and
        # lose the same share to the host's time per message
        assert b.efficiency == tuple((s / 2, e) for s, e in a.efficiency)
        assert b.eff(MiB) == pytest.approx(a.eff(2 * MiB))
    assert len(slow.collective_links) == 2
    assert prof.rescaled(2).extra["topology"]["inter_gbps"] == 0.5
    # twice x2 is x4; a saved rescaled profile reads back the same
    assert prof.rescaled(2).rescaled(2).cluster(2, 4) == prof.rescaled(4).cluster(2, 4)
    assert LinkProfile.from_dict(prof.rescaled(2).to_dict()).cluster(2, 4) == slow
    with pytest.raises(ValueError, match="positive"):
        prof.rescaled(0)


@pytest.mark.parametrize("nodes,gpn,tp", [(2, 4, 4), (2, 8, 8)])
def test_rescaled_predictions_scale_with_the_clock(nodes, gpn, tp):
    prof = _profile()
    layout = ParallelLayout(nodes, gpn, tp=tp, ep=nodes * gpn // tp)
    for variant, k in (("legacy", 1), ("deepspeed", 1), ("monta", 4)):
        t1 = exchange_time(variant, 16 * MiB, layout, prof.cluster(nodes, gpn), k).total_us
        t2 = exchange_time(variant, 16 * MiB, layout, prof.rescaled(2).cluster(nodes, gpn), k).total_us
        # bandwidth-bound at 16 MiB: twice the time, less the latencies that do not stretch
        assert 1.9 * t1 < t2 <= 2 * t1, (variant, t1, t2)
    tiny = [exchange_time("legacy", 1024, layout, prof.rescaled(f).cluster(nodes, gpn), 1).total_us for f in (1, 2)]
    assert tiny[1] < 1.5 * tiny[0]  # a latency-bound message hardly stretches


def test_accuracy_prices_a_record_at_the_rate_it_ran_and_leaves_out_another_ratio():
    prof = _profile()
    half = prof.rescaled(2)
    layout = ParallelLayout(2, 8, tp=8, ep=2)
    recs = []
    for gbps, intra, p in ((0.5, 4.0, half), (0.5, 8.0, None)):  # the second: another intra:inter ratio
        t = exchange_time("legacy", 4 * MiB, layout, (p or prof).cluster(2, 8), 1).total_us
        recs.append(
            make_record(
                kind="alltoall",
                source="emulated",
                experiment="t",
                env={},
                params={"size_bytes": 4 * MiB, "variant": "legacy", "chunks": 1, "nodes": 2, "gpus_per_node": 8}
                | {"tp": 8, "inter_gbps": gbps, "intra_gbps": intra},
                metrics={"time_us": t},
            )
        )
    assert clock_factor(recs[0], prof) == 2.0 and clock_factor(recs[1], prof) is None
    points, _ = evaluate(recs, prof)
    assert len(points) == 1 and points[0].clock_factor == 2.0 and points[0].error == pytest.approx(0.0, abs=1e-12)


# -- one emulated run on the slower clock ----------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_at_dilation_2_runs_at_half_the_rates_and_says_so(tmp_path):
    out = tmp_path / "d2.jsonl"
    cmd = [sys.executable, "-m", "monta.cli", "bench", "alltoall", "--nodes", "2", "--gpus-per-node", "2"]
    cmd += ["--sizes", "64K", "--hidden", "256", "--chunks", "2", "--iters", "2", "--warmup", "0", "--no-components"]
    cmd += ["--topology", "a800-4nic", "--dilation", "2", "--no-wandb", "--allow-unshaped", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "network a800-4nic@0.0625: inter 0.0625 Gbit/s" in proc.stdout.splitlines()[0], proc.stdout[:500]
    recs = read_records(out)
    assert {r["params"]["variant"] for r in recs} == {"legacy", "deepspeed", "monta"}
    slow = Topology.preset("a800-4nic").dilated(2)
    for r in recs:
        assert r["params"]["dilation"] == 2.0 and r["metrics"]["dilation_reason"] == "fixed by --dilation 2"
        assert (r["params"]["inter_gbps"], r["params"]["intra_gbps"]) == (slow.inter_gbps, slow.intra_gbps)
        assert r["config"]["out"] == str(out) and r["config"]["topology"]["name"] == "a800-4nic@0.0625"
