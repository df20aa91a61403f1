"""Synthetic, deterministic token batches: no downloads, same data for every variant.

A batch depends only on (seed, step, data-parallel rank), so TP ranks of a group see the same tokens.
"""

from __future__ import annotations

import torch

from monta.model.config import ModelConfig


def synthetic_batch(
    cfg: ModelConfig, seed: int, step: int, dp_rank: int, device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, labels) of shape [micro_batch, seq]; labels are next tokens of a seeded stream.

    The stream mixes a repeating pattern with noise so the loss can actually fall in a few steps.
    """
    g = torch.Generator().manual_seed(((seed * 7919 + step) * 104729 + dp_rank) % (2**63 - 1))
    n = cfg.micro_batch * (cfg.seq + 1)
    base = torch.randint(0, cfg.vocab, (cfg.micro_batch, 1), generator=g)
    stride = torch.randint(1, max(2, cfg.vocab // 8), (cfg.micro_batch, 1), generator=g)
    pattern = (base + stride * torch.arange(cfg.seq + 1)) % cfg.vocab
    noise = torch.randint(0, cfg.vocab, pattern.shape, generator=g)
    keep = torch.rand(pattern.shape, generator=g) < 0.8
    stream = torch.where(keep, pattern, noise).view(cfg.micro_batch, cfg.seq + 1)
    assert stream.numel() == n
    return stream[:, :-1].contiguous().to(device), stream[:, 1:].contiguous().to(device)
