"""The loss over the vocabulary is priced as the HBM bytes Megatron-Core's fused cross entropy moves per logit
(``run_step.LOSS_BYTES_PER_LOGIT``), on the stage that holds the head, once per micro-batch and per MTP layer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monta.hardware.profile import get_cluster
from monta.perfmodel.training.run_shape import RunModel
from monta.perfmodel.training.run_step import Layout, price_run

M = RunModel(layers=4, hidden=2048, ffn=768, experts=16, top_k=4, attention="gqa", heads=16, kv_heads=4,
             head_dim=128, vocab=150000)  # fmt: skip


BF16, FP32 = 2, 4
# Megatron-Core's fused cross entropy per logit, pass by pass (bytes read + written): forward, the BF16 logits
# read and an FP32 copy written; the max subtracted and exp taken in place; divided by the sum in place into the
# saved softmax; backward, the softmax read and the BF16 gradient written
FUSED_CE_PASSES = ((BF16, FP32), (FP32, FP32), (FP32, FP32), (FP32, BF16))
BYTES_PER_LOGIT = sum(r + w for r, w in FUSED_CE_PASSES)


def test_the_loss_is_the_logits_bytes_over_hbm_per_micro_batch_and_adds_to_the_step():
    c = get_cluster("gb200").with_nodes(1, 8)
    s = Layout(gpus=8, tp=2, ep=4, micro_batch=2, seq=4096, global_batch_tokens=16 * 4096)
    t = price_run(M, s, c)
    tokens = 2 * 4096 / 2  # one micro-batch's tokens on one TP rank (the vocabulary split over TP)
    assert t["num_micro"] == 2
    assert t["loss_us"] == pytest.approx(2 * BYTES_PER_LOGIT * M.vocab * tokens / (c.hbm_GBps * 1e3))
    without = price_run(replace(M, vocab=0), s, c)
    assert without["loss_us"] == 0
    assert t["total_us"] - without["total_us"] > t["loss_us"]  # the head's GEMMs come with it
    mtp = price_run(replace(M, mtp=1), s, c)
    assert mtp["loss_us"] == pytest.approx(2 * t["loss_us"])  # an MTP layer has its own loss
