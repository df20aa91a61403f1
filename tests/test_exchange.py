"""Equivalence of the token exchanges with stock DeepSpeed MoE, byte accounting, and bad input.

Runs on persistent gloo worlds of 4 (2 nodes x 2) and 8 (2 nodes x 4) ranks; tests are ordered
so each world starts once (world-4 cases first, then world-8 cases).
"""

from __future__ import annotations

import pytest

import moe_cases

pytestmark = pytest.mark.slow

# (ranks per node, tp, ep) for 2 nodes; EP x TP beyond a node makes the EP groups inter-node.
LAYOUTS = {4: [(2, 1, 2), (2, 1, 4), (2, 2, 2)], 8: [(4, 1, 2), (4, 1, 4), (4, 2, 2), (4, 2, 4), (4, 4, 2)]}
VARIANTS = [("legacy", 1), ("deepspeed", 1), ("monta", 1), ("monta", 3), ("monta", 4)]


def _matrix():
    # Ordered so each world, then each layout, is visited once (worlds and groups are reused).
    for world, layouts in LAYOUTS.items():
        for gpn, tp, ep in layouts:
            for expert_tp in [False, True] if tp > 1 else [False]:
                for k in (1, 2):
                    for exchange, chunks in VARIANTS:
                        yield pytest.param(
                            world,
                            gpn,
                            tp,
                            ep,
                            expert_tp,
                            k,
                            exchange,
                            chunks,
                            id=f"w{world}-tp{tp}-ep{ep}-{'etp' if expert_tp else 'rep'}-k{k}-"
                            f"{exchange}{chunks if exchange == 'monta' else ''}",
                        )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_moe_layer_preserves_low_precision_dtype(dist_world, dtype):
    results = dist_world(4).run(
        moe_cases.compare_case, nodes=2, gpn=2, tp=2, ep=2, k=2, expert_tp=True, exchange="monta", chunks=3, dtype=dtype
    )
    for r in results:
        assert r["dtype"] == f"torch.{dtype}"
        assert r["bitwise"], r


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_exchange_pass_moves_bytes_exactly(dist_world, dtype):
    for r in dist_world(4).run(moe_cases.exchange_dtype_case, nodes=2, gpn=2, tp=2, ep=2, dtype=dtype, chunks=3):
        assert r["dtype"] == f"torch.{dtype}" and r["equal"] and r["shape"] == [4, 16, 6]


@pytest.mark.parametrize("world,gpn,tp,ep,expert_tp,k,exchange,chunks", list(_matrix()))
def test_matches_stock_deepspeed(dist_world, world, gpn, tp, ep, expert_tp, k, exchange, chunks):
    results = dist_world(world).run(
        moe_cases.compare_case,
        nodes=2,
        gpn=gpn,
        tp=tp,
        ep=ep,
        k=k,
        expert_tp=expert_tp,
        exchange=exchange,
        chunks=chunks,
    )
    for r in results:
        assert r["missing_grads"] == [], r
        # Same arithmetic, only data movement differs: fp32 results must be bitwise identical.
        assert r["bitwise"], (
            f"rank {r['rank']}: out diff {r['out_diff']}, x grad diff {r['x_grad_diff']}, "
            f"param grad diffs {r['grad_diffs']}"
        )
        assert r["chunks_used"] == (chunks if exchange == "monta" else 1)
    # The capacity slice is divisible by 4 but not by 3 in every layout: both paths are covered.
    cap = results[0]["capacity"]
    assert (cap // tp) % 4 == 0 and (cap // tp) % 3 != 0


def test_byte_accounting_shows_tp_factor(dist_world):
    w = dist_world(8)
    common = dict(nodes=2, gpn=4, tp=4, ep=2, k=1, expert_tp=True)
    legacy = w.run(moe_cases.compare_case, exchange="legacy", chunks=1, **common)
    ds = w.run(moe_cases.compare_case, exchange="deepspeed", chunks=1, **common)
    monta = w.run(moe_cases.compare_case, exchange="monta", chunks=4, **common)
    for lg, d, m in zip(legacy, ds, monta):
        assert m["inter_bytes"] > 0
        assert lg["inter_bytes"] == 4 * m["inter_bytes"]  # TP = 4: legacy re-sends every TP rank's copy
        assert d["inter_bytes"] == m["inter_bytes"] and d["intra_bytes"] == m["intra_bytes"]
        assert lg["intra_bytes"] == 0 and m["intra_bytes"] > 0  # the AllGather runs inside the node
        # forward and backward, dispatch and combine all go through the exchange
        assert all(v > 0 for v in m["phases"].values()), m["phases"]


@pytest.mark.parametrize(
    "exchange,chunks,layout_ep,match",
    [
        ("monta", 0, None, "chunks=0 must be >= 1"),
        ("monta", -2, None, "chunks=-2 must be >= 1"),
        ("tutel", 2, None, "unknown exchange 'tutel'"),
        ("monta", 4, 4, "ep_size=4 does not match the layout's EP degree 2"),
    ],
)
def test_bad_input_is_refused_before_any_collective(dist_world, exchange, chunks, layout_ep, match):
    results = dist_world(8).run(
        moe_cases.bad_input_case,
        nodes=2,
        gpn=4,
        tp=4,
        ep=2,
        expert_tp=True,
        exchange=exchange,
        chunks=chunks,
        layout_ep=layout_ep,
    )
    for r in results:
        assert r["error"] is not None and match in r["error"], r
        assert r["traffic"] == 0 and not r["a2a_busy"]
        assert r["allreduce"] == 8.0  # the world is still healthy


def test_smaller_capacity_later_uses_fewer_chunks_and_says_so_once(dist_world):
    """Built with 4 chunks (capacity slice 4), then a short last batch and an eval capacity factor of
    0.5 halve the capacity: those calls run 2 chunks, bitwise equal to stock DeepSpeed, logged once;
    a full batch afterwards runs 4 chunks again."""
    results = dist_world(8).run(
        moe_cases.shrinking_capacity_case, nodes=2, gpn=4, tp=4, ep=2, chunks=4, eval_capacity_factor=0.5
    )
    for r in results:
        assert r["calls"] == [
            ("full", 16, 4, True),
            ("short", 8, 2, True),
            ("eval", 8, 2, True),
            ("full again", 16, 4, True),
        ], r
        assert len(r["logged"]) == 1 and "chunks=4 is larger than this call's capacity slice 2" in r["logged"][0]


def test_ep_group_not_matching_layout_is_refused(dist_world):
    for msg in dist_world(8).run(moe_cases.wrong_group_case, nodes=2, gpn=4, tp=4, ep=2):
        assert msg is not None and "does not match the layout" in msg


def test_auto_chunks_come_from_the_performance_model(dist_world):
    from monta.chunking import Auto
    from monta.parallel import ParallelLayout
    from monta.perfmodel.network.chunks import model_chooser

    results = dist_world(8).run(
        moe_cases.compare_case, nodes=2, gpn=4, tp=4, ep=2, k=2, expert_tp=True, exchange="monta", chunks="auto"
    )
    cap = results[0]["capacity"]
    # The layer asks the model about its own full per-rank buffer: E=4 experts x C x M=8, fp32.
    want = Auto().resolve(4 * cap * 8 * 4, ParallelLayout(2, 4, 4, 2), cap // 4, model_chooser())
    for r in results:
        assert r["bitwise"], r
        assert r["chunks_used"] == want
