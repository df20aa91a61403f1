"""The results schema (monta/results_schema.py): the records the harness writes pass, a record with a
wrong field is refused in one line naming it, and docs/results-schema.md is the schema's own table."""

from __future__ import annotations

from pathlib import Path

import pytest

from monta import results_schema
from monta.results import make_record, read_records

ROOT = Path(__file__).resolve().parents[1]


def _a2a(**metrics):
    return make_record(
        kind="alltoall",
        source="emulated",
        experiment="t",
        env={},
        params={"size_bytes": 1 << 20, "variant": "monta", "chunks": 2, "nodes": 2, "gpus_per_node": 4, "tp": 4},
        metrics={"time_us": 100.0, **metrics},
    )


def test_the_stored_baseline_and_fresh_records_pass():
    recs = read_records(ROOT / "analysis/baselines/default-alltoall.jsonl")
    assert len(recs) > 40
    for r in recs + [_a2a(samples_us=[99.0, 101.0], busbw_GBps=0.5, cpu_bound=False)]:
        results_schema.check(r)


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda r: r["metrics"].update(time_us=-1.0), "metrics.time_us: -1.0 is less than or equal to the minimum"),
        (lambda r: r["metrics"].pop("time_us"), "metrics: 'time_us' is a required property"),
        (lambda r: r["params"].update(chunks=0), "params.chunks: 0 is less than the minimum of 1"),
        (lambda r: r["params"].pop("variant"), "params: 'variant' is a required property"),
        (lambda r: r["params"].update(tp="4"), "params.tp: '4' is not of type 'integer'"),
        (lambda r: r["metrics"].update(samples_us=[1.0, "x"]), "metrics.samples_us.1: 'x' is not of type 'number'"),
        (lambda r: r.update(source="guessed"), "source: 'guessed' is not one of"),
    ],
)
def test_a_wrong_field_is_named_in_one_line(change, named):
    rec = _a2a()
    change(rec)
    with pytest.raises(ValueError, match="docs/results-schema.md") as e:
        results_schema.check(rec)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("alltoall record: ") and named in msg, msg


def test_unknown_kinds_get_the_envelope_and_extra_metrics_are_allowed():
    rec = make_record(kind="newkind", source="predicted", experiment="t", env={}, params={}, metrics={"x": "y"})
    results_schema.check(rec)
    results_schema.check(_a2a(host_cpu={"busy": 0.2}, stop="max 40 iterations"))
    rec.pop("run_id")
    with pytest.raises(ValueError, match="'run_id' is a required property"):
        results_schema.check(rec)


def test_every_kind_states_its_units_and_the_docs_page_is_the_schema():
    for kind, (_params, _, metrics, _) in results_schema.KINDS.items():
        for name, s in metrics.items():
            if name.endswith(("_us", "_ms", "_GBps", "_bytes")):
                assert s["x-unit"], (kind, name)
    page = (ROOT / "docs/results-schema.md").read_text()
    assert page.endswith(results_schema.markdown()), "regenerate the tables: python -c 'from monta.results_schema ...'"


def test_records_are_checked_on_write_and_nothing_is_written_when_one_fails(tmp_path):
    from monta.results import write_records

    out = tmp_path / "r.jsonl"
    write_records(out, [_a2a()])
    before = out.read_bytes()
    bad = _a2a()
    bad["params"]["chunks"] = 0
    with pytest.raises(ValueError, match="params.chunks"):
        write_records(out, [_a2a(), bad], append=True)
    assert out.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]
