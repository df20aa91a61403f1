"""``monta bench step``: a training step of the MoE decoder on DeepSpeed for every variant
(deepspeed, legacy, monta, lina, lancet, monta+priority), interleaved step by step in one run.

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

from monta.model.config import PRESETS, resolve_config
from monta.model.engine import VARIANTS
from monta.parallel import ParallelLayout

BREAKDOWN = ("attention", "gate", "dispatch_exchange", "experts", "combine_exchange", "backward",
             "gradient_sync", "optimizer")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--gpus-per-node", type=int, default=4)
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel size (default: gpus per node)")
    p.add_argument("--model", default="moe-2x70b-mini", choices=sorted(PRESETS))
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}")
    p.add_argument("--chunks", default="4", help="chunks for monta/lina/lancet partitions (int)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--zero-stage", type=int, default=1, choices=(0, 1))
    for flag in ("layers", "hidden", "heads", "kv-heads", "experts", "topk", "seq", "micro-batch"):
        p.add_argument(f"--{flag}", type=int, default=None, help="model override")
    p.add_argument("--capacity-factor", type=float, default=None, help="model override")
    p.add_argument("--emulate", action="store_true", help="run on the emulated cluster (monta.emulate)")
    try:
        from monta.emulate.topology import add_topology_args

        add_topology_args(p)
    except ImportError:  # emulator not installed: plain local ranks only
        pass
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before the run is abandoned")
    p.add_argument("--out", default="results/step/step.jsonl")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)


def _spec(args: argparse.Namespace) -> dict[str, Any]:
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise ValueError(f"--variants: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(VARIANTS)}")
    try:
        chunks = int(args.chunks)
    except ValueError:
        raise ValueError(f"--chunks={args.chunks!r}: give an integer >= 1") from None
    if chunks < 1:
        raise ValueError(f"--chunks={chunks}: must be >= 1")
    if args.steps < 1 or args.warmup < 0:
        raise ValueError("--steps must be >= 1 and --warmup >= 0")
    tp = args.tp if args.tp is not None else args.gpus_per_node
    layout = ParallelLayout(args.nodes, args.gpus_per_node, tp=tp, ep=args.nodes)
    cfg = resolve_config(args.model, layers=args.layers, hidden=args.hidden, heads=args.heads,
                         kv_heads=args.kv_heads, experts=args.experts, topk=args.topk, seq=args.seq,
                         micro_batch=args.micro_batch, capacity_factor=args.capacity_factor)
    cfg.check_layout(layout.tp, layout.ep)
    if "lancet" in variants and cfg.top_k != 2:
        raise ValueError("the lancet variant needs --topk 2 (it carries capacity for DeepSpeed's top-2 gate)")
    return {"layout": {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "tp": tp, "ep": args.nodes},
            "model": args.model, "overrides": {k: v for k, v in cfg.to_dict().items()}, "variants": variants,
            "chunks": chunks, "steps": args.steps, "warmup": args.warmup, "seed": args.seed,
            "zero_stage": args.zero_stage, "out": args.out, "emulated": False}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(json.loads(args.worker))
    spec = _spec(args)
    lay = spec["layout"]
    argv = [sys.executable, "-m", "monta.bench.step", "--worker"]
    env = {"DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu"), "DS_BUILD_OPS": "0", "OMP_NUM_THREADS": "1"}
    if args.emulate:
        from monta.emulate.launcher import launch
        from monta.emulate.topology import topology_from_args

        spec["emulated"] = True
        spec["topology"] = topology_from_args(args).name
        result = launch(argv + [json.dumps(spec)], lay["nodes"], lay["gpus_per_node"], topology_from_args(args),
                        env=env, timeout_s=args.timeout)
        spec["emulated"] = bool(result.emulated)
        return 0
    world = lay["nodes"] * lay["gpus_per_node"]
    port = _free_port()
    procs = []
    for r in range(world):
        e = dict(os.environ, **env, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r % lay["gpus_per_node"]),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(argv + [json.dumps(spec)], env=e,
                                      stdout=None if r == 0 else subprocess.DEVNULL))
    deadline = time.monotonic() + args.timeout
    try:
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise ValueError(f"ranks {failed or 'all'} {'failed' if failed else 'timed out'}; see their stderr above")
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return 0 if all(p.returncode == 0 for p in procs) else 1


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def _worker(spec: dict[str, Any]) -> int:
    import torch.distributed as dist

    from monta.bench.step_worker import init_from_env, run_interleaved
    from monta.model.config import ModelConfig

    init_from_env()
    layout = ParallelLayout(**spec["layout"])
    cfg = ModelConfig(**spec["overrides"])
    res = run_interleaved(layout, cfg, spec["variants"], chunks=spec["chunks"], steps=spec["steps"],
                          warmup=spec["warmup"], seed=spec["seed"], zero_stage=spec["zero_stage"],
                          lancet_partitions=spec["chunks"])
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(res, gathered, dst=0)
    if dist.get_rank() == 0:
        _report(spec, layout, cfg, gathered)
    dist.barrier()
    return 0


def _report(spec, layout, cfg, per_rank: list[dict]) -> None:
    from monta.results import make_record, new_run_id, write_records

    run_id = new_run_id()
    tokens = cfg.tokens_per_micro_batch * layout.dp
    rows, records = [], []
    base = None
    for v in spec["variants"]:
        n = len(per_rank[0][v]["step_s"])
        step_ms = [1e3 * max(r[v]["step_s"][i] for r in per_rank) for i in range(n)]  # slowest rank
        med = statistics.median(step_ms)
        base = med if v == "deepspeed" else base
        bd = {k: 1e3 * statistics.median(statistics.fmean(r[v]["breakdown_s"][i][k] for r in per_rank)
                                         for i in range(n)) for k in BREAKDOWN}
        peak = max(r.get("peak_mem_bytes", r["peak_rss_bytes"]) for r in per_rank)
        loss = statistics.fmean(r[v]["loss"][-1] for r in per_rank)
        metrics = {"step_ms": med, "step_ms_p10": _pct(step_ms, 0.1), "step_ms_p90": _pct(step_ms, 0.9),
                   "tokens_per_s": tokens / (med / 1e3), "loss": loss, "breakdown_ms": bd, "peak_mem_bytes": peak,
                   "speedup_vs_deepspeed": (base / med) if base else None}
        records.append(make_record(kind="step", source="emulated" if spec["emulated"] else "measured",
                                   experiment="step", run_id=run_id,
                                   params={"variant": v, "model": cfg.name, "chunks": spec["chunks"],
                                           "tp": layout.tp, "ep": layout.ep, "dp": layout.dp,
                                           "nodes": layout.nodes, "gpus_per_node": layout.gpus_per_node,
                                           "layers": cfg.num_layers, "seq": cfg.seq, "steps": n},
                                   metrics=metrics, config={"spec": spec, "layout": layout.to_dict()}))
        rows.append((v, metrics))
    write_records(spec["out"], records)
    print(f"# monta bench step: {cfg.name} on {layout.describe()}, {spec['steps']} steps after "
          f"{spec['warmup']} warm-up, variants interleaved; source={records[0]['source']}")
    hdr = ["variant", "step_ms", "p10", "p90", "speedup", "tok/s", "loss"] + [k[:10] for k in BREAKDOWN]
    print(" ".join(f"{h:>10}" for h in hdr))
    for v, m in rows:
        cells = [v, f"{m['step_ms']:.1f}", f"{m['step_ms_p10']:.1f}", f"{m['step_ms_p90']:.1f}",
                 f"{m['speedup_vs_deepspeed']:.3f}" if m["speedup_vs_deepspeed"] else "-",
                 f"{m['tokens_per_s']:.0f}", f"{m['loss']:.4f}"] + [f"{m['breakdown_ms'][k]:.1f}" for k in BREAKDOWN]
        print(" ".join(f"{c:>10}" for c in cells))
    print(f"# wrote {len(records)} records to {spec['out']}")


if __name__ == "__main__":
    _p = argparse.ArgumentParser(prog="monta bench step")
    add_arguments(_p)
    sys.exit(main(_p.parse_args()))
