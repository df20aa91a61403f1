"""``monta bench alltoall``: the TP AllToAll sweep on an emulated cluster (or under torchrun/SLURM).

Parses and validates every flag up front, then launches one worker per rank and logs the records.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from monta import variants as registry
from monta.bench.alltoall.config import ADAPTIVE_DEFAULTS, AlltoallAids, AlltoallConfig
from monta.bench.alltoall.launch import default_timeout, expected_seconds, stall_seconds  # noqa: F401
from monta.cli_args import deprecated_alias
from monta.dtypes import DTYPE_BYTES, DTYPES
from monta.parallel import ParallelLayout
from monta.runconfig import add_flag


def add_arguments(p: argparse.ArgumentParser) -> None:
    from monta.bench.common_args import add_cluster_argument, add_shared_arguments

    add_shared_arguments(p, launchers=("emulate", "env"))
    _add_sweep_arguments(p)
    add_cluster_argument(p, "default: $MONTA_CLUSTER, else a800")
    _add_repetition_arguments(p)
    _add_run_arguments(p)
    from monta.bench.pipeline_preset import add_preset_argument

    add_preset_argument(p, "2 x 4 sweep (sizes, chunks, chunk floor, repetition, clock, network)")


def _add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """What is swept: the layout, the buffer, the exchanges and their routing (defaults and help: the
    AlltoallConfig fields')."""
    config = AlltoallConfig  # the fields the flags read their defaults and help from
    add_flag(p, config, "tp", type=int)
    add_flag(p, config, "ep", type=int)
    add_flag(p, config, "sizes")
    add_flag(
        p,
        config,
        "variants",
        "--exchanges",
        dest="exchanges",
        extra=f": {', '.join(registry.CORE)}, or one a plugin registered (`monta variants` lists them)",
    )
    # the flag's name before the exchanges were told apart from the step's variants: read, with a warning
    p.add_argument("--variants", dest="exchanges", action=deprecated_alias("--exchanges"), help=argparse.SUPPRESS)
    add_flag(p, config, "chunks")
    add_flag(p, config, "min_chunk", metavar="BYTES")
    add_flag(p, config, "dtype", choices=DTYPES)
    add_flag(p, config, "experts", type=int)
    add_flag(p, config, "hidden", type=int)
    add_flag(p, config, "topk", type=int)
    add_flag(p, config, "capacity_factor", type=float, metavar="CF")
    add_flag(p, config, "routing")
    add_flag(p, config, "mode", choices=("dispatch", "layer"))


def _add_repetition_arguments(p: argparse.ArgumentParser) -> None:
    """How often each size is timed: --iters exactly, or --adaptive's stopping rule."""
    add_flag(p, AlltoallConfig, "warmup", type=int)
    add_flag(p, AlltoallConfig, "iters", type=int)
    add_flag(p, AlltoallConfig, "adaptive", action="store_true")
    # None = not given: the three knobs below belong to --adaptive (ADAPTIVE_DEFAULTS when it is on).
    a = ADAPTIVE_DEFAULTS
    p.add_argument(
        "--max-iters",
        type=int,
        default=None,
        help=f"with --adaptive: most iterations per size (default {a['max_iters']})",
    )
    p.add_argument(
        "--target-ci",
        type=float,
        default=None,
        help="with --adaptive: stop once every paired ratio (legacy/monta, deepspeed/monta) has a 95%% CI "
        f"narrower than this share of its value (default {a['target_ci']:g} = +-{50 * a['target_ci']:g}%%), judged "
        "from 10 iterations on (fewer give too narrow a bootstrap CI); 0 = exactly --iters iterations",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="with --adaptive: time budget per size for the extra iterations, seconds "
        f"(default {a['budget_s']:g}; 0 = none)",
    )


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How the exchange runs and what else the run does (check, test aids, time limit, records' name)."""
    add_flag(p, AlltoallConfig, "device", choices=("auto", "cpu", "cuda"))
    add_flag(p, AlltoallConfig, "transport", choices=("duplex", "native"))
    p.add_argument(
        "--dilation",
        default="auto",
        metavar="auto|F",
        help="the emulated clock: auto (default; with --adaptive) reruns each CPU-bound size alone with every link "
        "rate halved, up to x4 or --budget-s, until its ranks stop waiting for a core; F: every link rate / F from the "
        "start, no reruns (reproducible timing). Records carry params.dilation (docs/testbed.md)",
    )
    add_flag(p, AlltoallAids, "inject_slowdown", metavar="VARIANT:FRACTION")
    add_flag(p, AlltoallAids, "check", action="store_true")
    p.add_argument("--no-components", action="store_true", help="skip the a2a-alone / ag-alone rows")
    add_flag(p, AlltoallConfig, "experiment")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds before the run is abandoned (default: scaled to the expected run time, see "
        "expected_seconds; a rank that stops making progress ends the run much earlier, named)",
    )
    p.add_argument("--inject-fault", action="store_true", help=argparse.SUPPRESS)  # test-only: corrupt one chunk


def _repetition(args: argparse.Namespace) -> dict:
    """The repetition knobs of the worker config: --iters exactly, or --adaptive's (a knob it owns
    given without it is a usage error rather than silently ignored)."""
    from monta.validate import UsageError

    given = {k: getattr(args, k) for k in ADAPTIVE_DEFAULTS if getattr(args, k) is not None}
    if not args.adaptive:
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise UsageError(
                f"{flags} only apply with --adaptive; without it, --iters is the exact number of "
                f"timed iterations per size (here {args.iters})"
            )
        return {"adaptive": False, "max_iters": args.iters, "target_ci": 0.0, "budget_s": 0.0}
    return {"adaptive": True, **ADAPTIVE_DEFAULTS, **given}


# Buffers one rank holds per size (input, output, the chunk and gather scratch, the check's copy).
_BUFFERS_PER_RANK = 6


def _check_memory(sizes: list[int], ranks_here: int) -> None:
    """All emulated ranks share this machine's memory: refuse a sweep that cannot fit before it starts."""
    try:
        with open("/proc/meminfo") as f:
            total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        return
    need = _BUFFERS_PER_RANK * max(sizes) * ranks_here
    if need > total:
        from monta.units import format_size
        from monta.validate import UsageError

        raise UsageError(
            f"--sizes: the largest size {format_size(max(sizes))}B needs about {format_size(need)}B on "
            f"{ranks_here} emulated ranks, more than this machine's {format_size(total)}B of memory; "
            "use smaller sizes"
        )


def build_config(args: argparse.Namespace) -> AlltoallConfig:
    """Validate the flags into the worker config (UsageError names the flag, its value and what is allowed).

    Every check here runs before any rank or emulated network starts (monta.validate holds the
    semantic ones, shared with the pipeline's config validation)."""
    from monta.bench.common_args import check_out, network, resolve_backend
    from monta.bench.routes import routing_arg
    from monta.validate import UsageError, number, slowdown

    v = _sweep(args)
    rep = _repetition(args)
    tp, sizes, variants, experts = v["tp"], v["sizes"], v["variants"], v["experts"]
    layout = ParallelLayout(args.nodes, args.gpus_per_node, tp, v["ep"])
    elsize = DTYPE_BYTES[args.dtype]
    chunks = _chunks(args, v, layout, elsize)
    _check_routing(args.topk, experts, args.hidden, elsize, sizes, tp, variants)
    cf = number(args.capacity_factor, "capacity-factor", 0, 64, lo_open=True)
    min_chunk = _min_chunk(args.min_chunk)
    if rep["max_iters"] < args.iters:
        raise UsageError(f"--max-iters {rep['max_iters']} is below --iters {args.iters}; use --max-iters >= --iters")
    if args.timeout is not None:
        number(args.timeout, "timeout", 1, 30 * 86400, lo_open=False, unit="seconds")
    if args.launcher == "emulate":
        _check_memory(sizes, args.nodes * args.gpus_per_node)
    check_out(args)
    aids = AlltoallAids(
        check=bool(args.check or args.inject_fault),
        inject_fault=args.inject_fault,
        inject_slowdown=slowdown(args.inject_slowdown, variants),
    )
    topo = network(args)
    backend = resolve_backend(args.backend, args.launcher)
    return AlltoallConfig(
        **{k: getattr(args, k) for k in ("nodes", "gpus_per_node", "dtype", "hidden", "warmup", "iters", "topk")},
        **{k: v[k] for k in ("tp", "ep", "sizes", "variants", "experts")},
        **{k: getattr(args, k) for k in ("transport", "append", "experiment", "mode")},
        **rep,
        chunks=chunks,
        components=not args.no_components,
        out=str(Path(args.out).resolve()) if args.out else None,
        backend=backend,
        topology={**topo.to_dict(), "description": topo.describe()},
        chunks_arg=args.chunks,
        routing=routing_arg(args.routing, sizes, experts, args.hidden, elsize, args.topk, layout, cf),
        capacity_factor=cf,
        min_chunk=min_chunk,
        device=_device(args.device, backend, args.launcher),
        aids=aids,
    )


def _sweep(args: argparse.Namespace) -> dict:
    """monta.validate's checks of the sweep: every given value range-checked first (then, in _repetition,
    whether it belongs to --adaptive); the resolved tp, ep, sizes, variants, chunks and experts."""
    from monta.validate import alltoall_sweep

    knobs = {k: ADAPTIVE_DEFAULTS[k] if getattr(args, k) is None else getattr(args, k) for k in ADAPTIVE_DEFAULTS}
    names = ("nodes", "gpus_per_node", "tp", "ep", "chunks", "dtype", "experts", "hidden", "warmup", "iters")
    given = {k: getattr(args, k) for k in names}
    return alltoall_sweep(
        sizes_spec=args.sizes, variants=args.exchanges, keys={"variants": "exchanges"}, **given, **knobs
    )


def _chunks(args: argparse.Namespace, v: dict, layout: ParallelLayout, elsize: int) -> list[int]:
    """The chunk counts: as given, or --chunks auto's, the performance model's count per size (on --cluster)."""
    from monta.chunking import Auto, capacity_slice

    if not isinstance(v["chunks"], Auto):
        return v["chunks"]
    from monta.perfmodel.network.chunks import model_chooser

    choose = model_chooser(args.cluster)
    row = v["experts"] * args.hidden * elsize  # bytes of one capacity slot over all experts
    return sorted({v["chunks"].resolve(s, layout, capacity_slice(s // row, v["tp"]), choose) for s in v["sizes"]})


def _device(device: str, backend: str, launcher: str) -> str:
    """--device checked against the backend: NCCL moves CUDA tensors only; the emulated ranks have no GPU."""
    from monta.validate import UsageError

    if device == "cpu" and backend == "nccl":
        raise UsageError("--device cpu with --backend nccl: NCCL moves CUDA tensors only; use --backend gloo")
    if device == "cuda" and launcher == "emulate":
        raise UsageError("--device cuda: the emulated ranks are CPU processes; use --launcher env under torchrun")
    return device


def _min_chunk(text: str) -> int:
    """--min-chunk as bytes (UsageError naming what to give)."""
    from monta.units import parse_size
    from monta.validate import UsageError

    try:
        value = parse_size(text)
    except (TypeError, ValueError):
        value = -1
    if value < 0:
        raise UsageError(f"--min-chunk {text}: give a byte count such as 512K or 1M (0: run every chunk count)")
    return value


def _check_routing(k, experts, hidden, elsize, sizes, tp, variants) -> None:
    """--topk fits every size: E x C routes make whole tokens, split over TP for the exchanges that split them."""
    from monta.validate import UsageError

    if not isinstance(k, int) or not 1 <= k <= experts:
        raise UsageError(f"--topk {k}: must be between 1 and the experts ({experts})")
    split = [v for v in variants if registry.exchange(v).splits_tokens]
    for s in sizes:
        routes = s // (hidden * elsize)  # E x C
        if routes % k:
            raise UsageError(f"--topk {k}: size {s} B holds {routes} routes, not a whole number of top-{k} tokens")
        if split and (routes // k) % tp:
            raise UsageError(
                f"--topk {k}: size {s} B holds {routes // k} tokens, which {', '.join(split)} cannot split over "
                f"TP {tp}; use sizes whose token count TP divides"
            )


def _preset(args: argparse.Namespace) -> str | None:
    """Apply ``--preset``; the line saying which settings differ from the pipeline's when none is given."""
    from monta.bench.pipeline_preset import preset

    return preset(args, "alltoall")


def main(args: argparse.Namespace) -> int:
    from monta.bench import dilation
    from monta.bench.alltoall.launch import fixed_dilation, launch_once, rerun_alone, stated
    from monta.bench.common_args import network_line

    preset_line = _preset(args)
    cfg = build_config(args)
    fixed, cfg = fixed_dilation(args, cfg)
    args.timeout_given = args.timeout
    if args.timeout is None:
        args.timeout = default_timeout(cfg)
    if os.environ.get("RANK", "0") == "0":  # the first line: what runs where (once, not per torchrun rank)
        print(network_line("alltoall", args, cfg.topology["description"]), flush=True)
        if preset_line:
            print(preset_line, flush=True)
    if args.launcher == "env":  # we are one rank of torchrun/srun
        from monta.bench.alltoall import worker

        with tempfile.NamedTemporaryFile("w", prefix="monta-a2a-", suffix=".json") as f:
            f.write(cfg.to_json())
            f.flush()
            return worker.main(f.name)
    records = launch_once(cfg, args, args.timeout)
    if records is None:
        return 1
    if fixed is not None:
        records = dilation.annotate(records, fixed, f"fixed by --dilation {args.dilation}")
    else:  # auto: a CPU-bound size again, alone, on a slower clock (hand-set links cannot be slowed)
        # Without --adaptive a run is exactly --iters, with no time budget for reruns: it says what it would need.
        why_not = (
            "" if cfg.adaptive else "without --adaptive a run is exactly --iters (give --adaptive or --dilation F)"
        )
        if not (cfg.topology.get("cluster") and cfg.topology.get("inter_gbps")):
            why_not = "unshaped or hand-set links"
        records = dilation.adapt(records, lambda s, f: rerun_alone(cfg, args, s, f), cfg.budget_s, why_not=why_not)
    if cfg.out:
        from monta.results import write_records

        write_records(cfg.out, stated(records, cfg), append=cfg.append)  # atomic: all of them or none
        print(f"# wrote {len(records)} records to {cfg.out}")
        if not args.no_wandb:
            from monta.results import read_records
            from monta.tracking import log_records

            log_records(read_records(cfg.out), group=cfg.experiment, config=cfg.to_dict(), job_type="alltoall")
    return 0
