"""The core's exchanges, registered the way a plugin registers its own: ``register(registry)`` is the
registry's first entry point (``monta.variants.CORE_ENTRY_POINT``), run before any plugin's. This module
sits above both the registry (``monta.variants``, which never imports it) and the performance model,
whose steps price the core's timelines (``monta.perfmodel.network.core_steps``).

- ``legacy``: every TP rank AllToAlls its full buffer (DeepSpeed < 0.14.5);
- ``deepspeed``: drop to the 1/TP capacity slice, AllToAll over EP, AllGather over TP; the reference
  exchange the token-level models are compared with (``reference=True``);
- ``monta``: deepspeed's slice in chunks, AllToAll of chunk i+1 overlapping AllGather of chunk i.

Torch-free; the model's steps are imported at a price hook's first call, so registering stays cheap for
the CLI (as the baselines' models are).
"""

from __future__ import annotations

from monta.exchanges import LayoutBytes, RoutingBytes


# -- byte formulas ---------------------------------------------------------------------------------------
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


# -- prices: the steps of their timelines (the one price signature; the routing is not read) -------------
def full_buffer_price(S, ep, tp, cluster, top_k, experts, row_bytes, chunks):
    """AllToAll the full buffer, copy it into place (legacy; never chunked)."""
    from monta.perfmodel.network.core_steps import full_buffer_steps

    return full_buffer_steps(S, ep, cluster)


def slice_price(S, ep, tp, cluster, top_k, experts, row_bytes, chunks):
    """Pack the 1/TP capacity slice, AllToAll it, AllGather it over TP, copy into place: in ``chunks``
    pipelined pieces (deepspeed: 1, it is not chunked; monta: the run's)."""
    from monta.perfmodel.network.core_steps import slice_steps

    return slice_steps(S, ep, tp, cluster, chunks)


SLICE_ABOUT = "capacity slice chunked, AllToAll of chunk i+1 overlapping AllGather of chunk i"


def register(registry) -> None:
    """The core's exchanges (origin ``monta``), as a plugin registers its own."""
    registry.add_exchange(
        "legacy",
        full_buffer=True,
        price=full_buffer_price,
        reads_routing=False,
        inter_bytes=full_buffer_bytes,
        routing_inter_bytes=full_buffer_routing_bytes,
        about="every TP rank AllToAlls its full buffer (DeepSpeed < 0.14.5)",
    )
    sliced = {"price": slice_price, "reads_routing": False, "inter_bytes": slice_bytes}
    sliced["routing_inter_bytes"] = slice_routing_bytes
    registry.add_exchange(
        "deepspeed", reference=True, about="drop to the capacity slice, AllToAll, AllGather over TP", **sliced
    )
    registry.add_exchange("monta", chunked=True, about=SLICE_ABOUT, **sliced)
