"""A GPU's name -> its hardware: the one lookup from the names drivers, nccl-tests logs, cluster files and
published tables write ("NVIDIA H100 80GB HBM3", "A100-SXM4-80GB (Azure NDm A100 v4)", "GB200") to the
cluster file of its node type (``clusters/NAME.yaml``: its peak TFLOP/s, memory and links are read from the
file, ``get_cluster(cluster_of_gpu(name))``) and to its NCCL generation (the constants
``monta.perfmodel.network.nccl_tuning`` prices its collectives with).

Read by ``monta bench step`` (the device's peak for MFU), ``monta calibrate`` (the base cluster of an
nccl-tests log), ``monta predict published`` (a row's GPU column) and the cluster files (``gpu.model``)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GPUName:
    """Names matching ``pattern`` (case-insensitive, word-bounded) are GPUs of the ``cluster`` file's node
    type, of NCCL generation ``arch`` ('' where nccl_tuning has no constants). ``compute`` False: the file's
    links are this GPU's, its compute and memory are not."""

    pattern: str
    cluster: str
    arch: str
    compute: bool = True


# First match wins; a name says one GPU, and the word bounds keep H800 from H100, B200 from GB200 and H200
# from GH200, so the order only matters for a text naming two GPUs ("A100 (p4de) / V100 (p3dn)": the first).
GPU_NAMES: tuple[GPUName, ...] = (
    GPUName(r"\bGB300\b", "gb300", ""),
    GPUName(r"\bGB200\b", "gb200", ""),
    GPUName(r"\bB300\b", "b300", ""),
    GPUName(r"\bB200\b", "b200", ""),
    GPUName(r"\bH800\b", "h800", "hopper"),
    # NVLink4 at 900 GB/s bidirectional, as the H100; its compute (148 dense TFLOP/s) is not the H100's.
    GPUName(r"\bH20\b", "h100", "hopper", compute=False),
    GPUName(r"\bH100\b|\bH200\b|\bGH200\b", "h100", "hopper"),  # H200 / GH200: the H100's compute, more HBM
    GPUName(r"\bA800\b", "a800-4nic", "ampere"),
    GPUName(r"\bA100\b", "a100", "ampere"),
    GPUName(r"\bV100\b", "p3dn", "volta"),
)


def _entry(name: str) -> GPUName | None:
    return next((e for e in GPU_NAMES if re.search(e.pattern, name, re.IGNORECASE)), None)


def cluster_of_gpu(name: str, *, links_only: bool = False) -> str | None:
    """The cluster file of the GPU ``name`` names, or None. ``links_only``: a file whose links are the GPU's
    is enough (what a collective's price needs); otherwise its compute must be the GPU's too."""
    e = _entry(name)
    return e.cluster if e and (e.compute or links_only) else None


def gpu_of(name: str) -> str | None:
    """The one GPU ``name`` names, as the lookup spells it ("NVIDIA H200" -> "H200"), or None. Finer than its
    cluster file: an H200 and an H100 share ``h100`` but are not the same GPU."""
    e = _entry(name)
    return re.search(e.pattern, name, re.IGNORECASE).group(0).upper() if e else None


def arch_of(gpu_model: str) -> str:
    """The NCCL generation of a GPU model name ('' when unknown: the plain link model)."""
    e = _entry(gpu_model)
    return e.arch if e else ""
