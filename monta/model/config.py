"""Model configuration of the MoE decoder: presets (the paper's moe-2x70b, the fine-grained moe-fine,
each with a CPU-sized mini) and overrides.

Pure Python, no torch: the planner and the CLI validate a config without building a model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A Llama-shaped decoder whose every FFN is an MoE of SwiGLU experts."""

    name: str
    num_layers: int
    """decoder layers (the 2x70B run states its layer count: 80 layers do not fit 16x80 GB)"""
    hidden: int
    num_heads: int
    num_kv_heads: int
    """grouped-query attention: each KV head serves num_heads / num_kv_heads query heads"""
    ffn: int
    """SwiGLU inner size of one expert"""
    vocab: int
    num_experts: int
    top_k: int
    capacity_factor: float
    seq: int
    micro_batch: int
    rope: bool = True
    rope_theta: float = 10000.0
    min_capacity: int = 4
    norm_eps: float = 1e-5
    aux_loss_coef: float = 0.01

    def __post_init__(self) -> None:
        for f in (
            "num_layers",
            "hidden",
            "num_heads",
            "num_kv_heads",
            "ffn",
            "vocab",
            "num_experts",
            "top_k",
            "seq",
            "micro_batch",
        ):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{f}={v!r}: must be a positive integer")
        if self.hidden % self.num_heads:
            raise ValueError(f"hidden={self.hidden} is not divisible by num_heads={self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not divisible by num_kv_heads={self.num_kv_heads}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}")
        if not self.capacity_factor > 0:
            raise ValueError(f"capacity_factor={self.capacity_factor}: must be > 0")
        if self.rope and (self.hidden // self.num_heads) % 2:
            raise ValueError(f"head dim {self.hidden // self.num_heads} must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def tokens_per_micro_batch(self) -> int:
        return self.seq * self.micro_batch

    # -- parameter counts (no biases, as in Llama) ---------------------------------------------
    @property
    def dense_params_per_layer(self) -> int:
        """Attention (QKV + output projection), two RMSNorms, the gate."""
        h = self.hidden
        return h * (h + 2 * self.kv_dim) + h * h + 2 * h + h * self.num_experts

    @property
    def expert_params_per_layer(self) -> int:
        """All experts of one layer: SwiGLU = gate, up and down projections."""
        return self.num_experts * 3 * self.hidden * self.ffn

    @property
    def embedding_params(self) -> int:
        """Input embedding + untied output head + final norm."""
        return 2 * self.vocab * self.hidden + self.hidden

    @property
    def total_params(self) -> int:
        return self.num_layers * (self.dense_params_per_layer + self.expert_params_per_layer) + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token's forward uses: the dense ones and ``top_k`` experts per layer."""
        per_layer = self.dense_params_per_layer + self.top_k * 3 * self.hidden * self.ffn
        return self.num_layers * per_layer + self.embedding_params

    def with_overrides(self, **overrides: Any) -> ModelConfig:
        """This config with CLI overrides applied (``OVERRIDES``' names; None keeps a value), under the same
        name: for callers that state the overrides elsewhere (``monta plan`` records its layers in a column)."""
        changes = {}
        for key, value in overrides.items():
            if key not in OVERRIDES:
                raise ValueError(f"unknown model override {key!r}; known: {', '.join(OVERRIDES)}")
            if value is not None:
                changes[OVERRIDES[key]] = value
        return replace(self, **changes) if changes else self

    def check_layout(self, tp: int, ep: int) -> None:
        """Raise ValueError when this model cannot be split by TP ``tp`` and EP ``ep``."""
        for what, n in (("num_heads", self.num_heads), ("num_kv_heads", self.num_kv_heads), ("ffn", self.ffn)):
            if n % tp:
                raise ValueError(f"{what}={n} is not divisible by tp={tp}; choose a TP size that divides it")
        if self.num_experts % ep:
            raise ValueError(
                f"num_experts={self.num_experts} is not divisible by ep={ep}; use --experts a multiple of {ep}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The mini preset is scaled for the regime the paper measures, not just for size. 2x70B at 8K
# tokens, hidden 8192, top-2 over 2 experts, cf 1.0 has a per-rank dispatch buffer [E=2, C=8192,
# M=8192] = 256 MiB in bf16: the MoE exchange is bandwidth-bound on the inter-node link. The mini
# keeps the 8K tokens per micro-batch (64 x 128: short sequences, because CPU attention costs
# grow with S per token and it was the largest single kernel of the step at 256) and the shape
# ratios (heads:kv 8:1, ffn/hidden 3.5, 2 experts, top-2, cf 1.0, so
# C = tokens) and divides the widths by 64 (hidden 128, ffn 448, 32 heads of dim 4): the buffer is
# [2, 8192, 128] fp32 = 8 MiB per rank (2 MiB per TP4 slice), bandwidth-bound on the emulated
# links, where the earlier 128-token mini (128 KiB) was a handful of latency-bound gloo messages in
# which chunking can only lose. Narrow and long rather than wide and short: bytes exchanged per
# token scale with hidden, compute per token with hidden^2, so this keeps the exchange a real share
# of the step, as at full scale. One layer and vocab 512 keep a step to a few seconds for 8 ranks
# on 2 cores; every reported run states its layer count.
PRESETS: dict[str, ModelConfig] = {
    # Llama-2-70B shape, every FFN an MoE of 2 such experts, top-2, cf 1.0, 8K sequence (MoNTA, arXiv 2411.00662;
    # docs/design.md#the-2x70b-model).
    "moe-2x70b": ModelConfig(
        name="moe-2x70b",
        num_layers=80,
        hidden=8192,
        num_heads=64,
        num_kv_heads=8,
        ffn=28672,
        vocab=32000,
        num_experts=2,
        top_k=2,
        capacity_factor=1.0,
        seq=8192,
        micro_batch=1,
    ),
    # Same ratios, scaled for 2 CPU cores with a multi-MiB MoE exchange (see above).
    "moe-2x70b-mini": ModelConfig(
        name="moe-2x70b-mini",
        num_layers=1,
        hidden=128,
        num_heads=32,
        num_kv_heads=4,
        ffn=448,
        vocab=512,
        num_experts=2,
        top_k=2,
        capacity_factor=1.0,
        seq=128,
        micro_batch=64,
    ),
    # A current fine-grained MoE (many small experts, top-8), next to the paper's 2 huge ones: the Qwen3-MoE
    # shape (Qwen3-235B-A22B, Qwen3 Technical Report, arXiv 2505.09388: 94 layers, hidden 4096, SwiGLU experts
    # of 1536, top-8, GQA, untied vocabulary 151936, RoPE theta 1e6, RMSNorm eps 1e-6, pre-trained on 4,096-token
    # sequences) with three departures, each for this harness: 64 experts instead of 128 (the routed-expert
    # count of DeepSeekMoE 16B and OLMoE, whose top-6/top-8 routing over 64 experts is the same regime), 32
    # query heads of dim 128 instead of 64 (ModelConfig ties the head dim to hidden / heads: Mixtral's and
    # Llama-3-8B's attention at hidden 4096) and 8 KV heads instead of 4, so that TP8 divides them as it does
    # for the 2x70B. No shared expert (DeepSeek's and Qwen2's; Qwen3 has none either). 118.8B parameters,
    # 19.4B active per token. Its per-rank dispatch buffer is [E=64, C=4096*8/64=512, M=4096] = 256 MiB in
    # bf16, the 2x70B's size, but every token is sent to 8 experts (on 2 nodes to both but for 0.5% of
    # tokens), ~4 per node: a node-deduplicated exchange sends it once per node. Like the 2x70B's 80 layers,
    # its 94 do not fit 16 x 80 GB with Adam: 32 layers fit TP8 EP2 DP2 ZeRO-1 (--layers is the knob;
    # docs/design.md#the-fine-grained-model).
    "moe-fine": ModelConfig(
        name="moe-fine",
        num_layers=94,
        hidden=4096,
        num_heads=32,
        num_kv_heads=8,
        ffn=1536,
        vocab=151936,
        num_experts=64,
        top_k=8,
        capacity_factor=1.0,
        seq=4096,
        micro_batch=1,
        rope_theta=1e6,
        norm_eps=1e-6,
    ),
    # Scaled as moe-2x70b-mini is (see above): the full model's tokens per micro-batch (4096 = 32 x 128),
    # top-8, cf 1.0, heads:kv 4:1 and ffn/hidden 0.375, widths divided by 32 (hidden 128, ffn 48, 32 heads
    # of dim 4), one layer, vocab 512. Experts 64 -> 16 (top-8 of 16 still reaches both nodes of a 2-node EP
    # group for all but a few tokens, and 8 experts per rank at EP2 keep the CPU's per-expert GEMMs few):
    # C = 4096 * 8 / 16 = 2048 (divisible by TP 1/2/4/8), buffer [16, 2048, 128] fp32 = 16 MiB per rank
    # (4 MiB per TP4 slice), bandwidth-bound on the emulated links. E x C = tokens x top_k x cf does not
    # depend on E, so the buffer-to-activation ratio is the full model's, and so is the emulated clock's D
    # (monta.perfmodel.training.clock prices this run as moe-fine: FULL_SIZE below).
    "moe-fine-mini": ModelConfig(
        name="moe-fine-mini",
        num_layers=1,
        hidden=128,
        num_heads=32,
        num_kv_heads=8,
        ffn=48,
        vocab=512,
        num_experts=16,
        top_k=8,
        capacity_factor=1.0,
        seq=128,
        micro_batch=32,
        rope_theta=1e6,
        norm_eps=1e-6,
    ),
}

# The full-size preset each CPU-sized preset stands for: an emulated run on the clock
# (monta.perfmodel.training.clock.full_size) is priced as this model with the run's layers and routing.
FULL_SIZE: dict[str, str] = {"moe-2x70b-mini": "moe-2x70b", "moe-fine-mini": "moe-fine"}


def preset_of(name: str) -> str:
    """The preset a config's name starts from: 'moe-fine-mini[topk=4]' -> 'moe-fine-mini'."""
    return name.partition("[")[0]


# CLI override name -> config field.
OVERRIDES = {
    "layers": "num_layers",
    "hidden": "hidden",
    "heads": "num_heads",
    "kv_heads": "num_kv_heads",
    "ffn": "ffn",
    "experts": "num_experts",
    "topk": "top_k",
    "capacity_factor": "capacity_factor",
    "seq": "seq",
    "micro_batch": "micro_batch",
    "vocab": "vocab",
}


def resolve_config(preset: str, **overrides: Any) -> ModelConfig:
    """A preset with overrides applied (None means keep the preset's value), named after them
    ('moe-2x70b-mini[layers=1,topk=2]')."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset].with_overrides(**overrides)
    suffix = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()) if v is not None)
    return replace(cfg, name=f"{preset}[{suffix}]") if suffix else cfg
