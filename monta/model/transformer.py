"""The MoE decoder: embedding, N x (RMSNorm, GQA attention, RMSNorm, MoE of SwiGLU experts), head.

Weights are drawn from the full (unsharded) matrices seeded by name, so a model is the same
function whatever its TP/EP split; the MoE is ``monta.moe.MoE`` with a swappable schedule.

What the model routes by (``choices``: a workload's ``monta.moe.WorkloadChoices``, or the gates' own) and
what watches it (``observers``: ``monta.moe.Observers``: phase timers, the backward clock, route tallies,
the compute clock) are given when it is built and passed down to every layer and priced piece.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from monta.mesh import Mesh, MeshAxis
from monta.model.clock import ClockPiece
from monta.model.config import ModelConfig
from monta.model.layers import Attention, RMSNorm, SwiGLUExpert
from monta.model.tp import ColumnParallelLinear, RowParallelLinear, linear

# A schedule runs one MoE layer: (moe module, x [B, S, M]) -> (out [B, S, M], l_aux). One with a
# ``layer_forward(decoder_layer, x) -> (x_next, l_aux)`` method runs the whole decoder layer instead.
MoESchedule = Callable[[nn.Module, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def stock_schedule(moe: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSpeed's MoE forward: the layer's own (``ExchangeMOELayer.forward``: route, dispatch, experts,
    combine, each exchange's backward timed when the step records times)."""
    layer = moe.deepspeed_moe
    out = layer.forward(x)  # not __call__: no module hooks, as DeepSpeed's MoE.forward runs it inside its own
    return out, layer.l_aux


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: MeshAxis, mesh: Mesh, exchange: str, chunks, choices, observers):
        super().__init__()
        from monta.moe import MoE  # deepspeed import deferred to model construction

        self.observers = observers
        self.norm1 = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.attn = Attention(
            cfg.hidden, cfg.num_heads, cfg.num_kv_heads, tp, cfg.rope, cfg.rope_theta, observers=observers
        )
        self.norm2 = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.moe = MoE(
            cfg.hidden,
            SwiGLUExpert(cfg.hidden, cfg.ffn, tp),
            num_experts=cfg.num_experts,
            ep_size=mesh.layout.ep,
            k=cfg.top_k,
            capacity_factor=cfg.capacity_factor,
            eval_capacity_factor=cfg.capacity_factor,
            min_capacity=cfg.min_capacity,
            enable_expert_tensor_parallelism=True,
            exchange=exchange,
            chunks=chunks,
            mesh=mesh,
            choices=choices,
            observers=observers,
        )
        self.schedule: MoESchedule = stock_schedule

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layer_forward = getattr(self.schedule, "layer_forward", None)
        if layer_forward is not None:  # a schedule that interleaves the attention with the MoE (Lancet)
            return layer_forward(self, x)
        with self.observers.phase("attention"):
            h = x + self.attn(self.norm1(x))
        out, l_aux = self.schedule(self.moe, self.norm2(h))
        return h + out, l_aux


class MoETransformer(nn.Module):
    """Llama-shaped decoder with MoE FFNs; ``forward(tokens, labels) -> (loss, lm_loss)``.

    ``choices``: a routing workload's ``monta.moe.WorkloadChoices`` for this EP member, which every MoE
    layer routes in place of its gate's choice (None: the gates' own); ``observers``: the
    ``monta.moe.Observers`` every layer and priced piece reports to (None: the model's own, silent until
    asked; give one with ``clock=`` to run the compute on the emulated clock).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        mesh: Mesh,
        tp: MeshAxis,
        exchange: str = "deepspeed",
        chunks=1,
        seed: int = 1234,
        *,
        choices=None,
        observers=None,
    ):
        super().__init__()
        from monta.moe import Observers

        cfg.check_layout(mesh.layout.tp, mesh.layout.ep)
        self.cfg = cfg
        self.observers = observers if observers is not None else Observers()
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, tp, mesh, exchange, chunks, choices, self.observers) for _ in range(cfg.num_layers)
        )
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.head = nn.Parameter(torch.empty(cfg.vocab, cfg.hidden))  # replicated over TP
        self._init_weights(seed, mesh.ep.index)
        self._tag_clock_pieces()

    def _init_weights(self, seed: int, ep_rank: int) -> None:
        def full(name: str, shape, std: float = 0.02) -> torch.Tensor:
            g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            return torch.randn(shape, generator=g) * std

        with torch.no_grad():
            self.embed.weight.copy_(full("embed", self.embed.weight.shape, 1.0))
            self.head.copy_(full("head", self.head.shape))
            for i, layer in enumerate(self.layers):
                for proj in ("wq", "wk", "wv", "wo"):
                    m = getattr(layer.attn, proj)
                    m.load_full(full(f"layers.{i}.attn.{proj}", m.full_shape))
                gate = layer.moe.deepspeed_moe.gate.wg
                gate.weight.copy_(full(f"layers.{i}.gate", gate.weight.shape))
                local = layer.moe.deepspeed_moe.experts.deepspeed_experts
                for j, expert in enumerate(local):
                    e = ep_rank * len(local) + j  # global expert id: same weights wherever it lives
                    for proj in ("w1", "w3", "w2"):
                        m = getattr(expert, proj)
                        m.load_full(full(f"layers.{i}.expert{e}.{proj}", m.full_shape))

    def _tag_clock_pieces(self) -> None:
        """Name the compute piece each GEMM weight belongs to (the observers' clock prices it as that piece of
        the full-size model); the MoE layers tag their experts ("experts") themselves."""
        self.head.clock_piece = ClockPiece("head", self.observers)
        for layer in self.layers:
            for proj in ("wq", "wk", "wv", "wo"):
                getattr(layer.attn, proj).weight.clock_piece = ClockPiece("attention", self.observers)

    def set_schedule(self, schedule: MoESchedule) -> None:
        for layer in self.layers:
            layer.schedule = schedule

    def moe_layers(self):
        return [layer.moe for layer in self.layers]

    def forward(self, tokens_BS: torch.Tensor, labels_BS: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(tokens_BS)
        l_aux_total = x.new_zeros((), dtype=torch.float32)
        for layer in self.layers:
            x, l_aux = layer(x)
            l_aux_total = l_aux_total + l_aux
        logits = linear(self.norm(x), self.head)
        lm_loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels_BS.reshape(-1))
        return lm_loss + self.cfg.aux_loss_coef * l_aux_total, lm_loss.detach()


__all__ = [
    "MoETransformer",
    "DecoderLayer",
    "stock_schedule",
    "ColumnParallelLinear",
    "RowParallelLinear",
]
