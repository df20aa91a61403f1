"""The shape of a published MoE model as a training run states it (``data/published/steps.csv``): layers,
widths, routed and shared experts, dense layers, attention kind (GQA/MHA or DeepSeek's MLA), vocabulary and
multi-token-prediction layers, and its FLOPs per token.

FLOPs count a multiply-add as 2 and follow Megatron-Core's model-FLOPs convention (causal attention halves
the score and value products; SwiGLU experts count three matrices; the head counts once, an MTP layer counts
its layer, projection and head). Checked against the sources that state both tokens/s and TFLOPS: DeepSeek-V3
at 4K is 249 GFLOP/token without MTP and 261 with one MTP layer, Qwen3-235B-A22B 148
(``docs/results/published-steps.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The head dimension assumed where a row states neither heads nor head_dim (Llama/Mixtral/Qwen's 128).
DEFAULT_HEAD_DIM = 128


@dataclass(frozen=True)
class RunModel:
    layers: int
    hidden: int
    ffn: int
    experts: int
    top_k: int
    shared: int = 0
    shared_ffn: int = 0
    dense_layers: int = 0
    dense_ffn: int = 0
    attention: str = "mha"  # mha | gqa | mla
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    q_lora: int = 0
    kv_lora: int = 0
    rope_dim: int = 0
    v_head: int = 0
    vocab: int = 0
    mtp: int = 0
    # The FLOPs per token (forward + backward, GFLOP) a source's TFLOPS or MFU figure counts, where the row
    # states it (``source_gflop_per_token``): a figure in the source's count is compared in that count. 0: the
    # model's own count (:meth:`model_flops_per_token`).
    source_gflop: float = 0.0
    # Biases on the linear layers, the experts' included (GPT-OSS: ``linear_bias`` yes; Megatron-Bridge's
    # provider sets ``add_bias_linear``): their FLOPs are negligible, the experts' second bias is not
    # (``passes.EXPERT_BIAS_BYTES``).
    linear_bias: bool = False
    assumed: tuple[str, ...] = field(default=(), compare=False)

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers

    @property
    def qk_dim(self) -> int:
        return self.head_dim + (self.rope_dim if self.attention == "mla" else 0)

    @property
    def v_dim(self) -> int:
        return self.v_head or self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token (elements) as context parallelism passes them around its ring."""
        if self.attention == "mla":
            return self.heads * (self.qk_dim + self.v_dim)
        return 2 * (self.kv_heads or self.heads) * self.head_dim

    def attn_proj_params(self) -> int:
        h = self.hidden
        if self.attention == "mla":
            q = (
                h * self.q_lora + self.q_lora * self.heads * self.qk_dim
                if self.q_lora
                else h * self.heads * self.qk_dim
            )
            kv = h * (self.kv_lora + self.rope_dim) + self.kv_lora * self.heads * (self.head_dim + self.v_dim)
            return q + kv + self.heads * self.v_dim * h
        kv = self.kv_heads or self.heads
        return h * self.heads * self.head_dim * 2 + 2 * h * kv * self.head_dim

    def mla_up_params(self) -> int:
        """MLA's up projections (what ``--recompute-modules up_proj`` recomputes); 0 for other attention."""
        if self.attention != "mla":
            return 0
        return self.q_lora * self.heads * self.qk_dim + self.kv_lora * self.heads * (self.head_dim + self.v_dim)

    def layer_flops(self, seq: int, moe: bool = True) -> dict[str, float]:
        """Forward FLOPs per token of one layer, by piece: GEMMs (``attn_proj``, ``experts``, ``shared``,
        ``dense``, ``router``) and the attention core (``attn_core``, causal)."""
        h = self.hidden
        out = {
            "attn_proj": 2.0 * self.attn_proj_params(),
            "attn_core": float(seq) * self.heads * (self.qk_dim + self.v_dim),
            "experts": 0.0,
            "shared": 0.0,
            "dense": 0.0,
            "router": 0.0,
        }
        if moe:
            out["experts"] = 2.0 * 3 * h * self.ffn * self.top_k
            out["shared"] = 2.0 * 3 * h * self.shared_ffn * self.shared
            out["router"] = 2.0 * h * self.experts
        else:
            out["dense"] = 2.0 * 3 * h * self.dense_ffn
        return out

    def model_flops_per_token(self, seq: int) -> float:
        """Forward + backward (3 x forward) model FLOPs per token of the whole model (no recomputation)."""
        moe = sum(self.layer_flops(seq, True).values())
        dense = sum(self.layer_flops(seq, False).values())
        head = 2.0 * self.hidden * self.vocab
        mtp = self.mtp * (moe + 2.0 * 2 * self.hidden * self.hidden + head)
        return 3 * (self.moe_layers * moe + self.dense_layers * dense + head + mtp)

    def params(self) -> tuple[float, float]:
        """(dense, expert) parameters of the whole model (embedding and head untied)."""
        h = self.hidden
        attn = self.attn_proj_params() + 2 * h
        dense = self.layers * attn + self.moe_layers * (h * self.experts + 3 * h * self.shared_ffn * self.shared)
        dense += self.dense_layers * 3 * h * self.dense_ffn + 2 * self.vocab * h
        expert = self.moe_layers * self.experts * 3 * h * self.ffn
        return float(dense), float(expert)


REQUIRED = ("layers", "hidden", "ffn_hidden", "experts", "topk")


def run_model(num, text) -> tuple[RunModel | None, str | None]:
    """A row's model from its columns (``num(col)``: a positive number or None; ``text(col)``), or (None, why)."""
    missing = [c for c in REQUIRED if not num(c)]
    if missing:
        return None, f"model shape not stated ({', '.join(missing)}): a step needs layers, widths, experts and top-k"
    assumed = []

    def i(col: str, default: int = 0, say: str | None = None) -> int:
        v = num(col)
        if v is None and say:
            assumed.append(say)
        return int(v) if v is not None else default

    h = int(num("hidden"))
    attention = (text("attention") or "").lower()
    heads = i("heads")
    head_dim = i("head_dim")
    if not attention or not heads:
        assumed.append("attention not stated: multi-head attention of head dim 128 assumed")
        attention, heads, head_dim = attention or "mha", heads or max(1, h // DEFAULT_HEAD_DIM), head_dim or 0
    head_dim = head_dim or h // heads
    vocab = i("vocab", 0, "vocabulary not stated: the head's FLOPs left out")
    m = RunModel(
        layers=int(num("layers")),
        hidden=h,
        ffn=int(num("ffn_hidden")),
        experts=int(num("experts")),
        top_k=int(num("topk")),
        shared=i("shared_experts"),
        shared_ffn=i("shared_ffn_hidden") or (int(num("ffn_hidden")) if num("shared_experts") else 0),
        dense_layers=i("dense_layers"),
        dense_ffn=i("dense_ffn_hidden"),
        attention=attention,
        heads=heads,
        kv_heads=i("kv_heads"),
        head_dim=head_dim,
        q_lora=i("q_lora_rank"),
        kv_lora=i("kv_lora_rank"),
        rope_dim=i("qk_rope_dim"),
        v_head=i("v_head_dim"),
        vocab=vocab,
        mtp=i("mtp_layers"),
        source_gflop=num("source_gflop_per_token") or 0.0,
        linear_bias=(text("linear_bias") or "").lower() == "yes",
        assumed=tuple(assumed),
    )
    return m, None
