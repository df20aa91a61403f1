"""Every nccl-tests table row checked before a fit reads it, and the runs of collectives the model does not
price set aside (``monta calibrate --nccl-tests``).

The parser (``monta.perfmodel.network.nccltests``) skips any line that is not a well-formed row, so a row
with a letter in its size, or a time typed 10x off, used to vanish or be fitted as it stood. Here a line
that is a row by its shape (a type name in the third column) must also be one by its numbers: whole
sizes and counts, numeric times and bandwidths, size = count x the type's size (x the ranks for the
collectives whose count is per rank), and algbw = size / time as nccl-tests computes it. The first line
that is not names its file and line number. Imports no torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from monta.perfmodel.network import nccltests as N

# Bytes per element of nccl-tests' type names.
TYPE_BYTES = {
    "int8": 1, "char": 1, "uint8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "f8e4m3": 1, "f8e5m2": 1,
    "half": 2, "bfloat16": 2, "float": 4, "int32": 4, "int": 4, "uint32": 4,
    "double": 8, "int64": 8, "uint64": 8,
}  # fmt: skip
# nccl-tests prints a per-rank count for these (its "size" is the whole buffer: count x type x ranks).
PER_RANK_COUNT = {"all_gather", "reduce_scatter", "alltoall", "gather", "scatter", "hypercube"}
# nccl-tests binaries the cost model does not price: their rows are checked, then set aside.
UNPRICED = ("broadcast", "reduce", "sendrecv", "gather", "scatter", "hypercube")
# algbw is printed with 2 decimals and the time with 4-5 significant digits: allow the rounding and 3%.
ALGBW_REL, ALGBW_ABS = 0.03, 0.006

_MARKER = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_BINARY = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|" + "|".join(UNPRICED) + r")_perf\b")
_DEVICE = re.compile(r"^#?\s*Rank\s+(\d+)\s")


def _name(binary: str) -> str:
    """nccl-tests' name of a collective (``all_reduce``, ``broadcast``...) from a binary or a user's name."""
    name = binary.strip().lower().removesuffix("_mpi").removesuffix("_perf").replace("-", "_")
    if name in UNPRICED:
        return name
    try:
        return N.canonical(name)
    except ValueError:
        return name


@dataclass
class CheckedFile:
    """One file after the check: the text the parser reads (runs of priced collectives) and what was set
    aside (``unpriced``: collective -> rows checked)."""

    path: str
    text: str
    rows: int = 0
    unpriced: dict[str, int] = field(default_factory=dict)


def check_file(path: str, collective: str | None = None) -> CheckedFile:
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"nccl-tests log {p} not found")
    return check_text(p.read_text(errors="replace"), str(p), collective)


def check_text(text: str, source: str, collective: str | None = None) -> CheckedFile:
    """Check every row of ``text``; ValueError ``SOURCE:LINE: ...`` at the first bad one."""
    out = CheckedFile(source, "")
    kept: list[str] = []
    coll = _name(collective) if collective else _from_name(source)
    ranks: set[int] = set()
    rows_in_run = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = N._strip(raw)
        if m := _MARKER.search(line):
            coll, ranks, rows_in_run = _name(m.group(1)), set(), 0
        elif m := _DEVICE.search(line):
            if rows_in_run:
                ranks, rows_in_run = set(), 0
            ranks.add(int(m.group(1)))
        elif (m := _BINARY.search(line)) and "concluded" not in line and not rows_in_run:
            coll = _name(m.group(1))
        elif _is_row(line):
            _check_row(line.split(), coll, len(ranks), f"{source}:{lineno}")
            rows_in_run += 1
            out.rows += 1
            if coll in UNPRICED:
                out.unpriced[coll] = out.unpriced.get(coll, 0) + 1
        if coll not in UNPRICED:
            kept.append(raw)
    out.text = "\n".join(kept) + "\n"
    return out


def _from_name(source: str) -> str | None:
    """The collective a file's name says (the parser's reading first: ``all_reduce`` holds ``reduce``)."""
    if priced := N._from_filename(source):
        return priced
    stem = source.rsplit("/", 1)[-1].lower().replace("-", "_")
    hits = [c for c in UNPRICED if re.search(rf"(^|_){c}(_|\.|$)", stem)]
    return hits[0] if hits else None


def _is_row(line: str) -> bool:
    """A table row by its shape: not a comment, and a type name third (or two counts first)."""
    tokens = line.split()
    if len(tokens) < 3 or tokens[0].startswith("#"):
        return False
    if tokens[2].lower() in TYPE_BYTES:
        return True
    return len(tokens) >= 7 and tokens[0].isdigit() and tokens[1].isdigit()


def _num(tok: str, what: str, where: str) -> float:
    try:
        v = float(tok)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{where}: {what} {tok!r} is not a number >= 0: fix or delete this row")
    return v


def _check_row(tokens: list[str], coll: str | None, nranks: int, where: str) -> None:
    size_t, count_t, dtype = tokens[0], tokens[1], tokens[2].lower()
    for tok, what in ((size_t, "size"), (count_t, "count")):
        if not tok.isdigit():
            raise ValueError(f"{where}: {what} {tok!r} is not a whole number: fix or delete this row")
    if dtype not in TYPE_BYTES:
        raise ValueError(f"{where}: type {tokens[2]!r} is not an nccl-tests type ({', '.join(TYPE_BYTES)})")
    size, count = int(size_t), int(count_t)
    rest = tokens[3:]
    if rest and not N._is_num(rest[0]):
        rest = rest[1:]  # redop
    if len(rest) in (5, 9):
        rest = rest[1:]  # root
    if len(rest) not in (4, 8):
        raise ValueError(
            f"{where}: {len(tokens)} columns; a row has size count type [redop] [root] time algbw busbw #wrong "
            "(and the in-place four): fix or delete this row"
        )
    _check_size(size, count, dtype, coll, nranks, where)
    for first in (0, 4) if len(rest) == 8 else (0,):
        place = "in-place " if first else ""
        t = _num(rest[first], f"{place}time", where)
        algbw = _num(rest[first + 1], f"{place}algbw", where)
        _num(rest[first + 2], f"{place}busbw", where)
        _check_algbw(size, t, algbw, place, where)


def _check_size(size: int, count: int, dtype: str, coll: str | None, nranks: int, where: str) -> None:
    """size = count x type size, x the ranks where nccl-tests prints a per-rank count (the ranks from the
    run's '# Rank' lines; any whole multiple where the log names none)."""
    unit = count * TYPE_BYTES[dtype]
    if size == unit:
        return
    per_rank = coll in PER_RANK_COUNT or coll is None
    if per_rank and unit and size % unit == 0 and (not nranks or size == unit * nranks):
        return
    want = f"{unit}" + (f" (or x {nranks} ranks = {unit * nranks})" if per_rank and nranks else "")
    raise ValueError(
        f"{where}: size {size} B is not count {count} x {TYPE_BYTES[dtype]} B ({dtype}) = {want}: "
        "fix or delete this row"
    )


def _check_algbw(size: int, time_us: float, algbw: float, place: str, where: str) -> None:
    """nccl-tests' algbw is size / time (GB/s, 1 GB = 1e9 B): a time or bandwidth typed wrong shows here."""
    if time_us == 0:
        if size and algbw:
            raise ValueError(f"{where}: {place}time 0 us with algbw {algbw} GB/s: fix or delete this row")
        return
    expect = size / (time_us * 1e3)
    if abs(algbw - expect) > ALGBW_ABS + ALGBW_REL * expect:
        raise ValueError(
            f"{where}: {place}algbw {algbw} GB/s but size / time = {size} B / {time_us:g} us = {expect:.3g} GB/s "
            f"({expect / algbw if algbw else math.inf:.2g}x): the time or the bandwidth is wrong; "
            "fix or delete this row"
        )
