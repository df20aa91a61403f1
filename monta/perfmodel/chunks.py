"""``chunks="auto"``: the chunk count that minimizes MoNTA's predicted exchange time.

Pure Python and cached, so the token exchange can call it on every layer without cost.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from monta.perfmodel.collectives import GroupShape
from monta.perfmodel.exchange import exchange_shapes, layout_shapes
from monta.perfmodel.links import Cluster, get_cluster

# Fewer chunks win ties: a chunk count has to buy at least this much to be worth its launches.
_TIE = 0.005


@lru_cache(maxsize=8192)
def best_chunks(
    S: float,
    ep: GroupShape,
    tp: GroupShape,
    cluster: Cluster,
    max_chunks: int = 16,
    candidates: tuple[int, ...] | None = None,
) -> int:
    cands = candidates or tuple(range(1, max_chunks + 1))
    best_k, best_t = None, float("inf")
    for k in sorted(cands):
        t = exchange_shapes("monta", S, ep, tp, cluster, k).total_us
        if best_k is None or t < best_t * (1 - _TIE):
            best_k, best_t = k, t
    return best_k


def choose_chunks(
    bytes_per_rank: float,
    layout,
    cluster: Cluster | str | None = None,
    max_chunks: int = 16,
    candidates: Iterable[int] | None = None,
) -> int:
    """Chunk count for ``monta`` on ``layout`` (a ``ParallelLayout``).

    ``cluster``: a Cluster, a preset name, ``emulator:PATH`` / a link-profile path, or None for
    ``$MONTA_CLUSTER`` (default ``a800``). ``candidates`` restricts the choice (e.g. measured counts).
    """
    if max_chunks < 1:
        raise ValueError(f"max_chunks={max_chunks}: must be >= 1")
    cluster = get_cluster(cluster, layout.nodes, layout.gpus_per_node)
    ep, tp = layout_shapes(layout)
    cands = tuple(sorted({int(c) for c in candidates})) if candidates is not None else None
    if cands is not None and (not cands or cands[0] < 1):
        raise ValueError(f"candidates {candidates!r}: need positive chunk counts")
    return best_chunks(float(bytes_per_rank), ep, tp, cluster, max_chunks, cands)
