"""How MoNTA cuts a TP rank's capacity slice into pipeline chunks: equal chunks, but the first one
half as large. Torch-free: the exchange and the performance model use the same split.

Why: with the AllGather the longer half (TP8 on the default profile), the exchange cannot end
before the first chunk's AllToAll (the fill, nothing to gather yet) plus every AllGather; halving
the first chunk halves that fill and keeps the chunk count. Measured on 2 x 8, TP8, 16 MiB, 8 chunks,
at half the default rates (four alternating runs each): 1076-1089 ms against 1096-1111 ms with
equal chunks (README, overlap section). Splits that start smaller still (chunks growing 1.5x, or
1.8x from 1%) did not help: their small early AllGathers end before the next AllToAll lands.
"""

from __future__ import annotations

FIRST = 0.5  # the first chunk's size relative to the others


def chunk_weights(chunks: int) -> list[float]:
    """Each chunk's share of the slice (sums to 1): [FIRST, 1, 1, ...] normalized; [1.0] for one chunk."""
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks={chunks!r}: must be a positive integer")
    w = [FIRST] + [1.0] * (chunks - 1) if chunks > 1 else [1.0]
    total = sum(w)
    return [x / total for x in w]


def chunk_sizes(capacity: int, chunks: int) -> list[int]:
    """``capacity`` slots cut by :func:`chunk_weights`: whole slots, each at least 1, summing to
    ``capacity`` (largest remainders get the leftover slots, earlier chunks first on ties)."""
    if not 1 <= chunks <= capacity:
        raise ValueError(f"chunks={chunks} must be between 1 and the capacity slice {capacity}")
    exact = [capacity * w for w in chunk_weights(chunks)]
    sizes = [max(1, int(x)) for x in exact]
    # Hand out (or take back) the difference one slot at a time, by how far each chunk is from its share.
    while sum(sizes) < capacity:
        i = max(range(chunks), key=lambda j: (exact[j] - sizes[j], -j))
        sizes[i] += 1
    while sum(sizes) > capacity:
        i = max((j for j in range(chunks) if sizes[j] > 1), key=lambda j: (sizes[j] - exact[j], j))
        sizes[i] -= 1
    return sizes
