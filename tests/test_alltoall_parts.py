"""The parts of ``monta bench alltoall`` that need no world: the config that crosses the process
boundary, the adaptive stop rule, the test aids and the shared percentile. Single-process."""

from __future__ import annotations

import argparse
import json

import pytest

from monta.bench.adaptive import CI_MIN_ITERS, StopRule, key_ratios
from monta.bench.alltoall.config import AlltoallConfig
from monta.testaids import Fault, Slowdown


def _config(*flags: str) -> AlltoallConfig:
    from monta.bench.alltoall import build_config
    from monta.bench.cli import register

    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    return build_config(p.parse_args(["bench", "alltoall", "--sizes", "64K", "--hidden", "256", *flags]))


def test_the_config_round_trips_as_the_plain_json_the_records_carry():
    cfg = _config("--adaptive", "--inject-slowdown", "monta:0.1")
    back = AlltoallConfig.from_json(cfg.to_json())
    assert back == cfg and isinstance(back.sizes, tuple)
    d = json.loads(cfg.to_json())
    assert d == cfg.to_dict() and isinstance(d["sizes"], list) and list(d)[:3] == ["nodes", "gpus_per_node", "tp"]
    assert d["inject_slowdown"] == {"variant": "monta", "fraction": 0.1} and d["adaptive"] is True
    with pytest.raises(AttributeError):
        cfg.iters = 3  # frozen


ROWS = [("legacy", 1), ("deepspeed", 1), ("monta", 2), ("monta", 4), ("a2a", 1), ("ag", 1)]


def test_the_rule_watches_legacy_and_deepspeed_over_every_monta_row():
    assert key_ratios(ROWS) == [(0, 2), (1, 2), (0, 3), (1, 3)]


def test_without_adaptive_exactly_iters():
    rule = StopRule.from_config(_config("--iters", "3"), ROWS)
    times = [[1.0, 1.0, 1.0] for _ in ROWS]
    assert rule.decide(times, 2, 0.0, 0) is None
    assert rule.decide(times, 3, 0.0, 0) == "3 iterations as asked"


def test_adaptive_stops_on_a_narrow_ci_only_from_the_minimum_on_and_at_the_cap_or_budget():
    rule = StopRule.from_config(_config("--adaptive", "--iters", "3", "--max-iters", "12", "--budget-s", "10"), ROWS)
    steady = [[2.0 if v != "monta" else 1.0] * 12 for v, _ in ROWS]
    assert rule.decide(steady, 3, 1.0, 0) is None  # narrow, but fewer than CI_MIN_ITERS iterations
    assert rule.decide(steady, CI_MIN_ITERS, 1.0, 0) == "every paired ratio's 95% CI within 4%"
    assert rule.decide(steady, 12, 1.0, 0).startswith("max 12 iterations")
    noisy = [[(1.0 + (i % 2)) * (2.0 if v != "monta" else 1.0 + 0.5 * (i % 3)) for i in range(12)] for v, _ in ROWS]
    assert rule.decide(noisy, 11, 1.0, 0) is None  # wide and within the budget: go on
    note = rule.decide(noisy, 11, 9.5, 0)
    assert note.startswith("time budget 10 s spent, widest CI") and "above the 4% target" in note
    assert "/monta" in note


def test_the_slowdown_is_measured_outside_the_call_and_only_for_its_variant():
    s = Slowdown.from_dict({"variant": "monta", "fraction": 0.5})
    assert s.applies("monta") and not s.applies("legacy") and not Slowdown.from_dict(None).applies("monta")
    with pytest.raises(ValueError, match="^Slowdown: unknown setting share"):
        Slowdown.from_dict({"variant": "monta", "share": 0.5})
    with pytest.raises(ValueError, match="^Slowdown: give both variant and fraction, got variant$"):
        Slowdown.from_dict({"variant": "monta"})
    took = s.delay([0.02, 0.04, 0.06], own=1.0)  # half the median so far, not of this call
    assert 0.02 <= took < 0.2


def test_the_fault_corrupts_one_element_of_the_first_chunk_on_its_rank_only():
    import torch

    f = Fault(rank=1)
    out = torch.zeros(2, 1, 3, 4)
    f.corrupt(out, 0, 1)
    assert not out.any()  # not enabled
    f.enabled = True
    f.corrupt(out, 1, 1)
    f.corrupt(out, 0, 0)
    assert not out.any()  # another chunk, another rank
    f.corrupt(out, 0, 1)
    assert out.sum() == 1 and out[0, 0, 0, 0] == 1


def test_one_percentile_rule_linear_interpolation():
    from monta.bench import stats
    from monta.emulate import probe
    from monta.percentiles import percentile

    assert probe.percentile is stats.percentile is percentile
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 10) == pytest.approx(1.5)
