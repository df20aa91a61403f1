"""``chunks='auto'``: ask the performance model for the chunk count that minimizes the exchange time.

The cluster is a perfmodel preset or link-profile path; default ``$MONTA_CLUSTER`` (else the A800 preset).
"""

from __future__ import annotations

from functools import lru_cache

from monta.parallel import ParallelLayout

# Past a few chunks every piece is latency-bound; searching further only costs time (the model's
# timeline grows with the chunk count), so 'auto' looks at 1..MAX_AUTO_CHUNKS.
MAX_AUTO_CHUNKS = 16


@lru_cache(maxsize=256)
def auto_chunks(buffer_bytes: int, layout: ParallelLayout, max_chunks: int, cluster: str | None = None) -> int:
    """Chunk count for one rank's full [E, C, M] dispatch buffer of ``buffer_bytes``, at most ``max_chunks``."""
    from monta.perfmodel.chunks import choose_chunks

    limit = max(1, min(max_chunks, MAX_AUTO_CHUNKS))
    return max(1, min(int(choose_chunks(buffer_bytes, layout, cluster, max_chunks=limit)), limit))
