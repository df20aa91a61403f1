"""The calibration's estimators (``published_steps_calibration``): the shrinkage weight, the nested
leave-one-source-out choice that never sees the held-out source's rows, and ``--step-calibration``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from monta.cli import main
from monta.perfmodel.reports import published_steps as PS
from monta.perfmodel.reports import published_steps_calibration as PC

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "published" / "steps.csv"


def _pool(log_ratios_by_source: dict[str, list[float]]) -> dict[str, list[tuple[float, float, float]]]:
    """Points (measured, compute, rest) whose measured / blind step time is exp(each log ratio)."""
    return {s: [(math.exp(x) * 3.0, 2.0, 1.0) for x in xs] for s, xs in log_ratios_by_source.items()}


def test_the_shrinkage_weight_follows_the_between_source_spread():
    """Sources that agree on a 20% slowdown keep (nearly) all of it; sources spread far wider than their median
    effect keep none; one source gives no spread and no factor; the median is one vote per source."""
    agree = _pool({"a": [0.19, 0.21], "b": [0.18], "c": [0.2], "d": [0.22]})
    m, w = PC.shrink_weight(agree)
    assert m == pytest.approx(0.2) and w > 0.98
    assert PC.ESTIMATORS["source-median-shrunk"](agree)[0] == pytest.approx(math.exp(w * m))
    spread = _pool({"a": [-0.5], "b": [0.05], "c": [0.6], "d": [0.1]})
    m, w = PC.shrink_weight(spread)
    assert m == pytest.approx(0.075) and w == 0.0
    assert PC.ESTIMATORS["source-median-shrunk"](spread) == (1.0, 1.0)
    assert PC.shrink_weight(_pool({"a": [0.3, 0.3, 0.3]}))[1] == 0.0
    # a source with many rows: the pooled median follows it, the median of sources does not
    heavy = _pool({"a": [0.5] * 9, "b": [0.0], "c": [0.05]})
    assert PC.ESTIMATORS["pooled-median"](heavy)[0] == pytest.approx(math.exp(0.5))
    assert PC.ESTIMATORS["source-median"](heavy)[0] == pytest.approx(math.exp(0.05))


def test_the_two_factor_shrunk_keeps_the_fit_where_the_sources_agree():
    a, g = 1.4, 0.8
    pts = [(a * c + g * r, c, r) for c, r in ((5e6, 1e6), (2e6, 3e6), (9e6, 0.5e6), (1e6, 1e6), (4e6, 2e6))]
    pool = {"x": pts[:2], "y": pts[2:3], "z": pts[3:]}
    fa, fg = PC.ESTIMATORS["pooled-lad-2"](pool)
    assert fa == pytest.approx(a, rel=1e-6) and fg == pytest.approx(g, rel=1e-6)
    _, w = PC.shrink_weight(pool)
    sa, sg = PC.ESTIMATORS["pooled-lad-2-shrunk"](pool)
    assert sa == pytest.approx(a**w) and sg == pytest.approx(g**w)


@pytest.fixture(scope="module")
def blind_recs():
    return [PS.blind(r) for r in PS.read_step_rows(DATA)]


def test_the_nested_choice_never_sees_the_held_out_source(blind_recs):
    """Tripling every measured figure of one source moves neither the estimator chosen for it nor its factors
    (its rows enter no pool and no inner score of its own choice), but it does move another source's inner
    scores (its rows are in theirs)."""
    source = "mcore-gb200-guide"
    recs = [dict(r) for r in blind_recs]
    pools = PC._Pools(recs)
    name, inner = PC.choose(pools, source)
    assert name in PC.ESTIMATORS and set(inner) == set(PC.ESTIMATORS)
    moved = [dict(r, measured=r["measured"] * 3) if r["source"] == source else dict(r) for r in blind_recs]
    moved_pools = PC._Pools(moved)
    assert PC.choose(moved_pools, source) == (name, inner)
    other = "bridge-perf"
    assert PC.choose(moved_pools, other)[1] != PC.choose(pools, other)[1]
    PC.calibrate(recs, "nested")
    PC.calibrate(moved, "nested")
    for r, m in zip(recs, moved):
        if r["source"] == source and r.get("calibration"):
            assert m["calibration"]["estimator"] == r["calibration"]["estimator"]
            assert m["calibration"]["compute_factor"] == r["calibration"]["compute_factor"]
            assert m["calibration"]["chosen_by"] == "nested leave-one-source-out"


def test_the_none_estimator_is_the_blind_step_and_a_bad_name_is_refused(blind_recs):
    recs = [dict(r) for r in blind_recs]
    PC.calibrate(recs, "none")
    priced = [r for r in recs if r.get("predicted_calibrated") is not None]
    assert priced and all(r["predicted_calibrated"] == pytest.approx(r["predicted_blind"]) for r in priced)
    with pytest.raises(ValueError, match="not 'nested' or one of"):
        PC.calibrate(recs, "ols")


def test_step_calibration_flag(tmp_path, capsys):
    """The default records name the two-factor fit; ``nested`` names each source's choice; the flag on a
    collectives table or with an unknown name is a usage error."""
    out = tmp_path / "nested.jsonl"
    assert main(["predict", "published", "--data", str(DATA), "--step-calibration", "nested", "--out", str(out)]) == 0
    cal = [json.loads(x).get("calibration") for x in out.read_text().splitlines()]
    cal = [c for c in cal if c]
    assert cal and all(c["chosen_by"] == "nested leave-one-source-out" and c["inner_errors"] for c in cal)
    assert len({c["estimator"] for c in cal}) > 1  # the choice differs between held-out sources
    coll = ROOT / "data" / "published" / "collectives.csv"
    assert main(["predict", "published", "--data", str(coll), "--step-calibration", "none"]) == 2
    assert "is not a step table" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["predict", "published", "--data", str(DATA), "--step-calibration", "ols"])
    assert e.value.code == 2
