"""Parallel-strategy planner: enumerate TP/CP/EP/DP/PP, micro-batch, recomputation and ZeRO stage,
drop what does not fit, rank the rest by predicted step time, and say why the winners win."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from monta.hardware.links import Cluster
from monta.model.config import ModelConfig
from monta.perfmodel.training.memory import GB, MemoryBreakdown, memory_per_rank
from monta.perfmodel.training.step import StepBreakdown, predict_step
from monta.perfmodel.training.strategy import Strategy

DEFAULT_BATCH_TOKENS = 4 * 2**20  # global batch of 4M tokens (Llama-2's), in whole sequences
MICRO_BATCHES = (1, 2, 4)
RECOMPUTE_ORDER = ("none", "selective", "full")  # cheapest first
MIN_CP_TOKENS = 1024  # a CP shard shorter than this is all latency


@dataclass(frozen=True)
class Choice:
    strategy: Strategy
    step: StepBreakdown
    memory: MemoryBreakdown
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy.to_dict(),
            "step": self.step.to_dict(),
            "memory": self.memory.to_dict(),
            "why": self.why,
        }


@dataclass(frozen=True)
class Plan:
    cluster: Cluster
    model: ModelConfig
    seq: int
    global_batch: int
    choices: tuple[Choice, ...]
    considered: int
    fitting: int


def default_global_batch(seq: int) -> int:
    return max(1, DEFAULT_BATCH_TOKENS // seq)


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _structures(m: ModelConfig, cluster: Cluster, seq: int, global_batch: int, pins: dict | None = None):
    world, gpn = cluster.world_size, cluster.gpus_per_node
    pins = pins or {}

    def ok(name: str, v: int) -> bool:
        return pins.get(name) in (None, v)

    for tp in _divisors(gpn, gpn):
        if not ok("tp", tp):
            continue
        if m.num_heads % tp or (m.num_kv_heads % tp and tp % m.num_kv_heads):
            continue
        rest = world // tp
        cp = 1
        while cp <= rest and seq % cp == 0 and (cp == 1 or seq // cp >= MIN_CP_TOKENS):
            for pp in _divisors(rest // cp, m.num_layers):
                dp = rest // (cp * pp)
                if not (ok("cp", cp) and ok("pp", pp) and ok("dp", dp)):
                    continue
                for ep in _divisors(m.num_experts, m.num_experts):
                    if (cp * dp) % ep or not ok("ep", ep):
                        continue
                    for mb in MICRO_BATCHES:
                        if global_batch % (dp * mb) == 0 and ok("micro_batch", mb):
                            yield tp, cp, pp, dp, ep, mb
            cp *= 2


def plan(
    m: ModelConfig,
    cluster: Cluster,
    seq: int,
    global_batch: int | None = None,
    variant: str = "monta",
    top: int = 5,
    pins: dict[str, int] | None = None,
    recompute: tuple[str, ...] = RECOMPUTE_ORDER,
    zero: tuple[int, ...] = (1, 2, 3),
) -> Plan:
    """Rank every strategy that fits; raise ValueError saying what would make one fit if none does.

    ``pins`` fixes degrees (tp, cp, pp, dp, ep, micro_batch); ``recompute``/``zero`` limit the options."""
    if seq < 1:
        raise ValueError(f"seq={seq}: must be a positive number of tokens")
    if global_batch is not None and global_batch < 1:
        raise ValueError(f"global batch {global_batch}: must be >= 1 sequence")
    pins = {k: v for k, v in (pins or {}).items() if v is not None}
    _check_pins(pins, m, cluster, seq)
    gb = global_batch or default_global_batch(seq)
    results: list[Choice] = []
    considered = 0
    for tp, cp, pp, dp, ep, mb in _structures(m, cluster, seq, gb, pins):
        num_micro = gb // (dp * mb)
        considered += 1
        # Step time grows with the recomputation level and with ZeRO-3 (ZeRO 0-2 move the same
        # bytes), so per structure only the first fitting option of each kind can win.
        seen_z3 = False
        for rc in (r for r in RECOMPUTE_ORDER if r in recompute):
            fit = None
            for z in sorted(zero):
                if z == 3 and seen_z3:
                    continue
                s = Strategy(tp=tp, ep=ep, pp=pp, cp=cp, dp=dp, micro_batch=mb, recompute=rc, zero=z, variant=variant)
                mem = memory_per_rank(m, s, seq, num_micro)
                if mem.fits(cluster.mem_GB):
                    fit = (s, mem)
                    break
            if fit is None:
                continue
            s, mem = fit
            results.append(Choice(s, predict_step(m, s, cluster, seq, gb, validate=False), mem))
            if s.zero < 3:
                break  # more recomputation only costs time
            seen_z3 = True
    if not results:
        if considered == 0:
            raise ValueError(
                f"no valid parallel degrees for {cluster.nodes} x {cluster.gpus_per_node} GPUs, seq {seq}, "
                f"global batch {gb} sequences"
                + (f" and pins {pins}" if pins else "")
                + ": drop a pin or pick a global batch divisible by the data-parallel degree"
            )
        raise ValueError(_no_fit_message(m, cluster, seq, gb, pins))
    # Predicted times within 0.1% are a tie: prefer less inter-node traffic, then less memory.
    results.sort(key=lambda c: (round(math.log(c.step.total_us) / math.log(1.001)), c.step.inter_bytes, c.memory.total))
    runner_up = results[1] if len(results) > 1 else None
    explained = tuple(
        replace(c, why=_why(c, results[0] if i else runner_up, i == 0)) for i, c in enumerate(results[: max(1, top)])
    )
    return Plan(cluster, m, seq, gb, explained, considered, len(results))


def _check_pins(pins: dict[str, int], m: ModelConfig, cluster: Cluster, seq: int) -> None:
    gpn, world = cluster.gpus_per_node, cluster.world_size
    for k, v in pins.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"--{k} {v!r}: must be a positive integer")
    if "tp" in pins and gpn % pins["tp"]:
        raise ValueError(f"--tp {pins['tp']} must divide gpus per node ({gpn}): tensor parallelism stays inside a node")
    if "tp" in pins and (m.num_heads % pins["tp"] or (m.num_kv_heads % pins["tp"] and pins["tp"] % m.num_kv_heads)):
        raise ValueError(
            f"--tp {pins['tp']} must divide the model's {m.num_heads} heads (and fit its {m.num_kv_heads} KV heads)"
        )
    if "ep" in pins and m.num_experts % pins["ep"]:
        raise ValueError(f"--ep {pins['ep']} must divide the model's {m.num_experts} experts")
    if "cp" in pins and seq % pins["cp"]:
        raise ValueError(f"--cp {pins['cp']} must divide the sequence length {seq}")
    if "pp" in pins and pins["pp"] > m.num_layers:
        raise ValueError(f"--pp {pins['pp']} exceeds the model's {m.num_layers} layers")
    prod = 1
    for k in ("tp", "cp", "pp"):
        prod *= pins.get(k, 1)
    if world % prod:
        raise ValueError(f"tp*cp*pp = {prod} does not divide the {world} GPUs")


def _min_memory(m: ModelConfig, cluster: Cluster, seq: int, gb: int, pins=None) -> tuple[float, Strategy | None]:
    best, arg = math.inf, None
    for tp, cp, pp, dp, ep, mb in _structures(
        m, cluster, seq, gb, {k: v for k, v in (pins or {}).items() if k in ("tp", "ep")}
    ):
        if mb != 1:
            continue
        s = Strategy(tp=tp, ep=ep, pp=pp, cp=cp, dp=dp, recompute="full", zero=3)
        t = memory_per_rank(m, s, seq, gb // dp).total
        if t < best:
            best, arg = t, s
    return best, arg


def _no_fit_message(m: ModelConfig, cluster: Cluster, seq: int, gb: int, pins=None) -> str:
    need, s = _min_memory(m, cluster, seq, gb, pins)
    head = (
        f"no strategy for {m.name} ({m.num_layers} layers, seq {seq}) fits {cluster.nodes} x {cluster.gpus_per_node} "
        f"GPUs of {cluster.mem_GB:g} GB"
    )
    if s is None:
        return head + f": no valid degrees (global batch {gb} sequences); try another --global-batch or node count"
    hints = [f"the smallest footprint is {need / GB:.0f} GB per GPU ({s.describe()})"]
    for k in range(1, 13):
        nodes = cluster.nodes * 2**k
        bigger = replace(cluster, nodes=nodes)
        if _min_memory(m, bigger, seq, gb, pins)[0] <= cluster.mem_GB * GB:
            hints.append(f"it would fit on {nodes} nodes")
            break
    lo, hi = 0, m.num_layers
    while lo < hi:  # the most layers that fit here
        mid = (lo + hi + 1) // 2
        if mid and _min_memory(replace(m, num_layers=mid), cluster, seq, gb, pins)[0] <= cluster.mem_GB * GB:
            lo = mid
        else:
            hi = mid - 1
    if lo:
        hints.append(f"or with --layers {lo} or fewer")
    if seq > 1024:
        hints.append("or with a shorter --seq")
    tail = "" if not pins else " (the hints keep your --tp/--ep; other pins dropped)"
    return head + " even with ZeRO-3 and full recomputation: " + "; ".join(hints) + tail


_LABELS = {
    "compute_us": "compute",
    "recompute_us": "recomputation",
    "exchange_us": "exposed MoE exchange",
    "tp_us": "TP AllReduce",
    "cp_us": "exposed context-parallel ring",
    "pp_us": "pipeline bubble",
    "grad_us": "exposed gradient sync",
    "optimizer_us": "optimizer step",
}


def _why(c: Choice, other: Choice | None, winner: bool) -> str:
    mem = f"{c.memory.total / GB:.0f} GB/GPU"
    if other is None:
        return f"the only fitting strategy ({mem})"
    diffs = sorted(
        ((getattr(c.step, k) - getattr(other.step, k), lab) for k, lab in _LABELS.items()),
        key=lambda d: d[0] if winner else -d[0],
    )
    parts = []
    for d, lab in diffs[:2]:
        if winner and d < 0:
            parts.append(f"{-d / 1e3:.0f} ms less {lab}")
        elif not winner and d > 0:
            parts.append(f"{d / 1e3:.0f} ms more {lab}")
    ref = "than #2" if winner else "than #1"
    if parts:
        return ", ".join(parts) + f" {ref}; {mem}"
    dx = (other.step.inter_bytes - c.step.inter_bytes) / 1e9
    traffic = (
        f"{abs(dx):.0f} GB/step {'less' if dx >= 0 else 'more'} inter-node traffic"
        if abs(dx) >= 0.5
        else "same traffic"
    )
    return f"same predicted time as {ref[5:]} (within 0.1%), {traffic}; {mem}"
