"""DeepSpeed's JIT-op build lock: a lock left by a process killed inside the build window no longer
hangs the next run's ranks; a lock some live process holds is never touched.

The end-to-end case is real: a process takes torch's own FileBaton on a copy of the venv's built
op and is SIGKILLed holding it, then two emulated ranks run ``deepspeed.init_distributed``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monta import extensions
from monta.emulate import Topology, launch, namespace_problem

PY = sys.executable
PROBLEM = namespace_problem()


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def _holder(lock: Path) -> subprocess.Popen:
    """A process that takes torch's FileBaton on ``lock`` (as cpp_extension.load does) and keeps it."""
    code = (
        "import sys, time; from torch.utils.file_baton import FileBaton; "
        "b = FileBaton(sys.argv[1]); assert b.try_acquire(); print('held', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen([PY, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_only_old_locks_that_no_process_holds_are_stale(tmp_path):
    (tmp_path / "orphan").mkdir()
    (tmp_path / "fresh").mkdir()
    (tmp_path / "py311_cpu" / "held").mkdir(parents=True)  # torch's default layout: root/<py-accel>/<op>
    orphan, fresh, held = (
        tmp_path / "orphan" / "lock",
        tmp_path / "fresh" / "lock",
        tmp_path / "py311_cpu" / "held" / "lock",
    )
    orphan.touch()
    fresh.touch()
    holder = _holder(held)
    try:
        _age(orphan, 600)
        _age(held, 600)
        assert extensions.locks(tmp_path) == sorted([orphan, fresh, held])
        assert extensions.stale_locks(tmp_path) == [orphan]  # too young to judge: fresh; held by a live process
        # what a stall message adds: the locks left, and the command that removes them
        note = extensions.stuck_note({extensions.ENV: str(tmp_path)})
        rm = "rm " + " ".join(map(str, sorted([orphan, fresh, held])))
        assert note.startswith("; a torch-extension build lock exists") and rm in note
        # clearing waits until an unheld young lock is old enough to judge (a run killed a moment ago left it):
        # then it is an orphan too; the live holder's is kept
        t0 = time.monotonic()
        notes = extensions.clear_stale_locks({extensions.ENV: str(tmp_path)})
        assert time.monotonic() - t0 <= extensions.MIN_STALE_AGE_S + 5
        assert len(notes) == 2 and all("no process holds" in n for n in notes), notes
        assert not orphan.exists() and not fresh.exists() and held.exists()
    finally:
        holder.kill()
        holder.wait()
    assert extensions.stuck_note({extensions.ENV: str(tmp_path / "none")}) == ""


def test_a_run_that_times_out_names_a_lock_its_ranks_may_wait_on(tmp_path):
    root = tmp_path / "ext"
    (root / "op").mkdir(parents=True)
    holder = _holder(root / "op" / "lock")  # a build in progress: its lock is not removed
    try:
        with pytest.raises(Exception, match=r"timed out after 1 s.*a torch-extension build lock exists.*rm "):
            launch(
                [PY, "-c", "import time; time.sleep(60)"],
                1,
                1,
                Topology(),
                env={extensions.ENV: str(root)},
                timeout_s=1,
                log_dir=tmp_path / "logs",
                allow_unshaped=True,
            )
    finally:
        holder.kill()
        holder.wait()


def test_a_venv_gets_its_own_build_folder_unless_one_is_named():
    env: dict[str, str] = {}
    extensions.configure(env)
    if sys.prefix != sys.base_prefix:
        assert env[extensions.ENV] == str(Path(sys.prefix) / "torch-extensions")
    env = {extensions.ENV: "/somewhere"}
    extensions.configure(env)
    assert env[extensions.ENV] == "/somewhere"
    assert extensions.build_root({"XDG_CACHE_HOME": "/c"}) == Path("/c/torch_extensions")


def test_every_process_runs_the_venvs_ninja():
    """torch runs the first ninja on PATH; two ninja versions discard each other's build log and rebuild."""
    nd = extensions.ninja_dir()
    if nd is None:
        pytest.skip(f"no ninja beside {sys.executable}")
    env = {"PATH": "/usr/bin:/bin"}
    extensions.configure(env)
    assert env["PATH"] == os.pathsep.join([str(nd), "/usr/bin", "/bin"])
    extensions.configure(env)  # idempotent: not prepended twice
    assert env["PATH"] == os.pathsep.join([str(nd), "/usr/bin", "/bin"])
    found = subprocess.run(["sh", "-c", "command -v ninja"], env=env, capture_output=True, text=True).stdout.strip()
    assert found == str(nd / "ninja")


RANK = """
import datetime, deepspeed, torch, torch.distributed as dist
deepspeed.init_distributed(dist_backend="gloo", verbose=False, timeout=datetime.timedelta(seconds=60))
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"sum {t.item():.0f}", flush=True)
dist.barrier()
dist.destroy_process_group()  # gloo's threads stopped before exit (else a rank may abort at teardown)
"""


@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_a_rank_killed_holding_the_build_lock_does_not_hang_the_next_run(tmp_path, capfd):
    pytest.importorskip("deepspeed")
    root = tmp_path / "ext"
    built = extensions.build_root({**os.environ, **_configured()}) / "deepspeed_shm_comm"
    if (built / "deepspeed_shm_comm.so").exists():
        # the venv's build: ranks only check it (no 45 s build); not a lock a killed process left there
        shutil.copytree(built, root / "deepspeed_shm_comm", ignore=shutil.ignore_patterns("lock"))
    (root / "deepspeed_shm_comm").mkdir(parents=True, exist_ok=True)
    lock = root / "deepspeed_shm_comm" / "lock"
    holder = _holder(lock)
    holder.send_signal(signal.SIGKILL)  # killed inside the window, as a rank torn down mid-init is
    holder.wait()
    assert lock.exists()
    _age(lock, 120)
    env = {extensions.ENV: str(root), "DS_ACCELERATOR": "cpu"}
    res = launch([PY, "-c", RANK], 1, 2, Topology(), env=env, timeout_s=240, log_dir=tmp_path / "logs")
    assert res.ok and "sum 3" in res.stdout
    err = capfd.readouterr().err
    assert f"removed {lock}" in err
    assert not lock.exists()


def _configured() -> dict[str, str]:
    env: dict[str, str] = {}
    extensions.configure(env)
    return env


def test_ranks_waiting_on_a_held_build_lock_are_not_stalled(tmp_path, monkeypatch):
    """A rank rebuilding the op (minutes on a loaded machine) uses no CPU of its own (the compiler is its
    child) and its peers wait on the lock: not a stall while a live process holds the lock; one once it
    is gone."""
    from monta.emulate.launch_spec import LaunchSpec
    from monta.emulate.ranks import layout
    from monta.emulate.supervisor import Supervisor
    from monta.emulate.topology import Topology

    root = tmp_path / "ext"
    (root / "deepspeed_shm_comm").mkdir(parents=True)
    lock = root / "deepspeed_shm_comm" / "lock"
    monkeypatch.setenv(extensions.ENV, str(root))
    s = Supervisor(
        LaunchSpec(
            mode="plain",
            nodes=1,
            gpus_per_node=2,
            topology=Topology(name="unshaped"),
            log_dir=str(tmp_path / "logs"),
            result_path=str(tmp_path / "result.json"),
            argv=("true",),
            master_port=0,
            stall_s=30,
        )
    )
    s.progress_dir.mkdir(parents=True)
    ranks = layout(1, 2, ["127.0.0.1"], ["node0"], "lo")
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    holder = _holder(lock)
    try:
        s.procs = dict(enumerate(procs))
        for r in (0, 1):  # both reported joining the process group 40 s ago and used no CPU since
            (s.progress_dir / f"rank{r}").write_text(f"1 {time.time() - 40:.3f} joining the process group\n")
        s.cpu_samples = [(time.monotonic() - 40, {0: 0.0, 1: 0.0})]
        assert s._stalled(ranks) is None
        holder.kill()
        holder.wait()
        s.cpu_samples = [(time.monotonic() - 40, {0: 0.0, 1: 0.0})]
        failure = s._stalled(ranks)
        assert failure is not None and "no rank made progress or used CPU for 30 s" in failure["message"]
    finally:
        holder.kill()
        holder.wait()
        for p in procs:
            p.kill()
            p.wait()
