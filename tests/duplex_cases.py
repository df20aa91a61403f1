"""Worker-side cases for the duplex transport tests: run inside a DistWorld rank, return plain data."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

_groups: dict[tuple, Any] = {}


def _pair(pattern: tuple[tuple[int, ...], ...]):
    """This rank's native group and duplex group for ``pattern`` (built once per pattern, collectively)."""
    from monta.comm.duplex import duplex_groups

    if pattern not in _groups:
        rank = dist.get_rank()
        native = None
        for ranks in pattern:
            g = dist.new_group(list(ranks))
            native = g if rank in ranks else native
        _groups[pattern] = (native, duplex_groups([list(r) for r in pattern], rank))
    return _groups[pattern]


def collectives_case(*, pattern, dtype: str, rows: int, staged: bool = False) -> dict[str, Any]:
    """AllToAll and AllGather on the duplex transport against gloo's own collectives, same inputs.
    ``staged``: through host copies, the path CUDA tensors take (gloo's sends read host memory only)."""
    import os

    from monta.comm.duplex import STAGE_ENV

    before = os.environ.get(STAGE_ENV)
    os.environ[STAGE_ENV] = "1" if staged else "0"
    try:
        return _collectives(pattern, dtype, rows)
    finally:
        if before is None:
            os.environ.pop(STAGE_ENV, None)
        else:
            os.environ[STAGE_ENV] = before


def _collectives(pattern, dtype: str, rows: int) -> dict[str, Any]:
    from monta.comm.collectives import all_gather, all_to_all

    native, duplex = _pair(tuple(tuple(p) for p in pattern))
    n, rank = duplex.size, dist.get_rank()
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(17 + rank)
    x = torch.randint(-100, 100, (n * rows, 3, 5), generator=g).to(dt)
    want, got = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(want, x, group=native)
    work = all_to_all(got, x, duplex)
    work.wait()
    a2a_equal = bool(torch.equal(want, got))
    piece = x[:rows].contiguous()
    want_g, got_g = x.new_empty((n,) + tuple(piece.shape)), x.new_empty((n,) + tuple(piece.shape))
    dist.all_gather_into_tensor(want_g.view(-1), piece.view(-1), group=native)  # gloo: flat (see collectives)
    all_gather(got_g, piece, duplex).wait()
    errors = []
    for bad in (
        lambda: duplex.all_to_all(x.new_empty(x.numel() + 1), torch.zeros(n * 2 + 1)),
        lambda: duplex.all_gather(x.new_empty(3), piece),
    ):
        try:
            bad()
        except ValueError as e:
            errors.append(str(e))
    return {
        "a2a_equal": a2a_equal,
        "ag_equal": bool(torch.equal(want_g, got_g)),
        "errors": errors,
        "ranks": list(duplex.ranks),
        "dtype": str(got.dtype),
    }


def transport_case(*, nodes, gpn, tp, ep, transport: str) -> dict[str, Any]:
    """Which groups ``exchange_mesh`` binds under $MONTA_GLOO_TRANSPORT, and a pass on them."""
    from monta.comm import exchange as ex
    from monta.comm.duplex import DuplexGroup
    from monta.mesh import build_mesh
    from monta.parallel import ParallelLayout

    layout = ParallelLayout(nodes, gpn, tp, ep)
    mesh = build_mesh(layout)
    old = os.environ.get("MONTA_GLOO_TRANSPORT")
    os.environ["MONTA_GLOO_TRANSPORT"] = transport
    try:
        try:
            g = ex.exchange_mesh(mesh)
        except ValueError as e:
            return {"error": str(e)}
    finally:
        if old is None:
            os.environ.pop("MONTA_GLOO_TRANSPORT")
        else:
            os.environ["MONTA_GLOO_TRANSPORT"] = old
    x = torch.arange(4 * 8 * 3, dtype=torch.float32).view(4, 8, 3) + 1000 * (mesh.rank // tp)
    out = ex.run_pass(x, ex.PassSpec(True, True), g, 2)
    return {
        "error": None,
        "ep_duplex": isinstance(g.ep.group, DuplexGroup),
        "tp_duplex": isinstance(g.tp.group, DuplexGroup),
        "out": out.tolist(),
    }
