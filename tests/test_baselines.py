"""Lancet's partitioned top-2 routing with carried capacity drops exactly the tokens DeepSpeed's
unpartitioned gate drops (same slots, same gates, same aux loss); single process, no collectives."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("DS_ACCELERATOR", "cpu")


@pytest.mark.parametrize("parts", [1, 2, 3, 5])
@pytest.mark.parametrize("cf", [0.5, 1.0])
def test_partitioned_routing_drops_same_tokens(parts, cf):
    from deepspeed.moe.sharded_moe import _capacity, _route_slots, gumbel_rsample, top2gating

    from monta_baselines.lancet import top2_route_with_carry

    S, E = 64, 4
    g = torch.Generator().manual_seed(parts * 10 + int(cf * 10))
    logits = torch.randn(S, E, generator=g)
    C = int(_capacity(logits, torch.tensor(cf * 2), torch.tensor(4)))
    torch.manual_seed(7)
    ref = top2gating(logits.clone(), cf, 4, sparse_routes=True)
    torch.manual_seed(7)
    noise = gumbel_rsample((S, E), device=logits.device)
    sizes = [len(c) for c in torch.arange(S).tensor_split(parts)]
    l_aux, idx, loc, gates, counts = top2_route_with_carry(list(logits.split(sizes)), list(noise.split(sizes)), C)
    assert int(ref[1]) == C
    assert torch.equal(_route_slots(idx, loc, E, C), _route_slots(ref[3], ref[4], E, C))
    assert torch.equal(idx, ref[3])
    assert torch.equal(gates, ref[5])
    assert torch.equal(counts, ref[6])
    assert torch.allclose(l_aux, ref[0])
    dropped = (idx < 0).sum().item()
    if cf < 1.0:
        assert dropped > 0  # the case actually exercises dropping


def test_wrong_carry_would_differ():
    """Without the carry (capacity restarting per partition) the kept set differs: the check can fail."""
    from deepspeed.moe.sharded_moe import gumbel_rsample

    from monta_baselines.lancet import top2_route_with_carry

    S, E, C = 64, 4, 16
    logits = torch.randn(S, E, generator=torch.Generator().manual_seed(3))
    noise = gumbel_rsample((S, E), device=logits.device)
    whole = top2_route_with_carry([logits], [noise], C)[1]
    halves = [top2_route_with_carry([lp], [n], C // 2)[1] for lp, n in zip(logits.split(32), noise.split(32))]
    assert not torch.equal(whole, torch.cat(halves, dim=1))
