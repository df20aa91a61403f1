"""A step's figure in a published row's metric (step time, tokens/s/GPU, TFLOPS/GPU, MFU) from a step time, and
the time ratio a metric's measured and predicted values imply: what ``published_steps`` and its calibration
(``published_steps_calibration``) share, in a module of its own so that neither imports the other.
"""

from __future__ import annotations


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
