"""``chunks='auto'``: ask the performance model for the chunk count that minimizes the exchange time.

The cluster is a perfmodel preset or link-profile path; default ``$MONTA_CLUSTER`` (else the A800 preset).
"""

from __future__ import annotations

from functools import lru_cache

from monta.parallel import ParallelLayout


@lru_cache(maxsize=256)
def auto_chunks(buffer_bytes: int, layout: ParallelLayout, max_chunks: int, cluster: str | None = None) -> int:
    """Chunk count for one rank's full [E, C, M] dispatch buffer of ``buffer_bytes``, at most ``max_chunks``."""
    from monta.perfmodel.chunks import choose_chunks

    return max(1, min(int(choose_chunks(buffer_bytes, layout, cluster, max_chunks=max_chunks)), max_chunks))
