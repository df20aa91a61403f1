"""What a ``monta bench step`` rank computes from its config before and after its steps: the chunk count
every variant uses, the model FLOPs of a step (for MFU) and the GPU's peak."""

from __future__ import annotations

from monta.chunking import Auto, capacity_slice, dispatch_bytes, expert_capacity, parse_chunks
from monta.hardware.gpus import cluster_of_gpu
from monta.hardware.profile import get_cluster


def run_chunks(run, cfg, layout, element_size: int) -> int:
    """The chunk count every variant uses: the flag's integer, or the performance model's choice (on the
    cluster of ``run``, the StepConfig) for this rank's full [E, C, M] dispatch buffer at the training
    capacity, as the MoE layer resolves it per call (``monta.chunking``)."""
    chunks = parse_chunks(run.chunks)
    capacity = expert_capacity(
        cfg.tokens_per_micro_batch, cfg.num_experts, cfg.capacity_factor, cfg.top_k, cfg.min_capacity
    )
    chooser = None
    if isinstance(chunks, Auto):
        from monta.perfmodel.network.chunks import model_chooser

        chooser = model_chooser(run.cluster)
    nbytes = dispatch_bytes(cfg.num_experts, capacity, cfg.hidden, element_size)
    return chunks.resolve(nbytes, layout, capacity_slice(capacity, layout.tp), chooser)


def model_flops_per_rank(cfg, layout) -> float:
    """Model FLOPs one rank does per training step (forward + backward = 3 x forward; no recomputation,
    capacity padding counted as the experts compute it), from the performance model's layer counts."""
    from monta.perfmodel.training.compute import head_flops, layer_flops

    tokens = cfg.tokens_per_micro_batch
    fwd = cfg.num_layers * layer_flops(cfg, tokens, cfg.seq, layout.tp).total + head_flops(cfg, tokens, layout.tp)
    return 3.0 * fwd


def peak_tflops(device_name: str, override: float | None) -> float | None:
    """The device's dense 16-bit peak for MFU: ``--peak-tflops``, else its cluster file's ``gpu.peak_tflops``
    (``monta.hardware.gpus``), else None (no MFU)."""
    if override:
        return override
    cluster = cluster_of_gpu(device_name)
    return get_cluster(cluster).peak_tflops if cluster else None
