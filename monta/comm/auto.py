"""``chunks='auto'``: ask the performance model for the chunk count that minimizes the exchange time.

The cluster comes from ``MONTA_CLUSTER`` (a preset name or a link-profile JSON path), default the emulator profile.
"""

from __future__ import annotations

import os
from functools import lru_cache

from monta.parallel import ParallelLayout


@lru_cache(maxsize=256)
def auto_chunks(nbytes_per_rank: int, layout: ParallelLayout, max_chunks: int) -> int:
    try:
        from monta.perfmodel.chunks import choose_chunks
    except ImportError as e:  # pragma: no cover - perfmodel ships with monta
        raise ValueError(f"chunks='auto' needs monta.perfmodel ({e}); pass an integer chunk count") from None
    cluster = os.environ.get("MONTA_CLUSTER", "a800-8nic")
    return max(1, min(int(choose_chunks(nbytes_per_rank, layout, cluster, max_chunks=max_chunks)), max_chunks))
