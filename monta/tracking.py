"""wandb logging of result records: config, metrics and a result table per record kind.

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


def log_records(
    records: Sequence[Mapping[str, Any]],
    project: str | None = None,
    group: str | None = None,
    config: Mapping[str, Any] | None = None,
    name: str | None = None,
    job_type: str | None = None,
    dir: str | os.PathLike | None = None,
) -> bool:
    """Log records to one wandb run (config, per-record metrics, a wandb.Table per kind).

    Returns True when logged, False when skipped or wandb failed; never raises. Settings come from
    the arguments, then MONTA_WANDB_PROJECT / MONTA_EXPERIMENT (group) / MONTA_WANDB_DIR, then defaults.
    WANDB_MODE=disabled or MONTA_WANDB=0 turns logging off."""
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
        run_config = dict(config if config is not None else first.get("config", {}))
        run_config.setdefault("env", first.get("env", {}))
        run = wandb.init(
            project=project or os.environ.get("MONTA_WANDB_PROJECT", "monta"),
            group=group or os.environ.get("MONTA_EXPERIMENT") or first.get("experiment"),
            name=name or f"{first['kind']}-{first['run_id']}",
            job_type=job_type or first["kind"],
            config=json.loads(json.dumps(run_config, default=str)),
            dir=str(root),
            mode=mode,
            reinit="create_new",
            settings=wandb.Settings(init_timeout=INIT_TIMEOUT_S, console="off", silent=True, x_disable_stats=True),
        )
        for i, r in enumerate(records):
            row = _flat(f"{r['kind']}/", {k: v for k, v in r["metrics"].items() if not isinstance(v, list)})
            row.update(_flat(f"{r['kind']}/params.", r["params"]))
            run.log({k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}, step=i)
        for kind in sorted({r["kind"] for r in records}):
            run.log({f"{kind}/table": _table(wandb, [r for r in records if r["kind"] == kind])})
        run.finish()
        return True
    except Exception as e:  # noqa: BLE001 - by contract nothing from wandb may fail an experiment
        _warn_once(f"{type(e).__name__}: {e}".splitlines()[0][:300])
        if run is not None:
            try:
                run.finish(exit_code=1)
            except Exception:  # noqa: BLE001
                pass
        return False
