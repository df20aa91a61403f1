"""The emulated clock: one dilation D for every exchange and compute piece (monta.perfmodel.training.clock),
and the runtime that makes a piece last its target (monta.model.clock)."""

from __future__ import annotations

import threading
import time

import pytest

from monta.emulate.topology import Topology
from monta.model.config import PRESETS, resolve_config
from monta.perfmodel.training.clock import Clock, buffer_bytes
from monta.perfmodel.training.compute import piece_flops

MINI = PRESETS["moe-2x70b-mini"]


def _clock(topo: Topology, gpn: int, tp: int, cfg=MINI) -> Clock:
    return Clock(
        topo.cluster or "a800-4nic",
        cfg,
        tp=tp,
        ep=2,
        gpus_per_node=gpn,
        inter_gbps=topo.inter_gbps,
        intra_gbps=topo.intra_gbps,
    )


@pytest.mark.parametrize(
    "preset,gpn,tp",
    [("a800-4nic", 4, 4), ("a800-4nic@0.0625", 8, 8), ("a800-4nic@0.25", 4, 4), ("a800-8nic", 4, 2), ("h800", 8, 8)],
)
def test_every_exchange_runs_on_the_same_dilation(preset, gpn, tp):
    """Emulated / real time at nominal rates is the same D for the inter-node AllToAll, the TP AllGather
    and the TP AllReduce, when the profile is the cluster's own (intra:inter = its per-GPU rho)."""
    c = _clock(Topology.preset(preset), gpn, tp)
    d = c.exchange_dilations()
    assert set(d) == {"alltoall", "allgather", "tp_allreduce"}
    for name, v in d.items():
        assert v == pytest.approx(c.dilation, rel=2e-3), name
    # D = bytes ratio x link dilation: fp32 mini buffer [2, 8192, 128] vs bf16 [2, 8192, 8192] = 1/32
    assert buffer_bytes(MINI, 4) / buffer_bytes(c.full, 2) == pytest.approx(1 / 32)
    assert c.dilation == pytest.approx(Topology.preset(preset).link_dilation(gpn) / 32, rel=1e-9)


def test_a_hand_set_ratio_is_not_one_clock():
    """The old default profile (intra:inter 7.27 = 160 GB/s over a 2-node busbw) slows the AllGather
    by a different factor than the AllToAll: not the A800 it named."""
    old = Topology(name="old", inter_gbps=0.25, intra_gbps=1.818)
    d = _clock(old, 8, 8).exchange_dilations()
    assert d["allgather"] / d["alltoall"] == pytest.approx((160 / 11.75) / (1.818 / 0.25), rel=1e-3)
    assert d["allgather"] / d["alltoall"] > 1.8


def test_compute_pieces_are_the_full_model_times_d():
    c = _clock(Topology.preset("a800-4nic"), 4, 4)
    for k, v in c.pieces_us.items():
        assert v == pytest.approx(c.full_pieces_us[k] * c.dilation), k
    assert c.optimizer_us == pytest.approx(c.full_optimizer_us * c.dilation)
    # summed over the run's own FLOPs of a layer, us_per_flop gives back D x the full model's piece
    run = piece_flops(MINI, MINI.tokens_per_micro_batch, MINI.seq, 4)
    run["head"] *= 4  # replicated over TP in the run
    for k, rate in c.us_per_flop().items():
        assert rate * run[k] == pytest.approx(c.pieces_us[k]), k
    # the full-size model is moe-2x70b with the run's layers and routing
    c1 = _clock(Topology.preset("a800-4nic"), 4, 4, resolve_config("moe-2x70b-mini", topk=1))
    assert (c1.full.hidden, c1.full.seq, c1.full.top_k, c1.full.num_layers) == (8192, 8192, 1, 1)


def test_the_clock_needs_shaped_links_and_a_known_cluster():
    with pytest.raises(ValueError, match="needs shaped links"):
        Clock("a800-4nic", MINI, tp=4, ep=2, gpus_per_node=4, inter_gbps=None, intra_gbps=1.0)
    with pytest.raises(ValueError, match="choose one of"):
        Clock("a900", MINI, tp=4, ep=2, gpus_per_node=4, inter_gbps=0.1, intra_gbps=1.0)


# -- the runtime --------------------------------------------------------------------------------------
def test_a_piece_lasts_at_least_its_target_and_counts_unpriced_math_into_it():
    from monta.model.clock import ComputeClock

    ck = ComputeClock({"experts": 1.0}, {"optimizer": 30_000.0})  # 1 us per FLOP
    t0 = time.perf_counter()
    ck.restart()
    ck.charge("experts", time.perf_counter(), flops=20_000)  # a 20 ms target
    assert time.perf_counter() - t0 >= 0.020
    # unpriced work (here a 15 ms busy loop) between pieces runs inside the run's time: the two pieces end
    # 80 ms after the run began, not 60 ms after the loop
    t1 = time.perf_counter()
    while time.perf_counter() - t1 < 0.015:
        pass
    ck.charge("experts", time.perf_counter(), flops=60_000)  # 45 ms to spare: a loaded machine's late wake-ups fit
    assert time.perf_counter() - t0 >= 0.080
    s = ck.stats()
    assert s["calls"] == {"experts": 2} and s["target_s"]["experts"] == pytest.approx(0.080)
    assert s["overruns"] == {}


def test_communication_is_not_counted_as_compute_and_overruns_are_named():
    from monta.model.clock import ComputeClock

    ck = ComputeClock({"head": 1.0})
    ck.restart()
    time.sleep(0.03)  # "communication"
    ck.restart()
    t = time.perf_counter()
    ck.charge("head", t, flops=10_000)  # 10 ms from the restart, not 30 ms already spent
    assert time.perf_counter() - t >= 0.009
    # math longer than its target: counted and named, no wait
    t = time.perf_counter()
    while time.perf_counter() - t < 0.01:
        pass
    ck.charge("head", t, flops=1_000)
    s = ck.stats()
    assert s["overruns"] == {"head": 1} and s["overrun_s"]["head"] > 0.005


def test_a_late_piece_is_absorbed_by_the_next_pieces_slack_as_queued_kernels_would_be():
    """A run of pieces lasts the sum of their targets: a piece whose math ran 100 ms past its 1 ms target
    (a wait for a core) is caught up by a 300 ms piece after it, so the run ends at 301 ms, not 401, and
    nothing is counted; lateness still standing when the run ends (a communication) is an overrun of its last piece."""
    from monta.model.clock import ComputeClock

    ck = ComputeClock({"attention": 1.0, "experts": 1.0})
    ck.restart()
    t0 = ck._local.start
    while time.perf_counter() - t0 < 0.101:
        pass
    ck.charge("attention", t0, flops=1_000)  # 1 ms target, 101 ms spent: late, no wait
    ck.charge("experts", time.perf_counter(), flops=300_000)
    assert 0.301 <= time.perf_counter() - t0 < 0.38  # 401 ms had the lateness not been absorbed
    ck.restart()  # the run ends on time
    assert ck.stats()["overruns"] == {}
    t1 = ck._local.start
    while time.perf_counter() - t1 < 0.016:
        pass
    ck.charge("experts", t1, flops=5_000)
    ck.charge("attention", time.perf_counter(), flops=1_000)
    ck.restart()  # 16 ms of math against 6 ms of targets: 10 ms late, named after the run's last piece
    s = ck.stats()
    assert s["overruns"] == {"attention": 1} and 0.009 < s["overrun_s"]["attention"] < 0.03


def test_dist_calls_restart_the_run_clock_after_every_collective_and_wait_and_only_inside():
    import pytest
    import torch.distributed as dist

    from monta.model import clock

    ck = clock.ComputeClock({"head": 1.0})
    orig = dist.all_reduce
    with clock.restarted_by_dist(ck):
        assert dist.all_reduce is not orig and dist.all_reduce.__wrapped__ is orig
        assert getattr(dist.distributed_c10d.Work.wait, "__wrapped__", None) is not None
        ck._local.start = 0.0
        try:
            dist.all_reduce(None)  # no process group: it raises, and the count still restarts
        except Exception:
            pass
        assert ck._local.start > 0.0
        # thread-local: another thread's count is its own
        seen = []
        th = threading.Thread(target=lambda: seen.append(getattr(ck._local, "start", None)))
        th.start()
        th.join()
        assert seen == [None]
        with pytest.raises(RuntimeError, match="one clock per process"), clock.restarted_by_dist(ck):
            pass
    assert dist.all_reduce is orig and not hasattr(clock, "CLOCK")
    assert getattr(dist.distributed_c10d.Work.wait, "__wrapped__", None) is None
    with clock.restarted_by_dist(None):  # no clock: torch.distributed as it is
        assert dist.all_reduce is orig


# -- contention: compute waited under the harness's exchange lasts (1 + c) x ----------------------------------
def test_stretch_arithmetic():
    """A piece's progress since its count started: full speed outside the exchange, 1 / (1 + c) inside."""
    from monta.model.clock import stretched_left_s

    # 1 s elapsed, 0.6 s of it under the exchange at c = 0.5: progress 0.4 + 0.6 / 1.5 = 0.8 s
    assert stretched_left_s(1.0, 1.0, 0.6, 0.5) == pytest.approx(0.2)
    assert stretched_left_s(1.0, 1.0, 0.6, 0.0) == pytest.approx(0.0)  # c = 0: the exchange costs nothing
    # wholly under the exchange, a target t is reached after (1 + c) t
    assert stretched_left_s(0.3, 0.3 * 1.25, 0.3 * 1.25, 0.25) == pytest.approx(0.0)


def test_exchange_window_counts_overlapping_tasks_once():
    from monta.model.clock import ExchangeWindow

    w = ExchangeWindow()
    t0 = time.perf_counter()
    w.enter()
    w.enter()  # a second exchange in flight at once
    time.sleep(0.01)
    w.exit()
    time.sleep(0.01)
    w.exit()
    a, b = w._spans[-1]
    t1 = time.perf_counter()
    assert len(w._spans) == 1 and t0 <= a < b <= t1
    assert w.in_flight_s(t0, t1) == pytest.approx(b - a)
    assert w.in_flight_s(a, (a + b) / 2) == pytest.approx((b - a) / 2)
    assert w.in_flight_s(b, t1 + 1) == 0.0
    with pytest.raises(RuntimeError, match="without a matching enter"):
        w.exit()


def _exchange_for(ck, seconds: float) -> threading.Thread:
    """An exchange in flight for ``seconds`` on clock ``ck``'s window, on another thread."""
    th = threading.Thread(target=lambda: ck.exchange.run(time.sleep, seconds))
    th.start()
    return th


def test_a_piece_under_the_exchange_waits_its_stretched_target():
    """c = 1: the 20 ms the exchange is in flight advance a piece 10 ms, so a 60 ms target ends 10 ms later;
    the stretch is exactly c / (1 + c) of the window the piece saw, and the piece lasts its target plus it."""
    from monta.model.clock import ComputeClock

    ck = ComputeClock({"experts": 1.0}, contention=1.0)
    t0 = time.perf_counter()
    ck.restart()
    th = _exchange_for(ck, 0.02)
    ck.charge("experts", time.perf_counter(), flops=60_000)  # a 60 ms target
    elapsed = time.perf_counter() - t0
    th.join()
    a, b = ck.exchange._spans[-1]
    assert t0 <= a and b <= t0 + elapsed  # the window lay inside the piece
    s = ck.stats()
    assert s["contention_s"]["experts"] == pytest.approx((b - a) / 2, rel=1e-9)
    assert elapsed >= 0.060 + s["contention_s"]["experts"]
    # without an exchange in flight the same clock adds nothing
    ck.reset_stats()
    ck.restart()
    ck.charge("experts", time.perf_counter(), flops=5_000)
    assert ck.stats()["contention_s"] == {}


def test_a_runs_contention_is_booked_once_across_its_pieces():
    """Two pieces of one run under one 20 ms exchange window (c = 1): the run's stretch, 10 ms, is booked once
    in all, not once per piece (each piece's wait covers the run from its start)."""
    from monta.model.clock import ComputeClock

    ck = ComputeClock({"experts": 1.0}, contention=1.0)
    ck.restart()
    th = _exchange_for(ck, 0.02)
    ck.charge("experts", time.perf_counter(), flops=40_000)
    ck.charge("experts", time.perf_counter(), flops=20_000)
    th.join()
    a, b = ck.exchange._spans[-1]
    assert sum(ck.stats()["contention_s"].values()) == pytest.approx((b - a) / 2, rel=1e-6)


def test_without_contention_the_exchange_changes_no_wait():
    from monta.model.clock import ComputeClock

    ck = ComputeClock({"experts": 1.0})
    ck.restart()
    th = _exchange_for(ck, 0.02)
    ck.charge("experts", time.perf_counter(), flops=10_000)
    th.join()
    assert ck.stats()["contention_s"] == {} and ck.contention == 0.0


def test_the_comm_thread_runs_every_task_as_an_exchange_in_flight():
    """On the layer's observers' clock: two models' clocks keep their own windows (none is process-wide)."""
    from types import SimpleNamespace

    from monta.model.clock import ComputeClock
    from monta.moe import Observers
    from monta_baselines.pipeline import _on_comm_thread

    mine, other = ComputeClock({}), ComputeClock({})
    layer = SimpleNamespace(observers=Observers(clock=mine))
    assert not mine.exchange._count
    assert _on_comm_thread(layer, lambda x: (x, mine.exchange._count, other.exchange._count), 7).result() == (7, 1, 0)
    assert not mine.exchange._count and len(mine.exchange._spans) == 1 and not other.exchange._spans
    # without a clock the task just runs
    assert _on_comm_thread(SimpleNamespace(observers=Observers()), lambda: 3).result() == 3


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), True, "0.2"])
def test_contention_must_be_a_finite_factor(bad):
    from monta.model.clock import ComputeClock

    with pytest.raises(ValueError, match="factor >= 0"):
        ComputeClock({"experts": 1.0}, contention=bad)
