"""The tests' gloo world (tests/dist_world.py) fails once, with one line, and never starts itself again:
a rank that exits at start-up, a start-up limit hit on purpose, a call that raises on one rank or does
not answer in time; a build lock left by a killed process does not hang its start.

Real spawned ranks (1 or 2: a start costs seconds, not the minutes of 8).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import conftest
from dist_world import DistWorld, RankError, WorldStartError, timeout_scale

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a loop would hang: the timeout makes it a failure


def _exit_on_rank_1(rank: int) -> None:
    if rank == 1:
        os._exit(3)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def _raise_on_rank_1() -> int:
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("rank 1 refuses")
    return dist.get_rank()


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _ranks_alive() -> list[str]:
    return [p.name for p in mp.active_children() if p.name.startswith("rank")]


def test_a_rank_that_exits_at_start_fails_the_start_once_in_one_line():
    with pytest.raises(WorldStartError) as info:
        DistWorld(2, before_init=_exit_on_rank_1)
    head = str(info.value).splitlines()[0]
    assert head == "the 2-rank test world did not start: rank 1 died (exit code 3)"
    assert _ranks_alive() == []  # rank 0 is stopped too, and nothing was started again


def test_a_start_up_limit_hit_fails_once_and_is_not_tried_again(monkeypatch):
    monkeypatch.setattr(conftest, "_worlds", {})
    monkeypatch.setattr(conftest, "_started_in_module", set())
    monkeypatch.setattr(conftest, "_start_failures", {})
    monkeypatch.setattr("dist_world.START_S_PER_RANK", 0.25)  # 0.5 s for 2 ranks: torch alone takes longer
    with pytest.raises(WorldStartError) as info:
        conftest.get_world(2)
    assert str(info.value).startswith(
        f"the 2-rank test world did not start within {0.5 * timeout_scale():g} s (ranks [0, 1] not ready; "
        "raise MONTA_TEST_TIMEOUT_SCALE on a slow machine)"
    )
    assert len(str(info.value).splitlines()) == 1
    assert _ranks_alive() == []
    # The same size again: refused at once with the first failure, no ranks started
    with pytest.raises(WorldStartError, match="^not started again this session: the 2-rank test world did not"):
        conftest.get_world(2)
    assert _ranks_alive() == []


def test_a_failed_call_stops_the_world_and_later_calls_fail_at_once():
    world = DistWorld(2)
    try:
        assert world.run(_rank) == [0, 1]
        with pytest.raises(RankError) as info:
            world.run(_raise_on_rank_1)
        head = str(info.value).splitlines()[0]
        assert head == (
            "_raise_on_rank_1 failed on ranks [1] (rank 1 raised ValueError: rank 1 refuses); "
            "the world is stopped, later calls on it fail at once"
        )
        assert "Traceback" in str(info.value)  # the rank's own traceback follows the first line
        assert _ranks_alive() == []
        with pytest.raises(RankError) as again:
            world.run(_rank)
        assert str(again.value) == (
            "the 2-rank test world was stopped because _raise_on_rank_1 failed in "
            "tests/test_dist_world.py::test_a_failed_call_stops_the_world_and_later_calls_fail_at_once; not run: _rank"
        )
    finally:
        world.close()


def test_a_call_past_its_limit_stops_the_world():
    world = DistWorld(1)
    try:
        with pytest.raises(RankError) as info:
            world.run(_sleep, 600, timeout_s=0.5)
        assert str(info.value) == (
            f"_sleep: ranks [0] did not answer within {0.5 * timeout_scale():g} s; "
            "the world is stopped, later calls on it fail at once"
        )
        assert _ranks_alive() == []
    finally:
        world.close()


def test_a_build_lock_left_by_a_killed_process_does_not_hang_the_start(tmp_path, monkeypatch, capfd):
    """As a rank killed inside torch's build window leaves it (tests/test_extensions.py does the same)."""
    from monta import extensions

    root = tmp_path / "ext"
    built = extensions.build_root() / "deepspeed_shm_comm"
    if not (built / "deepspeed_shm_comm.so").exists():
        pytest.skip(f"no built op in {built} to copy: run `make setup`")
    shutil.copytree(built, root / "deepspeed_shm_comm", ignore=shutil.ignore_patterns("lock"))
    lock = root / "deepspeed_shm_comm" / "lock"
    code = (
        "import sys, time; from torch.utils.file_baton import FileBaton; "
        "b = FileBaton(sys.argv[1]); assert b.try_acquire(); print('held', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    old = time.time() - 120  # older than extensions.MIN_STALE_AGE_S: no live process is about to hold it
    os.utime(lock, (old, old))
    monkeypatch.setenv(extensions.ENV, str(root))
    world = DistWorld(1)
    try:
        assert world.run(_rank) == [0]
    finally:
        world.close()
    assert f"removed {lock}" in capfd.readouterr().err
    assert not lock.exists()


@pytest.mark.parametrize("raw", ["0", "-1", "x", "inf", "nan"])
def test_a_bad_timeout_scale_is_a_one_line_error(raw):
    with pytest.raises(ValueError, match=rf"^MONTA_TEST_TIMEOUT_SCALE='{raw}': give a positive number, e\.g\. 2"):
        timeout_scale({"MONTA_TEST_TIMEOUT_SCALE": raw})
    assert timeout_scale({"MONTA_TEST_TIMEOUT_SCALE": "2.5"}) == 2.5 and timeout_scale({}) == 1.0
