"""The contention ablation's table (monta_analysis.step_tables.contention_ablation, monta_analysis.contention): step
time per variant and contention factor, speedup vs deepspeed at the same c, slowdown vs c = 0, its footer."""

from __future__ import annotations

import pytest

from monta.results import make_record, write_records


def _step(variant: str, c: float, step_ms: float, run: str) -> dict:
    params = {"variant": variant, "model": "moe-2x70b-mini", "nodes": 2, "gpus_per_node": 4, "tp": 4}
    params.update(layers=1, seq=8192, topk=2, capacity_factor=1.0, contention=c)
    return make_record(
        kind="step", source="emulated", experiment="t", run_id=run, params=params, metrics={"step_ms": step_ms}
    )


RECORDS = [
    _step("deepspeed", 0.0, 100.0, "a"),
    _step("lina", 0.0, 80.0, "a"),
    _step("deepspeed", 0.2, 100.0, "b"),
    _step("lina", 0.2, 90.0, "b"),
]


def test_contention_ablation_compares_each_c_with_deepspeed_and_with_c0():
    from monta_analysis import step_tables

    t = step_tables.contention_ablation(RECORDS).set_index(["variant", "contention"])
    assert t.loc[("lina", 0.0), "speedup_vs_deepspeed"] == pytest.approx(100 / 80)
    assert t.loc[("lina", 0.2), "speedup_vs_deepspeed"] == pytest.approx(100 / 90)
    assert t.loc[("lina", 0.2), "slowdown_pct"] == pytest.approx(12.5)
    assert t.loc[("deepspeed", 0.2), "slowdown_pct"] == pytest.approx(0.0)
    # step records without a contention factor (older runs) make no contention table
    older = [{**r, "params": {k: v for k, v in r["params"].items() if k != "contention"}} for r in RECORDS]
    assert step_tables.contention_ablation(older).empty and not step_tables.step_table(older).empty


def test_contention_table_file_carries_the_footer(tmp_path):
    from monta_analysis.contention import main

    path = tmp_path / "steps.jsonl"
    write_records(path, RECORDS)
    assert main([str(path), "--out-dir", str(tmp_path)]) == 0
    md = (tmp_path / "tables" / "contention.md").read_text()
    assert "| lina " in md and "+12.5%" in md
    assert md.rstrip().endswith("c = 0 is no contention: overlap gains are upper bounds")
