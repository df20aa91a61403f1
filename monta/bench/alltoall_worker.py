"""Rank side of ``monta bench alltoall``: times the TP dispatch exchange variants, checks them,
and (rank 0) prints the nccl-tests-style table and writes the records.

Started once per rank by the launcher with torchrun's environment (RANK, WORLD_SIZE, MASTER_*).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from monta.bench.hostload import HostLoad, cores, is_cpu_bound, own_run_delay_s, verdict
from monta.bench.stats import (
    alltoall_bw,
    bootstrap,
    median_ratio,
    overlap_efficiency,
    overlap_efficiency_vs_sum,
    rel_width,
    summarize,
)
from monta.comm import exchange as ex
from monta.comm.accounting import TrafficMeter
from monta.comm.collectives import all_gather
from monta.groups import build_process_groups
from monta.parallel import ParallelLayout
from monta.progress import beat
from monta.results import environment, make_record, new_run_id, write_records
from monta.units import format_size

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Each variant: how one dispatch pass runs. a2a/ag are the two halves alone (for the overlap bound).
# A plugin's exchange (monta.variants.add_exchange) runs its own pass with the deepspeed/monta spec.
SPECS = {
    "legacy": ex.PassSpec(False, False),
    "deepspeed": ex.PassSpec(True, True),
    "monta": ex.PassSpec(True, True),
    "a2a": ex.PassSpec(True, False),
}
PLUGIN_SPEC = ex.PassSpec(True, True)


def buffer_shape(size_bytes: int, experts: int, hidden: int, elsize: int, tp: int) -> tuple[int, int, int]:
    per_row = experts * hidden * elsize
    if size_bytes % per_row or (size_bytes // per_row) % tp:
        raise ValueError(
            f"size {size_bytes} B is not a whole [E={experts}, C, M={hidden}] buffer with C "
            f"divisible by TP={tp}; use sizes that are multiples of {per_row * tp} B"
        )
    return experts, size_bytes // per_row, hidden


def rank_input(dp_index: int, size_idx: int, shape, dtype, salt: int = 0) -> torch.Tensor:
    # Small integers are exact in every dtype, so #wrong counts real misplacements only.
    g = torch.Generator().manual_seed(1_000_003 * (size_idx + 1) + 7919 * dp_index + salt)
    return torch.randint(-64, 64, shape, generator=g).to(dtype)


class Runner:
    """Everything a rank needs to run one variant on one buffer."""

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        self.layout = ParallelLayout(cfg["nodes"], cfg["gpus_per_node"], cfg["tp"], cfg["ep"])
        self.pgs = build_process_groups(self.layout)
        from monta.comm.duplex import transport_for

        self.transport = cfg.get("transport") or transport_for(cfg.get("backend", "gloo"))
        self.groups = ex.exchange_groups(self.pgs.ep, self.pgs.tp, self.layout, self.pgs.rank, self.transport)
        self.meter = TrafficMeter(self.layout, self.pgs.rank)
        self.rank = self.pgs.rank
        # plugins' exchanges: their pass functions, looked up once (not on every timed call)
        self.plugin_pass = {v: ex.pass_function(v) for v in cfg["variants"] if v not in SPECS}

    def run(self, variant: str, chunks: int, x: torch.Tensor) -> torch.Tensor:
        if variant == "ag":
            tp = self.groups.tp_size
            E, C, M = x.shape
            local = x.view(E, tp, C // tp, M)[:, self.groups.tp_rank].contiguous()
            out = local.new_empty((tp,) + tuple(local.shape))
            self.meter.all_gather(self.groups.tp_ranks, local.numel() * local.element_size(), "ag")
            all_gather(out, local, self.groups.tp).wait()
            return out
        if variant in SPECS:
            return ex.run_pass(x, SPECS[variant], self.groups, chunks, self.meter, variant)
        return self.plugin_pass[variant](x, PLUGIN_SPEC, self.groups, chunks, self.meter, variant)

    def expected(self, variant: str, size_idx: int, shape, dtype, salt: int) -> torch.Tensor:
        """What ``run`` must return, rebuilt from the deterministic inputs of the peers."""
        E, C, M = shape
        tp, tpr = self.groups.tp_size, self.groups.tp_rank
        if variant == "ag":
            x = rank_input(self.rank // tp, size_idx, shape, dtype, salt)
            return x.view(E, tp, C // tp, M).transpose(0, 1).contiguous()
        ep_ranks = self.groups.ep_ranks
        me = ep_ranks.index(self.rank)
        nle = E // len(ep_ranks)
        blocks = [rank_input(r // tp, size_idx, shape, dtype, salt)[me * nle : (me + 1) * nle] for r in ep_ranks]
        full = torch.cat(blocks, 0)
        if variant == "a2a":
            return full.view(E, tp, C // tp, M)[:, tpr].contiguous()
        return full


def _variants(cfg) -> list[tuple[str, int]]:
    from monta import variants as registry

    out = []
    for v in cfg["variants"]:
        if registry.exchange(v).chunked:
            out += [(v, c) for c in cfg["chunks"]]
        else:
            out.append((v, 1))
    if cfg["tp"] > 1 and cfg.get("components", True):
        out += [("a2a", 1), ("ag", 1)]
    return out


def _sync(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize()


# The CI target may end a size only from this many iterations on: a percentile bootstrap over fewer
# samples comes out too narrow (at 5, the pipeline's minimum, a 4 MiB point stopped with CIs "within
# 4%" while its medians, which `monta regress` compares between runs, rested on 5 samples).
CI_MIN_ITERS = 10


def _adaptive(cfg) -> tuple[int, int, float, float]:
    """(min iterations, max iterations, target relative CI width, time budget per size in s): exactly
    ``iters`` unless the config asks for adaptive repetition (``monta bench alltoall --adaptive``)."""
    lo = int(cfg["iters"])
    if not cfg.get("adaptive"):
        return lo, lo, 0.0, 0.0
    hi = max(lo, int(cfg.get("max_iters") or lo))
    return lo, hi, float(cfg.get("target_ci") or 0.0), float(cfg.get("budget_s") or 0.0)


def _key_ratios(variants) -> list[tuple[int, int]]:
    """(numerator, denominator) variant indices of the paired ratios the stopping rule watches:
    legacy / monta_c and deepspeed / monta_c for every chunk count c."""
    idx = {v: i for i, v in enumerate(variants)}
    pairs = []
    for i, (v, _) in enumerate(variants):
        if v == "monta":
            pairs += [(idx[b], i) for b in (("legacy", 1), ("deepspeed", 1)) if b in idx]
    return pairs


def _widest(times_si, pairs, seed: int) -> tuple[float, tuple[int, int] | None]:
    """Widest relative 95% CI among the watched paired ratios of one size (inf if under 3 iterations)."""
    worst, which = 0.0, None
    for a, b in pairs:
        w = rel_width(bootstrap(median_ratio, [times_si[a], times_si[b]], n_boot=1000, seed=seed))
        if w >= worst:
            worst, which = w, (a, b)
    return worst, which


def main(cfg_path: str) -> int:
    with open(cfg_path) as f:
        cfg = json.load(f)
    backend = cfg.get("backend", "gloo")
    beat("joining the process group (init_process_group)")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=cfg.get("collective_timeout_s", 300)))
    torch.set_num_threads(1)
    beat("building the process groups")
    r = Runner(cfg)
    rank, world = r.rank, r.layout.world_size
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = DTYPES[cfg["dtype"]]
    elsize = torch.empty(0, dtype=dtype).element_size()
    shapes = [buffer_shape(s, cfg["experts"], cfg["hidden"], elsize, cfg["tp"]) for s in cfg["sizes"]]
    variants = _variants(cfg)
    for s, shape in zip(cfg["sizes"], shapes):
        for v, c in variants:
            if v == "monta" and c > shape[1] // cfg["tp"]:
                raise ValueError(f"chunks={c} exceeds the capacity slice {shape[1] // cfg['tp']} at size {s} B")
    slow_variant, slow_frac = _injected(cfg)

    host_line = {
        "rank": rank,
        "host": os.environ.get("MONTA_HOST", socket.gethostname()),
        "addr": os.environ.get("MONTA_BIND_ADDR", os.environ.get("MASTER_ADDR", "?")),
        "node": r.layout.node_of(rank),
        "pid": os.getpid(),
        "device": str(device),
    }
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, host_line)
    if rank == 0:
        _print_header(cfg, r.layout, hosts, r.transport)

    inputs = [rank_input(rank // cfg["tp"], i, shp, dtype).to(device) for i, shp in enumerate(shapes)]
    # Warm up every size and variant first (connections, allocator), as nccl-tests does.
    for si, x in enumerate(inputs):
        beat(f"warm-up of size {format_size(cfg['sizes'][si])}")
        for v, c in variants:
            for _ in range(cfg["warmup"]):
                r.run(v, c, x)
    _sync(inputs[0])

    min_it, max_it, target, budget = _adaptive(cfg)
    load = HostLoad().start() if rank == 0 else None
    times: list[list[list[float]]] = [[[] for _ in variants] for _ in shapes]  # [size][variant][iteration]
    cpu: list[list[list[float]]] = [[[] for _ in variants] for _ in shapes]
    clean: list[list[list[float]]] = [[[] for _ in variants] for _ in shapes]  # injected variant, without its delay
    spans: list[list[list[tuple[float, float]]]] = [[[] for _ in variants] for _ in shapes]
    stop_note: list[str] = [""] * len(shapes)
    # per size and variant: this rank's scheduler run delay and the wall time it accrued over
    waits = torch.zeros(len(shapes), len(variants), 2, dtype=torch.float64)
    bytes_per_call: dict[tuple[int, int], tuple[int, int]] = {}
    pairs = _key_ratios(variants)
    for si, x in enumerate(inputs):
        t_size = time.perf_counter()
        it = 0
        while True:
            beat(f"timing size {format_size(cfg['sizes'][si])} ({si + 1}/{len(shapes)}), iteration {it + 1}")
            round_t = torch.zeros(len(variants), dtype=torch.float64)
            round_c = torch.zeros(len(variants), dtype=torch.float64)
            round_clean = torch.zeros(len(variants), dtype=torch.float64)  # before an injected delay
            # Interleave variants, rotating the order each iteration so drift and noise hit all alike.
            k = it % len(variants)
            for vi in list(range(k, len(variants))) + list(range(k)):
                v, c = variants[vi]
                r.meter.reset()
                d0 = own_run_delay_s()
                dist.barrier()
                c0, t0 = time.process_time(), time.perf_counter()
                r.run(v, c, x)
                _sync(x)
                if v == slow_variant:  # TEST AID (--inject-slowdown): a measured delay, marked in the records
                    # Every rank sleeps the same share of the variant's median so far (slowest rank per
                    # iteration, from the all-reduced history), so the iteration's time grows by that
                    # share exactly. A sleep of each rank's own elapsed share fell short on CPU-bound
                    # sizes (+2.5-5% instead of 10% at 1 MiB on 2 x 4): a rank that sleeps frees its core
                    # for the slowest one.
                    history = clean[si][vi]
                    own = time.perf_counter() - t0
                    round_clean[vi] = own
                    time.sleep(slow_frac * (statistics.median(history) if history else own))
                t1 = time.perf_counter()
                round_t[vi] = t1 - t0
                round_c[vi] = time.process_time() - c0
                d1 = own_run_delay_s()
                if d0 is not None and d1 is not None:
                    waits[si, vi, 0] += d1 - d0
                    waits[si, vi, 1] += t1 - t0
                if load is not None:
                    spans[si][vi].append((t0, t1))
                bytes_per_call[(si, vi)] = (r.meter.inter, r.meter.intra)
            dist.all_reduce(round_t, op=dist.ReduceOp.MAX)  # an iteration lasts until its slowest rank is done
            if slow_variant is not None:
                dist.all_reduce(round_clean, op=dist.ReduceOp.MAX)
            dist.all_reduce(round_c, op=dist.ReduceOp.SUM)
            for vi in range(len(variants)):
                if round_clean[vi] > 0:
                    clean[si][vi].append(float(round_clean[vi]))
                times[si][vi].append(float(round_t[vi]))
                cpu[si][vi].append(float(round_c[vi]) / world)
            it += 1
            # Rank 0 decides whether to go on and tells everyone (one small broadcast per round).
            go = torch.zeros(1, dtype=torch.int64)
            if rank == 0:
                elapsed = time.perf_counter() - t_size
                width, which = _widest(times[si], pairs, seed=si) if pairs and target > 0 and it >= 3 else (0.0, None)
                if it < min_it:
                    go[0] = 1
                elif not cfg.get("adaptive"):
                    stop_note[si] = f"{it} iterations as asked"
                elif it >= max_it:
                    stop_note[si] = f"max {max_it} iterations" + (f", widest CI {100 * width:.1f}%" if which else "")
                elif target > 0 and pairs and (width > target or it < CI_MIN_ITERS):
                    if budget and elapsed + elapsed / it > budget:
                        stop_note[si] = (
                            f"time budget {budget:g} s spent, widest CI {100 * width:.1f}% "
                            f"({_ratio_name(variants, which)}) "
                            + (
                                f"above the {100 * target:g}% target"
                                if width > target
                                else f"within the {100 * target:g}% target but from {it} < {CI_MIN_ITERS} iterations"
                            )
                        )
                    else:
                        go[0] = 1
                else:
                    stop_note[si] = (
                        f"every paired ratio's 95% CI within {100 * target:g}%"
                        if target > 0 and pairs
                        else f"{it} iterations as asked"
                    )
            dist.broadcast(go, 0)
            if not int(go[0]):
                break
        if rank == 0:
            print(
                f"# timed {format_size(cfg['sizes'][si])} ({si + 1}/{len(shapes)}): {it} iterations, "
                f"{time.perf_counter() - t_size:.1f} s ({stop_note[si]})",
                file=sys.stderr,
                flush=True,
            )
    if load is not None:
        load.stop()
    measured_wait = torch.tensor([float(own_run_delay_s() is not None)], dtype=torch.float64)
    dist.all_reduce(waits, op=dist.ReduceOp.SUM)
    dist.all_reduce(measured_wait, op=dist.ReduceOp.MIN)

    wrong = torch.zeros(len(shapes), len(variants), dtype=torch.int64)
    if cfg["check"]:
        ex.FAULT.enabled = bool(cfg.get("inject_fault"))
        for si, shp in enumerate(shapes):
            beat(f"checking size {format_size(cfg['sizes'][si])}")
            for vi, (v, c) in enumerate(variants):
                x = rank_input(rank // cfg["tp"], si, shp, dtype, salt=1).to(device)  # fresh data
                got = r.run(v, c, x)
                wrong[si, vi] = int((got.cpu() != r.expected(v, si, shp, dtype, salt=1)).sum())
        ex.FAULT.enabled = False
        dist.all_reduce(wrong, op=dist.ReduceOp.SUM)

    beat("writing the records")
    if rank == 0:
        host = [[load.window(spans[si][vi]) for vi in range(len(variants))] for si in range(len(shapes))]
        if float(measured_wait[0]):  # the ranks' own wait for a core, averaged over ranks
            for si in range(len(shapes)):
                for vi in range(len(variants)):
                    d, w = waits[si, vi].tolist()
                    host[si][vi]["rank_wait"] = d / w if w > 0 else None
        records = _records(
            cfg,
            r.layout,
            variants,
            times,
            cpu,
            wrong,
            bytes_per_call,
            host,
            stop_note,
            r.transport,
            (slow_variant, slow_frac),
            clean,
        )
        _print_table(cfg, records)
        if cfg.get("out"):
            write_records(cfg["out"], records, append=cfg.get("append", False))
            print(f"# wrote {len(records)} records to {cfg['out']}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _injected(cfg) -> tuple[str | None, float]:
    spec = cfg.get("inject_slowdown")
    if not spec:
        return None, 0.0
    return spec["variant"], float(spec["fraction"])


def _ratio_name(variants, pair) -> str:
    if not pair:
        return "-"
    (a, _), (b, cb) = variants[pair[0]], variants[pair[1]]
    return f"{a}/{b}{cb if b == 'monta' else ''}"


def _net_tuning() -> dict[str, Any]:
    try:
        return json.loads(os.environ.get("MONTA_NET_TUNING") or "{}")
    except ValueError:
        return {}


def _records(
    cfg, layout, variants, times, cpu, wrong, bytes_per_call, host, stop_note, transport, injected, clean
) -> list[dict]:
    run_id = cfg.get("run_id") or new_run_id()
    env = environment()
    env.update(
        {
            "backend": cfg.get("backend", "gloo"),
            "emulated": os.environ.get("MONTA_EMULATED") == "1",
            "transport": transport,
            "net_tuning": _net_tuning(),
            "cores": cores(),
        }
    )
    source = "emulated" if os.environ.get("MONTA_EMULATED") == "1" else "measured"
    topo = cfg.get("topology") or {}
    idx = {vc: i for i, vc in enumerate(variants)}
    records = []
    for si, size in enumerate(cfg["sizes"]):
        t = [[x * 1e6 for x in times[si][vi]] for vi in range(len(variants))]
        for vi, (v, c) in enumerate(variants):
            m = summarize(t[vi])
            algbw, busbw = alltoall_bw(size, m["time_us"], layout.ep)
            inter, intra = bytes_per_call[(si, vi)]
            load = host[si][vi]
            m.update(
                samples_us=t[vi],
                iters=len(t[vi]),
                stop=stop_note[si],
                algbw_GBps=algbw,
                busbw_GBps=busbw,
                inter_bytes=inter,
                intra_bytes=intra,
                wrong=int(wrong[si, vi]),
                cpu_us=statistics.median(cpu[si][vi]) * 1e6,
                checked=bool(cfg["check"]),
                host_cpu=load,
                cpu_bound=is_cpu_bound(load),
            )
            link = _link_delivery(layout, topo, m["time_us"], inter, intra, v)
            if link:
                m["link_delivery"] = link
            # Paired per-iteration ratios (same iteration, rotated order): speedup of this variant.
            for base in ("legacy", "deepspeed"):
                bi = idx.get((base, 1))
                if bi is not None and bi != vi:
                    pt, lo, hi = bootstrap(median_ratio, [t[bi], t[vi]], seed=1000 * si + vi)
                    m[f"speedup_vs_{base}"], m[f"speedup_vs_{base}_ci"] = pt, [lo, hi]
                elif bi == vi:
                    m[f"speedup_vs_{base}"], m[f"speedup_vs_{base}_ci"] = 1.0, [1.0, 1.0]
            parts = [idx.get(k) for k in (("deepspeed", 1), ("a2a", 1), ("ag", 1))]
            if v == "monta" and None not in parts:
                ds, a, g = (t[i] for i in parts)
                pt, lo, hi = bootstrap(overlap_efficiency, [ds, t[vi], a, g], seed=7 + 1000 * si + vi)
                ds_, m_, a_, g_ = _arrays(ds, t[vi], a, g)
                ideal = bootstrap(lambda d, x, y: median_ratio(d, _np_max(x, y)), [ds, a, g], seed=si)
                m.update(
                    overlap_efficiency=pt,
                    overlap_efficiency_ci=[lo, hi],
                    ideal_vs_deepspeed=ideal[0],
                    ideal_vs_deepspeed_ci=[ideal[1], ideal[2]],
                    # context: deepspeed against its two halves run alone (< 1: it overlaps a little
                    # by itself), and the efficiency by the earlier (t_a2a + t_ag) / max ideal
                    deepspeed_vs_halves=float(median_ratio(ds_, a_ + g_)),
                    overlap_efficiency_vs_sum=float(overlap_efficiency_vs_sum(ds_, m_, a_, g_)),
                )
            if injected[0] == v:
                m["injected_slowdown"] = injected[1]  # TEST AID: this variant was slowed on purpose
                # ... and what it took before its delay, so a gate check can tell the injection from a
                # run that moved by itself (monta regress shows it)
                own = [x * 1e6 for x in clean[si][vi]]
                if own:
                    m["samples_clean_us"], m["time_clean_us"] = own, float(statistics.median(own))
            params = {
                "size_bytes": size,
                "variant": v,
                "chunks": c,
                "nodes": layout.nodes,
                "gpus_per_node": layout.gpus_per_node,
                "tp": layout.tp,
                "ep": layout.ep,
                "dtype": cfg["dtype"],
                "experts": cfg["experts"],
                "hidden": cfg["hidden"],
                "topology": topo.get("name"),
                "inter_gbps": topo.get("inter_gbps"),
                "intra_gbps": topo.get("intra_gbps"),
            }
            records.append(
                make_record(
                    kind="alltoall",
                    source=source,
                    experiment=cfg.get("experiment", "alltoall"),
                    params=params,
                    metrics=m,
                    config=cfg,
                    env=env,
                    run_id=run_id,
                )
            )
    return records


def _arrays(*lists):
    import numpy as np

    return [np.asarray(x, dtype=float) for x in lists]


def _np_max(a, b):
    import numpy as np

    return np.maximum(a, b)


# Payload per frame on the emulated NIC (1448 B of TCP payload in a 1514 B frame; htb counts frames).
PAYLOAD_SHARE = 1448 / 1514
LINK_SHORTFALL = 0.85  # below this share of the payload ceiling, a link did not deliver its rate
# Only transfers that take this long at the configured rate are judged: shorter ones are bound by
# latency and start skew (and the htb bucket lets their first 32 KiB through unshaped).
LINK_JUDGED_S = 0.02


def _link_delivery(layout, topo, time_us, inter, intra, variant) -> dict[str, float] | None:
    """Share of its configured rate the shaped link delivered in this variant's exchange, where the
    exchange is that link alone: legacy and a2a (inter-node NIC), ag (the node's loopback).
    Every rank of a node sends the same bytes, so a node's link carried gpus_per_node x them."""
    if variant in ("legacy", "a2a") and topo.get("inter_gbps") and inter:
        link, rate, nbytes = "inter", topo["inter_gbps"] * 1e9 / 8 * PAYLOAD_SHARE, layout.gpus_per_node * inter
    elif variant == "ag" and topo.get("intra_gbps") and intra:
        link, rate, nbytes = "intra", topo["intra_gbps"] * 1e9 / 8, layout.gpus_per_node * intra
    else:
        return None
    ideal_s = nbytes / rate
    return {
        "link": link,
        "share": ideal_s / (time_us * 1e-6),
        "ideal_ms": 1e3 * ideal_s,
        "judged": ideal_s >= LINK_JUDGED_S,
    }


def _print_header(cfg, layout, hosts, transport) -> None:
    env = environment()
    print(
        f"# monta bench alltoall  (monta {env['monta']}, torch {torch.__version__}, python {env['python']}, "
        f"commit {env.get('git_commit')})"
    )
    print(f"# layout: {layout.describe()}; backend {cfg.get('backend', 'gloo')}, transport {transport}")
    topo = cfg.get("topology") or {}
    tuning = _net_tuning()
    tun = f"; tcp {tuning.get('tcp_cc')}, quickack {'on' if tuning.get('quickack') else 'off'}" if tuning else ""
    print(f"# network: {topo.get('description', 'unshaped')}{tun}")
    knobs = {
        k: cfg.get(k)
        for k in (
            "sizes",
            "variants",
            "chunks",
            "dtype",
            "experts",
            "hidden",
            "warmup",
            "iters",
            "adaptive",
            "max_iters",
            "target_ci",
            "budget_s",
            "check",
        )
    }
    print("# " + " ".join(f"{k}={v}" for k, v in knobs.items()))
    if cfg.get("inject_slowdown"):
        sd = cfg["inject_slowdown"]
        print(
            f"# TEST AID: --inject-slowdown slows {sd['variant']} by {100 * sd['fraction']:g}% on purpose "
            "(a measured delay after each call); its records say injected_slowdown"
        )
    print("# size = bytes of one rank's [E, C, M] dispatch buffer; algbw = size / time; busbw = algbw * (EP-1)/EP;")
    print("# time = median over iterations of the slowest rank; inter/intra = bytes this rank sent per call;")
    print("# a2a / ag rows = the drop-side AllToAll and the AllGather alone (the halves monta overlaps);")
    if cfg.get("adaptive"):
        print(
            "# iterations (--adaptive): at least --iters, then more until every paired ratio's 95% CI is within "
            "--target-ci (or --max-iters / --budget-s)"
        )
    else:
        print("# iterations: exactly --iters (--adaptive repeats until the paired ratios' CIs are narrow)")
    for h in hosts:
        print(
            f"#   rank {h['rank']:3d}  node {h['node']}  host {h['host']}  addr {h['addr']}  "
            f"pid {h['pid']}  {h['device']}"
        )


def _print_table(cfg, records) -> None:
    hdr = (
        f"{'size(B)':>10} {'variant':>9} {'chunks':>6} {'time(us)':>11} {'p10':>10} {'p90':>10} {'n':>3} "
        f"{'algbw(GB/s)':>11} {'busbw(GB/s)':>11} {'inter(B)':>10} {'intra(B)':>10} {'cpu(us)':>10} {'#wrong':>6} "
        f"{'vs legacy [95% CI]':>20}"
    )
    print(hdr)
    for rec in records:
        p, m = rec["params"], rec["metrics"]
        wrong = m["wrong"] if m["checked"] else "N/A"
        sp = _fmt_ci(m.get("speedup_vs_legacy"), m.get("speedup_vs_legacy_ci"))
        print(
            f"{p['size_bytes']:>10} {p['variant']:>9} {p['chunks']:>6} {m['time_us']:>11.1f} {m['time_us_p10']:>10.1f} "
            f"{m['time_us_p90']:>10.1f} {m['iters']:>3} {m['algbw_GBps']:>11.3f} {m['busbw_GBps']:>11.3f} "
            f"{m['inter_bytes']:>10} {m['intra_bytes']:>10} {m['cpu_us']:>10.0f} {wrong:>6} {sp:>20}"
        )
    _print_footer(records)


def _fmt_ci(point, ci) -> str:
    if point is None:
        return "-"
    if not ci or ci[0] != ci[0]:
        return f"{point:.3f}"
    return f"{point:.3f} [{ci[0]:.3f},{ci[1]:.3f}]"


def summary_rows(records) -> list[dict[str, Any]]:
    """Per size: monta (best chunks) vs legacy and deepspeed as paired ratios with their CIs, the
    overlap efficiency with its CI, the byte bound, link delivery and the host CPU verdict."""
    by_size: dict[int, dict[tuple[str, int], dict]] = {}
    for rec in records:
        by_size.setdefault(rec["params"]["size_bytes"], {})[(rec["params"]["variant"], rec["params"]["chunks"])] = rec
    out = []
    for size, vs in sorted(by_size.items()):
        monta = {c: rec for (v, c), rec in vs.items() if v == "monta"}
        if not monta:
            continue
        best_c = min(monta, key=lambda c: monta[c]["metrics"]["time_us"])
        m = monta[best_c]["metrics"]
        p = monta[best_c]["params"]
        row: dict[str, Any] = {
            "size_bytes": size,
            "best_chunks": best_c,
            "t_monta": m["time_us"],
            "iters": m["iters"],
            "stop": m.get("stop"),
            "tp": p["tp"],
        }
        for base in ("legacy", "deepspeed"):
            if f"speedup_vs_{base}" in m and (base, 1) in vs:
                row[f"vs_{base}"], row[f"vs_{base}_ci"] = m[f"speedup_vs_{base}"], m[f"speedup_vs_{base}_ci"]
        if "overlap_efficiency" in m:
            row.update(
                ideal_vs_deepspeed=m["ideal_vs_deepspeed"],
                ideal_vs_deepspeed_ci=m["ideal_vs_deepspeed_ci"],
                overlap_efficiency=m["overlap_efficiency"],
                overlap_efficiency_ci=m["overlap_efficiency_ci"],
                deepspeed_vs_halves=m.get("deepspeed_vs_halves"),
            )
        # The byte bound: monta moves TP times fewer inter-node bytes than legacy, so on a link-bound
        # testbed its speedup over legacy cannot exceed TP (5% slack for measurement noise).
        if "vs_legacy" in row:
            row["byte_bound"] = p["tp"]
            lo = row["vs_legacy_ci"][0]
            row["above_bound"] = bool(lo == lo and lo > 1.05 * p["tp"])
        if ("a2a", 1) in vs and ("ag", 1) in vs:
            # r = AllGather alone / AllToAll alone; k pipelined chunks gain at most TP / (r + 1/k) over
            # legacy (TP / (1 + r/k) when r <= 1): the bound of the whole exchange, not only its bytes.
            r = vs[("ag", 1)]["metrics"]["time_us"] / vs[("a2a", 1)]["metrics"]["time_us"]
            row["ag_over_a2a"] = r
            row["pipeline_bound"] = p["tp"] / (r + 1 / best_c) if r >= 1 else p["tp"] / (1 + r / best_c)
        loads = [rec["metrics"].get("host_cpu") for rec in vs.values()]
        row["host_cpu"] = _merge_loads(loads)
        # The size's ratios are CPU-bound when a variant they are computed from was (legacy,
        # deepspeed, the best monta, the two halves); other chunk counts are named, not counted.
        reported = {("legacy", 1), ("deepspeed", 1), ("monta", best_c), ("a2a", 1), ("ag", 1)}
        bound = {vc: rec for vc, rec in vs.items() if is_cpu_bound(rec["metrics"].get("host_cpu"))}
        row["cpu_bound_variants"] = [_wait_label(vc, rec) for vc, rec in bound.items() if vc in reported]
        row["cpu_bound_others"] = [_wait_label(vc, rec) for vc, rec in bound.items() if vc not in reported]
        row["cpu_bound"] = bool(row["cpu_bound_variants"])
        shortfall = [
            f"{rec['params']['variant']} {100 * rec['metrics']['link_delivery']['share']:.0f}% of its "
            f"{rec['metrics']['link_delivery']['link']} link"
            for rec in vs.values()
            if rec["metrics"].get("link_delivery")
            and rec["metrics"]["link_delivery"].get("judged", True)
            and rec["metrics"]["link_delivery"]["share"] < LINK_SHORTFALL
        ]
        row["link_shortfall"] = shortfall
        row["links"] = {
            rec["params"]["variant"]: rec["metrics"]["link_delivery"]
            for rec in vs.values()
            if rec["metrics"].get("link_delivery")
        }
        out.append(row)
    return out


def _wait_label(vc, rec) -> str:
    v, c = vc
    wait = (rec["metrics"].get("host_cpu") or {}).get("rank_wait")
    return f"{v}{c if v == 'monta' else ''}" + (f" ({100 * wait:.0f}%)" if wait is not None else "")


def _merge_loads(loads) -> dict[str, float] | None:
    """Time-weighted mean of several windows' CPU figures."""
    loads = [x for x in loads if x and x.get("busy") is not None and x.get("sampled_s")]
    if not loads:
        return None
    w = sum(x["sampled_s"] for x in loads)
    out = {k: sum(x[k] * x["sampled_s"] for x in loads) / w for k in ("busy", "saturated")}
    waits = [x for x in loads if x.get("rank_wait") is not None]
    out["rank_wait"] = sum(x["rank_wait"] * x["sampled_s"] for x in waits) / w if len(waits) == len(loads) else None
    psi = [x for x in loads if x.get("psi_some") is not None]
    out["psi_some"] = sum(x["psi_some"] * x["sampled_s"] for x in psi) / w if len(psi) == len(loads) else None
    out["sampled_s"] = w
    return out


def _print_footer(records) -> None:
    rows = summary_rows(records)
    if not rows:
        return
    print(
        "# summary per size: monta (best chunks) speedup vs legacy and vs deepspeed = median of the paired "
        "per-iteration ratios [95% bootstrap CI over iterations];"
    )
    print(
        "# ideal = t_deepspeed / max(t_a2a, t_ag), the gain of a perfect overlap; overlap efficiency = (gain - 1) / "
        "(ideal - 1), the share of it achieved; bound = TP (legacy sends TP x the inter-node bytes)"
    )
    for row in rows:
        parts = [f"{format_size(row['size_bytes']):>6}", f"chunks {row['best_chunks']}", f"n={row['iters']}"]
        if "vs_legacy" in row:
            flag = "  ABOVE THE BYTE BOUND: a testbed problem" if row["above_bound"] else ""
            pipe = (
                f", pipeline {row['pipeline_bound']:.2f} at ag/a2a {row['ag_over_a2a']:.2f}"
                if "pipeline_bound" in row
                else ""
            )
            parts.append(
                f"vs legacy {_fmt_ci(row['vs_legacy'], row['vs_legacy_ci'])} (bound {row['byte_bound']}{pipe}){flag}"
            )
        if "vs_deepspeed" in row:
            parts.append(f"vs deepspeed {_fmt_ci(row['vs_deepspeed'], row['vs_deepspeed_ci'])}")
        if "overlap_efficiency" in row:
            lo, hi = row["overlap_efficiency_ci"]
            ci = f" [{100 * lo:.0f}%, {100 * hi:.0f}%]" if lo == lo else ""
            halves = row.get("deepspeed_vs_halves")
            sums = f" (deepspeed = {halves:.2f} x (a2a + ag))" if halves is not None else ""
            parts.append(
                f"ideal {row['ideal_vs_deepspeed']:.2f}x efficiency {100 * row['overlap_efficiency']:.0f}%{ci}{sums}"
            )
        print("# " + "  ".join(parts))
        links = ", ".join(
            f"{v} {100 * d['share']:.0f}% ({d['link']})" for v, d in row["links"].items() if d.get("judged", True)
        )
        if links:
            print(f"#        links delivered (of the payload rate): {links}")
        if row["link_shortfall"]:
            print(
                f"#        LINK SHORTFALL: {'; '.join(row['link_shortfall'])} (below {100 * LINK_SHORTFALL:.0f}%): "
                "the emulator, not the method"
            )
        line = verdict(row["host_cpu"])
        if row["cpu_bound_variants"]:
            line = (
                f"CPU-BOUND: {', '.join(row['cpu_bound_variants'])} over the limit; all variants: "
                + line.split(": ", 1)[1]
            )
        elif line.startswith("CPU-BOUND"):  # the average says bound, no reported variant does
            line = "CPU: reported variants not bound; all variants: " + line.split(": ", 1)[1]
        print(f"#        {line}")
        if row["cpu_bound_others"]:
            print(
                f"#        CPU-bound (not in the ratios above): {', '.join(row['cpu_bound_others'])}: their times "
                "measure this machine's cores"
            )
    n_bound = sum(r["cpu_bound"] for r in rows)
    if n_bound:
        print(
            f"# CPU-BOUND: {n_bound} of {len(rows)} sizes had timings limited by this machine's cores (see above); "
            "their ratios are the emulator talking, not the method"
        )
    injected = {
        r["params"]["variant"]: r["metrics"]["injected_slowdown"]
        for r in records
        if r["metrics"].get("injected_slowdown")
    }
    for v, f in injected.items():
        print(f"# TEST AID: {v} was slowed by {100 * f:g}% on purpose (--inject-slowdown)")
    n_wrong = sum(r["metrics"]["wrong"] for r in records)
    checked = all(r["metrics"]["checked"] for r in records)
    print(f"# Out of bounds values : {n_wrong if checked else 'N/A'} {'OK' if checked and n_wrong == 0 else ''}")
    busbw = [r["metrics"]["busbw_GBps"] for r in records if r["params"]["variant"] not in ("a2a", "ag")]
    print(f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):.4f} GB/s")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
