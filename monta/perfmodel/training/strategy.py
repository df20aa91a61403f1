"""One parallel strategy: TP, EP, PP, context-parallel and data-parallel degrees, micro-batch,
recomputation, ZeRO stage and the MoE exchange variant; validated against a cluster and a model."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

RECOMPUTE = ("none", "selective", "full")

# Rank order (innermost first): TP, CP, DP, PP, as in Megatron; EP groups are consecutive
# members of a (CP x DP) lane, as DeepSpeed builds them, so with TP = a node they cross nodes.


@dataclass(frozen=True)
class Strategy:
    tp: int = 1
    ep: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 1
    micro_batch: int = 1
    recompute: str = "none"  # none | selective (experts' SwiGLU internals) | full (whole layer)
    zero: int = 1
    variant: str = "monta"
    chunks: int | str = "auto"

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def lanes(self) -> int:
        """Ranks sharing one TP slot of a pipeline stage: the token-parallel (CP x DP) lane."""
        return self.cp * self.dp

    @property
    def expert_dp(self) -> int:
        return self.lanes // self.ep

    def validate(self, world_size: int, gpus_per_node: int, model=None, seq: int | None = None) -> None:
        for f in ("tp", "ep", "pp", "cp", "dp", "micro_batch"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{f}={v!r}: must be a positive integer")
        if self.world_size != world_size:
            raise ValueError(
                f"tp*cp*dp*pp = {self.tp}*{self.cp}*{self.dp}*{self.pp} = {self.world_size} "
                f"is not the world size {world_size}"
            )
        if self.tp > gpus_per_node or gpus_per_node % self.tp:
            raise ValueError(f"tp={self.tp} must divide gpus_per_node={gpus_per_node} (TP stays inside a node)")
        if self.lanes % self.ep:
            raise ValueError(f"ep={self.ep} must divide cp*dp={self.lanes}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute={self.recompute!r}: choose one of {', '.join(RECOMPUTE)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero={self.zero!r}: ZeRO stage must be 0, 1, 2 or 3")
        from monta import variants as registry

        try:
            registry.check(self.variant)
        except ValueError as e:
            raise ValueError(f"variant={self.variant!r}: {e}") from None
        if model is not None:
            if model.num_experts % self.ep:
                raise ValueError(f"ep={self.ep} must divide the number of experts ({model.num_experts})")
            if self.pp > model.num_layers:
                raise ValueError(f"pp={self.pp} exceeds the number of layers ({model.num_layers})")
            if model.num_heads % self.tp or (model.num_kv_heads % self.tp and self.tp % model.num_kv_heads):
                raise ValueError(
                    f"tp={self.tp} must divide heads={model.num_heads} "
                    f"(and divide or be a multiple of kv_heads={model.num_kv_heads})"
                )
        if seq is not None and seq % self.cp:
            raise ValueError(f"cp={self.cp} must divide the sequence length {seq}")

    def describe(self) -> str:
        return (
            f"TP{self.tp} CP{self.cp} EP{self.ep} DP{self.dp} PP{self.pp} mb{self.micro_batch} "
            f"recompute={self.recompute} ZeRO-{self.zero}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
