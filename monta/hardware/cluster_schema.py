"""The cluster file's schema (``monta.cluster/1``, every field in ``clusters/README.md``): the kind of
each field and the check of one parsed document against them, one line per problem naming the file
and the dotted key. ``monta.hardware.clusterfile`` reads and writes the files with it."""

from __future__ import annotations

import math
from typing import Any

from monta.hardware.links import CURVES

# Field kinds: str, strlist, map, any, pos (number > 0), nonneg (number >= 0), frac (0 < x <= 1),
# count (integer >= 1), curve (a name of links.CURVES or [[size_bytes, eff], ...]).
TOP = {
    "schema": ("str", True),
    "name": ("str", True),
    "description": ("str", False),
    "aliases": ("strlist", False),
    "base": ("str", False),
    "gpu": ("map", True),
    "gpus_per_node": ("count", True),
    "nodes": ("count", False),
    "nvlink": ("map", True),
    "nic": ("map", True),
    "collectives": ("map", False),
    "sources": ("map", False),
    "calibration": ("any", False),  # free-form notes of `monta calibrate` (what it fitted, residuals)
    "nccl": ("map", False),  # what the collective library does beyond rings (collectives.allreduce)
}
NCCL = {
    "allreduce": ("strlist", False),
    "nvls_algbw_GBps": ("pos", False),
    "protocols": ("any", False),  # false: no NCCL protocol model (a file of fitted, end-to-end curves)
    "note": ("str", False),
}
ALLREDUCE_ALGORITHMS = ("ring", "tree", "nvls")
GPU = {
    "model": ("str", False),
    "peak_tflops": ("pos", True),
    "gemm_eff": ("frac", False),
    "attn_eff": ("frac", False),
    "mem_GB": ("pos", True),
    "hbm_GBps": ("pos", True),
    "copy_GBps": ("pos", True),
}
NVLINK = {
    "generation": ("str", False),
    "bandwidth_GBps": ("pos", True),
    "latency_us": ("nonneg", True),
    "efficiency": ("curve", False),
    "note": ("str", False),
}
NIC = {
    "model": ("str", False),
    "count": ("count", True),
    "rate_gbps": ("pos", False),
    "bandwidth_GBps": ("pos", True),
    "latency_us": ("nonneg", True),
    "efficiency": ("curve", False),
    "note": ("str", False),
}
OVERRIDE = {
    "bandwidth_GBps": ("pos", False),
    "latency_us": ("nonneg", False),
    "efficiency": ("curve", False),
    "note": ("str", False),
}
_WHAT = {
    "str": "a string",
    "strlist": "a list of names",
    "map": "a mapping of keys",
    "pos": "a number > 0",
    "nonneg": "a number >= 0",
    "frac": "a number in (0, 1]",
    "count": "an integer >= 1",
    "curve": f"a curve name ({', '.join(CURVES)}) or a list [[size_bytes, eff], ...]",
}


def show(v: Any) -> str:
    text = repr(v) if not isinstance(v, (dict, list)) else f"a {type(v).__name__} {v!r}"
    return text if len(text) <= 60 else text[:57] + "..."


# -- the check ---------------------------------------------------------------------------------------
class DocCheck:
    """Validates one document; every problem is one line naming the file and the dotted key."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, key: str, text: str) -> None:
        raise ValueError(f"{self.where}: {key}: {text}" if key else f"{self.where}: {text}")

    def section(self, d: Any, spec: dict, prefix: str = "") -> dict:
        if not isinstance(d, dict):
            self.fail(prefix, f"expected a mapping of keys ({', '.join(spec)}), got {show(d)}")
        for k in d:
            if k not in spec:
                where = f"in {prefix}" if prefix else "at the top level"
                self.fail(f"{prefix}.{k}" if prefix else str(k), f"unknown key ({where} allowed: {', '.join(spec)})")
        out = {}
        for k, (kind, required) in spec.items():
            key = f"{prefix}.{k}" if prefix else k
            if k not in d or d[k] is None:
                if required:
                    self.fail(key, f"missing (expected {_WHAT.get(kind, kind)})")
                continue
            out[k] = self.value(d[k], kind, key)
        return out

    def value(self, v: Any, kind: str, key: str) -> Any:
        if kind == "any":
            return v
        if kind == "str":
            if not isinstance(v, str) or not v.strip():
                self.fail(key, f"expected a non-empty string, got {show(v)}")
            return v
        if kind == "strlist":
            if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
                self.fail(key, f"expected a list of names, e.g. [a800], got {show(v)}")
            return list(v)
        if kind == "map":
            if not isinstance(v, dict):
                self.fail(key, f"expected a mapping of keys, got {show(v)}")
            return v
        if kind == "curve":
            return self.curve(v, key)
        if kind == "count":
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                self.fail(key, f"expected an integer >= 1, got {show(v)}")
            return v
        x = self.number(v, key)
        bad = {"pos": x <= 0, "nonneg": x < 0, "frac": not 0 < x <= 1}[kind]
        if bad:
            self.fail(key, f"expected {_WHAT[kind]}, got {show(v)}")
        return x

    def number(self, v: Any, key: str) -> float:
        if isinstance(v, str):
            # YAML 1.1 reads 1.5e9 (no sign after the e) as text; a numeric string is a number here.
            try:
                v = float(v.replace("_", ""))
            except ValueError:
                self.fail(key, f"expected a number, got {show(v)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            self.fail(key, f"expected a number, got {show(v)}")
        return float(v)

    def curve(self, v: Any, key: str) -> tuple[tuple[float, float], ...]:
        if isinstance(v, str):
            if v not in CURVES:
                choices = ", ".join(CURVES)
                self.fail(key, f"unknown efficiency curve {v!r}; choose one of {choices} or give [[size, eff], ...]")
            return CURVES[v]
        if not isinstance(v, list) or not v:
            self.fail(key, f"expected {_WHAT['curve']}, got {show(v)}")
        pts = []
        for i, pt in enumerate(v):
            if not isinstance(pt, (list, tuple)) or len(pt) != 2:
                self.fail(f"{key}[{i}]", f"expected a pair [size_bytes, eff], got {show(pt)}")
            size, eff = (self.number(x, f"{key}[{i}]") for x in pt)
            if size <= 0 or eff <= 0:
                self.fail(f"{key}[{i}]", f"expected size_bytes > 0 and eff > 0, got {show(pt)}")
            pts.append((size, eff))
        return tuple(pts)
