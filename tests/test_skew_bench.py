"""``monta bench alltoall --routing SPEC``'s check on a 2 x 4 gloo world at TP 1, 2 and 4 over every
workload: 0 wrong elements for every exchange (a capacity exchange against stock DeepSpeed's buffer of the
same routing, a dropless one against the buffer at the dropless capacity), and the routes each output
holds: the same for every capacity exchange (all routes but the routing's dropped ones), all of them for
a dropless exchange. W0 is the balanced routing of before (its records untouched)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monta.results import read_records

pytestmark = pytest.mark.slow

EXCHANGES = ("legacy", "deepspeed", "monta", "2dh", "allgather", "node-dedup")
WORKLOADS = ("W0", "W1", "W2", "W3", "W4", "W5", "W6", "W7", "lognormal:maxvio=1", "lognormal:maxvio=4", "zipf:s=1.2")
EXPERTS, HIDDEN, K = 16, 16, 2
SIZE = EXPERTS * 32 * HIDDEN * 4  # C = 32: 256 tokens per rank at top-2


def skew_check_case(tp: int, specs, cf: float = 1.0) -> dict:
    """Rank side: the bench's own check (monta.bench.alltoall.runner.check_routes) for every workload at one TP."""
    import torch

    from monta.bench.alltoall.config import AlltoallAids, AlltoallConfig
    from monta.bench.alltoall.runner import Runner, buffer_shape, check_routes, variant_rows

    cfg = AlltoallConfig(
        nodes=2, gpus_per_node=4, tp=tp, ep=8 // tp, sizes=(SIZE,), variants=EXCHANGES, chunks=(2,),
        dtype="float32", experts=EXPERTS, hidden=HIDDEN, warmup=0, iters=1, adaptive=False, max_iters=1,
        target_ci=0.0, budget_s=0.0, transport=None, aids=AlltoallAids(check=True), components=True,
        out=None, append=False, experiment="skew", backend="gloo", topology={},
        chunks_arg="2", topk=K, capacity_factor=cf,
    )  # fmt: skip
    r = Runner(cfg)
    shape = buffer_shape(SIZE, EXPERTS, HIDDEN, 4, tp)
    rows = variant_rows(cfg)
    out = {"rows": rows, "capacity_based": {v: r.capacity_based(v) for v, _ in rows}}
    for spec in specs:
        r.routing_spec = spec
        wrong, held = check_routes(r, rows, [shape], [SIZE], torch.float32, "cpu", False)
        pr = r.point(shape)
        out[spec] = {"wrong": wrong[0].tolist(), "held": held[0].tolist(), "facts": pr.facts() if pr else None}
    return out


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_every_exchange_under_every_workload_is_exact_and_drops_the_same_routes(dist_world, tp):
    got = dist_world(8).run(skew_check_case, tp, WORKLOADS)[0]
    rows, cap = got["rows"], got["capacity_based"]
    routes = (8 // tp) * EXPERTS * 32  # every member's T k routes, over one EP group
    for spec in WORKLOADS:
        res = got[spec]
        assert res["wrong"] == [0] * len(rows), (spec, list(zip(rows, res["wrong"])))
        facts = res["facts"] or {"routes": routes, "dropped_routes": 0}
        if spec == "W4":
            assert facts["routes"] < routes  # ragged sources hold fewer tokens
        kept = facts["routes"] - facts["dropped_routes"]
        for (v, _), held in zip(rows, res["held"]):
            if v in ("a2a", "ag"):
                continue
            assert held == (kept if cap[v] else facts["routes"]), (spec, v, held, kept)
        if spec != "W0" and spec != "W4":
            assert facts["dropped_routes"] > 0  # the capacity exchanges did drop, all the same routes


@pytest.mark.timeout(900)
def test_a_capacity_factor_above_one_is_exact_and_drops_only_past_the_buffer(dist_world):
    """--capacity-factor 1.25 at TP 2: W0 goes through the routing path with a partly empty buffer (nothing
    dropped), a skewed routing fills the room before it drops, and every exchange is exact."""
    from monta.routing.stats import tokens_per_rank

    specs = ("W0", "hotnode", "lognormal:maxvio=4")
    got = dist_world(8).run(skew_check_case, 2, specs, 1.25)[0]
    at1 = dist_world(8).run(skew_check_case, 2, specs[1:], 1.0)[0]
    rows, cap = got["rows"], got["capacity_based"]
    tokens = tokens_per_rank(EXPERTS, 32, K, 1.25, 2)
    assert tokens == 200  # 204.8 down to a multiple of E / k = 8
    for spec in specs:
        res = got[spec]
        facts = res["facts"]
        assert res["wrong"] == [0] * len(rows), (spec, list(zip(rows, res["wrong"])))
        assert facts["routes"] == 4 * tokens * K and facts["capacity"] == 32
        kept = facts["routes"] - facts["dropped_routes"]
        for (v, _), held in zip(rows, res["held"]):
            if v not in ("a2a", "ag"):
                assert held == (kept if cap[v] else facts["routes"]), (spec, v, held, kept)
        if spec == "W0":
            assert facts["dropped_routes"] == 0 and facts["maxvio"] == 0.0
        else:
            assert 0 < facts["drop_fraction"] < at1[spec]["facts"]["drop_fraction"]


def _bench(tmp_path, *args):
    cmd = [sys.executable, "-m", "monta.cli", "bench", "alltoall", "--nodes", "2", "--gpus-per-node", "2",
           "--sizes", "64K", "--hidden", "256", "--experts", "8", "--topk", "2", "--chunks", "2", "--iters", "2",
           "--warmup", "0", "--no-wandb", "--allow-unshaped", "--out", str(tmp_path / "r.jsonl"), *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("spec", ["W5", "W7"])
def test_bench_records_carry_the_routing_and_w5_w7_run_to_the_end(tmp_path, spec):
    p = _bench(tmp_path, "--check", "--routing", spec, "--exchanges", "deepspeed,monta,node-dedup")
    assert p.returncode == 0, p.stderr[-3000:]
    recs = {r["params"]["variant"]: r for r in read_records(tmp_path / "r.jsonl")}
    ds, nd = recs["deepspeed"]["metrics"], recs["node-dedup"]["metrics"]
    assert all(r["params"]["routing"] == spec and r["metrics"]["wrong"] == 0 for r in recs.values())
    assert ds["maxvio"] == nd["maxvio"] > 0 and ds["dropped_routes"] > 0 and not ds["dropless"]
    assert nd["dropless"] and nd["dropped_routes"] == 0 and nd["held_routes"] == ds["routes"]
    assert ds["held_routes"] == recs["monta"]["metrics"]["held_routes"] == ds["routes"] - ds["dropped_routes"]


@pytest.mark.parametrize(("flag", "says"), [("0", "--capacity-factor 0"), ("nan", "--capacity-factor nan")])
def test_bad_capacity_factor_fails_before_any_rank_starts(tmp_path, flag, says):
    p = _bench(tmp_path, "--capacity-factor", flag)
    assert p.returncode == 2
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("monta: error:") and says in last, last


def test_bad_routing_fails_before_any_rank_starts(tmp_path):
    p = _bench(tmp_path, "--routing", "lognormal:maxvio=9")
    assert p.returncode == 2
    assert (
        p.stderr.strip()
        .splitlines()[-1]
        .startswith("monta: error: routing 'lognormal:maxvio=9': maxvio=9 is unreachable")
    )
