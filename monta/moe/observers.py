"""What watches a model's MoE layers and its compute: one ``Observers`` object, given when the model (or a
lone ``monta.moe.MoE``) is built and read back through its methods, so no one writes the layer's
attributes from outside and no module-level clock carries a run (docs/routing.md, "The --routing walk").

One model shares one ``Observers`` among its layers:

- phase timers: ``record_times(on)`` starts a step's (cleared); ``phase(name)`` times a block (the
  attention; the layer's gate, dispatch, experts, combine); ``add_times`` adds a pipeline's waits;
  ``phase_times()`` returns them with the exchanges' backward seconds;
- the backward clock ``backward`` (``monta.comm.timing.BackwardClock``), stamped by the exchanges'
  marks while times are recorded, and heard by listeners (Lancet's dW filler);
- route tallies: each layer registers (``register_layer``); ``record_routes()`` starts a step's,
  ``take_routes()`` returns one list of ``RouteTally`` per layer and stops;
- the compute clock ``clock`` (a ``monta.model.clock.ComputeClock``, or None: the CPU's own speed),
  charged through ``charge`` and restarted through ``restart`` by the model's pieces and schedules; the
  pipelines' comm thread runs each exchange through ``run_exchange`` (the clock's contention window);
- the weight gradients: a GEMM weight's dW goes through ``weight_grad``, computed at once unless a
  schedule defers them (``defer_weight_grads(sink)``: Lancet's dW filler, for one backward);
- ``fault`` (TEST AID: a ``monta.testaids.Fault``, or None), handed to the traffic meter of every layer's
  exchange, whose pass calls it (``monta bench alltoall --inject-fault`` in layer mode).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

import torch

from monta.comm.timing import BackwardClock
from monta.moe.gate_routing import RouteTally


class Observers:
    """One model's recorders (see the module's docstring); shared, never copied."""

    def __init__(self, clock: Any = None, fault: Any = None):
        self.clock = clock  # a monta.model.clock.ComputeClock (None: compute at the CPU's own speed)
        self.fault = fault  # TEST AID: a monta.testaids.Fault for the layers' exchanges (None: none)
        self.backward = BackwardClock()
        self._timing = False
        self._times: dict[str, float] = {}
        self._layers = 0
        self._routes: list[list[RouteTally]] | None = None
        self._dw_sink: Any = None

    def __deepcopy__(self, memo):  # DeepSpeed deep-copies experts; what watches them stays one object
        return self

    # -- phase timers and the backward clock ----------------------------------------------------
    def record_times(self, on: bool) -> None:
        """Record this step's phase seconds (forward phases and the exchanges' backward) or not; clears."""
        self._timing = on
        self._times.clear()
        self.backward.enabled = on
        self.backward.clear()

    @property
    def timing(self) -> bool:
        return self._timing

    @contextmanager
    def phase(self, name: str):
        """Time the block as phase ``name`` (summed over the step; CUDA-synchronized on GPU)."""
        if not self._timing:
            yield
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self._times[name] = self._times.get(name, 0.0) + time.perf_counter() - t0

    def add_times(self, times: dict[str, float]) -> None:
        """Add a schedule's own phase seconds (a pipeline's waits) while the step records times."""
        if self._timing:
            for k, v in times.items():
                self._times[k] = self._times.get(k, 0.0) + v

    def phase_times(self) -> dict[str, float]:
        """The step's phase seconds: forward phases, then the exchanges' backward (dispatch_bwd, combine_bwd)."""
        out = dict(self._times)
        out.update(self.backward.times)
        return out

    # -- route tallies ----------------------------------------------------------------------------
    def register_layer(self) -> int:
        """A MoE layer joins: its index in ``take_routes()``."""
        self._layers += 1
        return self._layers - 1

    def record_routes(self) -> None:
        """Record what every layer's gate routes from now on (one ``RouteTally`` per routing call)."""
        self._routes = [[] for _ in range(self._layers)]

    def tally(self, layer: int, plan, choices_Sk: torch.Tensor | None = None) -> None:
        """Layer ``layer`` routed ``plan`` (by a workload's ``choices_Sk``, or its gate's own choice)."""
        if self._routes is not None:
            self._routes[layer].append(RouteTally.of(plan, choices_Sk))

    def take_routes(self) -> list[list[RouteTally]]:
        """Per registered layer, its tallies since ``record_routes`` (empty: it never routed through
        ``ExchangeMOELayer.route``); recording stops."""
        routes, self._routes = self._routes, None
        return routes if routes is not None else [[] for _ in range(self._layers)]

    # -- the compute clock ------------------------------------------------------------------------
    def priced(self, piece: str) -> bool:
        return self.clock is not None and self.clock.priced(piece)

    def charge(self, piece: str, t0: float, flops: float | None = None, factor: float = 1.0) -> None:
        """Piece ``piece`` began at ``t0``: wait out its target on the clock (nothing without one)."""
        if self.priced(piece):
            self.clock.charge(piece, t0, flops, factor)

    def restart(self) -> None:
        """This thread just communicated or waited for a thread that did: its run of compute restarts."""
        if self.clock is not None:
            self.clock.restart()

    def run_exchange(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` as one exchange in flight on the clock's window (what contention reads)."""
        if self.clock is None:
            return fn(*args, **kwargs)
        return self.clock.exchange.run(fn, *args, **kwargs)

    def listen_backward(self, fn) -> None:
        """``fn("open"/"close")`` at every exchange backward's marks (Lancet's dW filler), until unlistened."""
        self.backward.listeners.append(fn)

    def unlisten_backward(self, fn) -> None:
        if fn in self.backward.listeners:
            self.backward.listeners.remove(fn)

    # -- weight gradients -------------------------------------------------------------------------
    def defer_weight_grads(self, sink: Any) -> None:
        """From now on the model's dW go to ``sink.defer(fn)`` (None: computed at once again)."""
        self._dw_sink = sink

    def weight_grad(self, dw) -> None:
        """One GEMM weight's dW (a closure that computes and accumulates it): now, or to the deferring sink."""
        sink = self._dw_sink
        if sink is None:
            dw()
        else:
            sink.defer(dw)
