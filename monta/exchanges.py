"""What a registered token exchange carries (``monta.variants.add_exchange``): how a rank builds it, what
optional capabilities it offers, its price in the performance model, its byte formulas and its
description. The core's three (``legacy``, ``deepspeed``, ``monta``) are entries like any other; the
model, the benches and the schedules read an exchange's parts from its entry, never from its name.

Torch-free at import (the CLI, the pipeline's config check and the performance model read it).

A rank's exchange is a ``monta.comm.dispatcher.Dispatcher``: ``dispatch(x_SM, plan) -> (x_ECM, handle)``
and ``combine(y_ECM, plan, handle) -> y_SM``. An entry names how to build one:

- ``run_pass(x, spec, groups, chunks, meter, phase)``: a buffer exchange, one pass over the capacity
  buffer [E, C, M] exactly as ``monta.comm.exchange.run_pass`` defines it (the core's when omitted);
  its dispatcher is DeepSpeed's encode + that pass and the pass + decode, and it offers
  ``CAPACITY_PASSES`` (any window of capacity slots as one pass), which capacity-pipelining schedules
  (Lina, Lancet) ask for;
- ``dispatcher(spec) -> Dispatcher``: any other exchange (one that moves tokens, say), built from a
  ``monta.comm.dispatcher.DispatcherSpec``; it declares the ``capabilities`` its dispatchers offer.

Its model (all optional; hooks are plain functions, called with keyword-free positional arguments):

- ``price(S, ep, tp, cluster, top_k, experts, row_bytes) -> [Step]``: the steps of one dispatch pass's
  timeline (``monta.perfmodel.network.routed.Step``), which the model schedules with every other
  exchange's (the core's too: ``full_buffer_price``, ``slice_price``; a chunked core exchange's hook also
  takes the chunk count and answers an ``ExchangeSteps``); or ``model_as``: the core exchange whose
  model prices it. Neither: predictions leave it out and say so.
- ``inter_bytes(LayoutBytes) -> (formula, bytes)``: the inter-node payload one rank sends in one
  dispatch, from the layout (the model's, the exchange map's);
- ``routing_inter_bytes(RoutingBytes) -> (formula, bytes)``: the same from one routing (the AllToAll
  bench prints it beside what it measured).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CORE = ("legacy", "deepspeed", "monta")  # the core's exchanges, the one list of them
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
    reproduces, so the step model prices such a run with it."""

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


def make_exchange(name: str, origin: str, **kw: Any) -> Exchange:
    """The entry ``add_exchange`` registers, checked: ValueError saying what to change."""
    if name in CORE and origin != "monta":
        raise ValueError(f"exchange {name!r} is the core's; a plugin names its own")
    model_as = kw.get("model_as")
    if model_as is not None and model_as not in CORE:
        raise ValueError(f"exchange {name!r}: model_as={model_as!r} must be one of {', '.join(CORE)}")
    if model_as is not None and kw.get("price") is not None:
        raise ValueError(f"exchange {name!r}: give its own price= or model_as=, not both")
    if kw.get("run_pass") is not None and kw.get("dispatcher") is not None:
        raise ValueError(f"exchange {name!r}: give run_pass= (a buffer exchange) or dispatcher=, not both")
    if origin != "monta" and not callable(kw.get("run_pass")) and not callable(kw.get("dispatcher")):
        raise ValueError(
            f"exchange {name!r}: a plugin exchange needs run_pass=callable(x, spec, groups, chunks, meter, phase) "
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
    return Exchange(name, capabilities=caps, origin=origin, **kw)


# -- the core exchanges' byte formulas ---------------------------------------------------------------
def full_buffer_bytes(g: LayoutBytes) -> tuple[str, float]:
    """Every TP rank sends its full buffer across the nodes (legacy)."""
    return "S x (N-1)/N", g.S * (g.nodes - 1) / g.nodes


def slice_bytes(g: LayoutBytes) -> tuple[str, float]:
    """Each TP rank sends its 1/TP capacity slice across the nodes (deepspeed, monta)."""
    return "S/TP x (N-1)/N", g.S / g.tp * (g.nodes - 1) / g.nodes


def full_buffer_routing_bytes(r: RoutingBytes) -> tuple[str, int]:
    P, L = r.members, r.per_node
    return "B (P-L)/P", r.buffer_bytes * (P - L) // P


def slice_routing_bytes(r: RoutingBytes) -> tuple[str, int]:
    P, L = r.members, r.per_node
    return "B/TP (P-L)/P", r.buffer_bytes // r.tp * (P - L) // P


# -- the core exchanges' prices: the steps of their timelines -----------------------------------------
# The steps are the performance model's (monta.perfmodel.network.core_steps), imported when the model
# prices an exchange, never when the registry loads: the model reads this registry.
def full_buffer_price(S, ep, tp, cluster, top_k, experts, row_bytes):
    """AllToAll the full buffer, copy it into place (legacy)."""
    from monta.perfmodel.network.core_steps import full_buffer_steps

    return full_buffer_steps(S, ep, cluster)


def slice_price(S, ep, tp, cluster, top_k, experts, row_bytes, chunks=1):
    """Pack the 1/TP capacity slice, AllToAll it, AllGather it over TP, copy into place: in ``chunks``
    pipelined pieces (deepspeed: one; monta: the run's)."""
    from monta.perfmodel.network.core_steps import slice_steps

    return slice_steps(S, ep, tp, cluster, chunks)
