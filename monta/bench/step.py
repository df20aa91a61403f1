"""``monta bench step``: a training step of the MoE decoder on DeepSpeed for every variant
(``monta.variants``: the registered names, plugins' included, or compositions), interleaved step by step in one run.

The parent validates flags and launches ranks (emulated cluster, or local processes on
127.0.0.1); every rank runs ``python -m monta.bench.step --worker SPEC``; rank 0 writes records.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

from monta import variants as registry
from monta.chunking import Auto, capacity_slice, dispatch_bytes, expert_capacity, is_auto, parse_chunks
from monta.model.config import PRESETS, ModelConfig, resolve_config
from monta.parallel import ParallelLayout
from monta.variants import PARTITIONS

# record key -> breakdown_s key of train_step; names match monta_analysis.tables.PHASES (plus backward detail)
BREAKDOWN = {
    "attention": "attention",
    "gate": "gate",
    "dispatch": "dispatch_exchange",
    "experts": "experts",
    "combine": "combine_exchange",
    "forward": "forward_total",
    "backward": "backward",
    "dispatch_bwd": "dispatch_exchange_bwd",
    "combine_bwd": "combine_exchange_bwd",
    "grad_sync": "gradient_sync",
    "optimizer": "optimizer",
    "exposed_comm": "exposed_comm",
}

EXCHANGE_PHASES = ("dispatch", "combine", "dispatch_bwd", "combine_bwd")

# Default shaping of the emulated run (no --topology/--*-gbps flag): the 4-NIC A800 preset, its NIC at
# the default emulated rate and its loopback at the A800's per-GPU ratio rho (monta.emulate.topology).
DEFAULT_PRESET = "a800-4nic"
MAX_CONTENTION = 10.0  # overlapped compute 11x slower: far past any GPU's


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--gpus-per-node", type=int, default=4)
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel size (default: gpus per node)")
    p.add_argument("--model", default="moe-2x70b-mini", choices=sorted(PRESETS))
    p.add_argument(
        "--variants",
        default=None,
        help="comma list of registered variants (default: all of them; `monta variants` lists them) "
        "or compositions exchange=E,schedule=S,sync=Y[,chunks=N]",
    )
    p.add_argument(
        "--chunks",
        default="4",
        help="chunks of the monta exchange and pieces of the lina schedule: an integer, or 'auto' "
        "(the performance model's choice for the dispatch buffer on --cluster)",
    )
    p.add_argument(
        "--lancet-partitions",
        type=int,
        default=PARTITIONS,
        help=f"batch partitions of the lancet schedule (default {PARTITIONS}: the performance model's "
        "PARTITIONS, monta.variants, which the model reads too, so the run and the model's price agree)",
    )
    p.add_argument(
        "--cluster",
        default=None,
        help="performance-model cluster for --chunks auto: a preset (a800, ...) or "
        "emulator:PROFILE.json from `monta emulate calibrate` with the same topology "
        "(default: $MONTA_CLUSTER; required on the emulated cluster)",
    )
    p.add_argument(
        "--compute",
        choices=("real", "modeled"),
        default="real",
        help="real: the small model's math at this machine's speed (numerics); modeled: each compute "
        "piece runs its math, then waits until it has taken the performance model's time for the "
        "same piece of the full-size model on the emulated cluster preset, x the run's dilation D "
        "(needs --emulate and a cluster preset topology, e.g. --topology a800-4nic)",
    )
    p.add_argument(
        "--contention",
        type=float,
        default=0.0,
        help="with --compute modeled: compute waited while this rank's MoE exchange is in flight lasts (1 + C) x "
        "its target (communication kernels take SMs and memory bandwidth from the compute they overlap); "
        "default 0: no contention, overlap gains are an upper bound. Only waits change: losses are identical",
    )
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--zero-stage", type=int, default=1, choices=(0, 1))
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="per-GPU dense bf16 peak for MFU (default: from the GPU's name; MFU is reported on GPU only)",
    )
    for flag in ("layers", "hidden", "heads", "kv-heads", "ffn", "experts", "topk", "seq", "micro-batch"):
        p.add_argument(f"--{flag}", type=int, default=None, help="model override")
    p.add_argument("--capacity-factor", type=float, default=None, help="model override")
    p.add_argument(
        "--emulate",
        action="store_true",
        help=f"run on the emulated cluster (monta.emulate); without shaping flags: the "
        f"{DEFAULT_PRESET} preset (the 4-NIC A800's per-GPU intra:inter ratio, 13.6)",
    )
    try:
        from monta.emulate.topology import add_topology_args

        add_topology_args(p)
    except ImportError:  # emulator not installed: plain local ranks only
        pass
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before the run is abandoned")
    p.add_argument("--out", default="results/step/step.jsonl")
    p.add_argument(
        "--launcher",
        choices=("spawn", "env"),
        default="spawn",
        help="spawn: start the ranks here (on the emulator with --emulate, else on 127.0.0.1); "
        "env: this process is one rank started by torchrun/srun (RANK, WORLD_SIZE, MASTER_*)",
    )
    p.add_argument("--experiment", default="step", help="experiment name stored in the records and wandb group")
    p.add_argument("--no-wandb", action="store_true", help="do not log to wandb")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)


def check_args(args: argparse.Namespace) -> list[str]:
    """Range checks of every flag (monta.validate), before any rank starts; returns the variants."""
    from monta import validate as V

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
    for flag in ("layers", "hidden", "heads", "kv_heads", "ffn", "experts", "topk", "seq", "micro_batch"):
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
            "(and --emulate), or leave --contention at 0"
        )
    V.out_path(args.out)
    return variants


def _spec(args: argparse.Namespace) -> dict[str, Any]:
    variants = check_args(args)
    try:
        chunks = parse_chunks(args.chunks)
    except ValueError as e:
        raise ValueError(f"--{e}") from None  # --chunks='four': give an integer >= 1 or 'auto'
    cluster = args.cluster
    if isinstance(chunks, Auto):
        cluster = cluster or os.environ.get("MONTA_CLUSTER")
        if cluster is None and args.emulate:
            raise ValueError(
                "--chunks auto on the emulated cluster needs --cluster emulator:PROFILE.json; write one "
                "with `monta emulate calibrate --nodes N --gpus-per-node G <same topology flags> --out "
                "PROFILE.json`"
            )
    if args.steps < 1 or args.warmup < 0:
        raise ValueError("--steps must be >= 1 and --warmup >= 0")
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        raise ValueError(f"--peak-tflops={args.peak_tflops}: must be > 0")
    tp = args.tp if args.tp is not None else args.gpus_per_node
    layout = ParallelLayout(args.nodes, args.gpus_per_node, tp=tp, ep=args.nodes)
    cfg = resolve_config(
        args.model,
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        kv_heads=args.kv_heads,
        ffn=args.ffn,
        experts=args.experts,
        topk=args.topk,
        seq=args.seq,
        micro_batch=args.micro_batch,
        capacity_factor=args.capacity_factor,
    )
    cfg.check_layout(layout.tp, layout.ep)
    for v in variants:  # a schedule's own model requirements (lancet: top-2), before any rank starts
        check = registry.get(v).schedule.check_model
        if check is not None:
            try:
                check(cfg)
            except ValueError as e:
                raise ValueError(f"variant {v}: {e}") from None
    return {
        "layout": {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "tp": tp, "ep": args.nodes},
        "model": args.model,
        "overrides": {k: v for k, v in cfg.to_dict().items()},
        "variants": variants,
        "chunks": chunks.as_json(),
        "cluster": cluster,
        "lancet_partitions": args.lancet_partitions,
        "steps": args.steps,
        "warmup": args.warmup,
        "seed": args.seed,
        "zero_stage": args.zero_stage,
        "out": args.out,
        "emulated": False,
        "compute": args.compute,
        "contention": float(args.contention),
        "experiment": args.experiment,
        "peak_tflops": args.peak_tflops,
    }


def _topology(args: argparse.Namespace):
    """The flags' topology; with no shaping flag at all, the default preset above."""
    from monta.emulate.topology import Topology, topology_from_args

    if args.topology is None and args.inter_gbps is None and args.intra_gbps is None and args.latency_us is None:
        return Topology.preset(DEFAULT_PRESET, **({"tcp_cc": args.tcp_cc} if args.tcp_cc else {}))
    return topology_from_args(args)


def clock_of(topo, lay: dict[str, Any], cfg):
    """The run's clock (``monta.perfmodel.training.clock``): its topology must emulate a cluster preset."""
    from monta.perfmodel.training.clock import Clock

    if not topo.cluster:
        raise ValueError(
            f"--compute modeled needs a topology that emulates a cluster preset (e.g. --topology "
            f"a800-4nic or a800-4nic@0.0625); {topo.name} has hand-set rates"
        )
    return Clock(
        topo.cluster,
        cfg,
        tp=lay["tp"],
        ep=lay["ep"],
        gpus_per_node=lay["gpus_per_node"],
        inter_gbps=topo.inter_gbps,
        intra_gbps=topo.intra_gbps,
    )


def run_chunks(spec: dict[str, Any], cfg, layout, element_size: int) -> int:
    """The chunk count every variant uses: the flag's integer, or the performance model's choice (on the
    spec's cluster) for this rank's full [E, C, M] dispatch buffer at the training capacity, as the MoE
    layer resolves it per call (``monta.chunking``)."""
    chunks = parse_chunks(spec["chunks"])
    capacity = expert_capacity(
        cfg.tokens_per_micro_batch, cfg.num_experts, cfg.capacity_factor, cfg.top_k, cfg.min_capacity
    )
    chooser = None
    if isinstance(chunks, Auto):
        from monta.perfmodel.network.chunks import model_chooser

        chooser = model_chooser(spec["cluster"])
    nbytes = dispatch_bytes(cfg.num_experts, capacity, cfg.hidden, element_size)
    return chunks.resolve(nbytes, layout, capacity_slice(capacity, layout.tp), chooser)


# Dense bf16 peak per GPU (TFLOP/s, vendor datasheets, no sparsity) for MFU; --peak-tflops overrides.
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0, "A800": 312.0, "L40S": 362.0}


def model_flops_per_rank(cfg, layout) -> float:
    """Model FLOPs one rank does per training step (forward + backward = 3 x forward; no recomputation,
    capacity padding counted as the experts compute it), from the performance model's layer counts."""
    from monta.perfmodel.training.compute import head_flops, layer_flops

    tokens = cfg.tokens_per_micro_batch
    fwd = cfg.num_layers * layer_flops(cfg, tokens, cfg.seq, layout.tp).total + head_flops(cfg, tokens, layout.tp)
    return 3.0 * fwd


def peak_tflops(device_name: str, override: float | None) -> float | None:
    if override:
        return override
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in device_name.upper()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(json.loads(args.worker))
    spec = _spec(args)
    if args.launcher == "env":  # one rank of torchrun/srun: run the worker in this process
        return _worker(spec)
    rc = _launch(args, spec)
    if rc == 0 and spec["out"] and not args.no_wandb:
        from monta.results import read_records
        from monta.tracking import log_records

        log_records(read_records(spec["out"]), group=args.experiment, config=spec, job_type="step")
    return rc


def _launch(args: argparse.Namespace, spec: dict[str, Any]) -> int:
    lay = spec["layout"]
    argv = [sys.executable, "-m", "monta.bench.step", "--worker"]
    env = {"DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu"), "DS_BUILD_OPS": "0", "OMP_NUM_THREADS": "1"}
    if args.emulate:
        from monta.emulate.launcher import launch

        topo = _topology(args)
        spec["emulated"] = True
        spec["topology"] = topo.to_dict()
        if spec["compute"] == "modeled":
            spec["clock"] = clock_of(topo, lay, ModelConfig(**spec["overrides"])).describe()
            print(
                f"# compute on the clock of {topo.cluster}: D = {spec['clock']['dilation']:.1f} (links and compute "
                f"alike; {topo.describe()})",
                flush=True,
            )
        result = launch(
            argv + [json.dumps(spec)],
            lay["nodes"],
            lay["gpus_per_node"],
            topo,
            env=env,
            timeout_s=args.timeout,
            stall_s=max(120.0, 60.0 + 5.0 * lay["nodes"] * lay["gpus_per_node"]),
        )
        spec["emulated"] = bool(result.emulated)
        return 0
    if spec["compute"] == "modeled":
        raise ValueError(
            "--compute modeled runs on the emulated cluster: add --emulate (and a cluster preset "
            "topology, e.g. --topology a800-4nic), or use --compute real"
        )
    world = lay["nodes"] * lay["gpus_per_node"]
    port = _free_port()
    procs = []
    for r in range(world):
        e = dict(
            os.environ,
            **env,
            RANK=str(r),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(r % lay["gpus_per_node"]),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        procs.append(subprocess.Popen(argv + [json.dumps(spec)], env=e, stdout=None if r == 0 else subprocess.DEVNULL))
    deadline = time.monotonic() + args.timeout
    try:
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise ValueError(
                    f"ranks {failed or 'all'} {'failed' if failed else 'timed out'}; see their stderr above"
                )
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return 0 if all(p.returncode == 0 for p in procs) else 1


def _parts(v: str) -> dict[str, Any]:
    """The variant's parts for its records (exchange, schedule, sync; the exchange's own chunks)."""
    p = registry.get(v).parts
    return {
        "exchange": p["exchange"],
        "schedule": p["schedule"],
        "sync": p["sync"],
        **({"exchange_chunks": p["chunks"]} if "chunks" in p else {}),
    }


def _worker(spec: dict[str, Any]) -> int:
    import torch.distributed as dist

    from monta.bench.step_worker import init_from_env, run_interleaved
    from monta.model.config import ModelConfig

    init_from_env()
    import torch

    layout = ParallelLayout(**spec["layout"])
    cfg = ModelConfig(**spec["overrides"])
    chunks = run_chunks(spec, cfg, layout, 2 if torch.cuda.is_available() else 4)
    spec = dict(spec, chunks_requested=spec["chunks"], chunks=chunks)
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        spec["device"], spec["peak_tflops"] = name, peak_tflops(name, spec.get("peak_tflops"))
    clock = None
    if spec.get("clock"):
        from monta.model.clock import ComputeClock

        clock = ComputeClock(
            spec["clock"]["us_per_flop"],
            {"optimizer": spec["clock"]["optimizer_us"]},
            contention=spec.get("contention", 0.0),
        )
    res = run_interleaved(
        layout,
        cfg,
        spec["variants"],
        chunks=chunks,
        steps=spec["steps"],
        warmup=spec["warmup"],
        seed=spec["seed"],
        zero_stage=spec["zero_stage"],
        lancet_partitions=spec.get("lancet_partitions", PARTITIONS),
        clock=clock,
    )
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(res, gathered, dst=0)
    if dist.get_rank() == 0:
        _report(spec, layout, cfg, gathered)
    dist.barrier()
    return 0


def _contention_text(c: float) -> str:
    if not c:
        return "contention 0: no contention, overlap gains are an upper bound"
    return f"contention {c:g}: compute waited while this rank's MoE exchange is in flight lasts {1 + c:g}x"


def _ci_text(ci: list[float], n: int) -> str:
    """``[lo, hi]``, or why there is none (a bootstrap needs 3 or more paired steps)."""
    lo, hi = ci
    return f"[{lo:.3f}, {hi:.3f}]" if lo == lo and hi == hi else f"[no CI from {n} step{'s' if n != 1 else ''}]"


def _clock_summary(per_rank: list[dict], v: str, step_ms: float) -> dict[str, Any]:
    """Variant ``v`` on the compute clock: priced compute per step (the slowest rank's), and every piece
    whose real math outlasted its target (counted and named over all ranks and steps)."""
    from monta.perfmodel.training.clock import OVERRUN_BOUND

    steps = [s for r in per_rank for s in r[v]["clock"]]
    if not steps:
        return {"target_ms": 0.0, "overrun_ms": 0.0, "contention_ms": 0.0, "overruns": {}, "cpu_bound": False}
    n = len(per_rank[0][v]["clock"])
    target = max(sum(sum(s["target_s"].values()) for s in r[v]["clock"]) / n for r in per_rank)
    over = max(sum(sum(s["overrun_s"].values()) for s in r[v]["clock"]) / n for r in per_rank)
    stretch = max(sum(sum(s.get("contention_s", {}).values()) for s in r[v]["clock"]) / n for r in per_rank)
    counts: dict[str, int] = {}
    for s in steps:
        for k, c in s["overruns"].items():
            counts[k] = counts.get(k, 0) + c
    return {
        "target_ms": 1e3 * target,
        "overrun_ms": 1e3 * over,
        "contention_ms": 1e3 * stretch,  # wait contention added to the step's compute (the most of any rank)
        "overruns": counts,
        "cpu_bound": 1e3 * over > OVERRUN_BOUND * step_ms,
    }


def _report(spec, layout, cfg, per_rank: list[dict]) -> None:
    from monta.bench.hostload import is_cpu_bound, verdict
    from monta.bench.stats import bootstrap, median_ratio, percentile
    from monta.results import make_record, new_run_id, write_records

    run_id = new_run_id()
    tokens = cfg.tokens_per_micro_batch * layout.dp
    rows, records = [], []

    def slowest(v: str) -> list[float]:
        return [1e3 * max(r[v]["step_s"][i] for r in per_rank) for i in range(len(per_rank[0][v]["step_s"]))]

    samples: dict[str, list[float]] = {"deepspeed": slowest("deepspeed")} if "deepspeed" in spec["variants"] else {}
    base = statistics.median(samples["deepspeed"]) if samples else None
    for v in spec["variants"]:
        n = len(per_rank[0][v]["step_s"])
        step_ms = slowest(v)  # per step, the slowest rank
        med = statistics.median(step_ms)
        bd = {
            k: 1e3
            * statistics.median(statistics.fmean(r[v]["breakdown_s"][i][src] for r in per_rank) for i in range(n))
            for k, src in BREAKDOWN.items()
        }
        # all four exchange passes of a step (forward and backward, dispatch and combine), summed per step
        bd["exchange"] = 1e3 * statistics.median(
            statistics.fmean(sum(r[v]["breakdown_s"][i][BREAKDOWN[k]] for k in EXCHANGE_PHASES) for r in per_rank)
            for i in range(n)
        )
        load = dict((per_rank[0].get("host_cpu") or {}).get(v) or {})
        waits = [w for r in per_rank for w in r[v].get("wait_s", [])]
        if waits and None not in waits:  # the ranks' own wait for a core, share of their step wall time
            load["rank_wait"] = sum(waits) / sum(w for r in per_rank for w in r[v]["wall_s"])
        samples[v] = step_ms
        clock = _clock_summary(per_rank, v, med) if spec.get("clock") else None
        peak = max(r.get("peak_mem_bytes", r["peak_rss_bytes"]) for r in per_rank)
        loss = statistics.fmean(r[v]["loss"][-1] for r in per_rank)
        metrics = {
            "step_ms": med,
            "step_ms_p10": percentile(step_ms, 10),
            "step_ms_p90": percentile(step_ms, 90),
            "tokens_per_s": tokens / (med / 1e3),
            "loss": loss,
            "breakdown_ms": bd,
            "peak_mem_bytes": peak,
            "exposed_comm_ms": bd["exposed_comm"],
            "mfu": (
                model_flops_per_rank(cfg, layout) / (med / 1e3) / (spec["peak_tflops"] * 1e12)
                if spec.get("peak_tflops")
                else None
            ),
            "speedup_vs_deepspeed": (base / med) if base else None,
            "samples_ms": step_ms,
            "host_cpu": load or None,
            "cpu_bound": is_cpu_bound(load) or bool(clock and clock["cpu_bound"]),
            "compute": spec.get("compute", "real"),
            "clock": clock,
        }
        if "deepspeed" in samples and v != "deepspeed":
            # paired per-step ratio (variants interleaved step by step) and its bootstrap CI
            pt, lo, hi = bootstrap(median_ratio, [samples["deepspeed"], step_ms], seed=len(rows))
            metrics["speedup_vs_deepspeed"], metrics["speedup_vs_deepspeed_ci"] = pt, [lo, hi]
        records.append(
            make_record(
                kind="step",
                source="emulated" if spec["emulated"] else "measured",
                experiment=spec.get("experiment", "step"),
                run_id=run_id,
                params={
                    "variant": v,
                    **_parts(v),
                    "model": cfg.name,
                    "chunks": spec["chunks"],
                    "chunks_requested": spec["chunks_requested"],
                    "inter_gbps": (spec.get("topology") or {}).get("inter_gbps"),
                    "intra_gbps": (spec.get("topology") or {}).get("intra_gbps"),
                    "tp": layout.tp,
                    "ep": layout.ep,
                    "dp": layout.dp,
                    "nodes": layout.nodes,
                    "gpus_per_node": layout.gpus_per_node,
                    "layers": cfg.num_layers,
                    "seq": cfg.seq,
                    "steps": n,
                    "topk": cfg.top_k,
                    "capacity_factor": cfg.capacity_factor,
                    "micro_batch": cfg.micro_batch,
                    "compute": spec.get("compute", "real"),
                    "contention": spec.get("contention", 0.0),
                    "topology": (spec.get("topology") or {}).get("name"),
                    "dilation": (spec.get("clock") or {}).get("dilation"),
                },
                metrics=metrics,
                config={"spec": spec, "layout": layout.to_dict()},
            )
        )
        rows.append((v, metrics))
    write_records(spec["out"], records)
    topo = spec.get("topology")
    ratio = (
        f", intra:inter {topo['intra_gbps'] / topo['inter_gbps']:.2f}"
        if topo and topo.get("intra_gbps") and topo.get("inter_gbps")
        else ""
    )
    print(
        f"# monta bench step: {cfg.name} ({cfg.num_layers} layers, hidden {cfg.hidden}, "
        f"{cfg.tokens_per_micro_batch} tokens/micro-batch) on {layout.describe()}, {spec['steps']} steps after "
        f"{spec['warmup']} warm-up, variants interleaved; source={records[0]['source']}"
    )
    if spec.get("compute") == "modeled":
        print(f"# {_contention_text(spec.get('contention', 0.0))}")
    if topo:
        rate = lambda g: f"{g:g} Gbit/s" if g else "unshaped"  # noqa: E731
        print(
            f"# topology {topo['name']}: intra {rate(topo.get('intra_gbps'))}, inter {rate(topo.get('inter_gbps'))}"
            f"{ratio}"
        )
    print(
        f"# chunks {spec['chunks']} (requested {spec['chunks_requested']}"
        f"{', cluster ' + str(spec['cluster']) if is_auto(spec['chunks_requested']) else ''}); "
        "breakdown ms, median over steps of the mean over ranks; *_bwd = exchange inside backward"
    )
    hdr = ["variant", "step_ms", "p10", "p90", "speedup", "tok/s", "loss"] + list(BREAKDOWN) + ["exchange"]
    w0 = max([10] + [len(v) for v, _ in rows])
    print(" ".join(f"{h:>{w0 if i == 0 else 10}}" for i, h in enumerate(hdr)))
    for v, m in rows:
        cells = [
            v,
            f"{m['step_ms']:.1f}",
            f"{m['step_ms_p10']:.1f}",
            f"{m['step_ms_p90']:.1f}",
            f"{m['speedup_vs_deepspeed']:.3f}" if m["speedup_vs_deepspeed"] else "-",
            f"{m['tokens_per_s']:.0f}",
            f"{m['loss']:.4f}",
        ] + [f"{m['breakdown_ms'][k]:.1f}" for k in hdr[7:]]
        print(" ".join(f"{c:>{w0 if i == 0 else 10}}" for i, c in enumerate(cells)))
    if spec.get("peak_tflops"):
        print(
            f"# MFU on {spec.get('device', 'this device')} (peak {spec['peak_tflops']:g} TFLOP/s): "
            + ", ".join(f"{v} {m['mfu']:.1%}" for v, m in rows)
        )
    print(
        "# exposed communication ms (waited for: forward exchanges, backward exchange waits, grad sync): "
        + ", ".join(f"{v} {m['exposed_comm_ms']:.0f}" for v, m in rows)
    )
    print(
        "# speedup vs deepspeed = median of the paired per-step ratios [95% bootstrap CI]: "
        + ", ".join(
            f"{v} {m['speedup_vs_deepspeed']:.3f} " + _ci_text(m["speedup_vs_deepspeed_ci"], len(m["samples_ms"]))
            for v, m in rows
            if m.get("speedup_vs_deepspeed_ci")
        )
    )
    if spec.get("clock"):
        ck = spec["clock"]
        print(
            f"# compute modeled: the {ck['full_model']} pieces on {ck['cluster']} x D = {ck['dilation']:.1f} "
            f"(per step, targets {', '.join(f'{k} {v / 1e3:.0f} ms' for k, v in ck['pieces_us'].items())} a "
            f"layer forward, backward 2x; optimizer {ck['optimizer_us'] / 1e3:.0f} ms)"
        )
        for v, m in rows:
            c = m["clock"]
            late = ", ".join(f"{k} {n}x" for k, n in c["overruns"].items()) or "none"
            print(
                f"# {v}: clock {c['target_ms']:.0f} ms of priced compute a step; math over its target: {late} "
                f"({c['overrun_ms']:.1f} ms, {c['overrun_ms'] / m['step_ms']:.1%} of the step)"
                + (f"; contention added {c['contention_ms']:.0f} ms" if spec.get("contention") else "")
            )
    for v, m in rows:
        print(f"# {v}: {verdict(m['host_cpu'])}")
    bound = [v for v, m in rows if m["cpu_bound"]]
    if bound:
        print(f"# CPU-BOUND: {', '.join(bound)}: these step times measure this machine's cores, not the links")
    print(f"# wrote {len(records)} records to {spec['out']}")


if __name__ == "__main__":
    _p = argparse.ArgumentParser(prog="monta bench step")
    add_arguments(_p)
    sys.exit(main(_p.parse_args()))
