"""The one interface of every token exchange on a rank: a ``Dispatcher``, built from its registry entry
(``monta.exchanges``) by ``build_dispatcher``.

``dispatch(x_SM, plan) -> (x_ECM, handle)``: this rank's tokens [S, M] and the gate's routing
(``monta.moe.layer.RoutingPlan``) in, the experts' input [E, C, M] out (the core exchange's: rows
grouped by source member), with a handle; ``combine(y_ECM, plan, handle) -> y_SM``: the experts'
output back to the tokens, weighted by their gates. Both are differentiable (autograd derives the
backward), and a dispatcher keeps no per-call state: what a combine needs rides in the handle
(DeepEP's dispatch -> handle -> combine), so calls may overlap on other threads.

Buffer exchanges (the core's and any registered with ``run_pass``) are ``BufferDispatcher``s:
DeepSpeed's encode + a pass over the [E, C, M] buffer, and a pass + decode. They offer the optional
capability ``CapacityPasses`` (``dispatcher.capacity_passes``): a pass over any window of capacity slots,
forward or transposed, which the schedules that pipeline capacity windows (Lina, Lancet) ask for. A
schedule that needs it is refused up front for an exchange without it (``monta.variants``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

# Torch-free at import, so a plugin's module (its dispatcher beside its model) stays importable by the
# performance model and the CLI: torch, DeepSpeed and the collectives are imported where a rank runs.
if TYPE_CHECKING:
    import torch

    from monta.comm.accounting import TrafficMeter
    from monta.mesh import Mesh


@dataclass(frozen=True)
class DispatcherSpec:
    """What a rank builds an exchange from: its registered ``name``, its ``mesh`` (``monta.mesh.Mesh``: the
    EP and TP axes it runs on, ``monta.comm.exchange.exchange_mesh``), ``chunks`` (the count a
    call runs unless its plan says otherwise; a chunked exchange only), ``expert_tp`` (experts are
    tensor-parallel: each TP rank needs the full capacity) and the byte meter."""

    name: str
    mesh: Mesh
    chunks: int = 1
    expert_tp: bool = True
    meter: TrafficMeter | None = None


class Dispatcher(ABC):
    """A token exchange bound to its mesh (module docstring). Subclasses implement ``dispatch`` and
    ``combine``; the checks run before any collective (``check_tokens``, ``check_capacity``)."""

    chunked = False  # takes the run's chunk count (a plan's ``chunks``)

    def __init__(self, spec: DispatcherSpec):
        self.name = spec.name
        self.mesh = spec.mesh
        self.expert_tp = spec.expert_tp
        self.meter = spec.meter
        self._chunks = spec.chunks if self.chunked else 1

    @property
    def chunks(self) -> int:
        """The count a call runs without its own (1 unless chunked)."""
        return self._chunks

    def count(self, chunks: int | None = None) -> int:
        """The chunks a call runs: its own ``chunks`` (None: the default), 1 if not chunked."""
        if not self.chunked:
            return 1
        return self._chunks if chunks is None else chunks

    @property
    def capacity_passes(self) -> CapacityPasses | None:
        """The optional capability of passes over capacity windows (None: not offered)."""
        return None

    def check_tokens(self, num_tokens: int) -> None:
        """Raise ValueError (before any collective) for a token count this exchange cannot move."""
        return None

    def check_capacity(self, capacity: int, chunks: int | None = None) -> None:
        """Raise ValueError (before any collective) for a capacity this exchange cannot move in ``chunks``."""
        return None

    @abstractmethod
    def dispatch(self, x_SM: torch.Tensor, plan) -> tuple[torch.Tensor, Any]:
        """Tokens [S, M] -> (the experts' input [E, C, M], the handle ``combine`` takes)."""

    @abstractmethod
    def combine(self, y_ECM: torch.Tensor, plan, handle: Any) -> torch.Tensor:
        """The experts' output [E, C, M] -> each token's gate-weighted sum [S, M]."""


@runtime_checkable
class CapacityPasses(Protocol):
    """Capability: passes over windows [E, c, M] of capacity slots of the encoded buffer, differentiable
    (``dispatch_pass``, ``combine_pass``) or their transposes run directly off autograd by a pipelined
    backward (``dispatch_pass_backward``, ``combine_pass_backward``); ``encode`` / ``decode`` between
    the tokens and the buffer; ``run_pass``: one dispatch pass off autograd (what the AllToAll bench times)."""

    mesh: Mesh

    def encode(self, x_SM: torch.Tensor, plan) -> torch.Tensor: ...
    def decode(self, y_ECM: torch.Tensor, plan) -> torch.Tensor: ...
    def check_capacity(self, capacity: int, chunks: int | None = None) -> None: ...
    def run_pass(self, x_ECM: torch.Tensor, chunks: int | None = None, phase: str = "dispatch") -> torch.Tensor: ...
    def dispatch_pass(self, x_ECM: torch.Tensor, chunks: int | None = None) -> torch.Tensor: ...
    def combine_pass(self, y_ECM: torch.Tensor, chunks: int | None = None) -> torch.Tensor: ...
    def dispatch_pass_backward(self, grad_ECM: torch.Tensor, chunks: int | None = None) -> torch.Tensor: ...
    def combine_pass_backward(self, grad_ECM: torch.Tensor, chunks: int | None = None) -> torch.Tensor: ...


class BufferDispatcher(Dispatcher):
    """A buffer exchange: encode + a pass, a pass + decode (``pass_fn``: ``run_pass`` or a plugin's).

    legacy (DeepSpeed before 0.14.5 with expert TP): the full buffer goes through the AllToAll on
    every TP rank (no drop, no gather: TP times the inter-node bytes); every other buffer exchange
    drops to the TP rank's capacity slice and gathers over TP around its AllToAll."""

    def __init__(self, spec: DispatcherSpec, pass_fn=None, chunked: bool = False, full_buffer: bool = False):
        from monta.comm.exchange import PassSpec, run_pass

        self.chunked = chunked
        super().__init__(spec)
        self._fn = pass_fn or run_pass
        whole = full_buffer and spec.expert_tp
        self.dispatch_spec = PassSpec(drop_in=not whole, gather_out=spec.expert_tp and not whole)
        self.combine_spec = PassSpec(drop_in=spec.expert_tp and not whole, gather_out=not whole)

    @property
    def capacity_passes(self) -> BufferDispatcher:
        return self

    def check_capacity(self, capacity: int, chunks: int | None = None) -> None:
        n = self.count(chunks)
        tp = self.mesh.tp.size
        if tp > 1 and capacity % tp:
            raise ValueError(
                f"expert capacity {capacity} is not divisible by the tensor-parallel size {tp}; "
                "adjust capacity_factor/min_capacity or the token count"
            )
        cl = capacity // tp
        if n > cl:
            raise ValueError(
                f"chunks={n} is larger than the capacity slice {cl} "
                f"(capacity {capacity} / TP {tp}); use at most {cl} chunks"
            )

    def dispatch(self, x_SM: torch.Tensor, plan) -> tuple[torch.Tensor, None]:
        return self.dispatch_pass(self.encode(x_SM, plan), plan.chunks), None

    def combine(self, y_ECM: torch.Tensor, plan, handle: None = None) -> torch.Tensor:
        return self.decode(self.combine_pass(y_ECM, plan.chunks), plan)

    # -- CapacityPasses ------------------------------------------------------------------------------
    def encode(self, x_SM: torch.Tensor, plan) -> torch.Tensor:
        from deepspeed.moe.sharded_moe import _sparse_encode

        return _sparse_encode(x_SM, plan.slots, plan.num_experts, plan.capacity)

    def decode(self, y_ECM: torch.Tensor, plan) -> torch.Tensor:
        from deepspeed.moe.sharded_moe import _sparse_decode

        E, C, M = y_ECM.shape
        return _sparse_decode(y_ECM.reshape(E * C, M), plan.slots, plan.gates, plan.num_tokens)

    def run_pass(self, x_ECM: torch.Tensor, chunks: int | None = None, phase: str = "dispatch") -> torch.Tensor:
        """One dispatch pass off autograd, as the AllToAll bench times it (the encode is the layer's compute)."""
        return self._fn(x_ECM, self.dispatch_spec, self.mesh, self.count(chunks), self.meter, phase)

    def dispatch_pass(self, x_ECM: torch.Tensor, chunks: int | None = None) -> torch.Tensor:
        from monta.comm.exchange import _PassFn

        n = self.count(chunks)
        return _PassFn.apply(x_ECM, self.dispatch_spec, self.mesh, n, self.meter, "dispatch", self._fn)

    def combine_pass(self, y_ECM: torch.Tensor, chunks: int | None = None) -> torch.Tensor:
        from monta.comm.exchange import _PassFn

        n = self.count(chunks)
        return _PassFn.apply(y_ECM, self.combine_spec, self.mesh, n, self.meter, "combine", self._fn)

    # The transposed passes, called directly by schedules that run a backward off autograd's thread
    # (the Lina/Lancet pipelined backward): the same pass autograd would run.
    def dispatch_pass_backward(self, grad_ECM: torch.Tensor, chunks: int | None = None) -> torch.Tensor:
        from monta.comm.exchange import transpose_pass

        n = self.count(chunks)
        return transpose_pass(grad_ECM, self.dispatch_spec, self.mesh, n, self.meter, "dispatch", self._fn)

    def combine_pass_backward(self, grad_ECM: torch.Tensor, chunks: int | None = None) -> torch.Tensor:
        from monta.comm.exchange import transpose_pass

        n = self.count(chunks)
        return transpose_pass(grad_ECM, self.combine_spec, self.mesh, n, self.meter, "combine", self._fn)


class TokenDispatcher(Dispatcher):
    """Base of exchanges that move tokens rather than capacity buffers: each TP rank moves its 1/TP token
    shard, so under TP the experts must be tensor-parallel and the token count must divide by TP."""

    def __init__(self, spec: DispatcherSpec):
        super().__init__(spec)
        if spec.mesh.tp.size > 1 and not spec.expert_tp:
            raise ValueError(
                f"exchange {spec.name!r} moves tokens to tensor-parallel experts: under TP {spec.mesh.tp.size} "
                "it needs expert tensor parallelism (enable_expert_tensor_parallelism=True)"
            )

    def check_tokens(self, num_tokens: int) -> None:
        tp = self.mesh.tp.size
        if num_tokens % tp:
            raise ValueError(
                f"exchange {self.name!r}: {num_tokens} tokens per rank do not split over TP {tp}; "
                "use a batch x sequence divisible by the tensor-parallel size"
            )


def build_dispatcher(
    name: str, mesh: Mesh, chunks: int = 1, expert_tp: bool = True, meter: TrafficMeter | None = None
) -> Dispatcher:
    """The dispatcher of exchange ``name`` (the core's or a plugin's) on this rank's mesh."""
    from monta import variants as registry
    from monta.comm.exchange import validate_exchange

    validate_exchange(name, chunks)
    entry = registry.exchange(name)
    spec = DispatcherSpec(name, mesh, chunks, expert_tp, meter)
    if entry.dispatcher is not None:
        d = entry.dispatcher(spec)
        if not isinstance(d, Dispatcher):
            raise TypeError(f"exchange {name!r}: its dispatcher= built {type(d).__name__}, not a Dispatcher")
    else:
        d = BufferDispatcher(spec, entry.run_pass, entry.chunked, entry.full_buffer)
    if (d.capacity_passes is not None) != (registry.CAPACITY_PASSES in entry.capabilities):
        raise TypeError(f"exchange {name!r}: its dispatcher's capacity passes disagree with its registry entry")
    return d
