"""Model shapes the performance model reasons about: the Llama-shaped MoE presets and their sizes.

Mirrors ``monta.model``'s presets without importing torch (the planner is pure Python).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    """A decoder whose every FFN is an MoE of SwiGLU experts (BRIEF.md section 1, '2x70B')."""

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
            raise ValueError(f"model: heads={self.heads} must divide hidden={self.hidden} and be a multiple of kv_heads={self.kv_heads}")
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

    def with_overrides(self, **kw: Any) -> "ModelSpec":
        kw = {k: v for k, v in kw.items() if v is not None}
        return replace(self, **kw) if kw else self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS = {
    # BRIEF.md decision: Llama-2-70B shape, every FFN an MoE of 2 such experts, top-2, cf 1.0.
    "moe-2x70b": ModelSpec("moe-2x70b", hidden=8192, layers=80, heads=64, kv_heads=8, ffn=28672, vocab=32000,
                           experts=2, top_k=2, capacity_factor=1.0),
    # Scaled down for the 2-core box, keeping the ratios ffn/hidden = 3.5, heads/kv_heads = 8.
    "moe-2x70b-mini": ModelSpec("moe-2x70b-mini", hidden=256, layers=4, heads=8, kv_heads=1, ffn=896, vocab=1024,
                                experts=2, top_k=2, capacity_factor=1.0),
}


def get_model(name: str | ModelSpec, **overrides: Any) -> ModelSpec:
    if isinstance(name, ModelSpec):
        return name.with_overrides(**overrides)
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}: choose one of {', '.join(PRESETS)}")
    return PRESETS[name].with_overrides(**overrides)
