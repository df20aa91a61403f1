"""``monta bench alltoall``: the TP AllToAll sweep on an emulated cluster (or under torchrun/SLURM).

Parses and validates every flag up front, then launches one worker per rank and logs the records.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from monta.bench.alltoall_config import AlltoallConfig
from monta.bench.alltoall_launch import default_timeout, expected_seconds, stall_seconds  # noqa: F401
from monta.comm import EXCHANGES
from monta.dtypes import DTYPE_BYTES, DTYPES
from monta.parallel import ParallelLayout


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
    """What is swept: the layout, the buffer, the exchanges and their routing."""
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel size (default: a whole node)")
    p.add_argument("--ep", type=int, default=None, help="expert-parallel size (default: the DP degree)")
    p.add_argument(
        "--sizes", default="1M:16M:2", help="per-rank dispatch buffer bytes: min:max:factor or a list (K/M/G suffixes)"
    )
    p.add_argument(
        "--variants",
        default="legacy,deepspeed,monta",
        help=f"comma list of exchanges: {', '.join(EXCHANGES)}, or one a plugin registered "
        "(`monta variants` lists them)",
    )
    p.add_argument("--chunks", default="2,4", help="monta chunk counts: comma list of integers, or 'auto'")
    p.add_argument(
        "--min-chunk",
        default="0",
        metavar="BYTES",
        help="run a chunk count at a size only where each chunk holds at least BYTES of a rank's buffer (e.g. 1M): "
        "smaller chunks' host work, not the links, sets their time on the emulator; records say what was left "
        "out (default 0: every count; docs/testbed.md)",
    )
    p.add_argument("--dtype", default="float32", choices=DTYPES, help="element type of the buffer")
    p.add_argument("--experts", type=int, default=None, help="experts E in the [E, C, M] buffer (default: EP)")
    p.add_argument("--hidden", type=int, default=1024, help="model dim M of the buffer")
    p.add_argument(
        "--topk",
        type=int,
        default=1,
        help="routes per token: the buffer holds E x C / (topk x capacity factor) tokens, routed top-k",
    )
    p.add_argument(
        "--capacity-factor",
        type=float,
        default=1.0,
        metavar="CF",
        help="the buffer is DeepSpeed's capacity at CF: 1 (default) fills it at W0; 1.25 (GShard, Switch) "
        "puts 1/1.25 as many tokens in it, room a skewed routing fills before it drops",
    )
    p.add_argument(
        "--routing",
        default="W0",
        help="routing workload: W0 (balanced, default) .. W7, lognormal:maxvio=V, zipf:s=A (docs/routing.md)",
    )
    p.add_argument(
        "--mode",
        choices=("dispatch", "layer"),
        default="dispatch",
        help="what is timed: dispatch (the exchange's dispatch alone, default) or layer (the MoE layer's "
        "forward+backward around it: dispatch, a per-expert FFN of width --hidden, combine; docs/routing.md)",
    )


def _add_repetition_arguments(p: argparse.ArgumentParser) -> None:
    """How often each size is timed: --iters exactly, or --adaptive's stopping rule."""
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations per size")
    p.add_argument(
        "--iters",
        type=int,
        default=5,
        help="timed iterations per size (variants interleaved in each), exactly; with --adaptive the minimum",
    )
    # None = not given: the three knobs below belong to --adaptive (ADAPTIVE_DEFAULTS when it is on).
    p.add_argument(
        "--adaptive",
        action="store_true",
        help="adaptive repetition: after --iters, go on while a paired ratio's CI is wider than "
        "--target-ci, up to --max-iters or --budget-s",
    )
    p.add_argument("--max-iters", type=int, default=None, help="with --adaptive: most iterations per size (default 40)")
    p.add_argument(
        "--target-ci",
        type=float,
        default=None,
        help="with --adaptive: stop once every paired ratio (legacy/monta, deepspeed/monta) has a 95%% CI "
        "narrower than this share of its value (default 0.04 = +-2%%), judged from 10 iterations "
        "on (fewer give too narrow a bootstrap CI); 0 = exactly --iters iterations",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="with --adaptive: time budget per size for the extra iterations, seconds (default 180; 0 = none)",
    )


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How the exchange runs and what else the run does (check, test aids, time limit, records' name)."""
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where each rank's buffers live: auto (CUDA with nccl, else the CPU); cuda with gloo puts several "
        "ranks on one GPU (cuda:LOCAL_RANK mod the GPUs: gloo over CUDA tensors, as tools/gpu_check.py runs it)",
    )
    p.add_argument(
        "--transport",
        choices=("duplex", "native"),
        default=None,
        help="gloo transport of the exchange: duplex (default: one TCP connection per direction) or "
        "native (gloo's own collectives: both directions share a connection and serialize)",
    )
    p.add_argument(
        "--dilation",
        default="auto",
        metavar="auto|F",
        help="the emulated clock: auto (default; with --adaptive) reruns each CPU-bound size alone with every link "
        "rate halved, up to x4 or --budget-s, until its ranks stop waiting for a core; F: every link rate / F from the "
        "start, no reruns (reproducible timing). Records carry params.dilation (docs/testbed.md)",
    )
    p.add_argument(
        "--inject-slowdown",
        default=None,
        metavar="VARIANT:FRACTION",
        help="TEST AID for the regression gate: slow VARIANT by FRACTION (e.g. monta:0.10) with a measured "
        "delay after each call; records carry injected_slowdown (default: none)",
    )
    p.add_argument("--check", action="store_true", help="verify every variant on fresh data after timing")
    p.add_argument("--no-components", action="store_true", help="skip the a2a-alone / ag-alone rows")
    p.add_argument("--experiment", default="alltoall", help="experiment name stored in the records")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds before the run is abandoned (default: scaled to the expected run time, see "
        "expected_seconds; a rank that stops making progress ends the run much earlier, named)",
    )
    p.add_argument("--inject-fault", action="store_true", help=argparse.SUPPRESS)  # test-only: corrupt one chunk


# --adaptive's knobs when not given: up to 40 iterations per size, until every paired ratio's 95% CI
# is within 4% of its value, for at most 180 s of extra iterations per size.
ADAPTIVE_DEFAULTS = {"max_iters": 40, "target_ci": 0.04, "budget_s": 180.0}


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


def build_config(args: argparse.Namespace) -> AlltoallConfig:  # size: one check per flag, before any rank starts
    """Validate the flags into the worker config (UsageError names the flag, its value and what is allowed).

    Every check here runs before any rank or emulated network starts (monta.validate holds the
    semantic ones, shared with the pipeline's config validation)."""
    from monta.bench.common_args import check_out, network, resolve_backend
    from monta.bench.routes import routing_arg
    from monta.chunking import Auto, capacity_slice
    from monta.validate import UsageError, alltoall_sweep, number, slowdown

    # Every given value is range-checked first (alltoall_sweep), then whether it belongs to --adaptive.
    knobs = {k: ADAPTIVE_DEFAULTS[k] if getattr(args, k) is None else getattr(args, k) for k in ADAPTIVE_DEFAULTS}
    v = alltoall_sweep(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        tp=args.tp,
        ep=args.ep,
        sizes_spec=args.sizes,
        variants=args.variants,
        chunks=args.chunks,
        dtype=args.dtype,
        experts=args.experts,
        hidden=args.hidden,
        warmup=args.warmup,
        iters=args.iters,
        **knobs,
    )
    rep = _repetition(args)
    tp, ep, sizes, variants, experts = v["tp"], v["ep"], v["sizes"], v["variants"], v["experts"]
    layout = ParallelLayout(args.nodes, args.gpus_per_node, tp, ep)
    elsize = DTYPE_BYTES[args.dtype]
    if isinstance(v["chunks"], Auto):  # the performance model's count per size (on --cluster)
        from monta.perfmodel.network.chunks import model_chooser

        choose = model_chooser(args.cluster)
        row = experts * args.hidden * elsize  # bytes of one capacity slot over all experts
        chunks = sorted({v["chunks"].resolve(s, layout, capacity_slice(s // row, tp), choose) for s in sizes})
    else:
        chunks = v["chunks"]
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
    inject = slowdown(args.inject_slowdown, variants)
    topo = network(args)
    fields = {
        "nodes": args.nodes,
        "gpus_per_node": args.gpus_per_node,
        "tp": tp,
        "ep": ep,
        "sizes": sizes,
        "variants": variants,
        "chunks": chunks,
        "dtype": args.dtype,
        "experts": experts,
        "hidden": args.hidden,
        "warmup": args.warmup,
        "iters": args.iters,
        **rep,
        "transport": args.transport,
        "inject_slowdown": inject,
        "check": bool(args.check or args.inject_fault),
        "components": not args.no_components,
        "out": str(Path(args.out).resolve()) if args.out else None,
        "append": args.append,
        "experiment": args.experiment,
        "backend": resolve_backend(args.backend, args.launcher),
        "inject_fault": args.inject_fault,
        "topology": {**topo.to_dict(), "description": topo.describe()},
        "chunks_arg": args.chunks,
        "topk": args.topk,
        "routing": routing_arg(args.routing, sizes, experts, args.hidden, elsize, args.topk, layout, cf),
        "mode": args.mode,
        "capacity_factor": cf,
        "min_chunk": min_chunk,
        "device": _device(args.device, resolve_backend(args.backend, args.launcher), args.launcher),
    }
    return AlltoallConfig(**fields)


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
    from monta import variants as registry
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
    from monta.bench.alltoall_launch import fixed_dilation, launch_once, rerun_alone, stated
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
        from monta.bench import alltoall_worker

        with tempfile.NamedTemporaryFile("w", prefix="monta-a2a-", suffix=".json") as f:
            f.write(cfg.to_json())
            f.flush()
            return alltoall_worker.main(f.name)
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
