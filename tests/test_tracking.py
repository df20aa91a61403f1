"""monta.tracking: real wandb in offline mode logs records; wandb failures never raise."""

from __future__ import annotations

import sys
import warnings

import pytest

from monta import tracking
from monta.results import make_record


def records():
    return [
        make_record(
            kind="alltoall",
            source="emulated",
            experiment="t",
            env={"python": "3.11"},
            params={"size_bytes": s, "variant": "monta", "chunks": 2},
            metrics={"time_us": 100.0 * s, "samples_us": [1.0, 2.0], "breakdown": {"a": 1.0}},
            config={"tp": 4},
        )
        for s in (1, 2)
    ]


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(tracking, "_warned", False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("MONTA_WANDB", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.mark.slow
def test_offline_run_written(tmp_path):
    assert tracking.log_records(records(), project="monta-test", group="g", dir=tmp_path) is True
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_unwritable_dir_warns_once_and_returns(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MONTA_WANDB_DIR", str(blocker / "wandb"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert tracking.log_records(records()) is False
        assert tracking.log_records(records()) is False
    assert len([x for x in w if "wandb logging skipped" in str(x.message)]) == 1


def test_invalid_mode_and_missing_wandb_do_not_raise(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "bogus")
    with pytest.warns(RuntimeWarning, match="WANDB_MODE='bogus'"):
        assert tracking.log_records(records(), dir=tmp_path) is False
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setattr(tracking, "_warned", False)
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` raise ImportError
    with pytest.warns(RuntimeWarning, match="import of wandb"):
        assert tracking.log_records(records(), dir=tmp_path) is False


def test_disabled_and_empty_are_noops(tmp_path, monkeypatch):
    assert tracking.log_records([], dir=tmp_path) is False
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert tracking.log_records(records(), dir=tmp_path) is False
    assert not (tmp_path / "wandb").exists()


def sweep():
    """An AllToAll sweep as bench alltoall writes it: two variants (monta at two chunk counts), three sizes."""
    return [
        make_record(
            kind="alltoall",
            source="emulated",
            experiment="t",
            env={"python": "3.11"},
            params={"size_bytes": s << 20, "variant": v, "chunks": c, "tp": 4},
            metrics={"time_us": 1000.0 * s * f, "busbw_GBps": s / f, "samples_us": [1.0], "cpu_bound": False},
            config={"sizes": "1M:4M:2"},
            run_id="r1",
        )
        for v, c, f in (("legacy", 1, 2.0), ("monta", 2, 1.0), ("monta", 4, 1.1))
        for s in (4, 1, 2)  # out of order, as an adaptive sweep may append them
    ]


def test_one_run_per_variant_and_chunk_count_over_the_message_size():
    runs = tracking.plan_runs(sweep())
    assert [r["name"] for r in runs] == ["alltoall-legacy-c1", "alltoall-monta-c2", "alltoall-monta-c4"]
    for r in runs:
        assert r["axis"] == "size_MiB"
        assert [row["size_MiB"] for row in r["rows"]] == [1.0, 2.0, 4.0]  # sorted: a line over the size
        # the run's config: what its points share (variant, chunks, tp), not the size that varies
        assert r["params"]["variant"] in ("legacy", "monta") and "size_bytes" not in r["params"]
        assert all("samples_us" not in row for row in r["rows"])  # lists stay in the table, not the charts
    legacy = runs[0]["rows"]
    assert [row["time_ms"] for row in legacy] == [2.0, 4.0, 8.0]
    assert legacy[0]["cpu_bound"] is False


def test_a_step_run_logs_every_timed_step_against_step():
    recs = [
        make_record(
            kind="step",
            source="emulated",
            experiment="t",
            env={},
            params={"variant": v, "model": "mini"},
            metrics={"step_ms": ms, "samples_ms": [ms + 1, ms - 1, ms], "breakdown_ms": {"experts": 2.0}},
        )
        for v, ms in (("deepspeed", 30.0), ("monta", 24.0))
    ]
    runs = tracking.plan_runs(recs)
    assert [r["name"] for r in runs] == ["step-deepspeed", "step-monta"]
    assert runs[1]["rows"] == [{"step": 0, "step_ms": 25.0}, {"step": 1, "step_ms": 23.0}, {"step": 2, "step_ms": 24.0}]
    assert runs[1]["summary"]["step_ms"] == 24.0 and runs[1]["summary"]["breakdown_ms.experts"] == 2.0


@pytest.mark.slow
def test_offline_runs_one_per_variant_with_their_axis(tmp_path):
    assert tracking.log_records(sweep(), project="monta-test", group="g", dir=tmp_path) is True
    import wandb

    wandb.teardown()  # the wandb service writes the run files behind run.finish(); this waits for it
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 3
    for run in runs:
        data = b"".join(f.read_bytes() for f in run.glob("*.wandb"))
        # define_metric("*", step_metric="size_MiB") as wandb's MetricRecord protobuf encodes it:
        # field 2 (glob_name) "*", field 4 (step_metric) "size_MiB"
        assert b'\x12\x01*"\x08size_MiB' in data
        assert b"time_ms" in data
