"""A step's figure in a published row's metric (step time, tokens/s/GPU, TFLOPS/GPU, MFU) from a step time, the
time ratio a metric's measured and predicted values imply, the columns that make two rows one configuration and
the error statistics: what ``published_steps``, its calibration (``published_steps_calibration``) and its release
analyses (``published_steps_releases``) share, in a module of its own so that none imports another.
"""

from __future__ import annotations

import statistics
from typing import Any

SETTINGS = ("gpu", "precision", "routing", "dispatcher", "a2a_overlap", "recompute", "cuda_graphs", "gpus")
SAME = ("model", "layers", "hidden", "ffn_hidden", "experts", "topk", "seq_len", "global_batch_tokens",
        "micro_batch", "tp", "ep", "pp", "vpp", "cp", "metric")  # fmt: skip


def predict_value(metric: str, step_s: float, m, s, cluster) -> float:
    """The model's figure of ``metric`` for a step of ``step_s`` seconds."""
    tok = s.global_batch_tokens / step_s / s.gpus
    if metric == "step_time_s":
        return step_s
    if metric == "tokens_per_s_per_gpu":
        return tok
    # in the source's FLOP count where the row states it (a TFLOPS figure is the source's count over its time)
    tflops = tok * (m.source_gflop * 1e9 or m.model_flops_per_token(s.seq)) / 1e12
    return tflops if metric == "tflops_per_gpu" else 100.0 * tflops / cluster.peak_tflops


def _time_ratio(metric: str, measured: float, predicted: float) -> float:
    """measured step time / predicted step time, from the metric's values."""
    return measured / predicted if metric == "step_time_s" else predicted / measured


def _stats(xs) -> dict[str, Any]:
    xs = sorted(abs(x) for x in xs if x is not None)
    if not xs:
        return {"n": 0, "median": None, "q1": None, "q3": None}
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"n": len(xs), "median": statistics.median(xs), "q1": q[0], "q3": q[2]}
