"""JSON Schema of the result records, one per record kind: the envelope every record has, the params
that identify a point, the metrics with their units (``x-unit``, shown in docs/results-schema.md).

:func:`check` validates a record (one line naming the field and what is wrong); a metric or param
not listed is allowed (benchmarks add diagnostics), a listed one must have its type
and range. The units are the metric names' suffixes (``_us``, ``_ms``, ``_GBps``, ``_bytes``): the
schema states them once so a reader of the JSONL need not guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

# The record envelope's fixed values, here so that monta.results (which checks records against these
# schemas on write) imports this module and never the other way round.
SCHEMA = "monta.record/1"
SOURCES = ("measured", "emulated", "predicted")

_POS = {"type": "number", "exclusiveMinimum": 0}
_NONNEG = {"type": "number", "minimum": 0}
_COUNT = {"type": "integer", "minimum": 1}
_BYTES = {"type": "number", "minimum": 0, "x-unit": "bytes"}  # the model predicts fractions of a byte


def _unit(schema: Mapping[str, Any], unit: str, about: str) -> dict[str, Any]:
    return {**schema, "x-unit": unit, "description": about}


def _samples(unit: str) -> dict[str, Any]:
    return {"type": "array", "items": _POS, "x-unit": unit, "description": "one value per timed iteration"}


# kind -> (params: {name: schema}, required params, metrics: {name: schema}, required metrics)
KINDS: dict[str, tuple[dict, list[str], dict, list[str]]] = {
    "alltoall": (
        {
            "size_bytes": _unit(_COUNT, "bytes", "message size per rank"),
            "variant": {"type": "string", "description": "exchange (monta.variants / the plugins)"},
            "chunks": _unit(_COUNT, "count", "pipeline chunks"),
            "nodes": _unit(_COUNT, "count", "nodes"),
            "gpus_per_node": _unit(_COUNT, "count", "ranks per node"),
            "tp": _unit(_COUNT, "count", "tensor-parallel degree"),
            "dilation": _unit(
                {"type": "number", "minimum": 1}, "factor", "the clock's slowdown over the run's links (--dilation)"
            ),
            "mode": {
                "type": "string",
                "enum": ["dispatch", "layer"],
                "description": "what was timed (--mode): absent = dispatch, layer = the MoE layer's forward+backward",
            },
        },
        ["size_bytes", "variant"],  # the others typed where present (older records and the model's lack some)
        {
            "time_us": _unit(_POS, "us", "median over iterations of the slowest rank's time"),
            "time_us_p10": _unit(_POS, "us", "10th percentile"),
            "time_us_p90": _unit(_POS, "us", "90th percentile"),
            "time_us_mean": _unit(_POS, "us", "mean"),
            "samples_us": _samples("us"),
            "algbw_GBps": _unit(_NONNEG, "GB/s (1e9)", "size / time (nccl-tests)"),
            "busbw_GBps": _unit(_NONNEG, "GB/s (1e9)", "algbw x (n - 1) / n (nccl-tests)"),
            "inter_bytes": {**_BYTES, "description": "bytes a rank sends to other nodes"},
            "intra_bytes": {**_BYTES, "description": "bytes a rank sends inside its node"},
            "wrong": {
                "type": "integer",
                "minimum": 0,
                "x-unit": "count",
                "description": "values the check found wrong",
            },
            "cpu_bound": {"type": "boolean", "description": "the ranks waited for a core more than the limit"},
            "cpu_us": _unit(_NONNEG, "us", "CPU time of the ranks per call"),
            "dilation_reason": {"type": "string", "description": "why the point ran at its dilation"},
        },
        ["time_us"],
    ),
    "step": (
        {
            "variant": {"type": "string", "description": "exchange x schedule x sync (monta.variants)"},
            "routing": {"type": "string", "description": "the --routing workload every gate routed by, or gate"},
        },
        ["variant"],
        {
            "step_ms": _unit(_POS, "ms", "median training-step time"),
            "step_ms_p10": _unit(_POS, "ms", "10th percentile"),
            "step_ms_p90": _unit(_POS, "ms", "90th percentile"),
            "samples_ms": _samples("ms"),
            "breakdown_ms": {
                "type": "object",
                "additionalProperties": _NONNEG,
                "x-unit": "ms",
                "description": "time per phase",
            },
            "exposed_comm_ms": _unit(_NONNEG, "ms", "communication not hidden behind compute"),
            "tokens_per_s": _unit(_NONNEG, "tokens/s", "throughput"),
            "peak_mem_bytes": {**_BYTES, "description": "peak memory of a rank"},
            "cpu_bound": {"type": "boolean", "description": "the ranks waited for a core more than the limit"},
            "router": {
                "type": "object",
                "properties": {
                    "maxvio": _unit(_NONNEG, "ratio", "max / mean expert load - 1, mean over layers and steps"),
                    "drop_fraction": _unit({**_NONNEG, "maximum": 1}, "ratio", "routes past the capacity"),
                },
                "required": ["maxvio", "drop_fraction"],
                "description": "what the MoE gates routed (docs/routing.md); absent: a schedule's own gate",
            },
            "workload_maxvio": {
                "type": "object",
                "additionalProperties": {"type": ["number", "null"], "minimum": 0},
                "x-unit": "ratio",
                "description": "the synthetic workloads' MaxVio at the same shape (null: the shape cannot hold it)",
            },
        },
        [],
    ),
    "plan": (
        {
            "variant": {"type": "string", "description": "variant the plan prices"},
            "model": {"type": "string", "description": "model preset"},
            "nodes": _unit(_COUNT, "count", "nodes"),
            "gpus_per_node": _unit(_COUNT, "count", "GPUs per node"),
            "tp": _unit(_COUNT, "count", "tensor-parallel degree"),
        },
        ["variant"],
        {
            "step_time_us": _unit(_POS, "us", "predicted step time"),
            "total_us": _unit(_POS, "us", "the step's total (the same as step_time_us)"),
            "exchange_us": _unit(_NONNEG, "us", "predicted MoE exchange time"),
            "total_GB": _unit(_NONNEG, "GB (1e9)", "predicted memory per GPU"),
        },
        ["step_time_us"],
    ),
}


def _envelope() -> dict[str, Any]:
    obj = {"type": "object"}
    return {
        "type": "object",
        "required": ["schema", "kind", "source", "experiment", "run_id", "timestamp", "params", "metrics"]
        + ["config", "env"],
        "properties": {
            "schema": {"const": SCHEMA},
            "kind": {"type": "string", "minLength": 1},
            "source": {"enum": list(SOURCES)},
            "experiment": {"type": "string"},
            "run_id": {"type": "string", "minLength": 1},
            "timestamp": {"type": "string"},
            "params": obj,
            "metrics": obj,
            "config": obj,
            "env": obj,
        },
    }


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of a record of ``kind``; a kind not in KINDS gets the envelope alone."""
    out = _envelope()
    if kind in KINDS:
        params, need_p, metrics, need_m = KINDS[kind]
        out["properties"]["params"] = {"type": "object", "properties": params, "required": need_p}
        out["properties"]["metrics"] = {"type": "object", "properties": metrics, "required": need_m}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": f"monta record: {kind}", **out}


@cache
def _validator(kind: str):
    import jsonschema

    return jsonschema.Draft202012Validator(schema(kind))


def check(rec: Mapping[str, Any]) -> None:
    """Raise ValueError, one line, for a record its kind's schema rejects: the field and what is wrong."""
    kind = rec.get("kind") if isinstance(rec, Mapping) else None
    err = next(iter(sorted(_validator(str(kind)).iter_errors(rec), key=lambda e: list(e.absolute_path))), None)
    if err is not None:
        where = ".".join(str(p) for p in err.absolute_path) or "record"
        raise ValueError(f"{kind} record: {where}: {err.message} (docs/results-schema.md)")


def markdown() -> str:
    """docs/results-schema.md's field tables, from the schemas (a test keeps the page equal to this)."""
    lines = []
    for kind, (params, need_p, metrics, need_m) in KINDS.items():
        lines += [f"### `{kind}`", "", "| field | type | unit | required | what |", "|---|---|---|---|---|"]
        for part, fields, need in (("params", params, need_p), ("metrics", metrics, need_m)):
            for name, s in fields.items():
                typ = s.get("type", "")
                typ += f" > {s['exclusiveMinimum']}" if "exclusiveMinimum" in s else ""
                typ += f" >= {s['minimum']}" if "minimum" in s else ""
                req = "yes" if name in need else ""
                lines.append(
                    f"| `{part}.{name}` | {typ} | {s.get('x-unit', '')} | {req} | {s.get('description', '')} |"
                )
        lines.append("")
    return "\n".join(lines)
