"""Model shapes the performance model reasons about: the Llama-shaped MoE presets and their sizes.

Built from ``monta.model.config``'s presets (torch-free, so the planner stays pure Python).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    """A decoder whose every FFN is an MoE of SwiGLU experts (docs/design.md#the-2x70b-model, '2x70B')."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    experts: int
    top_k: int = 2
    capacity_factor: float = 1.0

    def __post_init__(self) -> None:
        for f in ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "experts", "top_k"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"model {f}={v!r}: must be a positive integer")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(
                f"model: heads={self.heads} must divide hidden={self.hidden} and be a multiple of "
                f"kv_heads={self.kv_heads}"
            )
        if self.top_k > self.experts:
            raise ValueError(f"model: top_k={self.top_k} exceeds experts={self.experts}")
        if not self.capacity_factor > 0:
            raise ValueError(f"model: capacity_factor={self.capacity_factor} must be > 0")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    # -- parameter counts (biases none, as in Llama) ----------------------------------------
    @property
    def dense_params_per_layer(self) -> int:
        """Attention (QKV + output projection), two RMSNorms, the gate."""
        h = self.hidden
        return h * (h + 2 * self.kv_dim) + h * h + 2 * h + h * self.experts

    @property
    def expert_params_per_layer(self) -> int:
        """All experts of one layer: SwiGLU = gate, up and down projections."""
        return self.experts * 3 * self.hidden * self.ffn

    @property
    def embedding_params(self) -> int:
        """Input embedding + untied output head + final norm."""
        return 2 * self.vocab * self.hidden + self.hidden

    @property
    def total_params(self) -> int:
        return self.layers * (self.dense_params_per_layer + self.expert_params_per_layer) + self.embedding_params

    def with_overrides(self, **kw: Any) -> ModelSpec:
        kw = {k: v for k, v in kw.items() if v is not None}
        return replace(self, **kw) if kw else self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def spec_of(cfg) -> ModelSpec:
    """The performance model's view of a ``monta.model.config.ModelConfig`` (the one preset table)."""
    return ModelSpec(
        cfg.name,
        hidden=cfg.hidden,
        layers=cfg.num_layers,
        heads=cfg.num_heads,
        kv_heads=cfg.num_kv_heads,
        ffn=cfg.ffn,
        vocab=cfg.vocab,
        experts=cfg.num_experts,
        top_k=cfg.top_k,
        capacity_factor=cfg.capacity_factor,
    )


def _presets() -> dict[str, ModelSpec]:
    # One source of truth: the training step's presets (monta.model.config is torch-free).
    from monta.model.config import PRESETS as MODEL_PRESETS

    return {name: spec_of(cfg) for name, cfg in MODEL_PRESETS.items()}


PRESETS = _presets()


def get_model(name: str | ModelSpec, **overrides: Any) -> ModelSpec:
    if isinstance(name, ModelSpec):
        return name.with_overrides(**overrides)
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}: choose one of {', '.join(PRESETS)}")
    return PRESETS[name].with_overrides(**overrides)
