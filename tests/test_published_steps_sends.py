"""With VPP > 1 only the warm-up's and the flush's stage-to-stage sends are exposed (Megatron's
``--overlap-p2p-communication``); without interleaving every send of 1F1B is."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monta.hardware.profile import get_cluster
from monta.perfmodel.network import collectives
from monta.perfmodel.training.run_shape import RunModel
from monta.perfmodel.training.run_step import Layout, exposed_sends, price_run


def test_interleaved_pipelines_expose_only_the_warmup_and_flush_sends():
    one = Layout(gpus=64, pp=8, vpp=1, global_batch_tokens=8 * 64 * 4096)
    assert exposed_sends(one) == 2 * one.num_micro  # 1F1B: every send on the critical path
    four = replace(one, vpp=4)
    assert exposed_sends(four) == 2 * (2 * 7 + 3 * 8)  # the first stage's warm-up, and as many in the flush
    few = replace(four, global_batch_tokens=8 * 4096)  # fewer micro-steps than a warm-up: all of them
    assert exposed_sends(few) == 2 * few.num_micro * 4


def test_the_pipeline_term_is_the_bubble_plus_the_exposed_sends_over_the_stage_link():
    # 2 stages of 8 GPUs on two 8-GPU nodes: every stage-to-stage send crosses the NICs, 8 GPUs sending at once
    m = RunModel(layers=8, hidden=4096, ffn=1024, experts=8, top_k=2, attention="gqa", heads=32, kv_heads=8,
                 head_dim=128, vocab=32000)  # fmt: skip
    c = get_cluster("h100").with_nodes(2, 8)
    p2p = collectives.p2p(4096 * 4096 * 2, "inter", c, 8).time_us
    for vpp, sends in ((1, 2 * 64), (2, 2 * (2 * 1 + 1 * 2))):
        s = Layout(gpus=16, ep=8, pp=2, vpp=vpp, global_batch_tokens=64 * 8 * 4096)
        t = price_run(m, s, c)
        t_mb = (t["total_us"] - t["pp_us"] - t["grad_exposed_us"] - t["optimizer_us"]) / t["num_micro"]
        assert exposed_sends(s) == sends
        assert t["pp_us"] == pytest.approx((2 - 1) / vpp * t_mb + sends * p2p)
