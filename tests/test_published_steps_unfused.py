"""Attention with learnable softmax sinks (the attention column's ``+sinks``, GPT-OSS) runs unfused: the full
square of scores at GEMM rate plus its passes through HBM; and with VPP > 1 only the warm-up's and the flush's
stage-to-stage sends are exposed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monta.hardware.profile import get_cluster
from monta.perfmodel.reports.published import Row
from monta.perfmodel.training.run_shape import RunModel, run_model
from monta.perfmodel.training.run_step import (
    UNFUSED_SCORE_PASSES,
    Layout,
    _layer_us,
    exposed_sends,
    unfused_core_us,
)

GPT_OSS = RunModel(layers=36, hidden=2880, ffn=2880, experts=128, top_k=4, attention="gqa", heads=64, kv_heads=8,
                   head_dim=64, vocab=201088)  # fmt: skip


def test_unfused_core_counts_the_whole_square_and_its_hbm_passes():
    c = get_cluster("b200")
    s = Layout(gpus=64, ep=64, micro_batch=2, seq=4096, global_batch_tokens=64 * 2 * 4096)
    flops = 3 * 2.0 * 2 * 64 * 4096 * 4096 * (64 + 64)
    score_bytes = UNFUSED_SCORE_PASSES * 2.0 * 2 * 64 * 4096 * 4096
    want = flops / (c.peak_tflops * c.gemm_eff * 1e6) + score_bytes / (c.hbm_GBps * 1e3)
    assert unfused_core_us(GPT_OSS, s, c) == pytest.approx(want)
    # a layer with sinks prices that core instead of the fused causal one, which is several times shorter
    fused = _layer_us(GPT_OSS, s, c, 2 * 4096, True, 1.0)["attention"]
    sinks = _layer_us(replace(GPT_OSS, sinks=True), s, c, 2 * 4096, True, 1.0)["attention"]
    assert sinks == pytest.approx(want) and sinks > 4 * fused


def _cols(d: dict):
    row = Row(d)
    return row.num, row.text


def test_the_attention_column_takes_sinks_and_rejects_other_modifiers():
    base = {"layers": "36", "hidden": "2880", "ffn_hidden": "2880", "experts": "128", "topk": "4", "heads": "64",
            "kv_heads": "8", "head_dim": "64"}  # fmt: skip
    m, why = run_model(*_cols({**base, "attention": "gqa+sinks"}))
    assert why is None and m.sinks and m.attention == "gqa"
    m, why = run_model(*_cols({**base, "attention": "gqa"}))
    assert why is None and not m.sinks
    m, why = run_model(*_cols({**base, "attention": "gqa+swa"}))
    assert m is None and "+sinks" in why


def test_interleaved_pipelines_expose_only_the_warmup_and_flush_sends():
    one = Layout(gpus=64, pp=8, vpp=1, global_batch_tokens=8 * 64 * 4096)
    assert exposed_sends(one) == 2 * one.num_micro  # 1F1B: every send on the critical path
    four = replace(one, vpp=4)
    assert exposed_sends(four) == 2 * (2 * 7 + 3 * 8)  # the first stage's warm-up, and as many in the flush
    few = replace(four, global_batch_tokens=8 * 4096)  # fewer micro-steps than a warm-up: all of them
    assert exposed_sends(few) == 2 * few.num_micro * 4
