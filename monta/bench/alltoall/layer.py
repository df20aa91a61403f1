"""``monta bench alltoall --mode layer``: the MoE layer forward+backward around each exchange, under the
point's routing (``monta.bench.routes``), and its exact check against stock DeepSpeed.

The layer is the project's own (``monta.moe.MoE``: DeepSpeed's layer, its experts and its phases route ->
dispatch -> experts -> combine, with the exchange a registered ``Dispatcher``); only its gate is replaced
by ``FixedGate``, which returns the bench's routing instead of choosing one, so every exchange sees the
same tokens, expert choices and gate weights as in dispatch mode. One layer serves every variant row: the
rank's dispatcher of the row's exchange (the Runner's, on its transport and byte meter) and the row's
chunk count are swapped in per call, so the weights are the same object for all of them.

The check's reference is stock ``deepspeed.moe.layer.MoE`` with the same gate and weights: at the
buffer's capacity for a capacity exchange (its dropped routes contribute nothing), at the dropless
capacity for a token-level exchange. Outputs and input gradients must be equal element for element.
Values are exact in fp32 whatever the summation order, so equal means equal: tokens are small integers,
the experts' weights are -1/0/1, the gate weights multiples of 1/8 and the loss weights small integers.
"""

from __future__ import annotations

import os
import zlib

import torch

from monta.bench.routes import SizeInput
from monta.progress import beat

FFN_BIAS = False  # integer weights without a bias keep every value exact (module docstring)


class FixedGate(torch.nn.Module):
    """DeepSpeed's gate interface (``TopKGate``'s call and the attributes ``ExchangeMOELayer.route``
    reads) answering with a given routing: ``plan`` = (slots [k, S], gates [k, S] fp32, capacity,
    experts), set before each call. ``drop_tokens`` False: the capacity is the routing's own."""

    def __init__(self) -> None:
        super().__init__()
        self.plan: tuple | None = None
        self.drop_tokens = False
        self.capacity_factor = self.eval_capacity_factor = 1.0
        self.min_capacity = 0
        self.wall_clock_breakdown = False

    def _set_ep_group(self, ep_group) -> None:
        self.ep_group = ep_group

    def forward(self, x_SM, used_token=None, use_sparse=True, use_tutel=False):
        slots, gates, C, E = self.plan
        kept = slots < E * C  # a dropped route sits on DeepSpeed's scratch slot E * C
        indices = torch.where(kept, slots // C, torch.full_like(slots, -1))
        locations = torch.where(kept, slots % C, torch.zeros_like(slots))
        counts = torch.bincount(indices[kept], minlength=E)
        return x_SM.new_zeros(()), C, E, indices, locations, gates, counts


def expert(hidden: int) -> torch.nn.Module:
    """The per-expert FFN: hidden -> hidden -> hidden, ReLU between (--hidden sets both widths)."""
    return torch.nn.Sequential(
        torch.nn.Linear(hidden, hidden, bias=FFN_BIAS),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden, bias=FFN_BIAS),
    )


def fill_weights(layer: torch.nn.Module, ep_index: int) -> None:
    """Deterministic -1/0/1 weights, a function of the parameter's name and the rank's EP index (its
    experts), the same on every TP rank of the member and in the reference layer."""
    with torch.no_grad():
        for name, p in layer.named_parameters():
            seed = zlib.crc32(name.removeprefix("deepspeed_moe.").encode()) + 7919 * ep_index
            g = torch.Generator().manual_seed(seed)
            p.copy_(torch.randint(-1, 2, p.shape, generator=g).to(p.dtype))


def layer_gates(gates: torch.Tensor) -> torch.Tensor:
    """The bench's gate weights (uniform in [0, 1)) rounded up to multiples of 1/8 in (0, 1]: exact products."""
    return torch.floor(gates * 8 + 1) / 8


def loss_weights(tokens: torch.Tensor) -> torch.Tensor:
    """The scalar loss is sum(out * w): w a small integer per element, a function of the tokens."""
    return torch.remainder(tokens, 5) - 2


def _init_deepspeed(backend: str) -> None:
    """DeepSpeed's comm layer over the process group the bench already joined (no second rendezvous)."""
    import deepspeed.comm as dcomm

    if dcomm.is_initialized():
        return
    import deepspeed

    deepspeed.init_distributed(dist_backend=backend, verbose=False)


class LayerRows:
    """The MoE layer of one Runner (``runner.Runner``): ``run`` one variant row's forward and
    backward, ``reference`` stock DeepSpeed's on the same input. Built once per Runner (collective)."""

    def __init__(self, runner) -> None:
        if runner.cfg.backend == "gloo":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        from deepspeed.moe.layer import MoE as StockMoE

        from monta.chunking import Fixed
        from monta.dtypes import torch_dtype
        from monta.groups import init_deepspeed_groups, reset_deepspeed_groups
        from monta.moe import MoE

        _init_deepspeed(runner.cfg.backend)
        cfg, mesh = runner.cfg, runner.mesh
        self.runner, self._fixed = runner, Fixed
        expert_tp = cfg.tp > 1
        # This layout's groups in DeepSpeed (a test world hosts several layouts: forget the last one's).
        reset_deepspeed_groups()
        init_deepspeed_groups(mesh, expert_tp)
        kw = dict(
            hidden_size=cfg.hidden,
            num_experts=cfg.experts,
            ep_size=cfg.ep,
            k=cfg.topk,
            enable_expert_tensor_parallelism=expert_tp,
        )
        dtype = torch_dtype(cfg.dtype)
        cuda = cfg.backend == "nccl"  # the worker's device: this rank's GPU (the worker)
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
        ep_index = runner.exchange_mesh.ep.index
        # The fixed routing plans replace both layers' gates; every pass runs on the runner's own metered
        # dispatchers (use_exchange below), whose meter carries the runner's fault (TEST AID).
        self.layer = MoE(
            expert=expert(cfg.hidden), exchange=cfg.variants[0], chunks=1, mesh=mesh, gate=FixedGate(), **kw
        )
        self.stock = StockMoE(expert=expert(cfg.hidden), **kw)
        self.stock.deepspeed_moe.gate = FixedGate()  # DeepSpeed's own layer, the reference: not monta's
        self.layer.to(device=device, dtype=dtype)
        self.stock.to(device=device, dtype=dtype)
        self.stock.set_deepspeed_parallelism()
        for m in (self.layer, self.stock):
            fill_weights(m, ep_index)

    def _call(self, moe, inp: SizeInput):
        """Forward and backward of ``moe`` on ``inp``: (output, input gradient), both detached."""
        p, dev = inp.plan, inp.tokens.device  # the plan is built on the host (monta.bench.routes)
        moe.deepspeed_moe.gate.plan = (p.slots.to(dev), layer_gates(p.gates).to(dev), p.capacity, p.num_experts)
        moe.zero_grad(set_to_none=True)
        x = inp.tokens.detach().requires_grad_(True)
        out = moe(x)[0]
        (out * loss_weights(inp.tokens)).sum().backward()
        return out.detach(), x.grad

    def run(self, variant: str, chunks: int, inp: SizeInput):
        """One forward+backward of the layer around exchange ``variant`` in ``chunks`` chunks, on the
        routing the exchange reads (the capacity plan, or the dropless one for a token-level exchange)."""
        r = self.runner
        self.layer.use_exchange(r.dispatchers[variant], self._fixed(chunks))
        beat(f"layer forward+backward of {variant}")  # a long call still shows the rank is alive
        return self._call(self.layer, inp.for_exchange(r.capacity_based(variant)))

    def reference(self, inp: SizeInput, capacity_based: bool):
        """Stock DeepSpeed's (output, input gradient) on the routing a capacity (or dropless) exchange reads."""
        from monta.compat import gloo_safe_deepspeed_gather

        with gloo_safe_deepspeed_gather():
            return self._call(self.stock, inp.for_exchange(capacity_based))


def wrong_elements(got, want) -> int:
    """Elements of the output and the input gradient that differ from the reference's."""
    return sum(int((a != b).sum()) for a, b in zip(got, want))
