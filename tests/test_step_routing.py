"""The router in the training step (docs/routing.md): each MoE layer's realized MaxVio and capacity drops
per step, summed over rank 0's EP group, equal what monta.routing computes from the same choices;
``--routing SPEC`` replaces the gate's expert choice with a workload's (its slots exactly the Routing's,
the gate still trained); a bad spec is one line, exit 2. One 4-rank world (2 x 2, TP 2, EP 2), a tiny
model, 1-2 steps."""

from __future__ import annotations

import math

import pytest
import torch

# 2 layers, 4 experts top-2, 32 tokens per rank: capacity ceil(32 / 4 x 2) = 16 (above min_capacity 4)
OVERRIDES = {"layers": 2, "hidden": 64, "ffn": 64, "experts": 4, "topk": 2, "seq": 32, "micro_batch": 1}


def _layout_cfg():
    from monta.model.config import resolve_config
    from monta.parallel import ParallelLayout

    return ParallelLayout(2, 2, tp=2, ep=2), resolve_config("moe-2x70b-mini", **OVERRIDES)


def _capacity(cfg) -> int:
    from monta.chunking import expert_capacity

    return expert_capacity(
        cfg.tokens_per_micro_batch, cfg.num_experts, cfg.capacity_factor, cfg.top_k, cfg.min_capacity
    )


def _steps(routing, variants, steps):
    from monta.bench.step.worker import run_interleaved

    layout, cfg = _layout_cfg()
    return run_interleaved(layout, cfg, variants, chunks=2, steps=steps, warmup=0, seed=1234, routing=routing)


@pytest.fixture(scope="module")
def runs(dist_world):
    world = dist_world(4)
    return {
        "gate": world.run(_steps, None, ["deepspeed"], 2, timeout_s=600),
        "W0": world.run(_steps, "W0", ["deepspeed"], 1, timeout_s=600),
        "W5": world.run(_steps, "W5", ["deepspeed", "monta", "lina"], 1, timeout_s=600),
    }


def _router(per_rank, v):
    from monta.bench.step.router import router_metrics

    layout, cfg = _layout_cfg()
    return router_metrics(layout, cfg, per_rank, v)


def test_gate_records_its_load_and_drops_per_layer_and_step(runs):
    """The gate's own choice: every route counted once, drops exactly the counts past the capacity on each
    rank (position policy), TP replicas alike, and the record's MaxVio/drop share those of the summed counts."""
    from monta.routing.stats import maxvio

    per_rank = runs["gate"]
    layout, cfg = _layout_cfg()
    C = _capacity(cfg)
    r = _router(per_rank, "deepspeed")
    assert r["ep_ranks"] == [0, 2]  # rank 0's EP group at TP 2: one member per node
    assert len(r["maxvio_per_layer"]) == 2 and all(len(s) == cfg.num_layers for s in r["maxvio_per_layer"])
    for i in range(2):
        for layer in range(cfg.num_layers):
            tallies = [per_rank[rank]["deepspeed"]["router"][i][layer] for rank in range(4)]
            assert tallies[0] == tallies[1] and tallies[2] == tallies[3]  # TP ranks route the same tokens
            for t in tallies:
                assert sum(t["counts"]) == cfg.tokens_per_micro_batch * cfg.top_k
                assert t["dropped_routes"] == sum(max(0, c - C) for c in t["counts"])
            load = [a + b for a, b in zip(tallies[0]["counts"], tallies[2]["counts"])]
            assert r["expert_load_per_layer"][i][layer] == load
            assert r["maxvio_per_layer"][i][layer] == pytest.approx(maxvio(load), abs=0)
            dropped = tallies[0]["dropped_routes"] + tallies[2]["dropped_routes"]
            assert r["drop_fraction_per_layer"][i][layer] == dropped / sum(load)
    flat = [x for s in r["maxvio_per_layer"] for x in s]
    assert r["maxvio"] == pytest.approx(sum(flat) / len(flat))
    assert r["maxvio_layer_min"] <= r["maxvio"] <= r["maxvio_layer_max"]
    assert r["maxvio"] > 0  # a gate at initialization does not route evenly


def test_routing_w0_is_balanced_and_drops_nothing(runs):
    r = _router(runs["W0"], "deepspeed")
    assert r["maxvio"] == 0 and r["maxvio_layer_max"] == 0
    assert r["dropped_routes"] == 0 and r["dropped_tokens"] == 0 and r["drop_fraction"] == 0


def test_routing_w5_runs_to_the_end_and_equals_the_routing(runs):
    """W5 (member 1 receives nothing): the step's figures in every layer are the Routing's own, the same
    for every variant (one routing for every exchange; Lina's schedule routes through the layer too), and
    the losses are finite."""
    from monta.bench.step.router import step_routing

    per_rank = runs["W5"]
    layout, cfg = _layout_cfg()
    routing = step_routing("W5", cfg, layout)
    facts = routing.summary(cap=_capacity(cfg))
    assert facts["dropped_routes"] > 0  # half the experts take every route: the capacity drops
    for v in ("deepspeed", "monta", "lina"):
        r = _router(per_rank, v)
        for layer in range(cfg.num_layers):
            assert r["expert_load_per_layer"][0][layer] == facts["expert_load"]
            assert r["maxvio_per_layer"][0][layer] == facts["maxvio"] == 1.0
        assert r["dropped_routes"] == cfg.num_layers * facts["dropped_routes"]
        assert r["dropped_tokens"] == cfg.num_layers * facts["dropped_tokens"]
        assert all(math.isfinite(rank[v]["loss"][0]) for rank in per_rank)


def test_each_rank_routes_exactly_its_members_choices_and_the_observers_return_them(runs):
    """The --routing walk's end (docs/routing.md): run_interleaved builds every variant's layers with EP
    member r's ``WorkloadChoices`` (``choices=`` at construction), and what each rank's layers routed,
    read back through the model's ``Observers``, is exactly that member's row of the routing: its
    per-expert load and its drops at the capacity, in every layer and variant."""
    from monta.bench.step.router import ep_members, step_routing

    per_rank = runs["W5"]
    layout, cfg = _layout_cfg()
    routing, C = step_routing("W5", cfg, layout), _capacity(cfg)
    rows = 0
    for rank in range(4):
        member = ep_members(layout, rank).index(rank)
        choices, valid = routing.choices[member], routing.valid[member]
        load = torch.bincount(choices[valid], minlength=cfg.num_experts).tolist()
        dropped = int(routing.dropped(C)[member].sum())
        for v in ("deepspeed", "monta", "lina"):
            for t in per_rank[rank][v]["router"][0]:
                assert t["counts"] == load and t["dropped_routes"] == dropped, (rank, v)
                rows += 1
        gate = runs["gate"][rank]["deepspeed"]["router"][0]
        assert all(t["counts"] != load for t in gate)  # the gate's own choice was another: it was replaced
    assert rows == 4 * 3 * cfg.num_layers


def test_the_step_records_and_report_carry_the_router(runs, capsys):
    import dataclasses

    from monta.bench.step.config import StepConfig
    from monta.bench.step.records import variant_params
    from monta.bench.step.report import report

    layout, cfg = _layout_cfg()
    spec = StepConfig(
        nodes=2,
        gpus_per_node=2,
        tp=2,
        overrides=OVERRIDES,
        variants=("deepspeed", "monta"),
        steps=1,
        warmup=0,
        chunks=2,
        chunks_used=2,
        routing="W5",
    )
    report(spec, layout, cfg, runs["W5"])
    out = capsys.readouterr().out
    assert "# router (--routing W5; " in out and "deepspeed MaxVio 1.00 (layer range 1.00-1.00)" in out
    assert "the synthetic workloads' MaxVio at the same experts, top-k and tokens: W0 0.00," in out
    assert variant_params(spec, layout, cfg, "monta", 1)["routing"] == "W5"
    assert variant_params(dataclasses.replace(spec, routing=None), layout, cfg, "monta", 1)["routing"] == "gate"


def test_workload_gate_routes_as_the_routing_and_trains_the_gate():
    """Without a world: a rank's slots under a workload are exactly ``Routing.slots``, the kept routes'
    weights sum to 1 per token, and the gate's weight gets a gradient."""
    from deepspeed.moe.sharded_moe import TopKGate, _route_slots

    from monta.moe.gate_routing import workload_gate
    from monta.routing import make_routing

    torch.manual_seed(0)
    for spec in ("W1", "W4", "lognormal:maxvio=1"):
        routing = make_routing(spec, 2, 32, 8, 2, 2)  # capacity 8 = 32 / 8 x 2: W1 drops
        gate = TopKGate(8, 8, k=2)
        for rank in range(2):
            l_aux, C, E, idx, loc, gates, counts = workload_gate(gate, torch.randn(32, 8), routing.choices[rank], 8)
            assert torch.equal(_route_slots(idx, loc, E, int(C)), routing.slots(rank, 8))
            kept = (idx >= 0).any(0)
            assert torch.allclose(gates.sum(0)[kept], torch.ones(int(kept.sum())))
            assert counts.tolist() == torch.bincount(routing.choices[rank][routing.valid[rank]], minlength=8).tolist()
            (gates.sum() + l_aux).backward()
        assert gate.wg.weight.grad is not None and gate.wg.weight.grad.abs().sum() > 0


def test_a_schedule_with_its_own_gate_is_refused_under_routing():
    from monta.bench.step.router import check_forced

    check_forced("lancet", [None, None], None)  # no --routing: its records say nothing of the router
    with pytest.raises(ValueError, match="routes with its schedule's own gate"):
        check_forced("lancet", [None, None], "W1")


def test_lancet_under_routing_is_refused_before_any_rank_starts(capsys):
    """The rank-side refusal above, said up front: one line, exit 2, nothing launched."""
    from monta.cli import main

    argv = ["bench", "step", "--launcher", "local", "--nodes", "2", "--gpus-per-node", "1", "--topk", "2"]
    rc = main([*argv, "--variants", "deepspeed,monta+lancet", "--routing", "W3"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "variant monta+lancet: the lancet schedule gates with its own router" in err


@pytest.mark.parametrize(
    "spec, says",
    [("W9", "unknown workload 'W9'"), ("lognormal:maxvio=100", "unreachable"), ("W1:heat=x", "is not a number")],
)
def test_a_bad_routing_is_one_line_and_exit_2(capsys, spec, says):
    from monta.cli import main

    rc = main(["bench", "step", "--launcher", "local", "--nodes", "2", "--gpus-per-node", "1", "--routing", spec])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("monta: error: --routing: ") and says in err
