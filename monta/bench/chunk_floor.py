"""Which chunk counts a size runs (``monta bench alltoall --min-chunk B``): a chunked exchange's chunk
count runs at a size only where each chunk holds at least B bytes of a rank's buffer.

Why: on the emulator every chunk costs each rank a fixed amount of host work (posting its sends and
receives, waking for them, copying it into place) whatever its bytes: 1.3-1.6 ms of CPU per rank and chunk
at 2 x 4 TP 4 on this 2-core machine, 2.2 ms at 2 x 8 TP 8 (docs/testbed.md, "The chunk floor"). Below the floor
that work, not the links, sets a chunk's time, its ranks wait for a core, and the row measures the
machine; a slower clock does not help much, as the work per chunk grows with the wait. So such rows are
not run, and every record of the size says which were left out and why (``metrics.not_run``), as the
table's footer and the reports do. On real GPUs a chunk costs a launch of microseconds: the floor is
the emulator's, not the method's, and 0 (the default) runs every count.

Torch-free: the worker, the records and the table's footer all ask it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from monta.units import format_bytes


def runs(min_chunk: int, variants: Sequence[str], size: int, variant: str, chunks: int) -> bool:
    """Whether row (``variant``, ``chunks``) runs at ``size`` under a floor of ``min_chunk`` bytes a
    chunk (0: every row). One chunk always runs: it is the unchunked exchange, with nothing to leave out."""
    if not min_chunk or chunks <= 1 or variant not in variants:
        return True
    from monta import variants as registry

    if not registry.exchange(variant).chunked:
        return True
    return size // chunks >= min_chunk


def mask(min_chunk: int, variants: Sequence[str], sizes: Sequence[int], rows: Sequence[tuple[str, int]]):
    """[size][row] -> whether it runs."""
    return [[runs(min_chunk, variants, s, v, c) for v, c in rows] for s in sizes]


def not_run(
    min_chunk: int, variants: Sequence[str], size: int, rows: Sequence[tuple[str, int]]
) -> dict[str, Any] | None:
    """What a size's records say about the rows it left out (None: it ran them all)."""
    from monta.bench.adaptive import row_label

    out = [row_label(v, c) for v, c in rows if not runs(min_chunk, variants, size, v, c)]
    if not out:
        return None
    return {
        "rows": out,
        "why": (
            f"a chunk under --min-chunk {format_bytes(min_chunk)} of {format_bytes(size)}: its host work per chunk, "
            "not the links, would set its time on this machine (docs/testbed.md, the chunk floor)"
        ),
    }


def footer(records: Sequence[dict]) -> str | None:
    """One table footer line naming every size's left-out rows (None: nothing was left out)."""
    left: dict[int, dict] = {}
    for r in records:
        if r["metrics"].get("not_run"):
            left.setdefault(int(r["params"]["size_bytes"]), r["metrics"]["not_run"])
    if not left:
        return None
    floor = format_bytes(int(next(iter(records))["config"].get("min_chunk") or 0))
    sizes = "; ".join(f"{format_bytes(s)}: {', '.join(n['rows'])}" for s, n in sorted(left.items()))
    return (
        f"# NOT RUN (a chunk under --min-chunk {floor}, whose host work, not the links, would set its time on "
        f"this machine; docs/testbed.md): {sizes}"
    )


def empty_sizes(min_chunk: int, variants: Sequence[str], sizes: Sequence[int], chunks: Sequence[int]) -> list[int]:
    """The sizes at which the floor leaves a chunked variant of ``variants`` no chunk count of ``chunks`` to
    run: such a sweep has no row of that exchange there, a contradiction the config check refuses."""
    from monta import variants as registry

    chunked = [v for v in variants if registry.exchange(v).chunked]
    if not chunked:
        return []
    return [s for s in sizes if not any(runs(min_chunk, chunked, s, chunked[0], c) for c in chunks)]
