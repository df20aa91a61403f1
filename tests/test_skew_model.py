"""The model under skewed routing (monta/perfmodel/network/skew.py, ``monta predict skew``): capacity buffers
keep their time and drop exactly the routes past capacity; token-level exchanges that move what the routing
sends slow down with the most-loaded rank, more the hotter it is; W0 is the balanced price exactly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from monta.hardware.profile import get_cluster
from monta.perfmodel.network.alltoall import make_layout
from monta.perfmodel.network.exchange import exchange_time
from monta.perfmodel.network.skew import SkewFactors, skew_price, skew_table, split_specs
from monta.routing import make_routing

LAYOUT = make_layout(2, 4, 1)  # EP 8 over 2 nodes
CLUSTER = get_cluster("a800", 2, 4)
E, K, M, EL = 16, 2, 256, 4
SIZE = 4 * 2**20
T = E * (SIZE // (E * M * EL)) // K  # tokens per rank of the bench's shape
CAPACITY = ("legacy", "deepspeed", "monta", "2dh")


def _price(variant, spec):
    r = make_routing(spec, 8, T, E, K, 2)
    return r, skew_price(variant, r, SIZE, LAYOUT, CLUSTER, row_bytes=M * EL)


def _drops_by_count(r, cap):
    """Routes past capacity, counted independently: per rank and expert, max(0, routes - C)."""
    total = 0
    for rank in range(r.ranks):
        c = r.choices[rank]
        total += int((torch.bincount(c[c >= 0], minlength=E) - cap).clamp_min(0).sum())
    return total


@pytest.mark.parametrize("variant", CAPACITY + ("allgather", "node-dedup"))
def test_balanced_routing_prices_every_exchange_as_before(variant):
    r, p = _price(variant, "W0")
    assert SkewFactors.of(r) == SkewFactors(1.0, 1.0, 1.0)
    want = exchange_time(variant, SIZE, LAYOUT, CLUSTER, top_k=K, experts=E, row_bytes=M * EL).total_us
    assert p.worst_us == pytest.approx(want, rel=1e-12) and p.balanced_us == pytest.approx(want, rel=1e-12)
    assert p.dropped_routes == 0


@pytest.mark.parametrize("spec", ["W1", "W2", "W5", "W7", "lognormal:maxvio=1", "zipf:s=1.2"])
@pytest.mark.parametrize("variant", CAPACITY)
def test_capacity_buffers_keep_their_time_and_drop_exactly_the_overflow(variant, spec):
    r, p = _price(variant, spec)
    assert not p.dropless and p.worst_us == p.balanced_us
    cap = r.capacity(1.0)
    assert p.dropped_routes == _drops_by_count(r, cap) > 0
    assert p.drop_fraction == p.dropped_routes / (8 * T * K)


def test_a_token_exchange_that_follows_the_routing_slows_with_the_hot_rank_and_drops_nothing():
    worst = [_price("node-dedup", f"lognormal:maxvio={v}")[1] for v in (0.2, 1, 4)]
    assert all(p.dropless and p.dropped_routes == 0 for p in worst)
    assert worst[0].balanced_us < worst[0].worst_us < worst[1].worst_us < worst[2].worst_us
    hot_rank, spread = _price("node-dedup", "W2")[1], _price("node-dedup", "W3")[1]
    assert hot_rank.worst_us > spread.worst_us  # the same heat on one rank costs more than spread out


def test_a_gather_of_every_token_keeps_its_price_under_skew():
    r, p = _price("allgather", "W2")
    assert p.dropless and p.worst_us == p.balanced_us and p.dropped_routes == 0


def test_a_capacity_factor_puts_fewer_tokens_in_the_same_buffer():
    """cf 1.25 (``tokens_per_rank``): T = E C / (k cf) rounded down to whole balanced routes that split
    over TP; the buffer exchanges keep the buffer's price and drop nothing at W0; the token-level ones
    move the T k routes there are, not the buffer."""
    from monta.routing.stats import tokens_per_rank

    C = SIZE // (E * M * EL)  # 256
    assert tokens_per_rank(E, C, K) == T == 2048
    assert tokens_per_rank(E, C, K, 1.25) == 1632  # 1638.4 down to a multiple of E / k = 8
    assert tokens_per_rank(E, C, K, 1.25, tp=16) == 1632 and tokens_per_rank(E, C, K, 1.25, tp=5) == 1600
    with pytest.raises(ValueError, match="leaves no whole top-2 tokens"):
        tokens_per_rank(E, 1, K, 64.0)
    [(r, prices)] = skew_table(["W0"], ["deepspeed", "node-dedup"], LAYOUT, CLUSTER, SIZE, E, M, EL, K, 1.25)
    ds, nd = prices
    assert r.tokens == 1632 and r.maxvio() == 0.0
    assert ds.worst_us == pytest.approx(_price("deepspeed", "W0")[1].worst_us, rel=1e-12) and ds.dropped_routes == 0
    # node-dedup at 1632 tokens is priced as the full buffer of those tokens would be
    want = exchange_time("node-dedup", 1632 * K * M * EL, LAYOUT, CLUSTER, top_k=K, experts=E, row_bytes=M * EL)
    assert nd.worst_us == pytest.approx(want.total_us, rel=1e-12)
    assert nd.worst_us < _price("node-dedup", "W0")[1].worst_us
    # a hot node fills the room the factor left: fewer drops than at cf 1
    [(_, (hot125, _))] = skew_table(["hotnode"], ["deepspeed", "node-dedup"], LAYOUT, CLUSTER, SIZE, E, M, EL, K, 1.25)
    assert 0 < hot125.drop_fraction < _price("deepspeed", "hotnode")[1].drop_fraction


def test_skew_can_change_the_winner():
    rows = skew_table(["W0", "W7"], ["deepspeed", "node-dedup"], LAYOUT, CLUSTER, SIZE, E, M, EL, K, 1.0)
    (w0, (ds0, nd0)), (w7, (ds7, nd7)) = rows
    assert w7.maxvio() == 7.0
    assert nd7.worst_us / ds7.worst_us > nd0.worst_us / ds0.worst_us  # the dropless exchange loses ground
    assert ds7.dropped_routes > 0 == nd7.dropped_routes


def test_a_routing_of_another_shape_is_refused():
    r = make_routing("W1", 4, T, E, K, 2)
    with pytest.raises(ValueError, match="has 4 ranks on 2 nodes; the EP group has 8 on 2"):
        skew_price("deepspeed", r, SIZE, LAYOUT, CLUSTER)


def test_spec_lists_keep_parameters_with_their_workload():
    assert split_specs("W0,lognormal:maxvio=1,seed=2,W3") == ["W0", "lognormal:maxvio=1,seed=2", "W3"]


def _monta(*args):
    return subprocess.run([sys.executable, "-m", "monta.cli", *args], capture_output=True, text=True, timeout=300)


def test_predict_skew_prints_and_records_worst_times_and_drops(tmp_path):
    out = tmp_path / "skew.jsonl"
    p = _monta("predict", "skew", "--routing", "W0,W2", "--exchanges", "deepspeed,node-dedup", "--out", str(out))
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.strip().startswith(("W0", "W2"))]
    assert len(lines) == 4 and "dropless" in lines[1]
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["params"]["routing"], r["params"]["variant"]) for r in recs] == [
        ("W0", "deepspeed"),
        ("W0", "node-dedup"),
        ("W2", "deepspeed"),
        ("W2", "node-dedup"),
    ]
    assert recs[2]["metrics"]["dropped_routes"] > 0 and recs[3]["metrics"]["dropless"] is True


def test_predict_skew_bad_routing_is_one_line_exit_2():
    p = _monta("predict", "skew", "--routing", "W9")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "monta: error: routing 'W9': unknown workload 'W9'; choose W0..W7, lognormal:maxvio=1 or zipf:s=1.2"
    ]
