"""The token-level and hierarchical exchanges (``2dh``, ``allgather``, ``node-dedup``) against stock
DeepSpeed MoE: outputs and gradients over layouts, expert counts and top-k; their bytes.

One gloo world of 8 ranks (2 nodes x 4). fp32 with top-k <= 2 is bitwise: each token's output and
input gradient is a sum of at most two non-zero terms, exact in any order. Beyond two routes the
partial sums meet in another order (per node, per rank), so fp32 is held to FP32_RTOL and bf16 to
BF16_RTOL (the wire carries bf16 partial sums, as DeepEP's and Megatron's combines do).
"""

from __future__ import annotations

import pytest
import torch

import moe_cases

pytestmark = pytest.mark.slow

NEW = ("2dh", "allgather", "node-dedup")
# (tp, ep) on 2 nodes x 4: EP across both nodes with 4, 2, 1 members per node, and EP inside a node
LAYOUTS = [(1, 8), (2, 4), (4, 2), (1, 4)]
ROUTING = [(8, 1), (8, 2), (16, 4), (16, 8)]  # (experts, top-k)
FP32_RTOL = 1e-5
BF16_RTOL = 2**-6  # two bf16 roundings of a partial sum instead of one


def _matrix():
    for tp, ep in LAYOUTS:
        for experts, k in ROUTING:
            for exchange in NEW:
                yield pytest.param(tp, ep, experts, k, exchange, id=f"tp{tp}-ep{ep}-e{experts}-k{k}-{exchange}")


def _close(r, rtol):
    scale = max(1.0, r["ref_scale"])
    worst = max([r["out_diff"], r["x_grad_diff"], *r["grad_diffs"].values()])
    return worst <= rtol * scale, worst


@pytest.mark.parametrize("tp,ep,experts,k,exchange", list(_matrix()))
def test_matches_stock_deepspeed(dist_world, tp, ep, experts, k, exchange):
    results = dist_world(8).run(
        moe_cases.compare_case,
        nodes=2,
        gpn=4,
        tp=tp,
        ep=ep,
        k=k,
        expert_tp=tp > 1,
        exchange=exchange,
        chunks=1,
        experts=experts,
        tokens=64,
    )
    for r in results:
        assert r["missing_grads"] == [], r
        if k <= 2 or exchange == "2dh":  # 2dh moves the same blocks: always bitwise
            assert r["bitwise"], {k: v for k, v in r.items() if k != "phases"}
        else:
            ok, worst = _close(r, FP32_RTOL)
            assert ok, f"rank {r['rank']}: worst diff {worst}"
        assert r["inter_bytes"] > 0 or ep <= 4, r  # EP of 8 (or 4 x 2 nodes) crosses the nodes


@pytest.mark.parametrize("dtype_k", [("bfloat16", 2), ("bfloat16", 8)])
def test_bf16_within_tolerance(dist_world, dtype_k):
    dtype, k = dtype_k
    for exchange in NEW:
        results = dist_world(8).run(
            moe_cases.compare_case,
            nodes=2,
            gpn=4,
            tp=2,
            ep=4,
            k=k,
            expert_tp=True,
            exchange=exchange,
            chunks=1,
            experts=16,
            tokens=64,
            dtype=dtype,
        )
        for r in results:
            assert r["dtype"] == "torch.bfloat16"
            ok, worst = _close(r, BF16_RTOL)
            assert ok, f"{exchange} rank {r['rank']}: worst diff {worst}"


# (tp, ep, experts): 8 and 4 experts per node on 2 nodes
@pytest.mark.parametrize("tp,ep,experts", [(1, 8, 16), (2, 4, 8)])
def test_node_dedup_saves_inter_node_bytes_only_beyond_top1(dist_world, tp, ep, experts):
    """Balanced routing, every exchange's expert input equal; node-dedup's inter-node payload (summed over
    the ranks) equals deepspeed's at top-1 and is smaller at top-k >= 2 (4+ experts per node); every
    exchange's payload equals its formula."""
    import routed_cases

    for k in (1, 2, 4):
        res = dist_world(8).run(routed_cases.dispatch_bytes_case, nodes=2, gpn=4, tp=tp, ep=ep, experts=experts, k=k)
        for r in res:
            assert all(r[n]["equal"] for n in NEW), r
            assert r["2dh"]["payload"] == r["deepspeed"]["payload"] > 0
        # Over the cluster (a TP rank's token shard need not hold exactly 1/TP of the remote routes)
        ds, dd = (sum(r[n]["payload"] for r in res) for n in ("deepspeed", "node-dedup"))
        if k == 1:
            assert dd == ds, (k, ds, dd)
        else:
            assert dd < ds, (k, ds, dd)
        r0 = res[0]
        for n in ("deepspeed",) + NEW:
            assert r0[n]["payload"] == r0[n]["formula"], (n, k, r0)


def test_local_arithmetic_check_runs_on_cpu():
    """tools/gpu_routed_check.py (the one-GPU check) on this machine's CPU: dispatch == encode,
    combine == decode at EP 1, for each token-level exchange."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "tools/gpu_routed_check.py", "--device", "cpu"], cwd=root, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")


def test_a_holder_without_rows_weights_nothing():
    """A rank that received no rows in a window (Lina's windows of a top-8 routing) combines an empty
    share: weighted_partials of 0 rows is [0, M], not an error (which desynchronized the ranks)."""
    import torch

    from monta.comm.routing import weighted_partials

    table = torch.randn(3, 5)
    empty = torch.zeros(8, 0, dtype=torch.long)
    out = weighted_partials(table, empty, torch.zeros(8, 0))
    assert out.shape == (0, 5) and out.dtype == table.dtype


def test_a_bench_input_moves_its_routing_with_its_tokens():
    """A layer's gate computes its routing on the data's device, and the token-level exchanges index the
    device's rows with it: the bench's input moves its plan (and its dropless twin's) with the tokens. A
    plan left on the CPU failed in index_select on an H200 (tools/gpu_check.py's token-level case)."""
    from monta.bench.routes import make_input

    inp = make_input(0, 0, (4, 8, 16), torch.float32, 2, device="meta")
    assert {t.device.type for t in (inp.tokens, inp.buffer, inp.plan.slots, inp.plan.gates)} == {"meta"}
    here = make_input(0, 0, (4, 8, 16), torch.float32, 2)
    moved = here.plan.to("meta")
    assert moved.slots.shape == here.plan.slots.shape and moved.capacity == here.plan.capacity
