"""Contention between communication and the compute it overlaps: a factor c >= 0.

On a GPU the kernels of a collective take SMs, a copy engine and HBM bandwidth from the compute they
overlap, so overlapped compute runs slower (Echo models this). The step model
(``monta.perfmodel.training.step``) stretches compute by (1 + c) for the part that overlaps the MoE exchange
or the gradient sync; the emulated step's clock (``monta.model.clock``) stretches compute waited while the
harness's exchange is in flight. c = 0 is no contention: overlap is free, so overlap gains are upper bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

NO_CONTENTION = "no contention: overlap gains are an upper bound"
ABLATION = (0.0, 0.1, 0.2, 0.3)  # `monta predict contention`'s default values


def check(c: object, flag: str = "contention") -> float:
    """``c`` as a float, or a ValueError saying what to give."""
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
        raise ValueError(
            f"{flag}={c!r}: give a factor >= 0 (0: no contention; 0.2: overlapped compute runs 1.2x as long)"
        )
    return float(c)


def describe(c: float) -> str:
    """What a header says about ``c``."""
    if c == 0:
        return f"contention c = 0 ({NO_CONTENTION})"
    return f"contention c = {c:g} (compute overlapped by communication runs {1 + c:g}x as long)"


def clamp_hidden(hid: tuple[float, float], ex: tuple[float, float]) -> tuple[float, float]:
    """A schedule's hidden exchange time, forward and backward, within [0, the exchange]."""
    return max(0.0, min(hid[0], ex[0])), max(0.0, min(hid[1], ex[1]))


def schedule_overlap(
    hidden_us: Callable, inputs, hid: tuple[float, float], c: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """A schedule's overlap under contention, per layer: (compute added, exchange hidden), forward and backward.

    ``hid`` is the schedule's hidden exchange without contention: the time its compute and its exchange
    run together, so the compute overlapped. That compute takes (1 + c) x as long (c x ``hid`` added);
    where the exchange outlasted it, the slower compute hides more of the exchange, which the schedule's
    own model gives with its compute (1 + c) x slower. The extra hidden time never exceeds the compute
    added, so contention never shortens a layer."""
    ex = (inputs.ex_fwd_us, inputs.ex_bwd_us)
    slow = replace(inputs, attn_fwd_us=inputs.attn_fwd_us * (1 + c), moe_fwd_us=inputs.moe_fwd_us * (1 + c))
    slow_hid = clamp_hidden(hidden_us(slow), ex)
    added = (c * hid[0], c * hid[1])
    hidden = tuple(min(max(s, h), h + a) for s, h, a in zip(slow_hid, hid, added))
    return added, hidden


def grad_sync_stretch(t_grad: float, free_compute: float, c: float) -> float:
    """Compute added to the last backward by the gradient sync overlapping it: c x the compute it
    overlaps, at most its own time and only compute not already stretched by the exchange."""
    return c * min(t_grad, max(0.0, free_compute))
