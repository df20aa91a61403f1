"""The emulated cluster's clock: one dilation factor D for links and compute alike.

An emulated run is the full-size model on a real cluster (a cluster file, ``clusters/NAME.yaml`` or a
user's PATH.yaml), D times slower: its links are the cluster's per-GPU rates slowed down
(``monta.emulate.topology``), and each compute piece of its small model lasts D times what this
performance model gives the same piece of the full-size model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from monta.chunking import expert_capacity
from monta.hardware import clusterfile
from monta.hardware.links import Cluster
from monta.model.config import FULL_SIZE, ModelConfig, preset_of
from monta.model.config import PRESETS as MODEL_PRESETS
from monta.perfmodel.training.compute import COMPUTE_PIECES, forward_pieces_us, optimizer_us, piece_flops
from monta.perfmodel.training.memory import params_per_rank
from monta.perfmodel.training.strategy import Strategy

# The model the paper trains; its 8K-token micro-batch is what the clock prices for a run of no known preset
# (a run of moe-fine-mini is priced as moe-fine: full_size).
FULL_MODEL = "moe-2x70b"
FULL_ELEM_BYTES = 2  # bf16 on the real cluster
# A piece is CPU-bound when its real math outlasted its dilated target by more than this share of the
# variant's step time, summed over the step (a sleep's wake-up jitter alone stays far below it).
OVERRUN_BOUND = 0.02


def full_size(run: ModelConfig, full: str | None = None) -> ModelConfig:
    """The full-size model a run stands for: ``full``'s widths and tokens per micro-batch, the run's layers
    and routing. ``full`` defaults to the preset the run's own preset stands for (``FULL_SIZE``: moe-fine for
    moe-fine-mini), the preset itself for a full-size one, ``FULL_MODEL`` for a config of no known preset.
    Where the mini has fewer experts than its full model (16 of moe-fine's 64), the run's expert count is
    scaled back by that ratio: the same E x C = tokens x top_k x cf, the full model's expert weights."""
    base = preset_of(run.name)
    if full is None:
        full = FULL_SIZE.get(base, base if base in MODEL_PRESETS else FULL_MODEL)
    big, small = MODEL_PRESETS[full], MODEL_PRESETS.get(base)
    scale = 1
    if small is not None and big.num_experts > small.num_experts and big.num_experts % small.num_experts == 0:
        scale = big.num_experts // small.num_experts
    return replace(
        big,
        num_layers=run.num_layers,
        num_experts=run.num_experts * scale,
        top_k=run.top_k,
        capacity_factor=run.capacity_factor,
        min_capacity=run.min_capacity,
    )


def capacity(cfg: ModelConfig) -> int:
    """Capacity slots per expert of one micro-batch (DeepSpeed's top-k gate with dropping): the runtime's
    own formula (``monta.chunking.expert_capacity``), so the model and the layer never disagree."""
    return expert_capacity(
        cfg.tokens_per_micro_batch, cfg.num_experts, cfg.capacity_factor, cfg.top_k, cfg.min_capacity
    )


def buffer_bytes(cfg: ModelConfig, elem_bytes: int) -> float:
    """One rank's MoE dispatch buffer [E, C, M] in bytes."""
    return cfg.num_experts * capacity(cfg) * cfg.hidden * elem_bytes


@dataclass(frozen=True)
class Clock:
    """The clock of an emulated run of ``run`` on ``cluster`` (a cluster name or file path) slowed to
    ``inter_gbps`` / ``intra_gbps`` per node (``gpus_per_node`` ranks sharing each), TP ``tp``, EP ``ep``."""

    cluster: str
    run: ModelConfig
    tp: int
    ep: int
    gpus_per_node: int
    inter_gbps: float
    intra_gbps: float
    run_elem_bytes: int = 4  # fp32 on CPU
    zero: int = 1

    def __post_init__(self) -> None:
        try:
            clusterfile.locate(self.cluster)
        except ValueError as e:
            raise ValueError(f"clock cluster {self.cluster!r}: {e}") from None
        for f in ("inter_gbps", "intra_gbps"):
            if not getattr(self, f) or getattr(self, f) <= 0:
                raise ValueError(f"clock {f}={getattr(self, f)!r}: the modeled clock needs shaped links")

    @cached_property
    def node(self) -> Cluster:
        """The real cluster's node type, as its file states it."""
        return clusterfile.load_cluster(self.cluster)

    @cached_property
    def real(self) -> Cluster:
        return self.node.with_nodes(self.ep, self.gpus_per_node)

    @cached_property
    def full(self) -> ModelConfig:
        return full_size(self.run)

    @property
    def per_gpu_GBps(self) -> tuple[float, float]:
        """(NVLink, NIC share) of one real GPU, GB/s (the cluster's own node, whatever the run's shape)."""
        return self.node.per_gpu_GBps

    def _emulated_s(self, node_bytes: float, gbps: float) -> float:
        return node_bytes * 8 / (gbps * 1e9)

    def exchange_dilations(self) -> dict[str, float]:
        """Emulated / real time of each transfer of the step at nominal rates (bytes / rate), from its
        bytes as emulated (the run's model, every rank of a node on one shaped link) and as on the real
        cluster (the full model, each GPU its own NVLink and NIC share). One clock means all are D."""
        nvlink, nic = self.per_gpu_GBps
        g, tp, ep = self.gpus_per_node, self.tp, self.ep
        s_run, s_full = buffer_bytes(self.run, self.run_elem_bytes), buffer_bytes(self.full, FULL_ELEM_BYTES)
        act_run = self.run.tokens_per_micro_batch * self.run.hidden * self.run_elem_bytes
        act_full = self.full.tokens_per_micro_batch * self.full.hidden * FULL_ELEM_BYTES
        cross = (ep - 1) / ep  # share of the AllToAll slice that leaves the node
        out = {
            # the 1/TP slice's AllToAll (deepspeed, monta; legacy moves TP x both, the same ratio)
            "alltoall": self._emulated_s(g * s_run / tp * cross, self.inter_gbps) / (s_full / tp * cross / (nic * 1e9)),
        }
        if tp > 1:  # the TP AllGather that rebuilds the buffer (none at TP1)
            out["allgather"] = self._emulated_s(g * s_run * (tp - 1) / tp, self.intra_gbps) / (
                s_full * (tp - 1) / tp / (nvlink * 1e9)
            )
        if tp > 1:  # the TP AllReduce of activations after attention and the experts (ring: 2 (tp-1)/tp)
            ring = 2 * (tp - 1) / tp
            out["tp_allreduce"] = self._emulated_s(g * act_run * ring, self.intra_gbps) / (
                act_full * ring / (nvlink * 1e9)
            )
        return out

    @property
    def dilation(self) -> float:
        """D: the inter-node AllToAll's emulated time over its real-cluster time (nominal rates)."""
        return self.exchange_dilations()["alltoall"]

    @cached_property
    def full_pieces_us(self) -> dict[str, float]:
        """Forward us of each compute piece of the full model on the real cluster (per layer; head once)."""
        return forward_pieces_us(self.full, self.full.tokens_per_micro_batch, self.full.seq, self.tp, self.real)

    @property
    def pieces_us(self) -> dict[str, float]:
        """The same pieces on the emulated clock (D x), what ``predict_step(compute_scale=self)`` uses."""
        return {k: v * self.dilation for k, v in self.full_pieces_us.items()}

    @cached_property
    def full_optimizer_us(self) -> float:
        s = Strategy(tp=self.tp, ep=self.ep, dp=self.real.world_size // self.tp, zero=self.zero)
        dense, expert = params_per_rank(self.full, s)
        return optimizer_us(dense, expert, s.lanes, s.expert_dp, s.zero, self.real)

    @property
    def optimizer_us(self) -> float:
        return self.full_optimizer_us * self.dilation

    def us_per_flop(self) -> dict[str, float]:
        """Emulated us per FLOP of the run's own math, per piece: a piece of the run that does f FLOPs
        waits until f x this has passed. Summed over a layer it is D x the full model's piece."""
        run = piece_flops(self.run, self.run.tokens_per_micro_batch, self.run.seq, self.tp)
        # The run's head is replicated over TP (every rank computes all logits), the model's is split.
        run["head"] *= self.tp
        return {k: self.pieces_us[k] / run[k] for k in COMPUTE_PIECES if run[k] > 0}

    def describe(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "full_model": self.full.name,
            "dilation": self.dilation,
            "exchange_dilations": self.exchange_dilations(),
            "full_pieces_us": self.full_pieces_us,
            "pieces_us": self.pieces_us,
            "optimizer_us": self.optimizer_us,
            "us_per_flop": self.us_per_flop(),
        }
