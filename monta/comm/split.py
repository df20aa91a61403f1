"""How MoNTA cuts a TP rank's capacity slice into pipeline chunks: equal chunks, but from 4 chunks on
the first one half as large. Torch-free: the exchange and the performance model use the same split.

Why: with the AllGather the longer half (TP8 on the default profile), the exchange cannot end
before the first chunk's AllToAll (the fill, nothing to gather yet) plus every AllGather; halving
the first chunk halves that fill and keeps the chunk count. Measured on 2 x 8, TP8, 16 MiB, 8 chunks,
at half the default rates (four alternating runs each): 1076-1089 ms against 1096-1111 ms with
equal chunks (docs/design.md#the-half-size-first-chunk). Splits that start smaller still (chunks growing 1.5x, or
1.8x from 1%) did not help: their small early AllGathers end before the next AllToAll lands.

Why not below 4 chunks: where the AllToAll is the longer half (TP4 on 2 x 4), the fill is hidden and
the last chunk's AllGather is what nothing hides; a half-size first chunk makes the others larger, so
that drain grows by 1/(k - 0.5) - 1/k of the AllGather: a sixth of it with 2 chunks. `monta regress`
caught it (2 x 4, 16 MiB, 2 chunks: 426 and 417 ms against 392 ms equal, two `make reproduce` runs),
while 4 chunks moved by -0.3% and +1.9% and 8 chunks by 0.0-0.3%.
"""

from __future__ import annotations

FIRST = 0.5  # the first chunk's size relative to the others
MIN_CHUNKS = 4  # fewer chunks are cut equal


def chunk_weights(chunks: int) -> list[float]:
    """Each chunk's share of the slice (sums to 1): [FIRST, 1, 1, ...] normalized from MIN_CHUNKS
    chunks on, equal shares below."""
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks={chunks!r}: must be a positive integer")
    w = [FIRST if i == 0 and chunks >= MIN_CHUNKS else 1.0 for i in range(chunks)]
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
