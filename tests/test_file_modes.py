"""Files a colleague can read: every atomic writer (records, tables, cluster files, link profiles)
gives its file the mode ``open()`` would, 0666 less the umask, not mkstemp's private 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from monta.atomic import current_umask, write_atomic
from monta.cli import main
from monta.results import make_record, write_records


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_umask_is_read_without_changing_it(umask):
    assert current_umask() == umask
    assert current_umask() == umask


def test_records_get_the_umask_mode_when_written_replaced_and_appended(tmp_path, umask):
    rec = make_record(kind="t", source="measured", experiment="e", params={}, metrics={}, env={"python": "3.11"})
    path = write_records(tmp_path / "r.jsonl", [rec])
    assert _mode(path) == 0o666 & ~umask
    path.chmod(0o600)  # an older file written mode 0600: a rewrite gives it the umask's mode
    write_records(path, [rec], append=True)
    assert _mode(path) == 0o666 & ~umask and len(path.read_text().splitlines()) == 2


def test_a_prediction_written_by_the_cli_is_readable_by_others_under_umask_022(tmp_path, umask, capsys):
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "alltoall", "--sizes", "1M", "--chunks", "1", "--out", str(out)]) == 0
    assert _mode(out) == 0o666 & ~umask
    if umask == 0o022:
        assert _mode(out) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left behind


def test_cluster_files_profiles_and_tables_get_the_umask_mode(tmp_path, umask):
    from monta.hardware import clusterfile
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.reports.out_files import write_text

    want = 0o666 & ~umask
    assert _mode(clusterfile.dump(get_cluster("a800"), tmp_path / "mine.yaml", base="a800")) == want
    write_text(str(tmp_path / "table.md"), "| a |\n")
    assert _mode(tmp_path / "table.md") == want
    assert _mode(write_atomic(tmp_path / "x.bin", b"\0")) == want


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = write_atomic(tmp_path / "t.txt", "old")

    with pytest.raises(TypeError):  # data neither str nor bytes: fails after the temp file exists
        write_atomic(path, object())  # type: ignore[arg-type]
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["t.txt"]
