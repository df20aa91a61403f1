"""The host floor by the parts a CUDA-graph scope covers (``host_floor``) and EP A2A overlap as Megatron-Core's
merged 1F1B schedules it (``a2a_overlap``): what a scope removes, what the two streams pair up, what stays
exposed (the dependency chain, the unpaired first and last passes, the host's share)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monta.hardware.profile import get_cluster
from monta.perfmodel.training import host_floor as hf
from monta.perfmodel.training.a2a_overlap import OPS_PER_NODE, LayerParts, pair_us, unpaired_share
from monta.perfmodel.training.run_shape import RunModel
from monta.perfmodel.training.run_step import Layout, price_run

# Qwen3-30B-A3B's shape: 128 experts, top-8; at EP8 16 local experts
M = RunModel(layers=4, hidden=2048, ffn=768, experts=128, top_k=8, attention="gqa", heads=32, kv_heads=4,
             head_dim=128, vocab=0)  # fmt: skip
S = Layout(gpus=8, ep=8, micro_batch=1, seq=4096, global_batch_tokens=8 * 4096, dispatcher="alltoall")


def test_a_graph_scope_replays_its_parts_with_one_launch_each():
    full = hf.host_ops(M, S)
    assert full == hf.OPS_ATTENTION + hf.OPS_ROUTER + hf.OPS_PREPROCESS + hf.OPS_DISPATCH_COMBINE + 16 * hf.OPS_EXPERT
    router_prep = hf.host_ops(M, replace(S, cuda_graphs="moe_router moe_preprocess"))
    assert full - router_prep == hf.OPS_ROUTER + hf.OPS_PREPROCESS - 1
    router_only = hf.host_ops(M, replace(S, cuda_graphs="moe_router"))
    assert full - router_only == hf.OPS_ROUTER - 1
    partial = hf.host_ops(M, replace(S, cuda_graphs="partial"))
    assert (
        partial
        == hf.host_ops(M, replace(S, cuda_graphs="attn,moe_router,moe_preprocess"))
        == router_prep - (hf.OPS_ATTENTION - 1)
    )
    assert hf.host_ops(M, replace(S, cuda_graphs="full")) == 0.0
    # the experts stay outside every partial scope: FP8 doubles their ops, not the graphed parts'
    fp8 = hf.host_ops(M, replace(S, cuda_graphs="partial", precision="mxfp8"))
    assert fp8 - partial == 16 * hf.OPS_EXPERT
    assert hf.host_floor_us(M, S) == pytest.approx(3 * full * hf.HOST_US_PER_OP)


def test_the_flex_dispatcher_issues_fewer_router_and_preprocess_ops():
    flex = hf.host_ops(M, replace(S, dispatcher="hybridep"))
    assert hf.host_ops(M, S) - flex == hf.OPS_ROUTER + hf.OPS_PREPROCESS - hf.OPS_FLEX_ROUTER - hf.OPS_FLEX_PREPROCESS
    assert hf.OPS_FLEX_ROUTER + hf.OPS_FLEX_PREPROCESS == 17  # NVIDIA's GB200 guide's count with DeepEP


def test_an_unknown_scope_is_a_reason_not_a_price():
    assert hf.graph_scopes("") == frozenset() and hf.graph_scopes("Full") is None
    with pytest.raises(ValueError, match="unknown scope 'mla'"):
        hf.graph_scopes("attn mla")
    assert "unknown scope" in replace(S, cuda_graphs="attn,moe_route").check()


P = LayerParts(attn_fwd=100.0, attn_bwd=200.0, mlp_fwd=300.0, mlp_bwd=600.0, dispatch=0.0, combine=0.0)


def test_a_pair_without_exchange_or_host_is_its_compute():
    assert pair_us(P, 0.2) == pytest.approx(1200.0)


def test_an_exchange_is_hidden_only_behind_the_other_micro_batch_in_its_slot():
    # dispatch 250: the forward's dispatch (after attn_fwd at 100) runs beside the backward's dgrad (100-400),
    # the backward's dispatch (after dgrad, 400-650) beside wgrad (400-700); the forward's experts wait for
    # their dispatch (350) and the wgrad (700): 700-1000; the combine (50 each) sits beside attn_fwd and attn_bwd
    p = replace(P, dispatch=250.0, combine=50.0)
    assert pair_us(p, 0.0) == pytest.approx(1200.0)
    # a combine of 400: the backward's dgrad waits for the backward's combine (0-400), the forward's combine for
    # the forward's experts (1000-1300): 400 + dgrad 300 + wgrad 300 + mlp_fwd 300 + combine 400
    p = replace(P, combine=400.0)
    assert pair_us(p, 0.0) == pytest.approx(400 + 300 + 300 + 300 + 400)
    # contention: compute beside an exchange is stretched by c of the overlap
    p = replace(P, dispatch=250.0, combine=50.0)
    assert pair_us(p, 0.5) > pair_us(p, 0.0)


def test_an_exchange_longer_than_the_compute_is_exposed_by_its_own_chain():
    p = replace(P, attn_fwd=1.0, attn_bwd=1.0, mlp_fwd=1.0, mlp_bwd=2.0, dispatch=1000.0, combine=500.0)
    # comm stream: combine_bwd, dispatch_fwd, dispatch_bwd, combine_fwd in a row
    assert pair_us(p, 0.0) == pytest.approx(2 * (1000.0 + 500.0) + 1.0, abs=2.0)


def test_the_host_issues_both_micro_batches_and_waits_at_the_forwards_dispatch():
    us = 10.0
    host = (50 * us, 5 * us, 30 * us, 5 * us)  # attn, dispatch, mlp, combine: forward
    p = replace(P, host=host, host_per_op=us)
    issued = 3 * sum(host) + 9 * OPS_PER_NODE * us  # the backward issues twice the forward's; nine nodes
    assert issued > 1200.0
    assert pair_us(p, 0.0) == pytest.approx(issued)


def test_unpaired_passes_are_the_first_and_last_or_the_warm_up():
    assert unpaired_share(64, 1, 1) == pytest.approx(1 / 64)
    assert unpaired_share(32, 4, 3) == pytest.approx((1 + 2 * 4) / (32 * 3))
    assert unpaired_share(2, 8, 4) == 1.0


def test_overlap_hides_part_of_an_exchange_heavy_step_and_not_more_than_the_exchange():
    c = get_cluster("h100").with_nodes(2, 8)
    s = Layout(gpus=16, ep=16, micro_batch=2, seq=4096, global_batch_tokens=16 * 2 * 4096 * 8, cuda_graphs="full")
    off = price_run(M, s, c)
    on = price_run(M, replace(s, a2a_overlap=True), c)
    assert 0 < off["total_us"] - on["total_us"] < off["exchange_us"]
    assert off["exchange_exposed_us"] == pytest.approx(off["exchange_us"])
    assert 0 < on["exchange_exposed_us"] < off["exchange_exposed_us"]
