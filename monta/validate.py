"""Argument checks shared by the command line and the pipeline's config validation.

Every check runs before anything starts (no rank, no emulated network, no file written) and raises
:class:`UsageError`, a ValueError whose one-line message names the flag (or config key), the value
and what is allowed. The command line names flags (``--hidden 0: ...``); the pipeline passes a
``where`` that names config keys (``config key alltoall.sizes = '128K:64K:2': ...``), so both say
the same thing about the same mistake. Pure Python: importing this never imports torch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from monta.bench.alltoall.config import ADAPTIVE_DEFAULTS, AlltoallConfig
from monta.dtypes import DTYPE_BYTES
from monta.runconfig import flag_default
from monta.units import parse_size

# Limits. A sweep of more sizes than this is a typo (a factor of 1.0000001), not an experiment.
MAX_SIZES = 64
MAX_SIZE_BYTES = 2**40  # 1 TiB per rank: beyond any accelerator's memory, let alone a host's
MAX_HIDDEN = 2**20
MAX_EXPERTS = 2**16
MAX_CHUNKS = 4096
MAX_NODES = 250  # the emulated subnet's size; real clusters use the env launcher
MAX_GPUS_PER_NODE = 1024
MAX_ITERS = 1_000_000

Where = Callable[[str, Any], str]


class UsageError(ValueError):
    """A bad argument or config value; the message is one line naming it and what is allowed."""


def cli(key: str, value: Any) -> str:
    """``--hidden 0`` (how the command line names a value)."""
    return f"--{key.replace('_', '-')} {value}"


def config_key(section: str) -> Where:
    """``config key alltoall.sizes = '128K:64K:2'`` (how the pipeline names a value)."""

    def where(key: str, value: Any) -> str:
        return f"config key {section}.{key} = {value!r}"

    return where


def _fail(where: Where, key: str, value: Any, allowed: str) -> UsageError:
    return UsageError(f"{where(key, value)}: {allowed}")


def integer(value: Any, key: str, lo: int, hi: int, where: Where = cli) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(where, key, value, f"must be an integer from {lo} to {hi}")
    return value


def number(
    value: Any, key: str, lo: float, hi: float, where: Where = cli, *, lo_open: bool = False, unit: str = ""
) -> float:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and (value > lo if lo_open else value >= lo)
        and value <= hi
    )
    if not ok:
        fmt = lambda x: f"{int(x)}" if float(x).is_integer() else f"{x:g}"  # noqa: E731 - never 2.592e+06
        rng = f"{'above' if lo_open else 'at least'} {fmt(lo)} and at most {fmt(hi)}"
        raise _fail(where, key, value, f"must be a finite number {rng}{(' ' + unit) if unit else ''}")
    return float(value)


def sizes(spec: Any, key: str = "sizes", where: Where = cli, max_count: int = MAX_SIZES) -> list[int]:
    """``1M:16M:2`` or ``4M`` or ``1M,3M`` -> byte counts, each 1 B .. 1 TiB, at most ``max_count`` of them.

    The count of a range is computed before any size is generated, so a factor of 1.0000001 is
    refused at once instead of building 10^8 sizes."""
    text = str(spec).strip()
    hint = "use min:max:factor (e.g. 1M:16M:2) or a comma list of sizes (e.g. 1M,4M); K/M/G/T suffixes"
    try:
        if ":" not in text:
            out = [parse_size(s) for s in text.split(",") if s.strip()]
            if not out:
                raise _fail(where, key, spec, hint)
            if len(out) > max_count:
                raise _fail(where, key, spec, f"{len(out)} sizes; at most {max_count}")
        else:
            parts = text.split(":")
            if len(parts) not in (2, 3):
                raise _fail(where, key, spec, hint)
            lo, hi = parse_size(parts[0]), parse_size(parts[1])
            try:
                factor = float(parts[2]) if len(parts) == 3 else 2.0
            except ValueError:
                raise _fail(where, key, spec, f"factor {parts[2]!r} is not a number; {hint}") from None
            if not (math.isfinite(factor) and factor > 1):
                raise _fail(where, key, spec, "the factor must be a number above 1, e.g. 2")
            if lo < 1:
                raise _fail(where, key, spec, "the smallest size must be at least 1 byte")
            if hi < lo:
                raise _fail(
                    where, key, spec, f"min {parts[0]} is above max {parts[1]}; use min:max:factor with min <= max"
                )
            count = int(math.floor(math.log(hi / lo) / math.log(factor) + 1e-9)) + 1
            if count > max_count:
                raise _fail(
                    where,
                    key,
                    spec,
                    f"that range has {count} sizes; at most {max_count} (use a larger factor or a narrower range)",
                )
            out, size = [], float(lo)
            while size <= hi * (1 + 1e-9):
                out.append(int(round(size)))
                size *= factor
    except UsageError:
        raise
    except ValueError as e:  # parse_size's message names the bad token
        raise _fail(where, key, spec, f"{e}; {hint}") from None
    for s in out:
        if not 1 <= s <= MAX_SIZE_BYTES:
            raise _fail(where, key, spec, f"size {s} B is outside 1 B .. 1T (a size is the bytes of one rank's buffer)")
    return out


def names(spec: Any, key: str, allowed: Sequence[str], where: Where = cli) -> list[str]:
    items = spec if isinstance(spec, (list, tuple)) else str(spec).split(",")
    out = [str(v).strip() for v in items if str(v).strip()]
    bad = [v for v in out if v not in allowed]
    if bad or not out:
        raise _fail(
            where,
            key,
            spec if isinstance(spec, str) else ",".join(map(str, items)),
            f"{'unknown ' + ', '.join(map(repr, bad)) + '; ' if bad else 'empty; '}choose from {', '.join(allowed)}",
        )
    if len(set(out)) != len(out):
        raise _fail(where, key, ",".join(out), "each name at most once")
    return out


def slowdown(spec: Any, variants: Sequence[str], key: str = "inject_slowdown", where: Where = cli) -> dict | None:
    """TEST AID ``VARIANT:FRACTION`` (e.g. ``monta:0.10``) -> {"variant", "fraction"}; empty -> None.
    The variant must be one the sweep runs, and 0 < FRACTION <= 1."""
    text = "" if spec is None else str(spec).strip()
    if not text:
        return None
    name, _, frac = text.partition(":")
    try:
        fraction = float(frac)
    except ValueError:
        fraction = float("nan")
    if name not in variants or not 0 < fraction <= 1:
        raise _fail(
            where,
            key,
            spec,
            f"use VARIANT:FRACTION with VARIANT one of {', '.join(variants)} and 0 < FRACTION <= 1, e.g. monta:0.10",
        )
    return {"variant": name, "fraction": fraction}


def int_list(spec: Any, key: str, lo: int, hi: int, where: Where = cli, max_count: int = 64) -> list[int]:
    shown = spec if isinstance(spec, str) else ",".join(map(str, spec))
    items = spec if isinstance(spec, (list, tuple)) else str(spec).split(",")
    try:
        out = [
            v if isinstance(v, int) and not isinstance(v, bool) else int(str(v).strip())
            for v in items
            if str(v).strip()
        ]
    except ValueError:
        raise _fail(where, key, shown, f"expected a comma list of integers from {lo} to {hi}") from None
    if not out or any(not lo <= v <= hi for v in out) or len(out) > max_count:
        raise _fail(where, key, shown, f"expected 1 to {max_count} integers, each from {lo} to {hi}")
    return out


def out_path(path: Any, key: str = "out", where: Where = cli, append: bool = False) -> Path | None:
    """A records file we can write: not a directory, its folder creatable and writable; with
    ``append``, an existing file that the record loader accepts (so appending cannot make it worse)."""
    if path is None or path == "":
        if append:
            raise UsageError("--append needs --out FILE (the records file to append to)")
        return None
    p = Path(path)
    if p.is_dir():
        raise _fail(where, key, path, "is a directory; give a file path, e.g. results/run.jsonl")
    parent = p.parent if str(p.parent) else Path(".")
    probe = parent
    while not probe.exists():  # the nearest existing ancestor must be a writable directory
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise _fail(where, key, path, f"{probe} is a file, not a directory")
    if probe.exists() and read_only(probe):
        raise _fail(
            where, key, path, f"{probe.absolute()} is on a read-only file system; give a path on a writable one"
        )
    if probe.exists() and not writable(probe):
        raise _fail(
            where,
            key,
            path,
            f"cannot write in {probe} (its permissions forbid it: mode {probe.stat().st_mode & 0o777:o})",
        )
    if probe.exists():
        _probe_write(probe, where, key, path)
    if append and p.exists():
        from monta.results import RecordError, read_records

        try:
            read_records(p)
        except RecordError as e:
            raise UsageError(
                f"--append {path}: refusing to append to a file that is already damaged: {e}; "
                "repair or remove that line, or write to a new file"
            ) from None
    return p


def read_only(directory: Path) -> bool:
    """Whether ``directory`` is on a file system mounted read-only (no permission bit lets a write there)."""
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# A write this size must fit for the run to start: a disk that cannot take it is full now, not at the end.
_PROBE_BYTES = 4096


def _probe_write(directory: Path, where: Where, key: str, path: Any) -> None:
    """Write and remove a small file in ``directory``: a full disk (or any other refusal the bits and the
    mount flags do not show) is named before the run, not after it."""
    import tempfile

    from monta.results import write_error

    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".monta-probe-") as f:
            f.write(b"\0" * _PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        reason = str(write_error(directory, e)).split(": ", 1)[1].replace(" (nothing was written)", "")
        raise _fail(where, key, path, f"cannot write in {directory.absolute()}: {reason}") from None


def writable(directory: Path) -> bool:
    """Whether this user may create files in ``directory`` by its permission bits alone, as the
    emulated ranks see it: they run without capabilities (monta.emulate.privileges), so even root's
    ranks cannot write where the bits say no. (os.access answers yes for root; this does not.)"""
    try:
        st = directory.stat()
    except OSError:
        return False
    if st.st_uid == os.geteuid():
        bits = (st.st_mode >> 6) & 7
    elif st.st_gid in (os.getegid(), *os.getgroups()):
        bits = (st.st_mode >> 3) & 7
    else:
        bits = st.st_mode & 7
    return bits & 3 == 3 and os.access(directory, os.W_OK | os.X_OK)


_SWEEP_KEYS = ("nodes", "gpus_per_node", "tp", "ep", "sizes", "variants", "chunks", "dtype", "experts", "hidden")
_SWEEP_KEYS += ("warmup", "iters", "max_iters", "target_ci", "budget_s")


def _sweep_layout(nodes: Any, gpus_per_node: Any, tp: Any, ep: Any, k: dict[str, str], where: Where) -> tuple[int, int]:
    """The sweep's TP and EP degrees (TP defaults to a node, EP to the data-parallel degree), checked."""
    from monta.parallel import ParallelLayout

    integer(nodes, k["nodes"], 1, MAX_NODES, where)
    integer(gpus_per_node, k["gpus_per_node"], 1, MAX_GPUS_PER_NODE, where)
    if tp is None:
        tp = gpus_per_node
    elif isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= gpus_per_node:
        raise _fail(
            where,
            k["tp"],
            tp,
            f"must be an integer from 1 to gpus_per_node={gpus_per_node} (tensor parallelism stays inside a node)",
        )
    if gpus_per_node % tp:
        raise _fail(where, k["tp"], tp, f"must divide gpus_per_node={gpus_per_node} (TP stays inside a node)")
    dp = nodes * gpus_per_node // tp
    ep = dp if ep is None else integer(ep, k["ep"], 1, dp, where)
    if dp % ep:
        raise _fail(where, k["ep"], ep, f"must divide the data-parallel degree {dp} (nodes x gpus_per_node / tp)")
    ParallelLayout(nodes, gpus_per_node, tp, ep)  # same rules; cannot fail after the checks above
    return tp, ep


def _sweep_chunks(chunks: Any, slice_: int | None, smallest: int, k: dict[str, str], where: Where) -> Any:
    """The sweep's chunk counts: ``Auto`` (resolved per size by the benchmark) or integers, none above the
    capacity slice ``slice_`` (C/TP of the smallest size) when a chunked exchange cuts it (else None)."""
    from monta.chunking import is_auto, parse_chunks

    if is_auto(chunks):
        return parse_chunks(chunks)
    ch = int_list(chunks, k["chunks"], 1, MAX_CHUNKS, where)
    if slice_ is not None and max(ch) > slice_:
        raise _fail(
            where,
            k["chunks"],
            chunks if isinstance(chunks, str) else ",".join(map(str, ch)),
            f"{max(ch)} chunks exceed the capacity slice {slice_} (C/TP) of the smallest size "
            f"{smallest} B; use at most {slice_} chunks, larger sizes or a smaller hidden",
        )
    return ch


# `monta bench alltoall`'s defaults as its flags spell them: the AlltoallConfig fields'
_A2A = {f.name: flag_default(AlltoallConfig, f.name) for f in fields(AlltoallConfig)}


def alltoall_sweep(
    *,
    nodes: Any,
    gpus_per_node: Any,
    tp: Any = _A2A["tp"],
    ep: Any = _A2A["ep"],
    sizes_spec: Any = _A2A["sizes"],
    variants: Any = _A2A["variants"],
    chunks: Any = _A2A["chunks"],
    dtype: str = _A2A["dtype"],
    experts: Any = _A2A["experts"],
    hidden: Any = _A2A["hidden"],
    warmup: Any = _A2A["warmup"],
    iters: Any = _A2A["iters"],
    max_iters: Any = ADAPTIVE_DEFAULTS["max_iters"],
    target_ci: Any = ADAPTIVE_DEFAULTS["target_ci"],
    budget_s: Any = ADAPTIVE_DEFAULTS["budget_s"],
    where: Where = cli,
    keys: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Every semantic check of one TP AllToAll sweep (``monta bench alltoall`` and the pipeline's
    ``alltoall`` / ablation sections). Returns the resolved values: tp, ep, sizes, variants, chunks
    (``monta.chunking.Auto`` or a list of integers), experts. ``keys`` renames a key for ``where``
    (e.g. sizes -> clusters[0].sizes)."""
    k = {n: n for n in _SWEEP_KEYS}
    k.update(keys or {})
    tp, ep = _sweep_layout(nodes, gpus_per_node, tp, ep, k, where)
    if dtype not in DTYPE_BYTES:
        raise _fail(where, k["dtype"], dtype, f"choose from {', '.join(DTYPE_BYTES)}")
    hidden = integer(hidden, k["hidden"], 1, MAX_HIDDEN, where)
    experts = ep if experts is None else integer(experts, k["experts"], 1, MAX_EXPERTS, where)
    if experts % ep:
        raise _fail(
            where, k["experts"], experts, f"must be a multiple of EP={ep} (each EP rank holds experts/EP experts)"
        )
    from monta import variants as registry  # torch-free; the core's exchanges and the plugins'

    vs = names(variants, k["variants"], list(registry.exchanges()), where)
    sz = sizes(sizes_spec, k["sizes"], where)
    row = experts * hidden * DTYPE_BYTES[dtype]
    for s in sz:
        if s % row or (s // row) % tp:
            raise _fail(
                where,
                k["sizes"],
                sizes_spec,
                f"{s} B is not a whole [E={experts}, C, M={hidden}] {dtype} buffer with C divisible by "
                f"TP={tp}; use multiples of {row * tp} B or change hidden",
            )
    chunked = any(registry.is_chunked(v) for v in vs)  # only a chunked exchange cuts its slice
    ch = _sweep_chunks(chunks, min(sz) // row // tp if chunked else None, min(sz), k, where)
    integer(warmup, k["warmup"], 0, MAX_ITERS, where)
    integer(iters, k["iters"], 1, MAX_ITERS, where)
    integer(max_iters, k["max_iters"], 0, MAX_ITERS, where)
    number(target_ci, k["target_ci"], 0, 10, where)
    number(budget_s, k["budget_s"], 0, 7 * 86400, where, unit="seconds")
    return {"tp": tp, "ep": ep, "sizes": sz, "variants": vs, "chunks": ch, "experts": experts, "hidden": hidden}
