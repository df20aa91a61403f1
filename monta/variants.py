"""The one registry of training-step variants: a variant is a token exchange (with its chunk
setting), an MoE schedule and a gradient synchronization, registered by name.

Torch-free at import (the CLI, the pipeline's config check and the analysis read it). The
engine, the step benchmark, the performance model, the config schema and the analysis look
variants up here; nothing else keeps a list of them.

Parts:

- exchange: ``legacy`` | ``deepspeed`` | ``monta`` (``monta.comm``), with ``chunks`` (``None`` =
  the run's ``--chunks``; only a chunked exchange, ``monta``, takes it), registered by the core's entry
  point (``monta.core_exchanges``, run first); others by any package (``add_exchange``: what an entry
  carries is ``monta.exchanges``);
- schedule: ``deepspeed`` (DeepSpeed's MoE forward) here; ``lina`` and ``lancet`` are registered by
  ``baselines`` (``monta_baselines.variants``), others by any package (below);
- sync: ``after-backward`` (DeepSpeed's reduction after backward), ``priority`` (a background thread
  whose AllReduce yields to any AllToAll, one micro-op per gradient) here; ``lina-microops``
  (Lina's fixed-size micro-ops) by ``baselines``.

Names: a registered name (``monta+lina``), or a composition ``exchange=monta,schedule=lancet,sync=priority``
(any subset of the keys ``exchange``, ``schedule``, ``sync``, ``chunks``; missing ones are
``deepspeed``, ``deepspeed``, ``after-backward``, the run's chunks). In a comma-separated list of
variants a composition's keys stay together: a new composition starts at a plain name or at a key
the current one already has (``split_list``).

Plugins: a distribution declares an entry point in group ``monta.variants`` whose object is a
callable taking this module (``register(registry)``); it calls ``add_exchange``, ``add_schedule``,
``add_sync`` and ``add_variant``. ``baselines`` registers itself so (``pyproject.toml``). A plugin that fails to load
is reported (a warning, and in the error of an unknown name), never silently dropped.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

from monta.exchanges import CAPACITY_PASSES, CORE, Exchange, make_exchange  # noqa: F401  (plugins read them here)
from monta.variant_names import DEFAULT_PARTS, KEYS, compose, is_composed, parse_parts, split_list
from monta.variant_parts import OverlapInputs, Schedule, ScheduleContext, Sync  # noqa: F401  (plugins read them here)

ENTRY_POINT_GROUP = "monta.variants"
# The core's exchanges register as a plugin's do, through an entry point run before every plugin's: the
# registry names the module above it and the model (monta.core_exchanges) and never imports it.
CORE_ENTRY_POINT = "monta.core_exchanges:register"
# Lina's gradient AllReduce micro-op size (its default, 30 MB): the lina-microops sync, the priority sync's
# default micro-op and the performance model's price of one.
LINA_CHUNK_BYTES = 30 * 2**20
# Lancet's batch partitions / Lina's AllToAll token chunks (a decision, a knob), living with the schedules:
# the default of the engine, the step benchmark and the performance model.
PARTITIONS = 4


@dataclass(frozen=True)
class Variant:
    name: str
    exchange: str
    schedule: Schedule
    sync: Sync
    chunks: int | None = None  # the exchange's chunks; None = the run's
    about: str = ""
    origin: str = "monta"

    @property
    def parts(self) -> dict[str, Any]:
        d = {"exchange": self.exchange, "schedule": self.schedule.name, "sync": self.sync.name}
        if self.chunks is not None:
            d["chunks"] = self.chunks
        return d

    @property
    def composed_name(self) -> str:
        return compose(**self.parts)

    def exchange_chunks(self, run_chunks: int) -> int:
        """Chunks of the exchange itself (1 unless the exchange is chunked, as ``monta`` is)."""
        if not exchange(self.exchange).chunked:
            return 1
        return self.chunks if self.chunks is not None else run_chunks


@dataclass
class _Registry:
    exchanges: dict[str, Exchange] = field(default_factory=dict)
    schedules: dict[str, Schedule] = field(default_factory=dict)
    syncs: dict[str, Sync] = field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> parts (+ about, origin)
    loaded: bool = False
    failed: dict[str, str] = field(default_factory=dict)  # entry point -> error


_R = _Registry()
_CURRENT_ORIGIN = ["monta"]


def add_exchange(name: str, **kw: Any) -> Exchange:
    """Register exchange ``name``: what it carries is ``monta.exchanges`` (ValueError says what to change)."""
    _check_part_name(name, "exchange")
    model_as = kw.get("model_as")
    priced = [n for n, x in _R.exchanges.items() if x.price is not None]
    if model_as is not None and model_as not in priced:
        raise ValueError(f"exchange {name!r}: model_as={model_as!r} must name a priced exchange: {', '.join(priced)}")
    e = make_exchange(name, _CURRENT_ORIGIN[0], **kw)
    _R.exchanges[name] = e
    return e


def add_schedule(name: str, **kw: Any) -> Schedule:
    _check_part_name(name, "schedule")
    kw["needs"] = frozenset(kw.get("needs", ()))
    s = Schedule(name, origin=_CURRENT_ORIGIN[0], **kw)
    _R.schedules[name] = s
    return s


def add_sync(name: str, **kw: Any) -> Sync:
    _check_part_name(name, "sync")
    s = Sync(name, origin=_CURRENT_ORIGIN[0], **kw)
    _R.syncs[name] = s
    return s


def add_variant(
    name: str,
    *,
    exchange: str = "deepspeed",
    schedule: str = "deepspeed",
    sync: str = "after-backward",
    chunks: int | None = None,
    about: str = "",
) -> None:
    """Register a name for a composition (its parts are checked when it is looked up, so a plugin may
    name a schedule that another plugin registers)."""
    if not name or any(c in name for c in ",=/ \t") or name != name.strip():
        raise ValueError(f"variant name {name!r}: no ',', '=', '/' or blanks (those belong to compositions)")
    _R.variants[name] = {
        "exchange": exchange,
        "schedule": schedule,
        "sync": sync,
        "chunks": chunks,
        "about": about,
        "origin": _CURRENT_ORIGIN[0],
    }


def _check_part_name(name: str, what: str) -> None:
    if not name or any(c in name for c in ",=/ \t"):
        raise ValueError(f"{what} name {name!r}: no ',', '=', '/' or blanks")


# The core's schedule, syncs and variant names (its exchanges: CORE_ENTRY_POINT, at the first lookup).
add_schedule("deepspeed", about="DeepSpeed's MoE forward; the exchange runs whole")
add_sync("after-backward", about="DeepSpeed's gradient reduction after backward")
add_sync(
    "priority",
    priority=True,
    chunk_bytes=None,
    about="gradient AllReduce on a background thread, yielding to any AllToAll (MoNTA's conflict handling)",
)
add_variant("deepspeed", exchange="deepspeed", about="stock DeepSpeed: drop -> AllToAll(EP) -> AllGather(TP)")
add_variant("legacy", exchange="legacy", about="DeepSpeed < 0.14.5: every TP rank AllToAlls its full buffer")
add_variant(
    "monta", exchange="monta", about="capacity slice chunked, AllToAll of chunk i+1 overlapping AllGather of chunk i"
)
add_variant(
    "monta+priority", exchange="monta", sync="priority", about="monta with AllToAll priority over gradient sync"
)


def load_plugins(force: bool = False) -> None:
    """Run every ``monta.variants`` entry point once (``force``: again)."""
    if _R.loaded and not force:
        return
    _R.loaded = True
    from importlib.metadata import EntryPoint, entry_points

    core = EntryPoint("monta", CORE_ENTRY_POINT, ENTRY_POINT_GROUP)
    plugins = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name != "baselines", e.name))
    for ep in (core, *plugins):
        key = f"{ep.name} = {ep.value}"
        _CURRENT_ORIGIN[0] = ep.name
        try:
            obj = ep.load()
            if callable(obj):
                obj(sys.modules[__name__])
            _R.failed.pop(key, None)
        except Exception as e:  # a broken plugin is named, never silently dropped
            _R.failed[key] = f"{type(e).__name__}: {e}"
            warnings.warn(f"monta variant plugin {key!r} failed to load: {e}", RuntimeWarning, stacklevel=2)
        finally:
            _CURRENT_ORIGIN[0] = "monta"


def _failed_note() -> str:
    if not _R.failed:
        return ""
    return "; plugins that failed to load: " + "; ".join(f"{k} ({v})" for k, v in _R.failed.items())


def names() -> list[str]:
    """Registered variant names, in registration order (the core's, then each plugin's)."""
    load_plugins()
    return list(_R.variants)


def exchanges() -> dict[str, Exchange]:
    load_plugins()
    return dict(_R.exchanges)


def exchange(name: str) -> Exchange:
    """The exchange ``name`` (core or plugin); ValueError naming the choices otherwise."""
    load_plugins()
    if name not in _R.exchanges:
        raise ValueError(f"unknown exchange {name!r}; choose one of {', '.join(_R.exchanges)}{_failed_note()}")
    return _R.exchanges[name]


def is_chunked(name: str) -> bool:
    """Whether ``name`` is a registered exchange that pipelines its capacity slice in chunks (takes the
    run's chunk count): what tables and the model ask instead of comparing names. False for a name the
    registry does not hold (a record's variant that is a schedule's, say)."""
    load_plugins()
    e = _R.exchanges.get(name)
    return e is not None and e.chunked


def chunked_exchanges() -> tuple[str, ...]:
    """The registered exchanges that take the run's chunk count, in registration order (the core's first)."""
    load_plugins()
    return tuple(n for n, e in _R.exchanges.items() if e.chunked)


def schedules() -> dict[str, Schedule]:
    load_plugins()
    return dict(_R.schedules)


def syncs() -> dict[str, Sync]:
    load_plugins()
    return dict(_R.syncs)


def _build(name: str, parts: dict[str, Any], about: str = "", origin: str = "monta") -> Variant:
    p = {**DEFAULT_PARTS, **{k: v for k, v in parts.items() if v is not None}}
    if p["exchange"] not in _R.exchanges:
        raise ValueError(
            f"variant {name!r}: unknown exchange {p['exchange']!r}; choose from "
            f"{', '.join(_R.exchanges)}{_failed_note()}"
        )
    if p["schedule"] not in _R.schedules:
        raise ValueError(
            f"variant {name!r}: unknown schedule {p['schedule']!r}; choose from "
            f"{', '.join(_R.schedules)}{_failed_note()}"
        )
    if p["sync"] not in _R.syncs:
        raise ValueError(
            f"variant {name!r}: unknown sync {p['sync']!r}; choose from {', '.join(_R.syncs)}{_failed_note()}"
        )
    ex, sched = _R.exchanges[p["exchange"]], _R.schedules[p["schedule"]]
    missing = sorted(sched.needs - ex.capabilities)
    if missing:
        fits = [n for n, s in _R.schedules.items() if s.needs <= ex.capabilities]
        raise ValueError(
            f"variant {name!r}: schedule {sched.name!r} needs {', '.join(missing)}, which exchange {ex.name!r} "
            f"does not offer; use schedule={'|'.join(fits)} with it (or an exchange that offers it)"
        )
    return Variant(name, p["exchange"], sched, _R.syncs[p["sync"]], p.get("chunks"), about, origin)


def get(name: str) -> Variant:
    """The variant of a registered name or of a composition; ValueError naming the choices otherwise."""
    load_plugins()
    name = name.strip()
    if name in _R.variants:
        meta = _R.variants[name]
        return _build(name, {k: meta[k] for k in KEYS}, meta["about"], meta["origin"])
    if is_composed(name):
        return _build(name, parse_parts(name), origin="composed")
    raise ValueError(
        f"unknown variant {name!r}; choose from {', '.join(_R.variants)}, or compose one as "
        f"exchange={'|'.join(_R.exchanges)},schedule={'|'.join(_R.schedules)},"
        f"sync={'|'.join(_R.syncs)}{_failed_note()}"
    )


def check(name: str) -> str:
    """``name`` if it names a variant (registered or composed), else ValueError."""
    get(name)
    return name


def parse_list(spec: str | list[str]) -> list[str]:
    """``split_list`` and every name checked (ValueError names the first bad one); duplicates rejected."""
    got = split_list(spec)
    if not got:
        raise ValueError("no variant given")
    for v in got:
        check(v)
    dup = sorted({v for v in got if got.count(v) > 1})
    if dup:
        raise ValueError(f"variant {', '.join(dup)} given twice")
    return got


def describe(name: str) -> dict[str, Any]:
    """What a variant is, for the resolved configs and the analysis: its parts and where they come from."""
    v = get(name)
    return {
        "variant": name,
        **v.parts,
        "schedule_about": v.schedule.about,
        "sync_about": v.sync.about,
        "about": v.about or f"{v.exchange} exchange, {v.schedule.name} schedule, {v.sync.name} gradient sync",
        "origin": v.origin,
    }


def label(name: str) -> str:
    """A short label for tables and figures: the registered name, or the registered name of the same
    parts, or ``exchange+schedule+sync`` with the defaults left out."""
    try:
        v = get(name)
    except ValueError:
        return name
    if not is_composed(name):
        return name
    for n, meta in _R.variants.items():
        if (
            all(meta.get(k) == v.parts.get(k) for k in ("exchange", "schedule", "sync"))
            and meta.get("chunks") == v.chunks
        ):
            return n
    bits = [v.exchange] + [x for x, d in ((v.schedule.name, "deepspeed"), (v.sync.name, "after-backward")) if x != d]
    return "+".join(bits) + (f" x{v.chunks}" if v.chunks is not None else "")


def order_key(name: str) -> tuple[int, str]:
    """Sort key: registration order, compositions after."""
    ns = names()
    return (ns.index(name), name) if name in ns else (len(ns), name)


def register(sub) -> None:
    """``monta variants``: the registry as a table (what each name is made of, where it comes from)."""
    p = sub.add_parser("variants", help="list the training-step variants and their parts (plugins included)")
    p.add_argument("name", nargs="?", help="a variant name or composition to explain")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    if args.name:
        for k, v in describe(args.name).items():
            print(f"{k:>14}: {v}")
        return 0
    load_plugins()
    rows = [(n, get(n)) for n in names()]
    w = max(len(n) for n, _ in rows)
    we = max(len("exchange"), *(len(v.exchange) for _, v in rows))
    print(f"{'variant':>{w}}  {'exchange':<{we}} {'schedule':<10} {'sync':<15} origin")
    for n, v in rows:
        print(f"{n:>{w}}  {v.exchange:<{we}} {v.schedule.name:<10} {v.sync.name:<15} {v.origin}")
    print("\nexchanges: " + ", ".join(f"{e.name} ({e.origin})" for e in _R.exchanges.values()))
    print("schedules: " + ", ".join(f"{s.name} ({s.origin})" for s in _R.schedules.values()))
    print("syncs: " + ", ".join(f"{s.name} ({s.origin})" for s in _R.syncs.values()))
    print("compose any: exchange=E,schedule=S,sync=Y[,chunks=N] (e.g. exchange=monta,schedule=lancet,sync=priority)")
    if _R.failed:
        print(_failed_note().lstrip("; "))
    return 0
