"""The records of ``monta bench step`` (rank 0): per variant the step time over the slowest rank, its
spread, the phase breakdown, throughput, loss, memory, MFU, the paired speedup over deepspeed with its
bootstrap CI, the host's CPU figures and, on the compute clock, the clock's accounting."""

from __future__ import annotations

import statistics
from typing import Any

from monta import variants as registry

# record key -> breakdown_s key of train_step; names match monta_analysis.step_tables.PHASES (plus backward detail)
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


def parts(v: str) -> dict[str, Any]:
    """The variant's parts for its records (exchange, schedule, sync; the exchange's own chunks)."""
    p = registry.get(v).parts
    return {
        "exchange": p["exchange"],
        "schedule": p["schedule"],
        "sync": p["sync"],
        **({"exchange_chunks": p["chunks"]} if "chunks" in p else {}),
    }


def slowest(per_rank: list[dict], v: str) -> list[float]:
    """Variant ``v``'s step times in ms: per step, the slowest rank's."""
    return [1e3 * max(r[v]["step_s"][i] for r in per_rank) for i in range(len(per_rank[0][v]["step_s"]))]


def clock_summary(per_rank: list[dict], v: str, step_ms: float) -> dict[str, Any]:
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


def _breakdown(per_rank: list[dict], v: str, n: int) -> dict[str, float]:
    """Phase ms: per step the mean over ranks, then the median over steps."""
    bd = {
        k: 1e3 * statistics.median(statistics.fmean(r[v]["breakdown_s"][i][src] for r in per_rank) for i in range(n))
        for k, src in BREAKDOWN.items()
    }
    # all four exchange passes of a step (forward and backward, dispatch and combine), summed per step
    bd["exchange"] = 1e3 * statistics.median(
        statistics.fmean(sum(r[v]["breakdown_s"][i][BREAKDOWN[k]] for k in EXCHANGE_PHASES) for r in per_rank)
        for i in range(n)
    )
    return bd


def _host_load(per_rank: list[dict], v: str) -> dict[str, Any]:
    """The machine's CPU figures over ``v``'s steps, and the ranks' own wait for a core (share of their wall time)."""
    load = dict((per_rank[0].get("host_cpu") or {}).get(v) or {})
    waits = [w for r in per_rank for w in r[v].get("wait_s", [])]
    if waits and None not in waits:
        load["rank_wait"] = sum(waits) / sum(w for r in per_rank for w in r[v]["wall_s"])
    return load


def variant_metrics(run, layout, cfg, per_rank: list[dict], v: str, deepspeed_ms, seed: int) -> dict[str, Any]:
    """One variant's metrics; ``deepspeed_ms``: deepspeed's per-step times (None without it), paired with
    ``v``'s step by step for the speedup and its bootstrap CI (``seed``: the variant's index)."""
    from monta.bench.hostload import is_cpu_bound
    from monta.bench.stats import bootstrap, median_ratio
    from monta.bench.step.compute import model_flops_per_rank
    from monta.bench.step.router import router_metrics
    from monta.percentiles import percentile

    n = len(per_rank[0][v]["step_s"])
    step_ms = slowest(per_rank, v)
    med = statistics.median(step_ms)
    bd = _breakdown(per_rank, v, n)
    load = _host_load(per_rank, v)
    clock = clock_summary(per_rank, v, med) if run.clock else None
    base = statistics.median(deepspeed_ms) if deepspeed_ms else None
    metrics = {
        "step_ms": med,
        "step_ms_p10": percentile(step_ms, 10),
        "step_ms_p90": percentile(step_ms, 90),
        "tokens_per_s": cfg.tokens_per_micro_batch * layout.dp / (med / 1e3),
        "loss": statistics.fmean(r[v]["loss"][-1] for r in per_rank),
        "breakdown_ms": bd,
        "peak_mem_bytes": max(r.get("peak_mem_bytes", r["peak_rss_bytes"]) for r in per_rank),
        "exposed_comm_ms": bd["exposed_comm"],
        "mfu": (
            model_flops_per_rank(cfg, layout) / (med / 1e3) / (run.peak_tflops * 1e12) if run.peak_tflops else None
        ),
        "speedup_vs_deepspeed": (base / med) if base else None,
        "samples_ms": step_ms,
        "host_cpu": load or None,
        "cpu_bound": is_cpu_bound(load) or bool(clock and clock["cpu_bound"]),
        "compute": run.compute,
        "clock": clock,
    }
    router = router_metrics(layout, cfg, per_rank, v)  # the gate's (or --routing's) realized imbalance
    if router is not None:  # None: the schedule routes with a gate of its own, which records nothing
        metrics["router"] = router
    if deepspeed_ms and v != "deepspeed":
        # paired per-step ratio (variants interleaved step by step) and its bootstrap CI
        pt, lo, hi = bootstrap(median_ratio, [deepspeed_ms, step_ms], seed=seed)
        metrics["speedup_vs_deepspeed"], metrics["speedup_vs_deepspeed_ci"] = pt, [lo, hi]
    return metrics


def variant_params(run, layout, cfg, v: str, steps: int) -> dict[str, Any]:
    topo = run.topology or {}
    return {
        "variant": v,
        **parts(v),
        "model": cfg.name,
        "chunks": run.chunks_used,
        "chunks_requested": run.chunks,
        "inter_gbps": topo.get("inter_gbps"),
        "intra_gbps": topo.get("intra_gbps"),
        "tp": layout.tp,
        "ep": layout.ep,
        "dp": layout.dp,
        "nodes": layout.nodes,
        "gpus_per_node": layout.gpus_per_node,
        "layers": cfg.num_layers,
        "seq": cfg.seq,
        "steps": steps,
        "topk": cfg.top_k,
        "capacity_factor": cfg.capacity_factor,
        "micro_batch": cfg.micro_batch,
        "compute": run.compute,
        "contention": run.contention,
        "topology": topo.get("name"),
        "dilation": (run.clock or {}).get("dilation"),
        "routing": run.routing or "gate",  # a --routing workload's spec, or the gate's own choice
    }


def build_records(run, layout, cfg, per_rank: list[dict]) -> tuple[list[tuple[str, dict]], list[dict]]:
    """(rows of (variant, metrics), records) of every variant of ``run`` (the StepConfig), in its order."""
    from monta.bench.step.router import workloads_at
    from monta.results import make_record, new_run_id

    run_id = new_run_id()
    workloads = workloads_at(layout, cfg)  # where the router sits among the synthetic workloads
    deepspeed_ms = slowest(per_rank, "deepspeed") if "deepspeed" in run.variants else None
    rows, records = [], []
    for i, v in enumerate(run.variants):
        metrics = variant_metrics(run, layout, cfg, per_rank, v, deepspeed_ms, seed=i)
        metrics["workload_maxvio"] = workloads
        records.append(
            make_record(
                kind="step",
                source="emulated" if run.emulated else "measured",
                experiment=run.experiment,
                run_id=run_id,
                params=variant_params(run, layout, cfg, v, len(per_rank[0][v]["step_s"])),
                metrics=metrics,
                config={"spec": run.to_dict(), "layout": layout.to_dict()},
            )
        )
        rows.append((v, metrics))
    return rows, records
