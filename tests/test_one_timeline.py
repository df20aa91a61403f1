"""One timeline in the performance model: every exchange, the core's and the token-level ones, is a list
of steps its registry entry carries, and one scheduler (``schedule.schedule_steps``) prices them all."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from monta import variants as registry
from monta.hardware.profile import get_cluster
from monta.parallel import ParallelLayout
from monta.perfmodel.network import schedule
from monta.perfmodel.network.collectives import CollTime
from monta.perfmodel.network.exchange import exchange_shapes, exchange_time, layout_shapes
from monta.perfmodel.network.routed import routed_exchange_time
from monta.perfmodel.network.steps import ExchangeSteps, Step

MiB = 2**20
NETWORK = Path(__file__).resolve().parent.parent / "monta" / "perfmodel" / "network"
LAYOUT = ParallelLayout(2, 8, tp=2, ep=8)


def _clusters(layout=LAYOUT):
    a800 = get_cluster("a800", layout.nodes, layout.gpus_per_node)
    emu = replace(a800, host_cores=2, a2a_cpu_us=(500.0, 0.002), ag_cpu_us=(50.0, 0.001))
    return {"a800": a800, "emu": emu}


@pytest.mark.parametrize("cname", ["a800", "emu"])
@pytest.mark.parametrize("variant,chunks", [("legacy", 1), ("deepspeed", 1), ("monta", 1), ("monta", 4)])
def test_the_core_exchanges_are_the_steps_their_registry_entries_carry(cname, variant, chunks):
    """The model's price of a core exchange is its registry entry's steps, scheduled by the one scheduler."""
    cl = _clusters()[cname]
    ep, tp = layout_shapes(LAYOUT)
    S = 16 * MiB
    steps = registry.exchange(variant).price(S, ep, tp, cl, 1, ep.size, None, chunks)  # the one signature
    assert isinstance(steps, ExchangeSteps) and all(isinstance(s, Step) for s in steps.steps)
    got = schedule.schedule_steps(variant, steps, cl)
    want = exchange_time(variant, S, LAYOUT, cl, chunks)
    assert got == want and [o.name for o in got.ops] == [s.name for s in steps.steps]
    assert got.chunks == chunks and got.total_us > 0


def test_monta_chunks_form_a_graph_not_a_chain():
    """AllToAll of chunk i+1 runs while AllGather of chunk i does (after-links), and the chunked exchange
    reports the unchunked AllToAll and AllGather as its components."""
    layout = ParallelLayout(2, 8, tp=8, ep=2)  # the AllToAll crosses the nodes only, the AllGather stays inside
    cl = _clusters(layout)["a800"]
    mk = exchange_time("monta", 64 * MiB, layout, cl, 4)
    ds = exchange_time("deepspeed", 64 * MiB, layout, cl)
    ops = {o.name: o for o in mk.ops}
    assert ops["alltoall[1]"].start_us < ops["allgather[0]"].end_us  # overlapped
    assert ops["allgather[1]"].start_us >= ops["alltoall[1]"].end_us
    assert ops["pack[1]"].start_us >= ops["alltoall[0]"].end_us  # the pack queues on the AllToAll's stream
    chained = sum(o.end_us - o.start_us for o in mk.ops)
    assert mk.total_us < chained  # a chain's makespan would be the sum
    assert (mk.a2a_us, mk.ag_us, mk.copy_us, mk.pack_us) == (ds.a2a_us, ds.ag_us, ds.copy_us, ds.pack_us)
    assert mk.total_us < ds.total_us


def _call(us: float, link: str) -> CollTime:
    return CollTime(us, us if link == "intra" else 0.0, us if link == "inter" else 0.0, 0.0, 0.0)


def test_after_links_and_streams_decide_what_overlaps_on_a_real_cluster():
    cl = _clusters()["a800"]
    rate = cl.copy_GBps * 1e3
    intra, inter = Step("intra", "a2a", _call(30.0, "intra")), Step("inter", "a2a", _call(50.0, "inter"), after=())
    assert schedule.schedule_steps("x", [intra, inter], cl).total_us == pytest.approx(50.0)  # two links at once
    chained = replace(inter, after=None)
    assert schedule.schedule_steps("x", [intra, chained], cl).total_us == pytest.approx(80.0)
    # two copies that wait on nothing: on one stream one after the other, on two streams at once
    a, b = Step("a", "copy", nbytes=10 * rate), Step("b", "copy", nbytes=20 * rate, after=())
    assert schedule.schedule_steps("x", [a, b], cl).total_us == pytest.approx(30.0)
    two = schedule.schedule_steps("x", [a, replace(b, stream="a2a_stream")], cl)
    assert two.total_us == pytest.approx(20.0)
    assert two.copy_us == pytest.approx(30.0)  # a plain list reports each role's scheduled time


def test_the_emulator_charges_an_empty_collective_its_fixed_cpu_once():
    """runs_empty: the core's AllToAll is called even with nothing to move and pays its fixed per-call CPU;
    a token-level step with nothing to send is no call."""
    cl = _clusters()["emu"]
    fixed = cl.a2a_cpu_us[0] * cl.world_size / cl.host_cores
    empty = Step("alltoall", "a2a", CollTime(0.0, 0.0, 0.0, 0.0, 0.0))
    assert schedule.schedule_steps("x", [empty], cl).total_us == 0.0
    assert schedule.schedule_steps("x", [replace(empty, runs_empty=True)], cl).total_us == pytest.approx(fixed)
    ep, tp = layout_shapes(LAYOUT)
    assert exchange_shapes("legacy", 0.0, ep, tp, cl, 1).total_us == pytest.approx(fixed)  # its copy moves nothing


def test_overlapping_steps_share_the_emulators_cpu():
    """Two CPU-bound calls at once on the emulator take as long as one after the other (one shared CPU);
    on a real cluster, on different links, as long as the longer."""
    emu, a800 = _clusters()["emu"], _clusters()["a800"]
    a = Step("a", "a2a", _call(40.0, "intra"))
    b = Step("b", "a2a", _call(40.0, "intra"), after=())
    both = schedule.schedule_steps("x", [a, replace(b, after=None)], emu).total_us
    assert schedule.schedule_steps("x", [a, b], emu).total_us == pytest.approx(both)
    assert schedule.schedule_steps("x", [a, replace(b, ct=_call(40.0, "inter"))], a800).total_us == 40.0


def test_a_token_level_exchange_goes_through_the_same_scheduler():
    """A plugin's steps (2dh) scheduled by hand are its prediction; its role times are as scheduled."""
    layout = ParallelLayout(2, 4, tp=1, ep=8)
    for cl in _clusters(layout).values():
        ep, tp = layout_shapes(layout)
        steps = registry.exchange("2dh").price(4.0 * MiB, ep, tp, cl, 2, 16, 8192.0, 1)
        got = schedule.schedule_steps("2dh", steps, cl)
        assert got == routed_exchange_time("2dh", 4 * MiB, layout, cl, top_k=2, experts=16, row_bytes=8192)
        assert got.pack_us == pytest.approx(sum(o.end_us - o.start_us for o in got.ops if "regroup" in o.name))


def test_bad_step_lists_are_refused_in_one_line():
    cl = _clusters()["a800"]
    a = Step("a", "copy", nbytes=1.0)
    with pytest.raises(ValueError, match=r"^step 'b' waits on \['c'\]: no earlier step has that name$"):
        schedule.schedule_steps("x", [a, Step("b", "copy", nbytes=1.0, after=("c",))], cl)
    with pytest.raises(ValueError, match=r"^step 'a' appears twice in one timeline: name each step once$"):
        schedule.schedule_steps("x", [a, a], cl)


def test_one_module_builds_timelines():
    """No parallel pricing path: only the scheduler builds a Timeline or a FluidTimeline in the network model."""
    builders = set()
    for path in sorted(NETWORK.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Timeline", "FluidTimeline"):
                builders.add(path.name)
    assert builders == {"schedule.py"}
