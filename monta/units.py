"""Byte-size parsing and formatting shared by the CLI of the benchmark and the performance model.

Sizes take K/M/G/T suffixes in powers of two (nccl-tests convention): ``16M`` = 16 * 2**20 bytes.
"""

from __future__ import annotations

import re

_SUFFIX = {
    "": 1,
    "B": 1,
    "K": 2**10,
    "KB": 2**10,
    "KIB": 2**10,
    "M": 2**20,
    "MB": 2**20,
    "MIB": 2**20,
    "G": 2**30,
    "GB": 2**30,
    "GIB": 2**30,
    "T": 2**40,
    "TB": 2**40,
    "TIB": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """``"16M"`` -> 16777216; plain integers pass through. Raises ValueError on anything else."""
    if isinstance(text, bool):
        raise ValueError(f"size {text!r}: expected a byte count like 4096, 64K, 16M or 1G")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size {text}: must not be negative")
        return text
    m = _SIZE_RE.match(str(text))
    if not m or m.group(2).upper() not in _SUFFIX:
        raise ValueError(f"size {text!r}: expected a byte count like 4096, 64K, 16M or 1G")
    value = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if value != int(value):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def size_range(spec: str, max_count: int = 10_000) -> list[int]:
    """``"1M:16M:2"`` -> [1M, 2M, 4M, 8M, 16M] (min:max:factor); ``"4M"`` or ``"1M,3M"`` -> those sizes."""
    spec = str(spec).strip()
    if ":" not in spec:
        sizes = [parse_size(s) for s in spec.split(",") if s.strip()]
        if not sizes:
            raise ValueError(f"sizes {spec!r}: expected min:max:factor (e.g. 1M:16M:2) or a comma list")
        return sizes
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"sizes {spec!r}: expected min:max:factor, e.g. 1M:16M:2")
    lo, hi = parse_size(parts[0]), parse_size(parts[1])
    try:
        factor = float(parts[2]) if len(parts) == 3 else 2.0
    except ValueError:
        raise ValueError(f"sizes {spec!r}: factor {parts[2]!r} is not a number") from None
    if lo < 1 or hi < lo:
        raise ValueError(f"sizes {spec!r}: need 1 <= min <= max")
    if factor <= 1:
        raise ValueError(f"sizes {spec!r}: factor must be > 1")
    import math

    count = int(math.floor(math.log(hi / lo) / math.log(factor) + 1e-9)) + 1 if math.isfinite(factor) else 0
    if count > max_count or not math.isfinite(factor):
        raise ValueError(f"sizes {spec!r}: {count} sizes; at most {max_count} (use a larger factor)")
    out, size = [], float(lo)
    while size <= hi * (1 + 1e-9):
        out.append(int(round(size)))
        size *= factor
    return out


def format_size(nbytes: float) -> str:
    """16777216 -> ``"16M"``; non-round values keep one decimal (``"1.5M"``)."""
    n = float(nbytes)
    for suffix, scale in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.0f}{suffix}" if v == int(v) else f"{v:.1f}{suffix}"
    return f"{n:.0f}"


def _three_figures(v: float) -> str:
    """About three significant figures without an exponent: 1.23, 12.3, 123, 1234; whole numbers as such."""
    if v == int(v):
        return f"{v:.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    text = f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return text.rstrip("0").rstrip(".")


def format_bytes(nbytes: float) -> str:
    """Bytes for a person (IEC units, as the tables print them): 16777216 -> ``16 MiB``, 1536 -> ``1.5 KiB``."""
    n = float(nbytes)
    for suffix, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{_three_figures(n / scale)} {suffix}"
    return f"{n:.0f} B"


def format_duration(seconds: float) -> str:
    """Seconds for a person: 9.2 -> ``9.2 s``, 0.00123 -> ``1.23 ms``, 4.2e-5 -> ``42 us``, 125 -> ``2 min 5 s``."""
    s = float(seconds)
    if s != s:
        return "-"
    s = float(f"{s:.3g}")  # round first, so 0.9999 s is "1 s", not "1000 ms"
    if abs(s) >= 3600:
        h, rest = divmod(round(s), 3600)
        return f"{h} h {rest // 60:02d} min"
    if abs(s) >= 60:
        m, rest = divmod(round(s), 60)
        return f"{m} min {rest} s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if abs(s) >= scale:
            return f"{_three_figures(s / scale)} {unit}"
    return f"{_three_figures(s / 1e-6)} us"
