"""What every rank of ``monta bench step`` reads: the run's settings, validated once by
``monta.bench.step.args.step_config`` before any rank starts, passed to each rank as JSON (``--worker``) and
carried whole by every record as its ``config.spec`` (``to_dict``: the keys the records always had).

Each field's default and help are the flag's (``monta.runconfig.setting``; ``args`` reads them). What
the launcher and the rank learn later (the emulated network, the compute clock, the resolved chunk count,
the GPU) are fields too, set by building a new config (``dataclasses.replace``), never keys added to a dict.

Torch-free at import.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from monta.runconfig import DEFAULT_GPUS_PER_NODE, DEFAULT_NODES, check_keys, plain, setting
from monta.variants import PARTITIONS


@dataclass(frozen=True)
class StepConfig:
    """One ``monta bench step`` run: the layout, the model, the variants and how each step is run."""

    nodes: int = setting(DEFAULT_NODES, "nodes (emulated, or of the torchrun/srun job)")
    gpus_per_node: int = setting(DEFAULT_GPUS_PER_NODE, "ranks (GPUs) per node")
    tp: int | None = setting(None, "tensor-parallel size (default: gpus per node)")
    model: str = setting("moe-2x70b-mini", "model preset")
    overrides: dict[str, Any] = setting(
        help="the resolved model config (ModelConfig.to_dict(): the preset with its overrides)", factory=dict
    )
    variants: tuple[str, ...] = setting(
        (),
        "comma list of registered variants (default: all of them; `monta variants` lists them) "
        "or compositions exchange=E,schedule=S,sync=Y[,chunks=N]",
    )
    chunks: int | str = setting(
        4,
        "chunks of the monta exchange and pieces of the lina schedule: an integer, or 'auto' "
        "(the performance model's choice for the dispatch buffer on --cluster)",
        text="4",
    )
    cluster: str | None = setting(None, "the performance model's cluster for --chunks auto")
    lancet_partitions: int = setting(
        PARTITIONS,
        "batch partitions of the lancet schedule (the performance model's PARTITIONS, monta.variants, "
        "which the model reads too, so the run and the model's price agree)",
    )
    steps: int = setting(10, "timed steps per variant")
    warmup: int = setting(2, "untimed steps per variant before them")
    seed: int = setting(1234, "seed of the weights and the data")
    zero_stage: int = setting(1, "DeepSpeed ZeRO stage")
    out: str | None = setting(None, "JSONL records file")
    append: bool = setting(False, "add to --out if it exists")
    backend: str = setting("auto", "torch.distributed backend; auto: nccl where the ranks have CUDA, else gloo")
    compute: str = setting(
        "real",
        "real: the small model's math at this machine's speed (numerics); modeled: each compute "
        "piece runs its math, then waits until it has taken the performance model's time for the "
        "same piece of the full-size model on the emulated cluster preset, x the run's dilation D "
        "(needs --launcher emulate and a cluster preset topology, e.g. --topology a800-4nic)",
    )
    contention: float = setting(
        0.0,
        "with --compute modeled: compute waited while this rank's MoE exchange is in flight lasts (1 + C) x "
        "its target (communication kernels take SMs and memory bandwidth from the compute they overlap); "
        "0: no contention, overlap gains are an upper bound. Only waits change: losses are identical",
    )
    experiment: str = setting("step", "experiment name stored in the records and wandb group")
    peak_tflops: float | None = setting(
        None, "per-GPU dense bf16 peak for MFU (default: from the GPU's name; MFU is reported on GPU only)"
    )
    routing: str | None = setting(
        None,
        "replace every MoE gate's expert choice with a routing workload (docs/routing.md: W0..W7, "
        "lognormal:maxvio=1, zipf:s=1.2; seeded, the same in every layer, step and variant; the gate's "
        "probabilities still weight the routes); default: the gate's own choice",
    )
    # What the launcher learns: the ranks ran on the emulated network (its Topology.to_dict()), on the clock
    emulated: bool = setting(False, "the ranks ran on the emulated cluster")
    topology: dict[str, Any] | None = setting(None, "the emulated network (Topology.to_dict()); None: none")
    clock: dict[str, Any] | None = setting(None, "the compute clock (Clock.describe()) with --compute modeled")
    # What each rank learns: the chunk count every variant uses (for --chunks auto, the model's) and the GPU
    chunks_used: int | None = setting(None, "the chunk count the run used (None: not resolved yet)")
    device: str | None = setting(None, "the GPU's name (None: the CPU)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", tuple(self.variants))
        if self.tp is None:
            object.__setattr__(self, "tp", self.gpus_per_node)

    @property
    def ep(self) -> int:
        """Expert parallelism: one EP rank per node."""
        return self.nodes

    @property
    def layout(self):
        from monta.parallel import ParallelLayout

        return ParallelLayout(self.nodes, self.gpus_per_node, tp=self.tp, ep=self.ep)

    @property
    def model_config(self):
        from monta.model.config import ModelConfig

        return ModelConfig(**self.overrides)

    def to_dict(self) -> dict[str, Any]:
        """The records' ``config.spec``: the keys it always had (``layout`` nested; ``chunks`` the count used
        and ``chunks_requested`` the flag's, once resolved; the launcher's and the GPU's facts where known)."""
        skip = {"nodes", "gpus_per_node", "tp", "chunks_used", "topology", "clock", "device"}
        out = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name not in skip}
        out["layout"] = {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "tp": self.tp, "ep": self.ep}
        if self.chunks_used is not None:
            out["chunks"], out["chunks_requested"] = self.chunks_used, self.chunks
        out.update({k: getattr(self, k) for k in ("topology", "clock", "device") if getattr(self, k) is not None})
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepConfig:
        """The inverse of ``to_dict`` (ValueError, one line, for a key no setting holds)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        check_keys(cls, data, fields - {"nodes", "gpus_per_node", "tp", "chunks_used"} | {"layout", "chunks_requested"})
        d = dict(data)
        lay = d.pop("layout", {})
        check_keys(cls, lay, {"nodes", "gpus_per_node", "tp", "ep"})
        if "chunks_requested" in d:
            d["chunks_used"], d["chunks"] = d["chunks"], d.pop("chunks_requested")
        return cls(**{k: lay[k] for k in ("nodes", "gpus_per_node", "tp") if k in lay}, **d)
