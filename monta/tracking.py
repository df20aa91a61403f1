"""wandb logging of result records, shaped so wandb's default charts compare variants.

One wandb run per variant (and chunk count) of a sweep, all in the sweep's group, each with its config
(the run's settings and the point's params); metrics are logged against their real axis with
``define_metric``: an AllToAll sweep's against the message size (``size_MiB``), a training step's
per-step times against ``step``. wandb's default line charts then draw one line per variant over the
size or the steps. Each run also carries its records as a wandb.Table.

Offline under results/wandb unless WANDB_MODE says otherwise; any wandb failure warns once and never fails the run.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DEFAULT_DIR = "results/wandb"
INIT_TIMEOUT_S = 30.0  # a hung wandb service must not hold up a benchmark
_warned = False


def _warn_once(msg: str) -> None:
    global _warned
    if not _warned:
        warnings.warn(f"wandb logging skipped ({msg}); the JSONL records are unaffected", RuntimeWarning, stacklevel=3)
        _warned = True


def _flat(prefix: str, d: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flat(key + ".", v))
        elif isinstance(v, bool) or v is None or isinstance(v, (int, float, str)):
            out[key] = v
    return out


def _table(wandb: Any, records: Sequence[Mapping[str, Any]]) -> Any:
    rows = [
        {"source": r["source"], "run_id": r["run_id"], **_flat("", r["params"]), **_flat("", r["metrics"])}
        for r in records
    ]
    cols = sorted({c for row in rows for c in row}, key=lambda c: (c not in ("source", "run_id"), c))
    data = [[_cell(row.get(c)) for c in cols] for row in rows]
    return wandb.Table(columns=cols, data=data)


def _cell(v: Any) -> Any:
    # wandb tables want one type per column; missing numbers become NaN, other values strings.
    if v is None:
        return float("nan")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    return str(v)


def enabled() -> bool:
    return os.environ.get("WANDB_MODE", "offline") != "disabled" and os.environ.get("MONTA_WANDB", "1") != "0"


# The x axis each record kind is logged against; kinds not listed get the record's index (``point``).
AXES = {"alltoall": "size_MiB", "step": "step"}


def plan_runs(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The wandb runs for ``records``: one per (kind, variant, chunks), in the order first seen, each
    ``{"name", "kind", "axis", "params", "rows", "summary", "records"}``. ``params``: the params every
    record of the run shares (its config beside the sweep's); ``rows``: what is logged, one dict per
    x value, sorted by it; ``summary``: for a step run, its median metrics."""
    runs: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in records:
        p = r["params"]
        runs.setdefault((r["kind"], p.get("variant"), p.get("chunks")), []).append(r)
    out = []
    for (kind, variant, chunks), recs in runs.items():
        shared = {k: v for k, v in recs[0]["params"].items() if all(x["params"].get(k) == v for x in recs)}
        name = "-".join(str(x) for x in (kind, variant, f"c{chunks}" if chunks is not None else None) if x)
        axis = AXES.get(kind, "point")
        out.append(
            {
                "name": name,
                "kind": kind,
                "axis": axis,
                "params": shared,
                "rows": _rows(kind, axis, recs),
                "summary": _scalars(recs[0]["metrics"]) if kind == "step" and len(recs) == 1 else {},
                "records": recs,
            }
        )
    return out


def _scalars(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in _flat("", metrics).items()
        if not isinstance(v, str) and not (isinstance(v, float) and math.isnan(v))
    }


def _rows(kind: str, axis: str, recs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if kind == "alltoall":  # one row per size: its time in ms (wandb charts read better than us) and bandwidths
        rows = []
        for r in sorted(recs, key=lambda r: r["params"].get("size_bytes", 0)):
            row = {axis: r["params"].get("size_bytes", 0) / 2**20, **_scalars(r["metrics"])}
            if "time_us" in row:
                row["time_ms"] = row["time_us"] / 1e3
            rows.append(row)
        return rows
    if kind == "step":  # every timed step of every record of the run, in order: its time, then the medians
        steps = [x for r in recs for x in (r["metrics"].get("samples_ms") or [r["metrics"].get("step_ms")])]
        return [{axis: i, "step_ms": float(x)} for i, x in enumerate(steps) if x is not None]
    return [{axis: i, **_scalars(r["metrics"])} for i, r in enumerate(recs)]


def log_records(
    records: Sequence[Mapping[str, Any]],
    project: str | None = None,
    group: str | None = None,
    config: Mapping[str, Any] | None = None,
    name: str | None = None,
    job_type: str | None = None,
    dir: str | os.PathLike | None = None,
) -> bool:
    """Log records to wandb: one run per variant (:func:`plan_runs`), metrics against their real axis.

    Returns True when logged, False when skipped or wandb failed; never raises. Settings come from
    the arguments, then MONTA_WANDB_PROJECT / MONTA_EXPERIMENT (group) / MONTA_WANDB_DIR, then defaults.
    ``name`` prefixes the runs' names. WANDB_MODE=disabled or MONTA_WANDB=0 turns logging off."""
    if not records or not enabled():
        return False
    run = None
    try:
        import wandb  # lazy: importing wandb is slow and it is optional for the experiment

        mode = os.environ.get("WANDB_MODE", "offline")
        if mode not in ("offline", "online"):
            raise ValueError(f"WANDB_MODE={mode!r} (use offline, online or disabled)")
        root = Path(dir or os.environ.get("MONTA_WANDB_DIR", DEFAULT_DIR))
        root.mkdir(parents=True, exist_ok=True)
        first = records[0]
        base_config = dict(config if config is not None else first.get("config", {}))
        base_config.setdefault("env", first.get("env", {}))
        for plan in plan_runs(records):
            run = wandb.init(
                project=project or os.environ.get("MONTA_WANDB_PROJECT", "monta"),
                # the sweep's runs together: its group is the experiment, one sweep one run_id
                group=group or os.environ.get("MONTA_EXPERIMENT") or first.get("experiment"),
                name=f"{name or first['run_id']}/{plan['name']}",
                job_type=job_type or plan["kind"],
                config=json.loads(
                    json.dumps({**base_config, **plan["params"], "run_id": first["run_id"]}, default=str)
                ),
                dir=str(root),
                mode=mode,
                reinit="create_new",
                settings=wandb.Settings(init_timeout=INIT_TIMEOUT_S, console="off", silent=True, x_disable_stats=True),
            )
            _log_plan(wandb, run, plan)
            run.finish()
            run = None
        return True
    except Exception as e:  # noqa: BLE001 - by contract nothing from wandb may fail an experiment
        _warn_once(f"{type(e).__name__}: {e}".splitlines()[0][:300])
        if run is not None:
            try:
                run.finish(exit_code=1)
            except Exception:  # noqa: BLE001
                pass
        return False


def _log_plan(wandb: Any, run: Any, plan: Mapping[str, Any]) -> None:
    axis = plan["axis"]
    run.define_metric(axis)
    run.define_metric("*", step_metric=axis)  # every metric's chart is drawn over the real axis
    for row in plan["rows"]:
        run.log(row)
    for k, v in plan["summary"].items():
        run.summary[k] = v
    run.log({f"{plan['kind']}/table": _table(wandb, plan["records"])})
