"""The one result-record schema (measured, emulated and predicted numbers alike) and its writer.

Records are JSON objects, one per line; files are written atomically so a failed run leaves
either the previous file or the complete new one, never half a result.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import math
import os
import platform
import socket
import subprocess
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from monta import results_schema
from monta.atomic import write_atomic
from monta.results_schema import SCHEMA, SOURCES  # noqa: F401  (the envelope's values; importers read them here)

# Fields every record carries. ``params`` holds what identifies the point (size, variant,
# chunks, tp, ...); ``metrics`` what was measured or predicted; ``config`` the full resolved
# config of the run; ``env`` versions and hardware.
REQUIRED = ("schema", "kind", "source", "experiment", "run_id", "timestamp", "params", "metrics", "config", "env")


def make_record(
    *,
    kind: str,
    source: str,
    experiment: str,
    params: Mapping[str, Any],
    metrics: Mapping[str, Any],
    config: Mapping[str, Any] | None = None,
    env: Mapping[str, Any] | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    if source not in SOURCES:
        raise ValueError(f"source={source!r}: must be one of {', '.join(SOURCES)}")
    return {
        "schema": SCHEMA,
        "kind": kind,
        "source": source,
        "experiment": experiment,
        "run_id": run_id or new_run_id(),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "params": dict(params),
        "metrics": dict(metrics),
        "config": dict(config or {}),
        "env": dict(env if env is not None else environment()),
    }


def validate_record(rec: Mapping[str, Any]) -> None:
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        raise ValueError(f"record is missing {', '.join(missing)}")
    if rec["schema"] != SCHEMA:
        raise ValueError(f"record schema {rec['schema']!r} is not {SCHEMA!r}")
    if rec["source"] not in SOURCES:
        raise ValueError(f"record source {rec['source']!r} is not one of {SOURCES}")


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


_ENV_CACHE: dict[str, Any] | None = None


def launch_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """How this process was started: ``launcher`` (emulator, srun-torchrun, torchrun, srun, local),
    the rank environment it was given (``dist``) and, under SLURM, the job and node (``slurm``)."""
    e = os.environ if environ is None else environ
    if "MONTA_EMULATED" in e:
        launcher = "emulator"
    elif "TORCHELASTIC_RUN_ID" in e:
        launcher = "srun-torchrun" if "SLURM_STEP_ID" in e else "torchrun"
    elif "SLURM_STEP_ID" in e:
        launcher = "srun"
    else:
        launcher = "local"
    out: dict[str, Any] = {"launcher": launcher}
    if "RANK" in e:
        keys = {
            "rank": "RANK",
            "world_size": "WORLD_SIZE",
            "local_rank": "LOCAL_RANK",
            "local_world_size": "LOCAL_WORLD_SIZE",
            "node_rank": "GROUP_RANK",
            "master_addr": "MASTER_ADDR",
            "master_port": "MASTER_PORT",
        }
        out["dist"] = {k: e[v] for k, v in keys.items() if v in e}
    if "SLURM_JOB_ID" in e:
        keys = {
            "job_id": "SLURM_JOB_ID",
            "step_id": "SLURM_STEP_ID",
            "node": "SLURMD_NODENAME",
            "job_nodelist": "SLURM_JOB_NODELIST",
            "step_nodelist": "SLURM_STEP_NODELIST",
            "procid": "SLURM_PROCID",
            "ntasks": "SLURM_NTASKS",
            "cluster": "SLURM_CLUSTER_NAME",
            "partition": "SLURM_JOB_PARTITION",
            "account": "SLURM_JOB_ACCOUNT",
        }
        out["slurm"] = {k: e[v] for k, v in keys.items() if v in e}
    return out


def environment() -> dict[str, Any]:
    """Versions and hardware, without importing torch/deepspeed if the caller has not."""
    global _ENV_CACHE
    if _ENV_CACHE is not None:
        return dict(_ENV_CACHE)
    import sys

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "git_commit": _git_commit(),
        "monta": __import__("monta").__version__,
        **launch_environment(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            try:
                env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            except Exception:  # noqa: BLE001 - NCCL may be absent from a CUDA build
                env["nccl"] = None
    ds = sys.modules.get("deepspeed")
    if ds is not None:
        env["deepspeed"] = ds.__version__
    _ENV_CACHE = env
    return dict(env)


class RecordWriteError(ValueError):
    """A records file that cannot be written: one line naming the file and the file system's reason."""


# What a person should hear for the errors a write meets most (errno -> reason and what to do).
_WRITE_REASONS = {
    errno.EROFS: "it is on a read-only file system; give a path on a writable one",
    errno.ENOSPC: "no space left on its device; free some space or write elsewhere",
    errno.EDQUOT: "the disk quota is exhausted; free some space or write elsewhere",
    errno.ENOENT: "its folder does not exist (removed?); create it or give another path",
    errno.EACCES: "permission denied; give a path you may write",
    errno.EPERM: "permission denied; give a path you may write",
    errno.ENOTDIR: "a part of its path is a file, not a folder",
}


def write_error(path: str | os.PathLike, e: OSError) -> RecordWriteError:
    """The one-line error for ``e``, met while writing ``path``."""
    reason = _WRITE_REASONS.get(e.errno, e.strerror or str(e))
    return RecordWriteError(f"cannot write {path}: {reason} (nothing was written)")


def write_records(path: str | os.PathLike, records: Iterable[Mapping[str, Any]], append: bool = False) -> Path:
    """Write records as JSONL atomically (temp file in the same folder + rename), so a failed write leaves
    the previous file or none, never part of one; ``append`` keeps existing lines. A file system error
    (read-only, full, a folder gone) raises RecordWriteError, one line."""
    try:
        return _write_records(Path(path), records, append)
    except RecordWriteError:
        raise
    except OSError as e:
        raise write_error(path, e) from None


def _write_records(path: Path, records: Iterable[Mapping[str, Any]], append: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    records = list(records)
    for r in records:
        validate_record(r)
        results_schema.check(r)  # its kind's params and metrics (docs/results-schema.md), before anything is written
    existing = path.read_bytes() if append and path.exists() else b""
    if existing and not existing.endswith(b"\n"):
        existing += b"\n"  # never glue a record onto the last line: it starts a line of its own
        last = existing.count(b"\n")
        try:
            check_record(json.loads(existing.rsplit(b"\n", 2)[-2]))
        except ValueError:  # (JSONDecodeError and UnicodeDecodeError are ValueErrors)
            import sys

            print(
                f"monta: warning: {path}:{last}: the last line is cut off (a write was interrupted before this "
                f"run); it is kept as it was and the {len(records)} new record(s) start on line {last + 1}. "
                "Readers will name that line until it is repaired or removed.",
                file=sys.stderr,
            )
    body = b"".join((json.dumps(r, sort_keys=True, default=str) + "\n").encode() for r in records)
    write_atomic(path, existing + body)
    return path


class RecordError(ValueError):
    """A records file that cannot be read as records: the message names file:line and what is wrong."""


# Time metrics: each, where a record has it, must be a finite number above zero (a NaN, zero or
# negative time is a broken measurement, never data). Sample lists hold such times too.
TIME_METRICS = (
    "time_us",
    "time_us_p10",
    "time_us_p90",
    "step_ms",
    "step_ms_p10",
    "step_ms_p90",
    "step_time_us",
    "measured_us",
)
TIME_SAMPLES = ("samples_us", "samples_ms")


def _positive_time(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def check_record(rec: Any) -> None:
    """Raise ValueError (what is wrong, one line) unless ``rec`` is a complete record with usable times."""
    if not isinstance(rec, dict):
        raise ValueError(f"a JSON {type(rec).__name__}, not a record (a JSON object with {', '.join(REQUIRED)})")
    validate_record(rec)
    for key in ("params", "metrics", "config", "env"):
        if not isinstance(rec[key], dict):
            raise ValueError(f"{key} is {json.dumps(rec[key])[:40]}, not an object")
    for key in ("kind", "experiment", "run_id"):
        if not isinstance(rec[key], str) or not rec[key]:
            raise ValueError(f"{key} is {json.dumps(rec[key])[:40]}, not a non-empty string")
    m = rec["metrics"]
    for key in TIME_METRICS:
        if key in m and not _positive_time(m[key]):
            raise ValueError(f"metrics.{key} is {json.dumps(m[key])}: a time must be a finite number above zero")
    for key in TIME_SAMPLES:
        if key in m:
            s = m[key]
            if not isinstance(s, list) or not s:
                raise ValueError(f"metrics.{key} is {json.dumps(s)[:40]}, not a non-empty list of times")
            bad = [x for x in s if not _positive_time(x)]
            if bad:
                bad = bad[0]
                raise ValueError(
                    f"metrics.{key} holds {json.dumps(bad)}: every time must be a finite number above zero"
                )


def read_records(*paths: str | os.PathLike) -> list[dict[str, Any]]:
    """The one validating loader of record files (JSONL): every reader of records goes through it.

    Raises RecordError naming ``file:line`` and what is wrong: a missing file, a directory,
    bytes that are not UTF-8, a line that is not JSON (or is cut off), JSON that is not a record,
    a record without params/metrics objects, and NaN, zero or negative times. A file without a
    single record is an error too (an empty input is never "nothing regressed")."""
    out: list[dict[str, Any]] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            raise RecordError(f"{p}: is a directory, not a records file (JSONL)")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise RecordError(f"{p}: no such records file") from None
        except OSError as e:
            raise RecordError(f"{p}: cannot read it ({e.strerror or e})") from None
        count = 0
        for n, raw in enumerate(data.split(b"\n"), 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise RecordError(
                    f"{p}:{n}: not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1}); "
                    "a records file is JSON lines"
                ) from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                cut = " (the line is cut off: a write was interrupted)" if n == data.count(b"\n") + 1 else ""
                raise RecordError(f"{p}:{n}: not a JSON record ({e.msg}, column {e.colno}){cut}") from None
            try:
                check_record(rec)
            except ValueError as e:
                raise RecordError(f"{p}:{n}: {e}") from None
            out.append(rec)
            count += 1
        if not count:
            raise RecordError(f"{p}: holds no records (empty file)")
    return out
