"""How much of a GEMM's large-size efficiency a GEMM of reduction depth K reaches, for the run step model
(``run_step``): the cluster files' ``gemm_eff`` is a large GEMM's; fine-grained experts (Qwen3's 768 or 1536
FFN dims, DeepSeek's 2048) and small hidden sizes run shallower GEMMs that reach less, most of all in FP8.

Every output tile of a GEMM pays a fixed cost (filling the pipeline, writing the tile; with block-scaled FP8 the
scales too) while its K loop runs at tensor rate, so a GEMM of depth K runs at ``K / (K + K_half)`` of its
asymptote. Two measurements fix K_half, one per precision:

- FP8: DeepGEMM's published FP8 GEMM table on an H800 (https://github.com/deepseek-ai/DeepGEMM README, normal
  GEMMs at M = 4096: K = 512, 1536, 2048, 7168, 16384 at 590, 990, 1025, 1304, 1358 TFLOP/s) fits
  ``E K / (K + K_half)`` with K_half = 720 (each point within 5%; its N = 2112 row, limited by its narrow N,
  left out).
- BF16: the project's own H100 table (``data/measured/gpu-compute-h100.json``, cuBLAS: K = 1024 to 8192 at
  662-801 TFLOP/s, docs/results/gpu-compute-h100.md) fits K_half = 86 (+-61): BF16 GEMMs lose little with depth.

Model assumptions: K_half scales with the tensor rate over HBM bandwidth from the GPU it was measured on (the
fixed cost is paid at memory rate); the cluster's ``gemm_eff`` is the asymptote.
"""

from __future__ import annotations

# precision -> (K_half, the dense tensor TFLOP/s over HBM GB/s of the GPU it was measured on)
K_HALF = {"fp8": (720.0, 1979.0 / 3350.0), "bf16": (86.0, 989.0 / 3350.0)}


def k_half(tflops: float, hbm_GBps: float, fp8: bool) -> float:
    """The depth at which a GEMM reaches half its asymptote on a GPU of ``tflops`` (this precision's dense
    peak) and ``hbm_GBps``."""
    ref, rate_over_hbm = K_HALF["fp8" if fp8 else "bf16"]
    return ref * (tflops / hbm_GBps) / rate_over_hbm


def depth_eff(k: float, kh: float) -> float:
    return k / (k + kh)


def ffn_slowdown(hidden: int, ffn: int, tokens: float, kh: float) -> float:
    """Time of a SwiGLU FFN's GEMMs (forward, input and weight gradients) over their time at the asymptote.
    Forward: gate+up at K = hidden (2/3 of the FLOPs), down at K = ffn; input gradient: gate+up's at K = 2 ffn,
    down's at K = hidden; weight gradient: all at K = the tokens the weights see (``tokens``)."""
    if ffn <= 0:
        return 1.0
    e = lambda k: depth_eff(k, kh)  # noqa: E731
    fwd = 2 / e(hidden) + 1 / e(ffn)
    dgrad = 2 / e(2 * ffn) + 1 / e(hidden)
    wgrad = 3 / e(max(1.0, tokens))
    return (fwd + dgrad + wgrad) / 9


def proj_slowdown(hidden: int, tokens: float, kh: float) -> float:
    """The same for the attention projections and the head, at K = hidden forward and for the input gradient
    (the projections' other width is of the hidden's order) and K = ``tokens`` for the weight gradient."""
    e = lambda k: depth_eff(k, kh)  # noqa: E731
    return (2 / e(hidden) + 1 / e(max(1.0, tokens))) / 3
