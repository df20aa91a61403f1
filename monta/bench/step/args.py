"""The flags of ``monta bench step`` and their checks: every value is validated, and the run's StepConfig
(what every rank reads) is built, before any rank starts."""

from __future__ import annotations

import argparse
import os

from monta import variants as registry
from monta.bench.step.config import StepConfig
from monta.chunking import Auto, parse_chunks
from monta.model.config import PRESETS, resolve_config
from monta.parallel import ParallelLayout
from monta.runconfig import add_flag

MAX_CONTENTION = 10.0  # overlapped compute 11x slower: far past any GPU's
_OVERRIDES = ("layers", "hidden", "heads", "kv_heads", "ffn", "experts", "topk", "seq", "micro_batch")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from monta.bench.common_args import add_cluster_argument, add_shared_arguments

    add_shared_arguments(p, launchers=("emulate", "local", "env"))
    # `--emulate` was this benchmark's switch before --launcher emulate (the default) meant it: still read
    p.add_argument("--emulate", dest="launcher", action="store_const", const="emulate", help=argparse.SUPPRESS)
    add_flag(p, StepConfig, "tp", type=int)
    _add_model_arguments(p)
    add_cluster_argument(
        p,
        "default: $MONTA_CLUSTER; on the emulated cluster required, an emulator:PROFILE.json from "
        "`monta emulate calibrate` with the same topology",
    )
    _add_run_arguments(p)
    from monta.bench.pipeline_preset import add_preset_argument

    add_preset_argument(p, "2 x 4 step (model, variants, steps, routing, compute, network)")


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model and the variants: what one step computes (defaults and help: the StepConfig fields')."""
    add_flag(p, StepConfig, "model", choices=sorted(PRESETS))
    add_flag(p, StepConfig, "variants", default=None)  # None: every registered variant
    add_flag(p, StepConfig, "chunks")
    add_flag(p, StepConfig, "lancet_partitions", type=int)
    for flag in ("layers", "hidden", "heads", "kv-heads", "ffn", "experts", "topk", "seq", "micro-batch"):
        p.add_argument(f"--{flag}", type=int, default=None, help="model override (default: the preset's)")
    p.add_argument("--capacity-factor", type=float, default=None, help="model override (default: the preset's)")
    add_flag(p, StepConfig, "routing", metavar="SPEC")


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How the step runs: its compute, repetition, seed, optimizer and what is recorded."""
    add_flag(p, StepConfig, "compute", choices=("real", "modeled"))
    add_flag(p, StepConfig, "contention", type=float)
    for name in ("steps", "warmup", "seed"):
        add_flag(p, StepConfig, name, type=int)
    add_flag(p, StepConfig, "zero_stage", type=int, choices=(0, 1))
    add_flag(p, StepConfig, "peak_tflops", type=float)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before the run is abandoned")
    add_flag(p, StepConfig, "experiment")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)


def check_args(args: argparse.Namespace) -> list[str]:
    """Range checks of every flag (monta.validate), before any rank starts; returns the variants."""
    from monta import validate as V
    from monta.bench.common_args import check_out

    V.integer(args.nodes, "nodes", 1, V.MAX_NODES)
    V.integer(args.gpus_per_node, "gpus_per_node", 1, V.MAX_GPUS_PER_NODE)
    if args.tp is not None:
        V.integer(args.tp, "tp", 1, args.gpus_per_node)
    try:
        variants = registry.parse_list(registry.names() if args.variants is None else args.variants)
    except ValueError as e:
        raise ValueError(f"--variants: {e}") from None
    V.integer(args.steps, "steps", 1, V.MAX_ITERS)
    V.integer(args.warmup, "warmup", 0, V.MAX_ITERS)
    V.integer(args.seed, "seed", 0, 2**32 - 1)
    V.integer(args.lancet_partitions, "lancet_partitions", 1, V.MAX_CHUNKS)
    for flag in _OVERRIDES:
        if getattr(args, flag) is not None:
            V.integer(getattr(args, flag), flag, 1, 2**24)
    if args.capacity_factor is not None:
        V.number(args.capacity_factor, "capacity_factor", 0, 1000, lo_open=True)
    if args.peak_tflops is not None:
        V.number(args.peak_tflops, "peak_tflops", 0, 1e6, lo_open=True)
    V.number(args.timeout, "timeout", 1, 30 * 86400, unit="seconds")
    V.number(args.contention, "contention", 0, MAX_CONTENTION)
    if args.contention and args.compute != "modeled":
        raise ValueError(
            f"--contention {args.contention:g} stretches compute on the emulated clock: add --compute modeled "
            "(and --launcher emulate), or leave --contention at 0"
        )
    if args.compute == "modeled" and args.launcher != "emulate":
        raise ValueError(
            f"--compute modeled runs on the emulated cluster, not --launcher {args.launcher}: use --launcher "
            "emulate (and a cluster preset topology, e.g. --topology a800-4nic), or --compute real"
        )
    check_out(args)
    return variants


def step_config(args: argparse.Namespace) -> StepConfig:
    """The run's config, every rank's copy of the flags (after check_args and the model's own checks)."""
    variants = check_args(args)
    try:
        chunks = parse_chunks(args.chunks)
    except ValueError as e:
        raise ValueError(f"--{e}") from None  # --chunks='four': give an integer >= 1 or 'auto'
    cluster = args.cluster
    if isinstance(chunks, Auto):
        cluster = cluster or os.environ.get("MONTA_CLUSTER")
        if cluster is None and args.launcher == "emulate":
            raise ValueError(
                "--chunks auto on the emulated cluster needs --cluster emulator:PROFILE.json; write one "
                "with `monta emulate calibrate --nodes N --gpus-per-node G <same topology flags> --out "
                "PROFILE.json`"
            )
    tp = args.tp if args.tp is not None else args.gpus_per_node
    layout = ParallelLayout(args.nodes, args.gpus_per_node, tp=tp, ep=args.nodes)
    cfg = resolve_config(args.model, **{k: getattr(args, k) for k in (*_OVERRIDES, "capacity_factor")})
    cfg.check_layout(layout.tp, layout.ep)
    for v in variants:  # a schedule's own model requirements (lancet: top-2), before any rank starts
        check = registry.get(v).schedule.check_model
        if check is not None:
            try:
                check(cfg)
            except ValueError as e:
                raise ValueError(f"variant {v}: {e}") from None
    routing = check_routing(args.routing, cfg, layout)
    for v in variants if routing else ():
        schedule = registry.get(v).schedule
        if schedule.own_gate:  # it would run its own gate's choice, not the workload's
            raise ValueError(
                f"variant {v}: the {schedule.name} schedule gates with its own router, which --routing does not "
                "replace; run it without --routing, or compare the other variants under it"
            )
    return StepConfig(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        tp=tp,
        model=args.model,
        overrides=cfg.to_dict(),
        variants=variants,
        chunks=chunks.as_json(),
        cluster=cluster,
        **{k: getattr(args, k) for k in ("lancet_partitions", "steps", "warmup", "seed", "zero_stage", "out")},
        append=bool(args.append),
        **{k: getattr(args, k) for k in ("backend", "compute", "experiment", "peak_tflops")},
        contention=float(args.contention),
        routing=routing,
    )


def check_routing(text: str | None, cfg, layout: ParallelLayout) -> str | None:
    """``--routing``'s spec, built once at the step's shape (the EP group's members, each gate's tokens per
    micro-batch, the model's experts and top-k) so a spec it cannot hold is one line before any rank
    starts; None: the gate's own choice."""
    if text is None:
        return None
    from monta.bench.step.router import step_routing

    try:
        step_routing(text, cfg, layout)
    except ValueError as e:
        raise ValueError(f"--routing: {e}") from None
    return text.strip()
