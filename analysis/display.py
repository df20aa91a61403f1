"""Tables as people read them: human units with 3 significant digits, never scientific notation.

The CSV files keep the raw numbers; the markdown and LaTeX tables get these strings.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

# Column names as headers (unit-free: every cell carries its unit).
HEADERS = {
    "source": "source",
    "cluster": "cluster",
    "size_bytes": "buffer/rank",
    "variant": "variant",
    "chunks": "chunks",
    "best_chunks": "chunks (best)",
    "legacy_us": "legacy",
    "deepspeed_us": "deepspeed",
    "monta_us": "monta",
    "time_us": "time",
    "predicted_us": "predicted",
    "measured_us": "measured",
    "speedup_vs_legacy": "vs legacy",
    "speedup_vs_deepspeed": "vs deepspeed",
    "rel_to_1_chunk": "vs 1 chunk",
    "monta_inter_bytes": "monta inter-node bytes",
    "inter_bytes_ratio": "inter-node bytes legacy/monta",
    "inter_bytes": "inter-node bytes",
    "intra_bytes": "intra-node bytes",
    "algbw_GBps": "algbw",
    "busbw_GBps": "busbw",
    "error_pct": "error",
    "step_ms": "step time",
    "tokens_per_s": "tokens/s",
    "peak_mem_bytes": "peak memory",
    "inter_gbps": "inter-node link",
    "ms": "time",
    "tp": "TP",
    "topk": "top-k",
    "exchange_ms": "exchange",
    "grad_sync_ms": "grad sync",
    "grad_sync_exposed_ms": "grad sync exposed",
    "left_out": "left out by the chunk floor",
    "grad_sync_total_ms": "grad sync total",
    "capacity_factor": "capacity factor",
    "ours_source": "ours from",
    "contention": "contention c",
    "slowdown_pct": "vs c = 0",
}
COUNTS = frozenset(
    {"chunks", "best_chunks", "n", "wrong", "layers", "seq", "topk", "tp", "nodes", "gpus_per_node", "points"}
)
MEASURED_UNIT = "ms"  # CPU + gloo on the emulator: milliseconds
PREDICTED_UNIT = "us"  # the performance model's GPU clusters: microseconds


def sig3(x: float) -> str:
    """3 significant digits, plain notation: 3066 -> '3070', 0.02431 -> '0.0243', 4.5 -> '4.50'."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    rounded = round(x, 2 - math.floor(math.log10(abs(x))))
    # after rounding (9.996 -> 10.0) the leading digit may have moved: decimals from the result
    decimals = max(0, 2 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:.{decimals}f}"


def time_unit(source: Any, typical_us: float) -> str:
    """ms for the emulator, us for predictions; otherwise (a real cluster, a table without sources)
    by the typical time."""
    if source == "emulated":
        return MEASURED_UNIT
    if source == "predicted":
        return PREDICTED_UNIT
    return MEASURED_UNIT if typical_us >= 1e3 else PREDICTED_UNIT


def fmt_time_us(us: float, unit: str) -> str:
    return f"{sig3(us / 1000.0 if unit == 'ms' else us)} {unit}"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{sig3(n / scale)} {unit}".replace(".00 ", " ").replace(".0 ", " ")
    return f"{n:.0f} B"


def fmt_cell(col: str, v: Any, unit: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return str(v)
    if col in COUNTS:
        return f"{v:.0f}" if float(v).is_integer() else sig3(v)
    if col.endswith("_us"):
        return fmt_time_us(v, unit)
    if col.endswith("_ms") or col == "ms" or col.startswith("breakdown_ms."):
        return f"{sig3(v)} ms"
    if col.endswith("_bytes") and not col.endswith("ratio"):
        return fmt_bytes(v)
    if col.startswith("speedup") or col.endswith("_ratio") or col == "rel_to_1_chunk":
        return f"{sig3(v)}x"
    if col.endswith("_pct"):
        return f"{v:+.1f}%"
    if col.endswith("_GBps"):
        return f"{sig3(v)} GB/s"
    if col.endswith("_gbps"):
        return f"{v:g} Gbit/s"
    return f"{v:g}" if float(v).is_integer() else sig3(v)


def humanize(df: pd.DataFrame) -> pd.DataFrame:
    """Every cell as a string in its unit, headers without the unit suffixes."""
    if df.empty:
        return df
    times = df[[c for c in df.columns if c.endswith("_us")]].stack()
    typical = float(times.median()) if len(times) else 0.0  # for rows that do not say their source
    out = {}
    units = []
    for _, row in df.iterrows():
        emulator = str(row.get("cluster", "")).startswith("emulator")  # a prediction of the emulator's links
        units.append(MEASURED_UNIT if emulator else time_unit(row.get("source"), typical))
    for c in df.columns:
        # One unit per column: ms where any of its values is the emulator's (a 230 us prediction beside a
        # 346 ms measurement reads 0.230 ms), else each row's (all us, or all ms).
        filled = [u for v, u in zip(df[c], units) if v is not None and v == v]
        unit = MEASURED_UNIT if MEASURED_UNIT in filled else (filled[0] if filled else PREDICTED_UNIT)
        # unknown time columns (a plugin exchange's "<name>_us") read as their name: the cells carry the unit
        out[HEADERS.get(c, c.removeprefix("breakdown_ms.").removesuffix("_us"))] = [fmt_cell(c, v, unit) for v in df[c]]
    return pd.DataFrame(out)


_OVERRIDE_NAMES = {"topk": "top-k", "capacity_factor": "capacity"}


def split_model(model: object) -> tuple[str, str]:
    """'moe-2x70b-mini[capacity_factor=1.0,topk=2]' -> ('moe-2x70b-mini', 'top-k 2, capacity 1.0')."""
    name = str(model)
    m = re.fullmatch(r"(.*?)\[(.*)\]", name)
    if not m:
        return name, ""
    pairs = [kv.split("=", 1) for kv in m.group(2).split(",") if kv]
    order = list(_OVERRIDE_NAMES)
    pairs.sort(key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    return m.group(1), ", ".join(
        f"{_OVERRIDE_NAMES[kv[0]]} {kv[1]}" if len(kv) == 2 and kv[0] in _OVERRIDE_NAMES else "=".join(kv)
        for kv in pairs
    )
