"""The bench CLI against real file systems and real runs: `--out` on a read-only mount and on a full disk
(tmpfs mounts in a private mount namespace: `unshare -m`), a records write that runs out of space leaving
the previous file whole, `bench step`'s progress lines and `bench alltoall`'s first line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

PY = sys.executable


def _can_mount() -> bool:
    if not shutil.which("unshare"):
        return False
    proc = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True)
    return proc.returncode == 0


needs_mount = pytest.mark.skipif(not _can_mount(), reason="needs `unshare -m` and mount (root) for a real tmpfs")


def in_mount(tmp_path, options: str, script: str) -> subprocess.CompletedProcess:
    """Run ``script`` (sh) with a tmpfs mounted at tmp_path/mnt (``options``), in a private mount namespace."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cmd = f"mount -t tmpfs -o {options} tmpfs {mnt} && cd {mnt} && {script}"
    return subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, timeout=120)


def monta(*argv: str) -> str:
    return " ".join([PY, "-m", "monta.cli", *argv])


@needs_mount
@pytest.mark.parametrize("bench", ["alltoall", "step"])
def test_out_on_a_read_only_mount_says_read_only(tmp_path, bench):
    proc = in_mount(tmp_path, "ro", monta("bench", bench, "--no-wandb", "--out", "sub/r.jsonl") + "; ls -A")
    assert proc.returncode == 0, proc.stderr  # the ls ran: the command exited before it
    err = proc.stderr.strip()
    assert err == (
        f"monta: error: --out sub/r.jsonl: {tmp_path / 'mnt'} is on a read-only file system; give a path on a "
        "writable one"
    ), err
    assert "permissions forbid" not in err and proc.stdout == ""  # nothing written, no folder made


@needs_mount
def test_out_on_a_full_disk_is_refused_before_the_run(tmp_path):
    script = "dd if=/dev/zero of=fill bs=4k count=64 2>/dev/null; " + monta(
        "bench", "alltoall", "--no-wandb", "--out", "r.jsonl"
    )
    proc = in_mount(tmp_path, "size=256k", script + "; echo rc=$?; ls -A")
    err = proc.stderr.strip()
    assert err == (
        f"monta: error: --out r.jsonl: cannot write in {tmp_path / 'mnt'}: no space left on its device; free some "
        "space or write elsewhere"
    ), err
    assert proc.stdout.split() == ["rc=2", "fill"]  # exit 2, no probe or records file left


@needs_mount
def test_a_records_write_that_runs_out_of_space_leaves_the_previous_file_whole(tmp_path):
    """The temp file + rename writer: the write fails with one line, the old file is unchanged, no temp file."""
    code = textwrap.dedent(
        """
        from monta.results import RecordWriteError, make_record, write_records
        env = {"python": "3.11"}
        small = [make_record(kind="t", source="measured", experiment="e", params={}, metrics={}, env=env)]
        write_records("r.jsonl", small)
        before = open("r.jsonl").read()
        big = [dict(small[0], metrics={"pad": "x" * 100_000})]
        try:
            write_records("r.jsonl", big)
        except RecordWriteError as e:
            print(e)
        assert open("r.jsonl").read() == before, "the previous file changed"
        """
    )
    proc = in_mount(tmp_path, "size=64k", f"{PY} -c '{code}' && ls -A")
    assert proc.returncode == 0, proc.stderr[-2000:]
    line, *files = proc.stdout.split("\n")
    assert line == "cannot write r.jsonl: no space left on its device; free some space or write elsewhere " + (
        "(nothing was written)"
    )
    assert [f for f in files if f] == ["r.jsonl"]


@pytest.mark.slow
def test_bench_step_prints_progress_lines_while_it_runs(tmp_path):
    """`bench step` (local ranks): its first line, then one line per variant and step with the elapsed time and
    an estimate of the time left, then its table in human units."""
    pytest.importorskip("deepspeed")
    out = tmp_path / "step.jsonl"
    argv = ["bench", "step", "--launcher", "local", "--nodes", "2", "--gpus-per-node", "1", "--tp", "1"]
    argv += ["--variants", "deepspeed,monta", "--steps", "2", "--warmup", "1", "--layers", "1", "--seq", "64"]
    argv += ["--micro-batch", "1", "--hidden", "256", "--ffn", "896", "--no-wandb", "--out", str(out)]
    proc = subprocess.run(
        [PY, "-m", "monta.cli", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "WANDB_MODE": "disabled"},
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "# monta bench step: 2 nodes x 1 ranks, local ranks on 127.0.0.1 (no emulated network)"
    progress = [x for x in lines if x.startswith("# ") and " left" in x]
    assert [x.split(":")[0] for x in progress] == [
        "# warm-up step 1/3 of variant deepspeed (1/6)",
        "# warm-up step 1/3 of variant monta (2/6)",
        "# step 2/3 of variant deepspeed (3/6)",
        "# step 2/3 of variant monta (4/6)",
        "# step 3/3 of variant deepspeed (5/6)",
        "# step 3/3 of variant monta (6/6)",
    ]
    assert progress[-1].endswith("about 0 us left") and "elapsed" in progress[-1]
    row = next(x for x in lines if x.split()[:1] == ["monta"])
    assert row.split()[2] in ("us", "ms", "s", "min")  # the step time has its unit
    assert len(out.read_text().splitlines()) == 2


@pytest.mark.slow
def test_bench_alltoall_without_a_network_flag_runs_the_4nic_a800_and_says_so_first(tmp_path):
    proc = subprocess.run(
        [PY, "-m", "monta.cli", "bench", "alltoall", "--gpus-per-node", "2", "--sizes", "64K", "--hidden", "256"]
        + ["--chunks", "2", "--iters", "1", "--warmup", "0", "--no-wandb", "--allow-unshaped"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0]
    assert first.startswith("# monta bench alltoall: 2 nodes x 2 ranks, emulated, network a800-4nic@0.125: "), first
    assert first.endswith("(the default profile; --topology unshaped for none)"), first
    assert "# network: a800-4nic@0.125" in proc.stdout or "unshaped" in proc.stderr  # no namespaces: said loudly
