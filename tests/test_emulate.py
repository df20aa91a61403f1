"""The emulated cluster: shaping really throttles inter-node traffic only, teardown leaves nothing.

Real namespaces, real tc, real gloo; skipped (with the reason) where user namespaces are forbidden.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from monta.emulate import EmulationError, NamespaceUnavailable, RankFailed, Topology, launch, namespace_problem
from monta.emulate.calibrate import build_profile, fit_bandwidth
from monta.emulate.shaping import link_commands

PROBLEM = namespace_problem()
PY = sys.executable


def _host_net_state() -> tuple[str, str, str]:
    run = lambda *c: subprocess.run(c, capture_output=True, text=True).stdout  # noqa: E731
    return run("ip", "-br", "link"), run("tc", "qdisc", "show"), run("ip", "netns", "list")


def _processes_with(marker: str) -> list[str]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and str(os.getpid()) != d.name:
                found.append(f"{d.name}: {cmd}")
    return found


def _children() -> list[int]:
    me, kids = str(os.getpid()), []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == me:  # field 4: ppid
                kids.append(int(d.name))
    return kids


_CHILDREN_BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _children_before_the_test():
    """This test's children are the ones it started: one left by an earlier test (or a helper process
    of the session) is that test's failure, not a reason for every later case to fail too."""
    _CHILDREN_BEFORE.clear()
    _CHILDREN_BEFORE.update(_children())


def _assert_nothing_left(marker: str, before: tuple[str, str, str]) -> None:
    deadline = time.monotonic() + 5  # the kernel reaps a dead PID namespace asynchronously
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker) == []
    assert set(_children()) - _CHILDREN_BEFORE == set()
    assert _host_net_state() == before  # no interface, qdisc or named namespace appeared or vanished


# -- topology and shaping spec (no namespaces needed) ------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"inter_gbps": 0}, "inter_gbps=0: must be between"),
        ({"intra_gbps": -2.0}, "intra_gbps=-2.0: must be between"),
        ({"inter_gbps": float("nan")}, "must be a number"),
        ({"inter_gbps": "1"}, "must be a number"),
        ({"latency_us": -1}, "latency_us=-1: must be between"),
    ],
)
def test_bad_topology_is_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Topology(**kwargs)


def _emulate_cli(argv: list[str]) -> int:
    """`monta emulate ...` without importing every other topic's CLI (monta.cli does, slowly)."""
    import argparse

    from monta.emulate.cli import register

    parser = argparse.ArgumentParser(prog="monta")
    register(parser.add_subparsers())
    args = parser.parse_args(["emulate", *argv])
    return args.func(args)


def test_bad_topology_flags_give_a_clear_error():
    with pytest.raises(ValueError) as info:
        _emulate_cli(["run", "--topology", "a900", "--", "true"])
    from monta.emulate.topology import PRESETS

    presets = ", ".join(p for p in PRESETS if p != "unshaped")  # every shipped cluster file, and its aliases
    assert {"a800-4nic", "a800-8nic", "p4de", "h100"} <= set(PRESETS)
    assert str(info.value) == (
        f"--topology a900: unknown topology preset 'a900'; choose one of unshaped, {presets}, "
        "PRESET@GBPS (the NIC rate per node) or a cluster file PATH.yaml[@GBPS]"
    )
    with pytest.raises(ValueError, match=r"^--topology a800-4nic-dilated: .*was removed: it shaped intra:inter 7.27"):
        _emulate_cli(["run", "--topology", "a800-4nic-dilated", "--", "true"])
    with pytest.raises(ValueError, match=r"after '@' give the NIC rate in Gbit/s, e.g. a800-4nic@0.0625"):
        _emulate_cli(["run", "--topology", "a800-4nic@fast", "--", "true"])
    with pytest.raises(ValueError, match=r"^--inter-gbps 0.0: must be between 0.001 and 400 Gbit/s$"):
        _emulate_cli(["run", "--inter-gbps", "0", "--", "true"])
    with pytest.raises(ValueError, match="no command given"):
        _emulate_cli(["run", "--inter-gbps", "1"])


def test_presets_are_the_clusters_per_gpu_ratio():
    """intra:inter = NVLink per GPU / NIC share per GPU of the performance model's cluster preset:
    160 / (4 x 23.5 / 8) = 13.6 on the 4-NIC A800 (not 160 / 22, a 2-node busbw that already holds
    the factor 2 x 15/16 the emulated exchange produces itself)."""
    assert Topology.preset("a800-4nic").ratio == pytest.approx(160 / (4 * 23.5 / 8), rel=1e-3)
    assert Topology.preset("a800-4nic").ratio == pytest.approx(13.6, rel=0.02)
    assert Topology.preset("a800-8nic").ratio == pytest.approx(160 / 23.5, rel=1e-3)
    assert Topology.preset("a100").ratio == pytest.approx(240 / 23.5, rel=1e-3)
    assert Topology.preset("h800").ratio == pytest.approx(160 / 46, rel=1e-3)
    assert not Topology.preset("unshaped").shaped
    # a slower NIC is the same cluster, slower: the loopback follows at the same ratio
    fast, slow = Topology.preset("a800-4nic"), Topology.preset("a800-4nic@0.0625")
    assert slow.name == "a800-4nic@0.0625" and slow.cluster == "a800-4nic"
    assert slow.ratio == pytest.approx(fast.ratio, rel=1e-3) and slow.inter_gbps == fast.inter_gbps / 2
    assert Topology.preset("a800-4nic", inter_gbps=0.0625) == slow
    assert Topology.preset("a800-4nic", tcp_cc="bbr").cluster == "a800-4nic"
    # rates or latency by hand: no longer the cluster, and the name says so
    assert Topology.preset("a800-4nic", latency_us=5).name == "a800-4nic@0.125+custom"
    custom = Topology.preset("a800-4nic", intra_gbps=1.0)
    assert custom.cluster == "" and custom.name.endswith("+custom") and custom.link_dilation(8) is None
    # the NIC is 8 GPUs x 11.75 GB/s on the real node, inter_gbps here
    assert fast.link_dilation(8) == pytest.approx(8 * 11.75 * 8 / 0.125)


def test_launch_rejects_bad_arguments():
    with pytest.raises(ValueError, match="nodes=0"):
        launch([PY, "-c", "pass"], 0, 1, Topology())
    with pytest.raises(ValueError, match="argv="):
        launch("python -c pass", 1, 1, Topology())


def test_link_commands_shape_rate_and_prioritise_small_packets():
    assert link_commands("eth0", None) == []
    cmds = [" ".join(c) for c in link_commands("eth0", 2.0)]
    assert cmds[0] == "tc qdisc add dev eth0 root handle 1: htb default 20"
    assert "classid 1:1 htb rate 2000000000bit ceil 2000000000bit" in cmds[1]
    assert cmds[-1].endswith("match u16 0x0000 0xff80 at 2 flowid 1:10")
    delayed = [" ".join(c) for c in link_commands("eth0", 2.0, 25.0)]
    assert sum("netem delay 25us" in c for c in delayed) == 2  # leaf of both classes
    # The NIC's bulk queue is bounded; a node's loopback (all its intra-node flows at once) never drops.
    assert "bfifo limit 4194304" in cmds[5]
    assert "bfifo limit 268435456" in " ".join(link_commands("lo", 1.818)[5])


def test_profile_from_raw_measurements():
    bw = 1e8  # bytes/s, 20 us latency
    points = [[s, 20e-6 + s / bw] for s in (1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22)]
    assert fit_bandwidth(points) == pytest.approx(bw, rel=1e-6)
    raw = {
        "groups": {"intra": [0, 1], "inter": [0, 2]},
        "latency_s": {"intra": 1e-5, "inter": 2e-5},
        "p2p": {"intra": points, "inter": points},
        "alltoall": {"intra": [[4096, 1e-4]], "inter": [[4096, 2e-4]]},
        "allgather": {"intra": [[4096, 1e-4]], "inter": [[4096, 3e-4]]},
    }
    prof = build_profile(raw, Topology(inter_gbps=1.0), 2, 2)
    assert prof["schema"] == "monta.linkprofile/1" and prof["source"] == "emulated"
    assert prof["links"]["inter"]["bandwidth_GBps"] == pytest.approx(0.1)
    assert prof["links"]["inter"]["latency_us"] == pytest.approx(20.0)
    eff = dict(prof["links"]["intra"]["efficiency"])
    assert eff[1 << 22] == pytest.approx((1 << 22) / bw / points[-1][1], rel=1e-3) and eff[1 << 10] < 0.5
    assert prof["collectives"]["allgather"]["inter"] == [[4096, 300.0]]
    assert prof["topology"]["inter_gbps"] == 1.0 and prof["topology"]["nodes"] == 2


# -- the real thing ----------------------------------------------------------------------------
@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_inter_node_traffic_is_throttled_and_intra_node_is_not():
    from monta.emulate.probe import summarize

    gbps, nbytes = 1.0, 6 << 20
    res = launch(
        [
            PY,
            "-m",
            "monta.emulate.probe",
            "--bytes",
            str(nbytes),
            "--intra-bytes",
            str(4 * nbytes),
            "--flows",
            "1,4",
            "--reps",
            "2",
        ],
        2,
        2,
        Topology(inter_gbps=gbps),
        timeout_s=120,
        stdout=open(os.devnull, "w"),
    )
    raw = json.loads(res.stdout.strip().splitlines()[-1])
    rows = {(r["link"], r["flows"]): r for r in summarize(raw, {"inter": gbps, "intra": None})}
    print(rows)
    # Shaping is engaged: asserted with bounds that a loaded machine cannot break, not with a rate floor
    # (an idle machine once read 79.1% against a floor of 80%). The payload ceiling is 95.6% of the
    # configured rate; an unshaped veth or loopback runs at several times it.
    ceiling = 1.3 * gbps
    for flows in (1, 4):
        inter = rows[("inter", flows)]
        assert inter["n"] == 4  # both directions at once, 2 timed rounds
        # Upper bound on the median: a side that is descheduled when it should start its clock misses
        # the start of the transfer and reads one sample fast, so not on every sample (a ~50 ms round
        # reads 1.3x after a ~12 ms delay); an unshaped link reads fast in every sample.
        assert inter["p50_gbps"] <= ceiling
        # Coarse lower bound, far below the ~95% an idle machine reads: the rate is the configured
        # one, not one an order of magnitude off (and no stall dominates the median).
        assert inter["share_p50"] > 0.2
        # The intra-node link is not shaped: faster than the inter-node link can deliver.
        assert rows[("intra", flows)]["p50_gbps"] > ceiling and rows[("intra", flows)]["share_p50"] is None
    node0 = res.links["0"]
    sent = 2 * 3 * nbytes  # 2 levels x (warm-up + 2 timed rounds), node 0's direction only
    print({dev: node0[dev]["tx_bytes"] for dev in ("lo", "eth0")}, "inter-node payload", sent)
    assert node0["lo"]["tx_bytes"] >= 2 * 3 * 4 * nbytes  # the intra-node transfers stayed on loopback...
    # ...only the inter-node ones used the NIC: their payload plus headers, ACKs and any retransmits,
    # far from the 4x more that intra-node traffic routed over it would add.
    assert sent <= node0["eth0"]["tx_bytes"] < 1.5 * sent
    assert [r.addr for r in res.ranks] == ["198.18.0.1", "198.18.0.1", "198.18.0.2", "198.18.0.2"]


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_nodes_get_reno_and_quickack_and_ranks_are_told():
    code = (
        "import json, os, subprocess; t = json.loads(os.environ['MONTA_NET_TUNING']); "
        "cc = open('/proc/sys/net/ipv4/tcp_congestion_control').read().strip(); "
        "idle = open('/proc/sys/net/ipv4/tcp_slow_start_after_idle').read().strip(); "
        "r = subprocess.run(['ip', 'route', 'show', '198.18.0.0/24'], capture_output=True, text=True).stdout; "
        "print(json.dumps([t, cc, 'quickack 1' in r, idle]))"
    )
    res = launch([PY, "-c", code], 2, 1, Topology(inter_gbps=1.0), timeout_s=60, stdout=open(os.devnull, "w"))
    tuning, cc, quick, idle = json.loads(res.stdout.strip().splitlines()[-1])
    assert tuning["tcp_cc"] == "reno" == cc and tuning["quickack"] is True and quick and tuning["notes"] == []
    # an idle connection keeps its window, as an RDMA queue pair keeps its rate (docs/testbed.md, the early AllGather)
    assert idle == "0" and tuning["slow_start_after_idle"] is False
    res = launch(
        [PY, "-c", code], 2, 1, Topology(inter_gbps=1.0, tcp_cc="bbr"), timeout_s=60, stdout=open(os.devnull, "w")
    )
    assert json.loads(res.stdout.strip().splitlines()[-1])[1] == "bbr"


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_ranks_get_one_compute_thread_whatever_the_caller_inherited(monkeypatch):
    """Snakemake exports OMP/MKL/..._NUM_THREADS=<job threads>; inherited by 8-16 ranks on 2 cores,
    their extra workers slowed mid-size collectives 2-3x (torch sizes its pool from MKL_NUM_THREADS
    too). Ranks get 1 thread (or $MONTA_RANK_THREADS)."""
    code = (
        "import os, torch; print(os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'], torch.get_num_threads())"
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    res = launch([PY, "-c", code], 1, 2, Topology(), timeout_s=60, stdout=open(os.devnull, "w"))
    assert res.stdout.split() == ["1", "1", "1"], res.stdout
    monkeypatch.setenv("MONTA_RANK_THREADS", "2")
    res = launch([PY, "-c", code], 1, 2, Topology(), timeout_s=60, stdout=open(os.devnull, "w"))
    assert res.stdout.split() == ["2", "2", "2"], res.stdout


GLOO_ROUTES = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    r = dist.get_rank()
    x = torch.ones((8 << 20) // 4)
    if r == 0:
        dist.send(x, 1)          # same node
        dist.barrier()
        dist.send(x, 2)          # other node
    elif r == 1:
        dist.recv(x, 0); dist.barrier()
    elif r == 2:
        dist.barrier(); dist.recv(x, 0); assert bool((x == 1).all())
    else:
        dist.barrier()
    print(os.environ["MONTA_HOST"], os.environ["MONTA_BIND_ADDR"], os.environ["GLOO_SOCKET_IFNAME"], flush=True)
    dist.destroy_process_group()
""")


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_gloo_intra_node_traffic_stays_off_the_shaped_nic():
    res = launch(
        [PY, "-c", GLOO_ROUTES],
        2,
        2,
        Topology(inter_gbps=2.0),
        timeout_s=90,
        env={"OMP_NUM_THREADS": "1"},
        stdout=open(os.devnull, "w"),
    )
    assert res.stdout.split() == ["node0", "198.18.0.1", "eth0"]
    eth0_tx = res.links["0"]["eth0"]["tx_bytes"]
    # Exactly one 8 MiB payload crossed node 0's NIC (plus rendezvous and barriers): the
    # intra-node send went over loopback even though gloo is bound to eth0's address.
    assert (8 << 20) <= eth0_tx < (8 << 20) * 1.25
    assert res.links["0"]["lo"]["tx_bytes"] >= 8 << 20


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_killed_rank_is_named_and_nothing_is_left(tmp_path):
    marker = f"monta-test-{uuid.uuid4().hex[:8]}"
    before = _host_net_state()
    code = (
        "import os, signal, time, sys; r = int(os.environ['RANK']); "
        "time.sleep(0.3) if r == 1 else None; "
        "os.kill(os.getpid(), signal.SIGKILL) if r == 1 else time.sleep(60)"
    )
    t0 = time.monotonic()
    with pytest.raises(RankFailed) as info:
        launch([PY, "-c", code, marker], 2, 2, Topology(inter_gbps=1.0), timeout_s=60, log_dir=tmp_path)
    assert time.monotonic() - t0 < 30  # the survivors (sleeping 60 s) were killed, not waited for
    assert "rank 1 (node 0) exited with signal 9 (SIGKILL)" in str(info.value)
    codes = info.value.result.returncodes
    assert codes[1] == -9 and all(c == -9 for c in codes)  # the others were SIGKILLed by us
    _assert_nothing_left(marker, before)


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_an_aborted_rank_says_where_it_was(tmp_path):
    """A rank that aborts (as a C++ std::terminate inside gloo would) is named with its signal, and the
    error shows what it printed last and the innermost Python frames of the crashing thread."""
    code = textwrap.dedent("""
        import os, sys, time
        def join_the_group():
            print("terminate called without an active exception", file=sys.stderr, flush=True)
            os.abort()
        join_the_group() if os.environ["RANK"] == "1" else time.sleep(60)
    """)
    with pytest.raises(RankFailed) as info:
        launch([PY, "-c", code], 2, 1, Topology(inter_gbps=1.0), timeout_s=60, log_dir=tmp_path)
    msg = str(info.value)
    assert "rank 1 (node 1) exited with signal 6 (SIGABRT)" in msg, msg
    assert "terminate called without an active exception\n    Fatal Python error: Aborted" in msg, msg
    assert "Current thread" in msg and "in join_the_group" in msg, msg
    assert "Extension modules" not in msg  # the end of faulthandler's report says nothing of the crash


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_timeout_and_unstartable_command_are_clear_errors(tmp_path):
    marker = f"monta-test-{uuid.uuid4().hex[:8]}"
    before = _host_net_state()
    with pytest.raises(RankFailed, match=r"timed out after 1 s; ranks still running: 0, 1"):
        launch([PY, "-c", "import time; time.sleep(60)", marker], 2, 1, Topology(), timeout_s=1, log_dir=tmp_path)
    _assert_nothing_left(marker, before)
    with pytest.raises(EmulationError, match=r"cannot start rank 0: .*No such file or directory"):
        launch(["/nonexistent/monta-rank"], 2, 1, Topology(), log_dir=tmp_path)
    _assert_nothing_left(marker, before)


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
@pytest.mark.parametrize(
    "sig, inherited",
    [
        (signal.SIGINT, signal.SIG_DFL),
        (signal.SIGINT, signal.SIG_IGN),  # as a background non-interactive shell starts its commands
        (signal.SIGTERM, signal.SIG_IGN),
        (signal.SIGKILL, signal.SIG_DFL),
    ],
    ids=["SIGINT", "SIGINT-inherited-ignored", "SIGTERM-inherited-ignored", "SIGKILL"],
)
def test_signal_to_the_launcher_tears_everything_down(sig, inherited, tmp_path):
    """Whatever disposition the driver inherits (set here explicitly, so the test does not depend on
    how pytest itself was started), a signal to it takes down every rank and namespace."""
    marker = f"monta-test-{uuid.uuid4().hex[:8]}"
    before = _host_net_state()
    started = tmp_path / "started"
    rank = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    driver = (
        f"from monta.emulate import launch, Topology; import sys; "
        f"launch([sys.executable, '-c', {rank!r}, {marker!r}], 2, 1, Topology(inter_gbps=1.0))"
    )

    def inherit():  # in the child before exec: dispositions other than handlers survive exec
        signal.signal(signal.SIGINT, inherited if sig == signal.SIGINT else signal.SIG_DFL)
        signal.signal(signal.SIGTERM, inherited if sig == signal.SIGTERM else signal.SIG_DFL)

    proc = subprocess.Popen([PY, "-c", driver], stderr=subprocess.PIPE, text=True, preexec_fn=inherit)
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stderr.read() if proc.poll() else "no start"
            )
            time.sleep(0.05)
        assert _processes_with(marker)
        proc.send_signal(sig)
        assert proc.wait(timeout=20) != 0
    finally:
        # A failed case takes its own driver (and with it, by the launcher's death signal, the
        # whole tree) down, so the next case starts clean.
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)
        proc.stderr.close()
    _assert_nothing_left(marker, before)


def test_unavailable_namespaces_name_the_sysctl_or_fall_back(monkeypatch, capsys):
    from monta.emulate import launcher

    monkeypatch.setattr(
        launcher,
        "namespace_problem",
        lambda: "user namespaces are unavailable; enable them with sysctl kernel.unprivileged_userns_clone=1",
    )
    with pytest.raises(NamespaceUnavailable, match="kernel.unprivileged_userns_clone"):
        launch([PY, "-c", "pass"], 2, 1, Topology(inter_gbps=1.0))
    code = "import os; print(os.environ['RANK'], os.environ['MONTA_BIND_ADDR'], os.environ['MONTA_EMULATED'])"
    with pytest.warns(RuntimeWarning, match="UNSHAPED"):
        res = launch([PY, "-c", code], 2, 1, Topology(inter_gbps=1.0), allow_unshaped=True)
    assert not res.emulated and res.returncodes == [0, 0]
    assert res.stdout == "0 127.0.0.1 0\n"
    assert "UNSHAPED" in capsys.readouterr().err


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_calibrate_writes_a_link_profile(tmp_path):
    out = tmp_path / "linkprofile.json"
    assert (
        _emulate_cli(
            [
                "calibrate",
                "--nodes",
                "2",
                "--gpus-per-node",
                "2",
                "--inter-gbps",
                "1",
                "--max-bytes",
                "1M",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    prof = json.loads(out.read_text())
    assert set(prof) == {"schema", "name", "source", "topology", "links", "collectives", "compute", "host", "transport"}
    assert prof["schema"] == "monta.linkprofile/1" and prof["source"] == "emulated"
    assert prof["transport"] == "duplex"  # measured through the exchanges' own transport
    for link in ("intra", "inter"):
        assert set(prof["links"][link]) == {"bandwidth_GBps", "latency_us", "efficiency"}
        assert prof["links"][link]["bandwidth_GBps"] > 0 and prof["links"][link]["latency_us"] > 0
        assert [s for s, _ in prof["links"][link]["efficiency"]] == [1024 * 4**i for i in range(6)]
        for op in ("alltoall", "allgather"):
            # every power of two: the htb bucket bends the time curve between them (calibrate.py)
            assert [s for s, _ in prof["collectives"][op][link]] == [4096 * 2**i for i in range(9)]
    # The exchange's SPMD patterns, every rank busy at once, with their CPU cost per rank.
    for op, name in (("alltoall", "inter_all"), ("allgather", "intra_all")):
        assert [s for s, _ in prof["collectives"][op][name]] == [4096 * 2**i for i in range(9)]
        assert all(c > 0 for _, c in prof["host"]["cpu_us"][f"{op}.{name}"])
    assert prof["host"]["cores"] >= 1 and prof["compute"]["copy_GBps"] > 0
    # The shaped NIC is the slower link (1 Gbit/s = 0.125 GB/s; loopback is unshaped).
    assert prof["links"]["inter"]["bandwidth_GBps"] < min(0.2, prof["links"]["intra"]["bandwidth_GBps"])
    assert not list(tmp_path.glob(".linkprofile.json*"))  # no temporary files left behind


PINGPONG = textwrap.dedent("""
    import os, socket, time
    rank, addrs = int(os.environ["RANK"]), os.environ["MONTA_NODE_ADDRS"].split(",")
    port = int(os.environ["MASTER_PORT"]) + 7
    if rank == 1:
        with socket.create_server((os.environ["MONTA_BIND_ADDR"], port)) as srv:
            conn, _ = srv.accept()
            while (b := conn.recv(1)):
                conn.sendall(b)
    else:
        for _ in range(200):
            try:
                conn = socket.create_connection((addrs[1], port)); break
            except OSError:
                time.sleep(0.05)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(20):
            t0 = time.perf_counter(); conn.sendall(b"x"); conn.recv(1); rtts.append(time.perf_counter() - t0)
        conn.close()
        print(sorted(rtts)[10] * 1e6)
""")


@pytest.mark.netns
@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
def test_latency_is_added_or_refused_clearly(tmp_path):
    try:
        res = launch(
            [PY, "-c", PINGPONG],
            2,
            1,
            Topology(latency_us=2000),
            timeout_s=60,
            log_dir=tmp_path,
            stdout=open(os.devnull, "w"),
        )
    except EmulationError as e:  # kernels without sch_netem (this CI box's among them)
        assert "--latency-us needs the netem qdisc (kernel module sch_netem)" in str(e)
        return
    assert float(res.stdout) >= 2 * 2000  # one-way 2 ms each way
