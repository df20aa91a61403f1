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
