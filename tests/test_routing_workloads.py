"""Routing workloads (monta.routing): each workload's loads as docs/routing.md defines them, realized
MaxVio, determinism in (workload, seed, step), the capacity's drop rule equal to DeepSpeed's own gate, and
the spec parser's one-line errors."""

from __future__ import annotations

import pytest
import torch

from monta.routing import Routing, make_routing, parse_spec
from monta.routing.construct import counts_from_weights, rows_with_counts

ALL = ["W0", "W1", "W2", "W3", "W4", "W5", "W6", "W7", "lognormal:maxvio=1", "zipf:s=1.2"]
SHAPE = dict(ranks=8, tokens=64, experts=16, k=2, nodes=2)


@pytest.mark.parametrize("spec", ALL)
def test_every_token_has_k_distinct_experts_and_the_routing_is_reproducible(spec):
    r = make_routing(spec, **SHAPE)
    assert r.choices.shape == (8, 64, 2) and r.choices.dtype == torch.long
    rows = r.choices[r.valid.all(2)]
    assert bool((rows[:, 0] != rows[:, 1]).all())
    assert int(r.choices.max()) < 16 and bool(((r.choices >= 0) == r.valid).all())
    assert torch.equal(r.choices, make_routing(spec, **SHAPE).choices)
    assert not torch.equal(r.choices, make_routing(spec + (",seed=1" if ":" in spec else ":seed=1"), **SHAPE).choices)
    assert int(r.expert_load().sum()) == int(r.valid.sum()) == int(r.rank_load().sum()) == int(r.node_load().sum())


def test_w0_is_exactly_balanced_on_every_rank_and_drops_nothing():
    r = make_routing("W0", **SHAPE)
    assert r.maxvio() == 0.0
    for rank in range(8):
        assert torch.bincount(r.choices[rank].reshape(-1), minlength=16).tolist() == [8] * 16
    assert r.summary(1.0)["dropped_routes"] == 0 and r.capacity(1.0) == 8


@pytest.mark.parametrize("target", [0.2, 1.0, 4.0])
def test_lognormal_realizes_its_target_maxvio_within_ten_percent(target):
    r = make_routing(f"lognormal:maxvio={target}", ranks=8, tokens=128, experts=16, k=2, nodes=2)
    assert abs(r.maxvio() - target) <= 0.1 * target


def test_lognormal_out_of_reach_says_what_to_change():
    with pytest.raises(ValueError, match="unreachable with 8 experts at top-2.*smaller target or more experts"):
        make_routing("lognormal:maxvio=3", ranks=4, tokens=32, experts=8, k=2)


def test_zipf_loads_fall_with_rank_as_a_power_law():
    r = make_routing("zipf:s=1.2", ranks=4, tokens=4096, experts=8, k=1)
    load = sorted(r.expert_load().tolist(), reverse=True)
    want = [4 * 4096 / (i + 1) ** 1.2 / sum(1 / (j + 1) ** 1.2 for j in range(8)) for i in range(8)]
    assert load == pytest.approx(want, abs=1.0)  # exact counts: largest-remainder rounding only


def test_hot_rank_has_the_hot_expert_sets_share_and_spread_puts_it_on_other_nodes():
    w1, w2, w3 = (make_routing(s, **SHAPE) for s in ("W1", "W2", "W3"))
    assert w1.maxvio() == pytest.approx(w2.maxvio(), rel=0.02) == pytest.approx(w3.maxvio(), rel=0.02)
    assert int(w2.rank_load().argmax()) == 0 and int(w2.rank_load()[0]) > 2 * int(w2.rank_load()[1:].max())
    hot = (w3.expert_load() > 2 * w3.expert_load().median()).nonzero().view(-1).tolist()
    assert hot == [0, 8]  # strided: members 0 and 4, one on each node
    assert w3.node_load()[0] == pytest.approx(float(w3.node_load()[1]), rel=0.05)


def test_rotating_hotspot_moves_with_the_step():
    hot = [int(make_routing(f"W6:step={s}", **SHAPE).rank_load().argmax()) for s in range(10)]
    assert hot == [s % 8 for s in range(10)]


def test_zero_load_rank_receives_nothing_and_ragged_sources_hold_fewer_tokens():
    w5 = make_routing("W5", **SHAPE)
    assert int(w5.rank_load()[7]) == 0 and bool((w5.rank_load()[:7] > 0).all())
    w4 = make_routing("W4", **SHAPE)
    assert w4.active_tokens().tolist() == [64, 59, 55, 50, 46, 41, 37, 32]
    assert int(w4.expert_load().max() - w4.expert_load().min()) <= 1  # routed evenly over the experts


def test_burst_comes_every_period_steps():
    assert make_routing("W7:step=0", **SHAPE).maxvio() > 3
    assert make_routing("W7:step=1", **SHAPE).maxvio() == 0.0
    assert make_routing("W7:step=4", **SHAPE).maxvio() > 3


def test_drops_are_first_come_by_token_order_per_expert():
    # one rank, 4 tokens top-1 over 2 experts, all to expert 0: capacity ceil(4/2 x 1) = 2 keeps tokens 0, 1
    r = Routing("hand", torch.tensor([[[0], [0], [1], [0]]]), experts=2, nodes=1)
    assert r.capacity(1.0) == 2
    assert r.dropped(2).view(-1).tolist() == [False, False, False, True]
    assert r.slots(0, 2).tolist() == [[0, 1, 2, 4]]  # e * C + place; dropped: E * C
    assert r.summary(1.0)["dropped_routes"] == 1 and r.dropless_capacity(2) == 4


@pytest.mark.parametrize("spec", ["W1", "W2", "W4", "W5", "W7", "lognormal:maxvio=4"])
@pytest.mark.parametrize("cf", [1.0, 1.25])
def test_kept_routes_and_places_equal_deepspeeds_topk_gate(spec, cf):
    from deepspeed.moe.sharded_moe import topkgating

    r = make_routing(spec, **SHAPE)
    cap = r.capacity(cf)
    for rank in range(r.ranks):
        c = r.choices[rank]
        rows = c[:, 0] >= 0
        c = c[rows]
        logits = torch.full((c.shape[0], 16), -30.0)
        logits.scatter_(1, c, torch.tensor([10.0, 9.0]).expand_as(c))
        _, _, mask, _ = topkgating(logits, 2, cf, 0, drop_policy="position")
        if r.active_tokens()[rank] == 64:  # DeepSpeed's capacity from the rows it sees
            assert mask.shape[2] == cap
        mine = torch.zeros_like(mask)
        places, kept = r.places()[rank][rows], r.kept(mask.shape[2])[rank][rows]
        for s, j in kept.nonzero().tolist():
            mine[s, c[s, j], places[s, j]] = True
        assert torch.equal(mine, mask)


def test_counts_are_exact_and_capped():
    counts = counts_from_weights(torch.tensor([100.0, 1, 1, 1]), tokens=10, k=2)
    assert counts.tolist() == [10, 4, 3, 3] and int(counts.sum()) == 20
    rows = rows_with_counts(counts, 10, 2, torch.Generator().manual_seed(0))
    assert torch.bincount(rows.view(-1), minlength=4).tolist() == [10, 4, 3, 3]
    assert bool((rows[:, 0] != rows[:, 1]).all())


@pytest.mark.parametrize(
    "text, message",
    [
        ("W9", "unknown workload 'W9'; choose W0..W7, lognormal:maxvio=1 or zipf:s=1.2"),
        ("lognormal", "lognormal needs maxvio=VALUE"),
        ("lognormal:maxvio=x", "maxvio='x' is not a number"),
        ("W1:hot=0", "hot=0 must be a finite number >= 1"),
        ("zipf:alpha=1", "zipf takes s=, seed=, step="),
        ("W3:heat=2,step=1.5", "step='1.5' is not an integer"),
    ],
)
def test_bad_specs_get_one_line_saying_what_to_write(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")) as e:
        parse_spec(text)
    assert "\n" not in str(e.value)


def test_shapes_a_workload_cannot_fill_are_refused():
    with pytest.raises(
        ValueError, match="do not split evenly over 16 experts; use a token count that is a multiple of 8"
    ):
        make_routing("W0", ranks=8, tokens=60, experts=16, k=2)
    with pytest.raises(ValueError, match="rank=9 is outside the 8 ranks"):
        make_routing("W2:rank=9", **SHAPE)
    with pytest.raises(ValueError, match="12 experts do not split over 8 ranks"):
        make_routing("W1", ranks=8, tokens=64, experts=12, k=2)
    assert parse_spec("w3").name == "W3" and parse_spec("LogNormal:maxvio=1").params == {"maxvio": 1.0}
