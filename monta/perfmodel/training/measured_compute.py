"""A GPU's compute measured on the GPU itself (``data/measured/gpu-compute-*.json``, written by
``tools/gpu_compute_table.py``: the GEMM and flash-attention kernels of a layer, each timed with CUDA events)
as a calibration input of the run step model: the GEMM asymptote and the attention efficiency that replace the
cluster file's assumed ``gemm_eff`` / ``attn_eff`` for the rows priced on that cluster
(``monta predict published --compute-table FILE``).

- GEMMs: every GEMM kernel of the table but the router gate (N = 2 output columns: memory-bound, it measures
  HBM, not the tensor cores). Each runs at ``asymptote x depth_eff(K)`` (``gemm_eff``, the depth law the run
  step model prices every GEMM with), K being the reduction depth of its phase: the forward's inner dimension,
  the input gradient's output width, the weight gradient's token count. The asymptote is the one that
  reproduces the kernels' summed time: sum(FLOPs) / sum(time x peak x depth_eff(K)).
- Attention: the flash-attention core's forward + backward FLOPs (the causal count, as ``run_shape`` counts)
  over their summed time and the peak: the step model prices fwd + bwd as 3 x the forward FLOPs at one rate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from monta.perfmodel.training.gemm_eff import depth_eff, k_half

SCHEMA = "monta.gpu-compute/1"
# kernels that are not tensor-core GEMMs of the layer: the memory-bound router gate and the chunk copy
NOT_GEMMS = ("gate.", "chunk_copy", "attn_core.")


@dataclass(frozen=True)
class ComputeTable:
    path: str
    device: str  # the device name the table was measured on ("NVIDIA H100 80GB HBM3")
    gpu: str  # that device as the GPU-name lookup spells it ("H100"): the rows it applies to name this GPU
    cluster: str  # the cluster file whose GPU it measured
    gemm_eff: float
    attn_eff: float
    kernels: int  # GEMM kernels the asymptote was fitted on

    def fits(self, gpu_name: str) -> bool:
        """Whether a row naming ``gpu_name`` ran on this table's GPU (an H200's table is not an H100's, though
        both are priced on the ``h100`` cluster file)."""
        from monta.hardware.gpus import gpu_of

        return gpu_of(gpu_name) == self.gpu

    def apply(self, cluster):
        """``cluster`` with the measured efficiencies."""
        return replace(cluster, gemm_eff=self.gemm_eff, attn_eff=self.attn_eff)


def _depth(phase: str, shape: list[int]) -> float:
    m, k, n = shape
    return {"fwd": k, "dX": n, "dW": m}[phase]


def fit_table(table: dict, peak_tflops: float, hbm_GBps: float) -> tuple[float, float, int]:
    """(GEMM asymptote, attention efficiency, GEMM kernels used) of a ``monta.gpu-compute/1`` table on a GPU
    of ``peak_tflops`` (dense BF16) and ``hbm_GBps``."""
    kh = k_half(peak_tflops, hbm_GBps, fp8=False)
    flops = scaled = 0.0
    used = 0
    for name, k in table["kernels"].items():
        if name.startswith(NOT_GEMMS) or "." not in name:
            continue
        phase = name.rsplit(".", 1)[1]
        flops += k["flops"]
        scaled += k["us"] * 1e-6 * peak_tflops * 1e12 * depth_eff(_depth(phase, k["shape"]), kh)
        used += 1
    attn = [table["kernels"].get(f"attn_core.{p}") for p in ("fwd", "bwd")]
    if not used or None in attn:
        raise ValueError("it holds no GEMM kernels or no attn_core.fwd/bwd: write it with tools/gpu_compute_table.py")
    attn_eff = sum(a["flops"] for a in attn) / (sum(a["us"] for a in attn) * 1e-6) / (peak_tflops * 1e12)
    return flops / scaled, attn_eff, used


def load_compute_table(path: str | Path) -> ComputeTable:
    """The table at ``path`` fitted against the cluster file it names (``model.cluster``), which must be the
    cluster of its ``device_name``; a file that is not such a table raises ValueError saying what to change."""
    from monta.hardware.gpus import cluster_of_gpu, gpu_of
    from monta.hardware.profile import get_cluster

    p = Path(path)
    try:
        table = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"--compute-table {path}: cannot read it as JSON ({e})") from None
    if not isinstance(table, dict) or table.get("schema") != SCHEMA:
        raise ValueError(f"--compute-table {path}: not a {SCHEMA} table (write one with tools/gpu_compute_table.py)")
    name = (table.get("model") or {}).get("cluster")
    if not name:
        raise ValueError(f"--compute-table {path}: names no cluster (model.cluster): rescore it with --cluster")
    device = str(table.get("device_name") or "")
    gpu = gpu_of(device)
    if gpu is None or cluster_of_gpu(device) != name:
        raise ValueError(
            f"--compute-table {path}: its device {device or '(none)'!r} is not a GPU of the cluster it names "
            f"({name}): rescore it with the device's --cluster"
        )
    base = get_cluster(name)
    try:
        gemm, attn, used = fit_table(table, base.peak_tflops, base.hbm_GBps)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"--compute-table {path}: {e}") from None
    return ComputeTable(str(p), device, gpu, name, gemm, attn, used)
