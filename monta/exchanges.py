"""What a registered token exchange carries (``monta.variants.add_exchange``): how a rank builds it, what
optional capabilities it offers, its price in the performance model, its byte formulas and its
description. The core's three (``legacy``, ``deepspeed``, ``monta``) are entries like any other, registered
the way a plugin registers its own (``monta.core_exchanges``, the registry's first entry point); the model,
the benches and the schedules read an exchange's parts from its entry, never from its name.

Torch-free at import, and below the performance model: the registry never imports it (the CLI, the
pipeline's config check and the performance model read the registry).

A rank's exchange is a ``monta.comm.dispatcher.Dispatcher``: ``dispatch(x_SM, plan) -> (x_ECM, handle)``
and ``combine(y_ECM, plan, handle) -> y_SM``. An entry names how to build one:

- ``run_pass(x, spec, mesh, chunks, meter, phase)``: a buffer exchange, one pass over the capacity
  buffer [E, C, M] exactly as ``monta.comm.exchange.run_pass`` defines it (the core's when omitted);
  its dispatcher is DeepSpeed's encode + that pass and the pass + decode, and it offers
  ``CAPACITY_PASSES`` (any window of capacity slots as one pass), which capacity-pipelining schedules
  (Lina, Lancet) ask for;
- ``dispatcher(spec) -> Dispatcher``: any other exchange (one that moves tokens, say), built from a
  ``monta.comm.dispatcher.DispatcherSpec``; it declares the ``capabilities`` its dispatchers offer.

Its model (all optional; hooks are plain functions, called with positional arguments):

- ``price(S, ep, tp, cluster, top_k, experts, row_bytes, chunks) -> [Step] | ExchangeSteps``: the steps of
  one dispatch pass's timeline (``monta.perfmodel.network.steps.Step``), which the model schedules with
  every other exchange's. One signature for every exchange, the core's included
  (``monta.core_exchanges``): ``chunks`` is the run's chunk count for a ``chunked`` entry, else 1; an entry
  with ``reads_routing=False`` (the core's) is priced on the balanced top-1 routing whatever the run's.
  Or ``model_as``: the registered exchange whose price prices it. Neither: predictions leave it out and
  say so.
- ``inter_bytes(LayoutBytes) -> (formula, bytes)``: the inter-node payload one rank sends in one
  dispatch, from the layout (the model's, the exchange map's);
- ``routing_inter_bytes(RoutingBytes) -> (formula, bytes)``: the same from one routing (the AllToAll
  bench prints it beside what it measured).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The names the core registers (monta.core_exchanges), reserved for it: the CLI's help lists them.
CORE = ("legacy", "deepspeed", "monta")
# Capability: the exchange moves capacity buffers, so a schedule may pass it any window of capacity
# slots of the encoded buffer (``monta.comm.dispatcher.CapacityPasses``).
CAPACITY_PASSES = "capacity-passes"


@dataclass(frozen=True)
class LayoutBytes:
    """An exchange on a layout, for its byte formula: ``S`` bytes of one rank's dispatch buffer,
    ``nodes`` N, ``per_node`` L EP members per node, ``tp`` TP, ``experts`` E, ``top_k`` k."""

    S: float
    nodes: int
    per_node: int
    tp: int
    experts: int
    top_k: int


@dataclass(frozen=True)
class RoutingBytes:
    """An exchange on one routing (the AllToAll bench's rank 0: member 0 of its EP group, node 0):
    ``buffer_bytes`` B = E C M x element size, ``row_bytes`` b = M x element size, ``tokens`` T,
    ``members`` P on ``nodes`` N (``per_node`` L), ``tp``, ``experts`` E, ``capacity`` C and ``slots``
    ([k, T] flat slots e * C + c of this rank's tokens, a tensor)."""

    buffer_bytes: int
    row_bytes: int
    tokens: int
    members: int
    nodes: int
    per_node: int
    tp: int
    experts: int
    capacity: int
    slots: Any


@dataclass(frozen=True)
class Exchange:
    """A registered token exchange (module docstring). ``chunked``: it takes the run's chunk count (else
    1). ``full_buffer``: a buffer exchange whose every TP rank passes its full buffer (no drop to its
    capacity slice, no gather over TP: DeepSpeed before 0.14.5). ``splits_tokens``: it splits a rank's
    tokens over the TP group (the token count must divide by TP; checked before any rank starts).
    ``origin``: the plugin that registered it (``monta``: the core). ``stands_for``: the published MoE
    dispatchers (a training run's ``dispatcher`` column, e.g. DeepEP's) whose token traffic this exchange
    reproduces, so the step model prices such a run with it. ``reads_routing``: its ``price`` reads the
    routing (top-k, experts, a token row's bytes; the core's do not). ``reference``: the flat exchange
    the token-level models are compared with (``monta.perfmodel.network.routed``: deepspeed)."""

    name: str
    run_pass: Callable[..., Any] | None = None
    dispatcher: Callable[..., Any] | None = None
    capabilities: frozenset[str] = frozenset()
    chunked: bool = False
    full_buffer: bool = False
    splits_tokens: bool = False
    model_as: str | None = None
    price: Callable[..., Any] | None = None
    inter_bytes: Callable[[LayoutBytes], tuple[str, float]] | None = None
    routing_inter_bytes: Callable[[RoutingBytes], tuple[str, int]] | None = None
    about: str = ""
    origin: str = "monta"
    stands_for: tuple[str, ...] = ()
    reads_routing: bool = True
    reference: bool = False


def make_exchange(name: str, origin: str, **kw: Any) -> Exchange:
    """The entry ``add_exchange`` registers, checked: ValueError saying what to change."""
    if name in CORE and origin != "monta":
        raise ValueError(f"exchange {name!r} is the core's; a plugin names its own")
    model_as = kw.get("model_as")
    if model_as is not None and kw.get("price") is not None:
        raise ValueError(f"exchange {name!r}: give its own price= or model_as=, not both")
    if kw.get("run_pass") is not None and kw.get("dispatcher") is not None:
        raise ValueError(f"exchange {name!r}: give run_pass= (a buffer exchange) or dispatcher=, not both")
    if origin != "monta" and not callable(kw.get("run_pass")) and not callable(kw.get("dispatcher")):
        raise ValueError(
            f"exchange {name!r}: a plugin exchange needs run_pass=callable(x, spec, mesh, chunks, meter, phase) "
            "(a buffer exchange) or dispatcher=callable(spec) -> monta.comm.dispatcher.Dispatcher"
        )
    if kw.get("dispatcher") is not None and (kw.get("chunked") or kw.get("full_buffer")):
        raise ValueError(f"exchange {name!r}: chunked= and full_buffer= are a buffer exchange's (run_pass=)")
    caps = frozenset(kw.pop("capabilities", ()))
    if kw.get("dispatcher") is None:  # a buffer exchange: passes over capacity windows by construction
        caps |= {CAPACITY_PASSES}
    for hook in ("price", "inter_bytes", "routing_inter_bytes"):
        if kw.get(hook) is not None and not callable(kw[hook]):
            raise ValueError(f"exchange {name!r}: {hook}= must be a callable")
    if kw.get("price") is not None:
        _check_price(name, kw["price"])
    return Exchange(name, capabilities=caps, origin=origin, **kw)


PRICE_ARGS = ("S", "ep", "tp", "cluster", "top_k", "experts", "row_bytes", "chunks")


def _check_price(name: str, price: Callable[..., Any]) -> None:
    """The one price signature: a hook that cannot take its eight positional arguments is refused when it
    is registered, not when the model first prices it."""
    try:
        inspect.signature(price).bind(*PRICE_ARGS)
    except TypeError:
        raise ValueError(
            f"exchange {name!r}: price= must take ({', '.join(PRICE_ARGS)}); chunks is 1 unless the exchange "
            "is chunked=True (docs/plugins.md)"
        ) from None
    except ValueError:  # a builtin without a signature: taken as given
        pass
