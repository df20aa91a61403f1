"""``monta.moe.MoE``: DeepSpeed's real MoE layer (its gate, its experts, its parameter names)
with the token exchange swapped for a registered one (a ``monta.comm.dispatcher.Dispatcher``); the
phases (route, dispatch, experts, combine) are separate for schedulers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from deepspeed.moe import layer as ds_layer
from deepspeed.moe.sharded_moe import MOELayer, _route_slots
from deepspeed.utils import groups as ds_groups

from monta.chunking import (
    AUTO,
    Auto,
    Chooser,
    Chunks,
    Fixed,
    capacity_slice,
    dispatch_bytes,
    expert_capacity,
    parse_chunks,
)
from monta.comm.accounting import TrafficMeter
from monta.comm.dispatcher import Dispatcher, build_dispatcher
from monta.comm.exchange import exchange_mesh, validate_exchange
from monta.comm.timing import timed_combine, timed_dispatch
from monta.groups import init_deepspeed_groups
from monta.mesh import Mesh
from monta.model.clock import ClockPiece
from monta.moe.gate_routing import WorkloadChoices, workload_gate
from monta.moe.observers import Observers

log = logging.getLogger(__name__)
_REDUCED: set[tuple[int, int]] = set()  # (chunks asked, capacity slice) already reported by this process


@dataclass(frozen=True)
class RoutingPlan:
    """The gate's decision for one batch of S tokens (returned, never stored on the layer)."""

    slots: torch.Tensor  # [k, S] flat slot of each route in the [E * C] buffer
    gates: torch.Tensor  # [k, S] gate weight of each route (fp32)
    capacity: int
    num_experts: int
    num_tokens: int
    l_aux: torch.Tensor
    exp_counts: torch.Tensor
    chunks: int | None = None  # the exchange's chunks for this batch (None: the exchange's default)


class ExchangeMOELayer(MOELayer):
    """DeepSpeed's MOELayer whose forward is cut into phases around a ``Dispatcher``: route, dispatch,
    experts, combine; the one MoE forward (DeepSpeed's schedule runs it as it is).

    ``chunks`` (``monta.chunking``): ``Fixed(n)`` or ``Auto``, resolved per call by ``route`` into
    ``RoutingPlan.chunks``, which a chunked exchange's calls read. ``chooser`` picks ``Auto``'s count;
    the top of the stack injects it (``monta.perfmodel.network.chunks.model_chooser``: the model).

    Given at construction, never written afterwards: ``choices`` (a workload's ``WorkloadChoices``, which
    replace the gate's expert choice; None: the gate's own) and ``observers`` (``monta.moe.Observers``:
    phase timers, the backward clock, route tallies; the layer registers with it).
    """

    def __init__(
        self,
        base: MOELayer,
        exchange: str,
        chunks: Chunks,
        mesh: Mesh | None,
        expert_tp: bool,
        chooser: Chooser | None = None,
        choices: WorkloadChoices | None = None,
        observers: Observers | None = None,
        gate: torch.nn.Module | None = None,
    ):
        gate = base.gate if gate is None else gate
        super().__init__(gate, base.experts, base.ep_group_name, base.ep_size, base.num_local_experts)
        self.exchange_name = exchange
        self.chunks = parse_chunks(chunks)
        if isinstance(self.chunks, Auto) and chooser is None:
            raise ValueError(
                f"chunks={AUTO!r} needs chunk_chooser= (e.g. monta.perfmodel.network.chunks.model_chooser(cluster)); "
                "or give a chunk count"
            )
        self.chooser = chooser
        self.mesh = mesh
        self.expert_tp = expert_tp
        self.exchange: Dispatcher | None = None
        self.meter: TrafficMeter | None = None
        self.choices = choices
        self.observers = observers if observers is not None else Observers()
        self.index = self.observers.register_layer()  # this layer's place in the observers' route tallies
        for w in self.experts.parameters():  # the experts' GEMMs: piece "experts" of the observers' clock
            w.clock_piece = ClockPiece("experts", self.observers)

    def use_exchange(self, dispatcher: Dispatcher, chunks: Chunks | int) -> None:
        """Run the next calls on ``dispatcher`` (built on this layer's mesh elsewhere, with its own meter) in
        ``chunks``: the AllToAll bench races every exchange through one layer, each on its own metered
        dispatcher. The one way in from outside: nothing else swaps the layer's exchange."""
        self.exchange, self.meter, self.chunks = dispatcher, dispatcher.meter, parse_chunks(chunks)

    # -- groups ---------------------------------------------------------------------------
    def _set_ep_group(self, ep_group):
        super()._set_ep_group(ep_group)
        if self.mesh is None:
            raise ValueError("monta.moe.MoE needs mesh= (monta.mesh.build_mesh(layout))")
        g = exchange_mesh(self.mesh, ep=ep_group)
        self.meter = TrafficMeter(self.mesh.layout, self.mesh.rank, fault=self.observers.fault)
        default = self.chunks.n if isinstance(self.chunks, Fixed) else 1  # a call without a plan's count
        self.exchange = build_dispatcher(self.exchange_name, g, default, self.expert_tp and g.tp.size > 1, self.meter)

    # -- phases ---------------------------------------------------------------------------
    def expected_capacity(self, num_tokens: int) -> int | None:
        """Capacity DeepSpeed's gate will pick (None when drop_tokens=False makes it data-dependent)."""
        gate = self.gate
        if not gate.drop_tokens:
            return None
        cf = gate.capacity_factor if self.training else gate.eval_capacity_factor
        E = self.ep_size * self.num_local_experts
        return expert_capacity(num_tokens, E, cf, gate.k, gate.min_capacity)

    def chunks_for(self, capacity: int, x_SM: torch.Tensor) -> int:
        """Chunks of this call's exchange (no state changes): ``Auto`` asks the chooser for this rank's
        full [E, C, M] buffer; a fixed count is capped at the capacity slice, because an eval capacity
        factor or a short last batch shrinks the capacity after the layer was built and stock DeepSpeed
        runs on there (chunking never changes values; the log says so once)."""
        if not self.exchange.chunked:  # a registry property of the exchange, not its name
            return 1
        tp = self.exchange.mesh.tp.size
        cl = capacity_slice(capacity, tp)  # a capacity TP does not divide is refused by check_capacity
        E = self.ep_size * self.num_local_experts
        nbytes = dispatch_bytes(E, capacity, x_SM.shape[-1], x_SM.element_size())
        n = self.chunks.resolve(nbytes, self.mesh.layout, cl, self.chooser)
        if n > cl and (n, cl) not in _REDUCED:
            _REDUCED.add((n, cl))
            log.warning(
                "monta.moe.MoE: chunks=%d is larger than this call's capacity slice %d (capacity %d / "
                "TP %d: an eval capacity factor or a short batch); using %d chunks for such calls",
                n,
                cl,
                capacity,
                tp,
                cl,
            )
        return min(n, cl)

    def route(self, x_SM: torch.Tensor, used_token: torch.Tensor | None = None) -> RoutingPlan:
        if self.exchange is None:
            raise ValueError(
                "MoE layer has no expert-parallel group yet; call set_deepspeed_parallelism() "
                "or construct monta.moe.MoE with mesh="
            )
        expected = self.expected_capacity(x_SM.shape[0])
        self.exchange.check_tokens(x_SM.shape[0])
        if expected is not None:  # fail before the gate's or the exchange's collectives
            chunks = self.chunks_for(expected, x_SM)
            self.exchange.check_capacity(expected, chunks)
        workload = self.choices.choices_Sk if self.choices is not None else None
        if workload is not None:
            if expected is None:
                raise ValueError("a routing workload needs the gate's drop_tokens=True (a fixed capacity)")
            gate_out = workload_gate(self.gate, x_SM, workload, expected)
        else:
            gate_out = self.gate(x_SM, used_token, True, False)
        l_aux, C, E, indices, locations, gates, exp_counts = gate_out
        C = int(C)
        if expected is None:
            chunks = self.chunks_for(C, x_SM)
            self.exchange.check_capacity(C, chunks)
        slots = _route_slots(indices, locations, E, C)
        plan = RoutingPlan(slots, gates, C, E, x_SM.shape[0], l_aux, exp_counts, chunks)
        self.observers.tally(self.index, plan, workload)
        return plan

    def keep_aux(self, plan: RoutingPlan) -> None:
        """Keep ``plan``'s aux loss and expert counts where DeepSpeed's ``MoE.forward`` reads them (the layer's
        ``l_aux``, ``exp_counts``): the one writer of those attributes, for schedules that route a batch
        themselves (Lancet's) as for this forward."""
        self.l_aux, self.exp_counts = plan.l_aux, plan.exp_counts

    def run_experts(self, x_ECM: torch.Tensor) -> torch.Tensor:
        E, C, M = x_ECM.shape
        out = self.experts(x_ECM.reshape(self.ep_size, self.num_local_experts, C, M))
        return out.reshape(E, C, M)

    def _timed(self, name: str, fn, *args):
        """``fn(*args)`` timed as phase ``name`` (when the observers record times)."""
        with self.observers.phase(name):
            return fn(*args)

    def forward(self, *input: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        x = input[0]
        used_token = input[1] if len(input) > 1 else None
        x_SM = x.reshape(-1, x.shape[-1])
        plan = self._timed("gate", self.route, x_SM, used_token)
        self.keep_aux(plan)
        bwd = self.observers.backward
        dispatched, handle = self._timed("dispatch", timed_dispatch, bwd, self.exchange, x_SM, plan)
        expert_out = self._timed("experts", self.run_experts, dispatched)
        out = self._timed("combine", timed_combine, bwd, self.exchange, expert_out, plan, handle)
        return out.reshape(x.shape)


class MoE(ds_layer.MoE):
    """``deepspeed.moe.layer.MoE`` with ``exchange=`` (a registered exchange: 'legacy' | 'deepspeed' |
    'monta' or a plugin's) and ``chunks=``.

    Same constructor, parameters and outputs as DeepSpeed's layer; only the token exchange
    differs, so variants compare apples to apples. ``mesh`` carries the layout's process groups (``monta.mesh.Mesh``).
    ``chunks``: an integer, ``"auto"`` or a ``monta.chunking`` value; ``chunk_chooser`` resolves
    ``"auto"`` (required with it: ``monta.perfmodel.network.chunks.model_chooser(cluster)``, say).
    ``choices``: a routing workload's ``WorkloadChoices`` for this EP member, routed in place of the gate's
    choice (None: the gate's own); ``observers``: the ``monta.moe.Observers`` that watch this layer (None:
    its own, silent until asked); ``gate``: a gate module in place of DeepSpeed's TopKGate (the AllToAll
    bench's fixed routing plans; None: DeepSpeed's). All are fixed here: nothing outside ``monta.moe`` sets
    them later (``use_exchange`` is the bench's one way to swap the exchange).
    """

    def __init__(
        self,
        hidden_size: int,
        expert: torch.nn.Module,
        num_experts: int = 1,
        ep_size: int = 1,
        k: int = 1,
        capacity_factor: float = 1.0,
        eval_capacity_factor: float = 1.0,
        min_capacity: int = 4,
        use_residual: bool = False,
        noisy_gate_policy: str | None = None,
        drop_tokens: bool = True,
        use_rts: bool = True,
        use_tutel: bool = False,
        enable_expert_tensor_parallelism: bool = False,
        top2_2nd_expert_sampling: bool = True,
        *,
        exchange: str = "monta",
        chunks: int | str | Chunks = 4,
        mesh: Mesh | None = None,
        chunk_chooser: Chooser | None = None,
        choices: WorkloadChoices | None = None,
        observers: Observers | None = None,
        gate: torch.nn.Module | None = None,
    ) -> None:
        validate_exchange(exchange, 1)  # the name first; the chunks by monta.chunking
        chunks = parse_chunks(chunks)
        if use_tutel:
            raise ValueError("use_tutel=True is not supported by monta.moe.MoE; the exchange replaces Tutel's")
        if mesh is not None and mesh.layout.ep != ep_size:
            raise ValueError(
                f"ep_size={ep_size} does not match the layout's EP degree {mesh.layout.ep} ({mesh.layout.describe()})"
            )
        if num_experts % ep_size:
            raise ValueError(f"num_experts={num_experts} is not divisible by ep_size={ep_size}")
        super().__init__(
            hidden_size,
            expert,
            num_experts,
            ep_size,
            k,
            capacity_factor,
            eval_capacity_factor,
            min_capacity,
            use_residual,
            noisy_gate_policy,
            drop_tokens,
            use_rts,
            False,
            enable_expert_tensor_parallelism,
            top2_2nd_expert_sampling,
        )
        self.mesh = mesh
        self.deepspeed_moe = ExchangeMOELayer(
            self.deepspeed_moe,
            exchange,
            chunks,
            mesh,
            enable_expert_tensor_parallelism,
            chunk_chooser,
            choices,
            observers,
            gate,
        )
        if mesh is not None:
            self.set_deepspeed_parallelism()

    def _create_process_groups(self, use_data_before_expert_parallel_: bool = False) -> None:
        if self.deepspeed_moe.exchange is not None:
            # Already bound at construction; deepspeed.initialize() calls this again, and
            # DeepSpeed's gate refuses a second EP group.
            return
        if self.mesh is not None and self.expert_group_name not in ds_groups._get_expert_parallel_group_dict():
            # Build DeepSpeed's expert groups from our layout (TP-strided, as the layout says).
            init_deepspeed_groups(self.mesh, self.enable_expert_tensor_parallelism)
        super()._create_process_groups(use_data_before_expert_parallel_)

    @property
    def exchange(self) -> Dispatcher | None:
        return self.deepspeed_moe.exchange

    def use_exchange(self, dispatcher: Dispatcher, chunks: Chunks | int) -> None:
        """``ExchangeMOELayer.use_exchange``: the next calls run on ``dispatcher`` in ``chunks``."""
        self.deepspeed_moe.use_exchange(dispatcher, chunks)

    @property
    def traffic(self) -> TrafficMeter | None:
        return self.deepspeed_moe.meter
