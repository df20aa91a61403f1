"""The loss over the vocabulary is priced as the HBM bytes Megatron-Core's fused cross entropy moves per logit
(``passes.LOSS_BYTES_PER_LOGIT``), on the stage that holds the head, once per micro-batch and per MTP layer."""

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


# Transformer Engine's cross entropy (``cross_entropy`` te): the online softmax reads the BF16 logits, the loss
# pass reads them and writes the gradient over them, the backward scales it in place
TE_CE_PASSES = ((BF16, 0), (BF16, BF16), (BF16, BF16))


def test_transformer_engines_cross_entropy_moves_its_own_bytes_per_logit():
    c = get_cluster("gb200").with_nodes(1, 8)
    s = Layout(gpus=8, tp=2, ep=4, micro_batch=2, seq=4096, global_batch_tokens=16 * 4096)
    native, te = price_run(M, s, c), price_run(M, replace(s, cross_entropy="te"), c)
    te_bytes = sum(r + w for r, w in TE_CE_PASSES)
    assert te["loss_us"] == pytest.approx(native["loss_us"] * te_bytes / BYTES_PER_LOGIT)
    assert native["total_us"] - te["total_us"] == pytest.approx(native["loss_us"] - te["loss_us"])


def test_a_row_states_its_loss_implementation_rope_fusion_and_linear_biases():
    from monta.perfmodel.reports.published_rows import Row
    from monta.perfmodel.reports.published_steps import layout_of
    from monta.perfmodel.training.run_shape import run_model

    cells = {"gpus": "8", "seq_len": "4096", "global_batch_tokens": "65536", "tp": "1", "ep": "8", "pp": "1",
             "micro_batch": "1", "layers": "36", "hidden": "2880", "ffn_hidden": "2880", "experts": "128",
             "topk": "4", "cross_entropy": "TE", "rope_fusion": "no", "linear_bias": "yes"}  # fmt: skip
    row = Row({"id": "X1", "source": "src", **cells})
    s, _ = layout_of(row)
    m, _ = run_model(row.num, row.text)
    assert (s.cross_entropy, s.rope_fused, m.linear_bias) == ("te", False, True)
    bare = Row({k: v for k, v in cells.items() if k not in ("cross_entropy", "rope_fusion", "linear_bias")})
    s, _ = layout_of(bare)
    m, _ = run_model(bare.num, bare.text)
    assert (s.cross_entropy, s.rope_fused, m.linear_bias) == ("", True, False)  # not stated: the defaults
