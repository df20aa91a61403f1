"""Ranks forked from the supervisor after its preload (monta.emulate.forkstart) run as ``python -m`` would:
the same module as __main__, argv, environment, node, signal dispositions and exit status, with exec or fork."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from monta.emulate import RankFailed, Topology, launch
from monta.emulate.forkstart import FORK_ENV, module_of

PROBE = textwrap.dedent(
    """
    import json, os, signal, socket, sys
    out = sys.argv[1]
    rank = int(os.environ["RANK"])
    state = {
        "name": __name__,
        "argv": sys.argv[1:],
        "rank": rank,
        "node": os.environ["MONTA_NODE"],
        "host": socket.gethostname(),
        "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "stdin": os.read(0, 10),
        "comm": open("/proc/self/comm").read().strip(),
        "session_leader": os.getsid(0) == os.getpid(),
        "preloaded": "decimal" in sys.modules,
        "faulthandler": __import__("faulthandler").is_enabled(),
    }
    state["stdin"] = state["stdin"].decode()
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(state, f)
    print(f"rank {rank} says hello", flush=True)
    code = os.environ.get("PROBE_EXIT_RANK")
    if code and int(code) == rank:
        if os.environ.get("PROBE_RAISE"):
            raise RuntimeError("probe failed on purpose")
        sys.exit(3)
    """
)


@pytest.fixture
def probe(tmp_path: Path) -> tuple[list[str], dict[str, str], Path]:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "rank_probe.py").write_text(PROBE)
    out = tmp_path / "out"
    out.mkdir()
    return [sys.executable, "-m", "rank_probe", str(out)], {"PYTHONPATH": str(tmp_path / "pkg")}, out


def _states(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def test_module_of_reads_only_this_interpreters_dash_m():
    assert module_of([sys.executable, "-m", "a.b", "x"]) == "a.b"
    assert module_of([sys.executable, "-c", "pass"]) is None
    assert module_of(["/usr/bin/env", "-m", "a.b"]) is None


def test_forked_ranks_run_as_exec_ranks_do(probe, tmp_path):
    argv, env, out = probe
    seen = {}
    for start in ("1", "0"):
        for f in out.iterdir():
            f.unlink()
        stdout = tmp_path / f"stdout{start}"
        with stdout.open("w") as f:
            res = launch(
                argv, 2, 2, Topology(inter_gbps=1.0), env={**env, FORK_ENV: start}, preload=("decimal",), stdout=f
            )
        assert res.ok
        assert "rank 0 says hello" in stdout.read_text()
        seen[start] = _states(out, 4)
    forked, execd = seen["1"], seen["0"]
    for r, (a, b) in enumerate(zip(forked, execd)):
        assert a["comm"] == f"monta-rank{r}" and b["comm"].startswith("python")
        assert a["preloaded"] and not b["preloaded"]
        for k in ("comm", "preloaded"):
            a.pop(k), b.pop(k)
        assert a == b
        assert a["name"] == "__main__" and a["argv"] == [str(out)] and a["rank"] == r
        assert a["sigint"] and a["sigterm"] and a["stdin"] == "" and a["session_leader"] and a["faulthandler"]
    assert [s["node"] for s in forked] == ["0", "0", "1", "1"]
    assert forked[0]["host"] != forked[2]["host"]  # each node's own namespaces (UTS here)


@pytest.mark.parametrize("raise_", [False, True])
def test_a_forked_ranks_exit_status_and_traceback_reach_the_launcher(probe, tmp_path, raise_):
    argv, env, _ = probe
    env = {**env, "PROBE_EXIT_RANK": "1", **({"PROBE_RAISE": "1"} if raise_ else {})}
    logs = tmp_path / "logs"
    with pytest.raises(RankFailed) as err:
        launch(argv, 1, 2, Topology(), env=env, preload=("decimal",), log_dir=logs, stdout=open(os.devnull, "w"))
    assert err.value.result.returncodes[1] == (1 if raise_ else 3)
    assert f"exited with code {1 if raise_ else 3}" in str(err.value)
    if raise_:
        assert "RuntimeError: probe failed on purpose" in (logs / "rank1.log").read_text()


def test_a_preload_that_fails_starts_every_rank_with_exec(probe, tmp_path, capfd):
    argv, env, out = probe
    res = launch(argv, 1, 2, Topology(), env=env, preload=("no_such_module_here",), stdout=open(os.devnull, "w"))
    assert res.ok
    assert "cannot preload no_such_module_here" in capfd.readouterr().err
    assert all(s["comm"].startswith("python") for s in _states(out, 2))
