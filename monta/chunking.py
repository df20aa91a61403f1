"""The chunk count of MoNTA's exchange: one value, one parser, one split rule, one capacity formula.

Torch-free and importing nothing of monta's, so every layer (the exchange, the MoE layer, the
benchmarks, the performance model) can use it.

- What is asked: ``Fixed(n)`` (exactly n chunks) or ``Auto(candidates)`` (the best of these counts).
  ``parse_chunks`` is the one parser of ``--chunks`` / ``chunks=`` (``"auto"``, ``"4"``, ``4``);
  ``parse_chunks_list`` reads a comma list (``"1,2,4,auto"``). The string ``"auto"`` is compared
  here and nowhere else (``is_auto``).
- What runs: ``chunks.resolve(buffer_bytes, layout, max_chunks, chooser)``. ``Fixed(n)`` is n (the MoE
  layer caps it per call at the capacity slice it meets, and says so); ``Auto`` asks ``chooser``, a
  callable the top of the stack injects (the performance model's, ``monta.perfmodel.network.chunks.model_chooser``),
  so the exchange below never imports the model.
- How a slice is cut: ``monta_split`` (MoNTA's exchange; the performance model prices the same
  shares, ``monta_weights``) and ``equal_split`` (the Lina/Lancet pipelines' capacity pieces).
- How large the buffer is: ``expert_capacity`` (DeepSpeed's gate) and ``dispatch_bytes``.

Lancet's batch partitions are a different number (``--lancet-partitions``, default
``monta.variants.PARTITIONS``), not a chunk count.

Why the half-size first chunk (``monta_split``): with the AllGather the longer half (TP8 on the
default profile), the exchange cannot end before the first chunk's AllToAll (the fill, nothing to
gather yet) plus every AllGather; halving the first chunk halves that fill and keeps the chunk count.
Measured on 2 x 8, TP8, 16 MiB, 8 chunks, at half the default rates (four alternating runs each):
1076-1089 ms against 1096-1111 ms with equal chunks (docs/design.md#the-half-size-first-chunk). Splits
that start smaller still (chunks growing 1.5x, or 1.8x from 1%) did not help: their small early
AllGathers end before the next AllToAll lands. Not below 4 chunks: where the AllToAll is the longer
half (TP4 on 2 x 4), the fill is hidden and the last chunk's AllGather is what nothing hides; a
half-size first chunk makes the others larger, so that drain grows by 1/(k - 0.5) - 1/k of the
AllGather: a sixth of it with 2 chunks. `monta regress` caught it (2 x 4, 16 MiB, 2 chunks: 426 and
417 ms against 392 ms equal, two `make reproduce` runs), while 4 chunks moved by -0.3% and +1.9% and
8 chunks by 0.0-0.3%.

The bound of the split as cut is ``pipeline_bound``: the half-size first chunk raises it only where
r = AllGather / AllToAll > 1 + 1/k; at r < 1 the drain (the last, larger chunk's AllGather) binds, and the
split's bound lies a little below the equal-chunk one.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

AUTO = "auto"  # the one spelling of "let the performance model choose"

# Past a few chunks every piece is latency-bound; searching further only costs time (the model's
# timeline grows with the chunk count), so Auto looks at 1..MAX_AUTO_CHUNKS by default.
MAX_AUTO_CHUNKS = 16
AUTO_CANDIDATES = tuple(range(1, MAX_AUTO_CHUNKS + 1))
# Fewer chunks win ties: Auto keeps the smaller count unless a larger one is predicted this much faster (a chunk
# count has to buy at least this much to be worth its launches). The model's search (``best_chunks``) and the
# report's check of its pick on recorded predictions (monta_analysis.summary) both apply it.
CHUNK_TIE = 0.005

FIRST = 0.5  # monta_split: the first chunk's size relative to the others
MIN_CHUNKS = 4  # monta_split: fewer chunks are cut equal

Chooser = Callable[[float, Any, tuple[int, ...]], int]
"""``chooser(buffer_bytes, layout, candidates) -> chunk count``: the count among ``candidates`` for one
rank's full [E, C, M] dispatch buffer of ``buffer_bytes`` on ``layout`` (a ``ParallelLayout``)."""


@dataclass(frozen=True)
class Fixed:
    """Exactly ``n`` chunks."""

    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int):
            raise ValueError(f"chunks={self.n!r}: give an integer >= 1 or '{AUTO}'")
        if self.n < 1:
            raise ValueError(f"chunks={self.n} must be >= 1")

    def resolve(self, buffer_bytes: float, layout: Any, max_chunks: int, chooser: Chooser | None = None) -> int:
        """``n`` as asked (a caller that meets a smaller capacity slice caps it, as the MoE layer does)."""
        return self.n

    def as_json(self) -> int:
        """The value as records and worker specs store it (``parse_chunks`` reads it back)."""
        return self.n

    def __str__(self) -> str:
        return str(self.n)


@dataclass(frozen=True)
class Auto:
    """The chooser's best among ``candidates`` (default 1..MAX_AUTO_CHUNKS)."""

    candidates: tuple[int, ...] = AUTO_CANDIDATES

    def __post_init__(self) -> None:
        try:
            cands = tuple(sorted({int(c) for c in self.candidates}))
        except (TypeError, ValueError):
            raise ValueError(f"chunks {AUTO}: candidates {self.candidates!r} must be positive integers") from None
        if not cands or cands[0] < 1:
            raise ValueError(f"chunks {AUTO}: candidates {self.candidates!r} must be positive integers")
        object.__setattr__(self, "candidates", cands)

    def within(self, max_chunks: int) -> tuple[int, ...]:
        """The candidates a capacity slice of ``max_chunks`` slots can run (at least one count)."""
        limit = max(1, int(max_chunks))
        return tuple(c for c in self.candidates if c <= limit) or (limit,)

    def resolve(self, buffer_bytes: float, layout: Any, max_chunks: int, chooser: Chooser | None = None) -> int:
        """``chooser``'s count for this buffer among the candidates up to ``max_chunks`` (the capacity slice)."""
        if chooser is None:
            raise ValueError(
                f"chunks={AUTO!r} needs a chooser (e.g. monta.perfmodel.network.chunks.model_chooser(cluster)) "
                "to pick a count"
            )
        cands = self.within(max_chunks)
        return max(1, min(int(chooser(float(buffer_bytes), layout, cands)), cands[-1]))

    def as_json(self) -> str:
        return AUTO

    def __str__(self) -> str:
        return AUTO


Chunks = Fixed | Auto
_AUTO = Auto()  # parse_chunks("auto"), built once (the planner parses a strategy's chunks per prediction)


def is_auto(value: Any) -> bool:
    """``value`` asks for the chooser's count: an ``Auto`` or the string ``"auto"`` (as records store it)."""
    return isinstance(value, Auto) or (isinstance(value, str) and value.strip() == AUTO)


def parse_chunks(value: Any) -> Chunks:
    """``"auto"`` -> ``Auto()``; ``4`` / ``"4"`` -> ``Fixed(4)``; a ``Fixed`` / ``Auto`` passes through.
    ValueError, one line: ``chunks='four': give an integer >= 1 or 'auto'`` / ``chunks=0 must be >= 1``."""
    if isinstance(value, (Fixed, Auto)):
        return value
    if is_auto(value):
        return _AUTO
    if isinstance(value, bool):
        raise ValueError(f"chunks={value!r}: give an integer >= 1 or '{AUTO}'")
    if isinstance(value, int):
        return Fixed(value)
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ValueError(f"chunks={value!r}: give an integer >= 1 or '{AUTO}'") from None
    return Fixed(n)


def parse_chunks_list(spec: Any) -> list[Chunks]:
    """A comma list (``"1,2,4,auto"``) or a list of values, each as ``parse_chunks`` reads it."""
    items = spec if isinstance(spec, (list, tuple)) else [x.strip() for x in str(spec).split(",") if x.strip()]
    out: list[Chunks] = []
    for x in items:
        if isinstance(x, (Fixed, Auto)) or is_auto(x):
            out.append(parse_chunks(x))
            continue
        try:
            n = x if isinstance(x, int) and not isinstance(x, bool) else int(str(x).strip())
        except ValueError:
            raise ValueError(f"chunks {x!r}: expected positive integers or '{AUTO}' (e.g. 1,2,4,{AUTO})") from None
        if n < 1:
            raise ValueError(f"chunks {n}: must be >= 1")
        out.append(Fixed(n))
    if not out:
        raise ValueError(f"chunks: give at least one chunk count, e.g. 1,2,4,{AUTO}")
    return out


# -- splits ----------------------------------------------------------------------------------


def equal_split(capacity: int, chunks: int) -> list[int]:
    """``capacity`` in ``chunks`` near-equal pieces, the first ones one larger: the capacity pieces of
    the Lina/Lancet pipelines."""
    base, extra = divmod(capacity, chunks)
    return [base + (1 if i < extra else 0) for i in range(chunks)]


def monta_weights(chunks: int) -> list[float]:
    """Each of MoNTA's chunks' share of the slice (sums to 1): [FIRST, 1, 1, ...] normalized from
    MIN_CHUNKS chunks on, equal shares below. The performance model prices these shares."""
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks={chunks!r}: must be a positive integer")
    w = [FIRST if i == 0 and chunks >= MIN_CHUNKS else 1.0 for i in range(chunks)]
    total = sum(w)
    return [x / total for x in w]


def monta_split(capacity: int, chunks: int) -> list[int]:
    """``capacity`` slots cut by :func:`monta_weights` (the first chunk half size from 4 chunks on): whole
    slots, each at least 1, summing to ``capacity`` (largest remainders get the leftover slots, earlier
    chunks first on ties). MoNTA's exchange cuts its capacity slice so."""
    if not 1 <= chunks <= capacity:
        raise ValueError(f"chunks={chunks} must be between 1 and the capacity slice {capacity}")
    exact = [capacity * w for w in monta_weights(chunks)]
    sizes = [max(1, int(x)) for x in exact]
    # Hand out (or take back) the difference one slot at a time, by how far each chunk is from its share.
    while sum(sizes) < capacity:
        i = max(range(chunks), key=lambda j: (exact[j] - sizes[j], -j))
        sizes[i] += 1
    while sum(sizes) > capacity:
        i = max((j for j in range(chunks) if sizes[j] > 1), key=lambda j: (sizes[j] - exact[j], j))
        sizes[i] -= 1
    return sizes


# -- the pipeline's bound ------------------------------------------------------------------------


def pipeline_span(shares: list[float], r: float) -> float:
    """How long the chunk pipeline of one exchange takes, in units of its whole inter-node AllToAll: chunk i's
    AllToAll (``shares[i]`` of it) runs on the inter-node link after chunk i-1's, and its AllGather (r x that)
    on the intra-node link after both its own AllToAll and chunk i-1's AllGather. Nothing else is priced (no
    latency, no host work), so it is the least time any schedule of these chunk sizes can take. A two-machine
    flow shop in a fixed order: the span is the longest path, max over j of (the AllToAlls of chunks 1..j)
    + r x (the AllGathers of chunks j..k). With equal chunks that is max(1 + r/k, r + 1/k)."""
    if not shares or any(not x > 0 for x in shares):
        raise ValueError(f"chunk shares {shares!r}: give one positive share per chunk")
    if not r >= 0:
        raise ValueError(f"r={r!r}: the AllGather's time over the AllToAll's must be >= 0")
    total = float(sum(shares))
    w = [x / total for x in shares]
    before, span = 0.0, 0.0
    for j, x in enumerate(w):
        before += x
        span = max(span, before + r * sum(w[j:]))
    return span


def pipeline_bound(tp: int, r: float, chunks: int, capacity: int | None = None) -> float:
    """The most MoNTA's exchange of ``chunks`` chunks can gain over legacy's (which sends TP x the inter-node
    bytes and has no AllGather): TP / ``pipeline_span`` of MoNTA's own split, ``monta_split(capacity,
    chunks)`` (``monta_weights(chunks)`` without a capacity). Equal chunks (below 4): TP / max(1 + r/k, r + 1/k).
    With the half-size first chunk (4 chunks on; w = 1/(k - 1/2) the other chunks' share) the longest path is
    the drain at r <= 1, TP / (1 + r w): the last chunk is larger than 1/k, so this lies BELOW the equal-chunk
    bound; at 1 <= r <= 2 it is the first two chunks' AllToAlls then every AllGather but the first one's
    (which ends before the second AllToAll), TP / (r + w (3 - r) / 2); from r = 2 on, TP / (r + w / 2). The
    half-size first chunk raises the bound only where r > 1 + 1/k (it shortens the fill, and the fill binds
    only where the AllGather is the longer half)."""
    shares = monta_split(capacity, chunks) if capacity is not None else monta_weights(chunks)
    return tp / pipeline_span([float(x) for x in shares], r)


# -- capacity and buffer bytes -------------------------------------------------------------------


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def expert_capacity(tokens: int, experts: int, capacity_factor: float, top_k: int, min_capacity: int) -> int:
    """Slots per expert DeepSpeed's gate gives ``tokens`` tokens (drop_tokens=True):
    max(min_capacity, ceil(tokens / experts * capacity_factor * top_k)), in float32 as
    ``deepspeed.moe.sharded_moe._capacity`` computes it (its factor is a float32 tensor)."""
    return max(int(min_capacity), math.ceil(_f32(_f32(tokens / experts) * _f32(capacity_factor * top_k))))


def dispatch_bytes(experts: int, capacity: int, hidden: int, element_size: int) -> int:
    """Bytes of one rank's full [E, C, M] dispatch buffer: what ``Auto`` is resolved for."""
    return experts * capacity * hidden * element_size


def capacity_slice(capacity: int, tp: int) -> int:
    """The slots of the capacity one TP rank exchanges (C / TP; at least 1): the most chunks it can run."""
    return max(1, capacity // tp)
