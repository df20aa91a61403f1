"""The exchange maps read their exchanges from the registry (a plugin's exchange joins them without a line
changed in analysis/ or the workflow), and the skew map's analysis: winner, margin, the model's pick,
drop fractions, and the points where skew changes the winner relative to W0, on synthetic records."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monta import variants as registry
from monta.hardware.profile import LinkProfile
from monta.results import make_record

ROOT = Path(__file__).resolve().parent.parent
TOYS = ("toy-exchange", "toy-dispatcher")  # tests/plugins/monta_toy_variant (conftest puts it on the path)

PROFILE = LinkProfile.from_dict(
    {
        "schema": "monta.linkprofile/1",
        "name": "test-emu",
        "source": "emulated",
        "topology": {"nodes": 2, "gpus_per_node": 4, "intra_group": [0, 1, 2, 3], "inter_group": [0, 4]},
        "links": {
            "intra": {"bandwidth_GBps": 1.0, "latency_us": 60.0, "efficiency": [[4096, 0.3], [1048576, 1.0]]},
            "inter": {"bandwidth_GBps": 0.125, "latency_us": 120.0, "efficiency": [[4096, 0.4], [1048576, 1.0]]},
        },
    }
)


def test_the_maps_exchanges_follow_the_registry():
    from monta_analysis import maps

    got = maps.map_exchanges()
    assert set(TOYS) <= set(registry.exchanges())  # the toy plugin is registered in this environment
    assert got[:5] == ["deepspeed", "monta", "2dh", "allgather", "node-dedup"]
    assert set(TOYS) <= set(got) and "legacy" not in got  # legacy: full_buffer, the pre-0.14.5 DeepSpeed
    assert maps.why("toy-dispatcher") == registry.exchange("toy-dispatcher").about


def _record(variant, time_us, tp=2, routing=None, drop=0.0, experts=16, topk=8, size=2**20, **metrics):
    params = {"size_bytes": size, "variant": variant, "chunks": 2 if variant == "monta" else 1, "tp": tp,
              "ep": 8 // tp, "nodes": 2, "gpus_per_node": 4}  # fmt: skip
    if routing:
        params["routing"] = routing
    rec = make_record(
        kind="alltoall", source="emulated", experiment="skew-map", params=params,
        metrics={"time_us": time_us, "time_us_p10": time_us * 0.98, "time_us_p90": time_us * 1.02, "iters": 5,
                 "inter_bytes": 1000, "cpu_bound": False, "drop_fraction": drop, **metrics},
    )  # fmt: skip
    rec["config"] = {"nodes": 2, "gpus_per_node": 4, "ep": 8 // tp, "experts": experts, "topk": topk,
                     "hidden": 256, "dtype": "float32"}  # fmt: skip
    return rec


def test_a_toy_exchange_is_on_the_exchange_map_priced_and_described():
    from monta_analysis import exchange_map as em

    recs = [_record(v, t) for v, t in (("deepspeed", 100.0), ("toy-dispatcher", 90.0), ("toy-exchange", 80.0))]
    pts = em.points(recs, PROFILE)
    assert [p["variant"] for p in pts] == ["deepspeed", "toy-dispatcher", "toy-exchange"]
    assert all(p["predicted_us"] > 0 for p in pts)
    text = em.report(pts, em.winners(pts), [])
    assert f"**toy-exchange** wins 1 of 1 emulated points: {registry.exchange('toy-exchange').about}." in text


def test_the_workflow_benches_every_registered_exchange(tmp_path):
    """map.smk's exchange list is the registry's: with the toy plugin on the path its exchanges are in the
    skew map's commands (the dry run names them), legacy is not."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "snakemake"), "-n", "-p", "--directory", str(tmp_path), "--cores", "1",
         "-s", str(ROOT / "Snakefile"), "results/skewmap/skew-map.md"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    want = "--exchanges deepspeed,monta,2dh,allgather,node-dedup,toy-exchange,toy-dispatcher "
    assert out.count(want) == 12  # TP 1/2/4 x four routings
    for spec in ("W0", "hotnode", "lognormal:maxvio=1", "lognormal:maxvio=4"):
        assert out.count(f"--routing {spec} ") == 3, spec
    assert "--iters 5 " in out and "--adaptive" not in out
    assert "python -m monta_analysis.skew_map" in out


def _pt(variant, routing, measured, predicted, tp=1, drop=0.0, capacity=True, cpu_bound=False, inter=1.0):
    return {"tp": tp, "ep": 8 // tp, "experts": 32, "topk": 4, "cf": 1.0, "size_bytes": 4 * 2**20, "routing": routing,
            "variant": variant, "chunks": 1, "measured_us": measured, "p10_us": measured, "p90_us": measured,
            "iters": 5, "predicted_us": predicted, "balanced_us": predicted, "capacity_based": capacity,
            "drop_fraction": drop, "predicted_drop_fraction": drop, "maxvio": 0.0 if routing == "W0" else 1.0,
            "model_inter_bytes": inter * 2**20, "wrong": 0, "cpu_bound": cpu_bound}  # fmt: skip


def _skew_points():
    """TP 1: node-dedup wins at W0; under the hot node its most-loaded link doubles and monta wins (the
    capacity buffers drop 30%); TP 2: node-dedup keeps its lead under the hot node."""
    return [
        _pt("deepspeed", "W0", 560.0, 565.0),
        _pt("monta", "W0", 570.0, 565.0),
        _pt("node-dedup", "W0", 420.0, 430.0, capacity=False, inter=0.5),
        _pt("deepspeed", "hotnode", 575.0, 565.0, drop=0.3),
        _pt("monta", "hotnode", 550.0, 565.0, drop=0.3),
        _pt("node-dedup", "hotnode", 800.0, 760.0, capacity=False, inter=1.0),
        _pt("deepspeed", "W0", 330.0, 329.0, tp=2),
        _pt("node-dedup", "W0", 250.0, 243.0, tp=2, capacity=False),
        _pt("deepspeed", "hotnode", 330.0, 329.0, tp=2, drop=0.3),
        _pt("node-dedup", "hotnode", 290.0, 289.0, tp=2, capacity=False),
    ]


def test_skew_map_winner_margin_drops_and_the_changed_winner():
    from monta_analysis import skew_map as sm

    pts = _skew_points()
    wins = sm.winners(pts)
    at = {(w["tp"], w["routing"]): w for w in wins}
    assert [(w["tp"], w["routing"]) for w in wins] == [(1, "W0"), (1, "hotnode"), (2, "W0"), (2, "hotnode")]
    w = at[(1, "hotnode")]
    assert (w["measured_winner"], w["runner_up"], w["model_pick"]) == ("monta", "deepspeed", "deepspeed")
    assert w["margin"] == pytest.approx(575 / 550) and not w["agree"]
    assert w["winner_drop"] == 0.3 and w["drops"] == {"deepspeed": 0.3, "monta": 0.3}
    assert at[(1, "W0")]["measured_winner"] == "node-dedup" and at[(1, "W0")]["drops"] == {
        "deepspeed": 0.0,
        "monta": 0.0,
    }
    moved = sm.changes(pts, wins)
    assert [(c["tp"], c["routing"], c["w0_winner"], c["measured_winner"]) for c in moved] == [
        (1, "hotnode", "node-dedup", "monta")
    ]
    why = moved[0]["why"]
    assert "node-dedup (dropless) carries 1.00 MiB on its most-loaded link (x2.00 of W0" in why
    assert "monta's capacity buffer keeps its bytes" in why and "drops 30% of the routes" in why
    text = sm.report(pts, wins, moved)
    assert "TP 1, hotnode (MaxVio 1.00): node-dedup -> **monta**" in text
    assert (
        "| 1 | 8 | 32 | 4 | 1 | 4M | hotnode | 1.00 | monta | 1.05x (deepspeed) | deepspeed | NO | 30.0% | "
        "30.0% (all 2) |" in text
    )


def test_skew_map_leaves_cpu_bound_points_out_of_agreement_and_error():
    from monta_analysis import skew_map as sm

    pts = _skew_points()
    s = sm.summary(pts, sm.winners(pts))
    assert (s["agree"], s["judged"], s["cpu_bound"]) == (3, 4, 0)
    for p in pts:
        if p["tp"] == 1 and p["routing"] == "hotnode":
            p["cpu_bound"] = p["variant"] == "node-dedup"  # one exchange bound: the whole point is out
    s = sm.summary(pts, sm.winners(pts))
    assert (s["agree"], s["judged"], s["cpu_bound"]) == (3, 3, 1)
    clean = [p for p in pts if not (p["tp"] == 1 and p["routing"] == "hotnode")]
    assert s["mape"] == pytest.approx(100 * sum(abs(p["predicted_us"] / p["measured_us"] - 1) for p in clean) / 7)
    assert "(CPU-bound)" in sm.report(pts, sm.winners(pts), sm.changes(pts, sm.winners(pts)))


def test_skew_map_prices_records_with_the_routing_the_bench_ran():
    """From records: the model rebuilds the point's routing (T = E C / k tokens per EP member), prices each
    exchange at its worst rank and reports the routing's exact drops for the capacity exchanges; the
    measured drop fraction is the record's."""
    from monta.routing import make_routing
    from monta_analysis import skew_map as sm

    spec, E, K, size = "lognormal:maxvio=4", 32, 4, 4 * 2**20
    C = size // (E * 256 * 4)
    want = make_routing(spec, 8, E * C // K, E, K, 2).summary(1.0)["drop_fraction"]
    times = (("deepspeed", 560.0), ("node-dedup", 450.0))
    recs = [
        _record(v, t, tp=1, routing=r, drop=d, experts=E, topk=K, size=size)
        for r, d in (("W0", 0.0), (spec, want))
        for v, t in times
    ]
    recs[0]["params"].pop("routing")  # the bench's W0 records carry no routing
    pts = {(p["routing"], p["variant"]): p for p in sm.points(recs, PROFILE)}
    ds0, nd0, ds, nd = pts["W0", "deepspeed"], pts["W0", "node-dedup"], pts[spec, "deepspeed"], pts[spec, "node-dedup"]
    assert ds["capacity_based"] and not nd["capacity_based"]
    assert want > 0.3 and ds["drop_fraction"] == want
    assert ds["predicted_drop_fraction"] == pytest.approx(want)
    assert nd["predicted_drop_fraction"] == 0.0 and ds0["predicted_drop_fraction"] == 0.0
    assert ds["predicted_us"] == pytest.approx(ds0["predicted_us"])  # a capacity buffer keeps its time
    assert nd["predicted_us"] > nd0["predicted_us"] == pytest.approx(nd0["balanced_us"])  # W0: the balanced price


def test_the_hot_node_workload_puts_its_heat_on_one_nodes_experts():
    """hotnode:node=n,heat=X: node n's experts at X times the others' weight, exact counts: node n
    receives X / (X + 1) of the routes on two nodes, MaxVio (X - 1) / (X + 1); a node outside the
    layout is one line naming the range."""
    from monta.routing import make_routing

    r = make_routing("hotnode", 8, 256, 32, 4, 2)  # heat 4 on node 0 by default
    load = r.node_load().double()
    assert load[0] / load.sum() == pytest.approx(0.8, abs=1e-3) and r.maxvio() == pytest.approx(0.6, abs=1e-2)
    r1 = make_routing("hotnode:node=1,heat=2", 8, 256, 32, 4, 2)
    assert r1.node_load()[1] / r1.node_load().sum() == pytest.approx(2 / 3, abs=1e-3)
    with pytest.raises(ValueError, match=r"node=2 is outside the 2 nodes; use 0..1"):
        make_routing("hotnode:node=2", 8, 256, 32, 4, 2)


def test_the_skew_model_prices_the_most_loaded_link_where_ranks_share_one():
    """On the emulator a node's ranks share one NIC and one loopback, so a routing's worst link is a
    node's (its members' load summed), never above the worst rank's; on the A800 (a NIC per GPU) the
    link is the rank's, as before."""
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.network.skew import SkewFactors, link_groups
    from monta.routing import make_routing

    r = make_routing("lognormal:maxvio=4", 8, 1024, 32, 4, 2)
    emulator = PROFILE.cluster(2, 4)
    assert link_groups(r, emulator, 1) == (4, 4) and link_groups(r, get_cluster("a800", 2, 4), 1) == (1, 1)
    per_rank, per_link = SkewFactors.of(r), SkewFactors.of(r, *link_groups(r, emulator, 1))
    assert per_link.inter <= per_rank.inter and per_link.intra < per_rank.intra / 1.5
    assert per_link.rank == per_rank.rank  # copies stay the worst rank's
    w0 = make_routing("W0", 8, 1024, 32, 4, 2)
    assert SkewFactors.of(w0, 4, 4) == SkewFactors(1.0, 1.0, 1.0)


@pytest.mark.parametrize("name", ["exchange_map", "skew_map"])
def test_both_maps_refuse_records_without_their_exchanges_in_one_line(name, tmp_path, capsys):
    """The maps' shared command: records of no map exchange are a usage error (exit 2, one line), nothing written."""
    import importlib

    records = ROOT / "tests" / "data" / "step-2x4-tp4-c664ae2.jsonl"  # a step's records: no AllToAll timing
    profile = PROFILE.save(tmp_path / "lp.json")
    argv = ["--measured", str(records), "--profile", str(profile), "--out", str(tmp_path / "out")]
    assert importlib.import_module(f"monta_analysis.{name}").main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no records of deepspeed, monta" in err[0] and not (tmp_path / "out").exists()
