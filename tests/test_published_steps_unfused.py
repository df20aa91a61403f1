"""Passes a run leaves unfused, counted from the code that runs them (``passes.unfused_bytes``): RoPE without
its fused kernel (Megatron-Bridge turns fusion off for GPT-OSS's YaRN) over the queries and keys, and the experts'
second bias, added per local expert in Python (Megatron-Core's ``TEGroupedMLP._apply_bias``). Each is HBM bytes per
token at the cluster's HBM rate, in the elementwise term of a layer pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monta.hardware.profile import get_cluster
from monta.perfmodel.training.run_shape import RunModel
from monta.perfmodel.training.run_step import Layout, price_run

# GPT-OSS-120B's shape (Hugging Face config): 64 query heads and 8 KV heads of 64, 128 experts, top-4
M = RunModel(layers=4, hidden=2880, ffn=2880, experts=128, top_k=4, attention="gqa", heads=64, kv_heads=8,
             head_dim=64, vocab=0)  # fmt: skip
# CUDA graphs of the whole step: no host floor for the GPU work to hide under
S = Layout(gpus=8, ep=8, micro_batch=1, seq=4096, global_batch_tokens=8 * 4096, cuda_graphs="full")
BF16 = 2
# eager RoPE per query/key element, BF16 moves: forward t*cos 2, -x2 1, cat 2, *sin 2, sum 3, cat 2; backward
# grad*cos 2, grad*sin 2, neg 1, the chunks' cat 2, the sum of the two gradients 3; the fused kernel 2 + 2
ROPE_MOVES = (2 + 1 + 2 + 2 + 3 + 2) + (2 + 2 + 1 + 2 + 3) - (2 + 2)
# the experts' second bias per [tokens x top-k, hidden] element: forward b*p 1, t + b*p 3, cat 2; backward
# grad*p and its sum 3, grad*b and its sum 3, the split's cat 2
BIAS_MOVES = (1 + 3 + 2) + (3 + 3 + 2)


def test_unfused_rope_adds_its_passes_over_the_queries_and_keys_of_every_layer():
    c = get_cluster("gb200").with_nodes(1, 8)
    fused, unfused = price_run(M, S, c), price_run(M, replace(S, rope_fused=False), c)
    per_token = ROPE_MOVES * BF16 * (64 + 8) * 64
    tokens = S.micro_batch * S.seq
    want = M.layers * S.num_micro * per_token * tokens / (c.hbm_GBps * 1e3)
    assert unfused["total_us"] - fused["total_us"] == pytest.approx(want, rel=1e-6)
    mla = replace(M, attention="mla", q_lora=512, kv_lora=256, rope_dim=32, v_head=64)
    assert price_run(mla, replace(S, rope_fused=False), c)["total_us"] == price_run(mla, S, c)["total_us"]


def test_expert_biases_add_their_per_expert_passes_to_the_moe_layers_only():
    c = get_cluster("gb200").with_nodes(1, 8)
    plain, biased = price_run(M, S, c), price_run(replace(M, linear_bias=True), S, c)
    per_token = BIAS_MOVES * BF16 * M.top_k * M.hidden
    tokens = S.micro_batch * S.seq
    want = M.layers * S.num_micro * per_token * tokens / (c.hbm_GBps * 1e3)
    assert biased["total_us"] - plain["total_us"] == pytest.approx(want, rel=1e-6)
    dense = replace(M, dense_layers=M.layers, dense_ffn=2880)  # no MoE layer: no expert bias
    assert price_run(replace(dense, linear_bias=True), S, c)["total_us"] == price_run(dense, S, c)["total_us"]
