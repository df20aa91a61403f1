"""``monta.chunking.Auto``'s chooser: the chunk count that minimizes the predicted time of the registry's
chunked exchange (the core's ``monta``).

Pure Python and cached, so the MoE layer can ask on every call without cost. The model's own
search on group shapes is ``monta.perfmodel.network.exchange.best_chunks`` (it asks the registry which
entry is chunked); this module puts it on a ``ParallelLayout`` (``choose_chunks``) and binds a cluster
into a ``monta.chunking.Chooser`` (``model_chooser``), which the benchmarks and the MoE layer inject
where ``Auto`` is resolved.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache, partial

from monta.chunking import Chooser
from monta.hardware.links import Cluster
from monta.hardware.profile import get_cluster
from monta.perfmodel.network.exchange import best_chunks, layout_shapes


def choose_chunks(
    bytes_per_rank: float,
    layout,
    cluster: Cluster | str | None = None,
    max_chunks: int = 16,
    candidates: Iterable[int] | None = None,
) -> int:
    """Chunk count for the registry's chunked exchange (``monta``) on ``layout`` (a ``ParallelLayout``).

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


@lru_cache(maxsize=256)
def _choose_cached(cluster, buffer_bytes: float, layout, candidates: tuple[int, ...]) -> int:
    return choose_chunks(buffer_bytes, layout, cluster, candidates=candidates)


def model_chooser(cluster: Cluster | str | None = None) -> Chooser:
    """``choose_chunks`` on ``cluster`` (a preset, ``emulator:PATH``, a Cluster; None: ``$MONTA_CLUSTER``,
    read at the first call of each buffer size) as a ``monta.chunking.Chooser``, cached."""
    return partial(_choose_cached, cluster)
