"""Where a route goes, for exchanges that move tokens rather than capacity buffers: a batch's routes as
member / node / expert-buffer positions (the EP group's nodes and rails: the mesh's ``ep`` axis).

A route is (token s, choice j) with flat slot q = e * C + c in DeepSpeed's [E * C] buffer (q = E * C:
dropped, DeepSpeed's scratch slot). Expert e lives on EP member e // (E / P); on that member the
slot's row in the expert input [P * E/P, C, M] (the core exchange's output, rows grouped by source
member p) is (p * E/P + e % (E/P)) * C + c.
"""

from __future__ import annotations

import torch


def route_members(slots: torch.Tensor, experts: int, capacity: int, members: int) -> torch.Tensor:
    """EP member of each route ([k, S] like ``slots``); -1 for a dropped route."""
    nle = experts // members
    valid = slots < experts * capacity
    return torch.where(valid, (slots // capacity) // nle, torch.full_like(slots, -1))


def expert_rows(slots: torch.Tensor, source: torch.Tensor, me: int, experts: int, capacity: int, members: int):
    """Row of each route in member ``me``'s expert input [P * E/P * C] given its source member
    ([k, n] like ``slots``), and whether the route is ``me``'s."""
    nle = experts // members
    e = slots // capacity
    mine = (slots < experts * capacity) & (e // nle == me)
    rows = (source * nle + e % nle) * capacity + slots % capacity
    return torch.where(mine, rows, torch.zeros_like(rows)), mine


def place_rows(rows: torch.Tensor, mine: torch.Tensor, table: torch.Tensor, total_rows: int) -> torch.Tensor:
    """The expert input: ``table``'s row ``r`` at every position ``rows`` of a route that is ``mine``
    (route r of the flattened [k, n] index -> table row r % n), zeros elsewhere; a gather
    (``index_select``) from a zero-padded table, as DeepSpeed's ``_sparse_encode`` builds its buffer."""
    n = table.shape[0]
    k = rows.shape[0]
    source = torch.full((total_rows + 1,), n, dtype=torch.long, device=rows.device)
    token_of = torch.arange(n, device=rows.device).expand(k, n)
    target = torch.where(mine, rows, torch.full_like(rows, total_rows))
    source.scatter_(0, target.reshape(-1), token_of.reshape(-1))
    padded = torch.cat([table, table.new_zeros((1,) + tuple(table.shape[1:]))])
    return padded.index_select(0, source[:-1])


def used_rows(rows: torch.Tensor, mine: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The expert-output rows a holder's routes read (in route order, j-major) and each route's
    position among them ([k, n]; routes that are not ``mine`` point past the end, at a zero pad)."""
    flat = mine.reshape(-1)
    used = rows.reshape(-1)[flat]
    local = torch.full_like(rows.reshape(-1), int(used.numel()))
    local[flat] = torch.arange(int(used.numel()), device=rows.device)
    return used, local.view(rows.shape)


def weighted_partials(table: torch.Tensor, local: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """Each route-holder's share of the combine for n tokens ([k, n] routes, ``local``: each route's
    row of ``table``, past its end for another holder's): the sum over its routes of expert output x
    gate in fp32 (DeepSpeed's ``_sparse_decode`` arithmetic), cast to the data dtype for the wire (as
    DeepEP's and Megatron's combines send it)."""
    k, n = local.shape
    padded = torch.cat([table, table.new_zeros(1, table.shape[-1])])
    routed = padded.index_select(0, local.reshape(-1)).view(k, n, table.shape[-1])  # n may be 0
    return (routed * gates.unsqueeze(-1)).sum(0).to(table.dtype)
