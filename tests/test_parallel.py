"""Rank layout: degrees, validation, group construction (checked against DeepSpeed's own), link classes."""

from __future__ import annotations

import itertools
import os

import pytest

from monta.parallel import INTER, INTRA, ParallelLayout, expert_parallel_ranks


def test_paper_layout_tp8_ep2():
    lay = ParallelLayout(nodes=2, gpus_per_node=8, tp=8, ep=2)
    assert (lay.world_size, lay.dp, lay.expert_dp) == (16, 2, 1)
    assert lay.tp_groups[0].ranks == tuple(range(8)) and lay.tp_groups[0].link == INTRA
    assert [g.ranks for g in lay.ep_groups] == [(i, i + 8) for i in range(8)]
    assert all(g.link == INTER for g in lay.ep_groups)
    assert lay.link_between(3, 4) == INTRA and lay.link_between(3, 11) == INTER


def test_mixed_ep_group_is_inter_node():
    lay = ParallelLayout(nodes=2, gpus_per_node=4, tp=1, ep=8)
    assert lay.ep_groups[0].ranks == tuple(range(8)) and lay.ep_groups[0].link == INTER
    lay2 = ParallelLayout(nodes=2, gpus_per_node=4, tp=2, ep=2)
    assert lay2.group_of("ep", 0).ranks == (0, 2) and lay2.group_of("ep", 0).link == INTRA


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(nodes=2, gpus_per_node=8, tp=16, ep=1), "tp=16 is larger than a node"),
        (dict(nodes=2, gpus_per_node=8, tp=3, ep=1), "tp=3 does not divide gpus_per_node=8"),
        (dict(nodes=2, gpus_per_node=8, tp=8, ep=4), "ep=4 does not divide the data-parallel degree dp=2"),
        (dict(nodes=0, gpus_per_node=8), "nodes=0"),
        (dict(nodes=2, gpus_per_node=4, tp=2, ep=1, pp=3), "tp\\*pp=6 does not divide world size 8"),
    ],
)
def test_bad_degrees_raise_value_error_naming_values(kw, match):
    with pytest.raises(ValueError, match=match):
        ParallelLayout(**kw)


def test_groups_partition_the_world():
    lay = ParallelLayout(nodes=4, gpus_per_node=8, tp=4, ep=4)
    for kind in ("tp", "dp", "ep", "edp"):
        ranks = sorted(r for g in lay.groups_of(kind) for r in g.ranks)
        assert ranks == list(range(32)), kind
    assert {g.size for g in lay.ep_groups} == {4} and {g.size for g in lay.expert_dp_groups} == {lay.expert_dp}


def test_expert_groups_equal_deepspeeds_construction():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.utils.groups import _get_expert_parallel_ranks

    for world, tp, ep in itertools.product([4, 8, 16, 32], [1, 2, 4, 8], [1, 2, 4, 8]):
        if world % tp or (world // tp) % ep:
            continue
        assert expert_parallel_ranks(world, tp, ep) == tuple(_get_expert_parallel_ranks(world, tp, ep))
