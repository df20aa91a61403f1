"""Rank side of ``monta bench alltoall``: times the TP dispatch exchange variants, checks them,
and (rank 0) prints the nccl-tests-style table and writes the records.

Started once per rank by the launcher with torchrun's environment (RANK, WORLD_SIZE, MASTER_*).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from monta.bench.stats import alltoall_bw, summarize
from monta.comm import exchange as ex
from monta.comm.accounting import TrafficMeter
from monta.comm.collectives import all_gather
from monta.groups import build_process_groups
from monta.parallel import ParallelLayout
from monta.results import environment, make_record, new_run_id, write_records
from monta.units import format_size

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Each variant: how one dispatch pass runs. a2a/ag are the two halves alone (for the overlap bound).
SPECS = {"legacy": ex.PassSpec(False, False), "deepspeed": ex.PassSpec(True, True),
         "monta": ex.PassSpec(True, True), "a2a": ex.PassSpec(True, False)}


def buffer_shape(size_bytes: int, experts: int, hidden: int, elsize: int, tp: int) -> tuple[int, int, int]:
    per_row = experts * hidden * elsize
    if size_bytes % per_row or (size_bytes // per_row) % tp:
        raise ValueError(f"size {size_bytes} B is not a whole [E={experts}, C, M={hidden}] buffer with C "
                         f"divisible by TP={tp}; use sizes that are multiples of {per_row * tp} B")
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
        self.groups = ex.exchange_groups(self.pgs.ep, self.pgs.tp, self.layout, self.pgs.rank)
        self.meter = TrafficMeter(self.layout, self.pgs.rank)
        self.rank = self.pgs.rank

    def run(self, variant: str, chunks: int, x: torch.Tensor) -> torch.Tensor:
        if variant == "ag":
            tp = self.groups.tp_size
            E, C, M = x.shape
            local = x.view(E, tp, C // tp, M)[:, self.groups.tp_rank].contiguous()
            out = local.new_empty((tp,) + tuple(local.shape))
            self.meter.all_gather(self.groups.tp_ranks, local.numel() * local.element_size(), "ag")
            all_gather(out, local, self.groups.tp).wait()
            return out
        return ex.run_pass(x, SPECS[variant], self.groups, chunks, self.meter, variant)

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
        blocks = [rank_input(r // tp, size_idx, shape, dtype, salt)[me * nle:(me + 1) * nle] for r in ep_ranks]
        full = torch.cat(blocks, 0)
        if variant == "a2a":
            return full.view(E, tp, C // tp, M)[:, tpr].contiguous()
        return full


def _variants(cfg) -> list[tuple[str, int]]:
    out = []
    for v in cfg["variants"]:
        if v == "monta":
            out += [("monta", c) for c in cfg["chunks"]]
        else:
            out.append((v, 1))
    if cfg["tp"] > 1 and cfg.get("components", True):
        out += [("a2a", 1), ("ag", 1)]
    return out


def _sync(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize()


def main(cfg_path: str) -> int:
    with open(cfg_path) as f:
        cfg = json.load(f)
    backend = cfg.get("backend", "gloo")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=cfg.get("collective_timeout_s", 300)))
    torch.set_num_threads(1)
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

    host_line = {"rank": rank, "host": os.environ.get("MONTA_HOST", socket.gethostname()),
                 "addr": os.environ.get("MONTA_BIND_ADDR", os.environ.get("MASTER_ADDR", "?")),
                 "node": r.layout.node_of(rank), "pid": os.getpid(), "device": str(device)}
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, host_line)
    if rank == 0:
        _print_header(cfg, r.layout, hosts)

    inputs = [rank_input(rank // cfg["tp"], i, shp, dtype).to(device) for i, shp in enumerate(shapes)]
    # Warm up every size and variant first (connections, allocator), as nccl-tests does.
    for x in inputs:
        for v, c in variants:
            for _ in range(cfg["warmup"]):
                r.run(v, c, x)
    _sync(inputs[0])

    n_iter = cfg["iters"]
    times = torch.zeros(len(shapes), len(variants), n_iter, dtype=torch.float64)
    cpu = torch.zeros_like(times)
    bytes_per_call: dict[tuple[int, int], tuple[int, int]] = {}
    for si, x in enumerate(inputs):
        for it in range(n_iter):
            # Interleave variants, rotating the order each iteration so drift and noise hit all alike.
            k = it % len(variants)
            for vi in list(range(k, len(variants))) + list(range(k)):
                v, c = variants[vi]
                r.meter.reset()
                dist.barrier()
                c0, t0 = time.process_time(), time.perf_counter()
                r.run(v, c, x)
                _sync(x)
                times[si, vi, it] = time.perf_counter() - t0
                cpu[si, vi, it] = time.process_time() - c0
                bytes_per_call[(si, vi)] = (r.meter.inter, r.meter.intra)
        if rank == 0:
            print(f"# timed {format_size(cfg['sizes'][si])} ({si + 1}/{len(shapes)})", file=sys.stderr, flush=True)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # an iteration lasts until its slowest rank is done
    dist.all_reduce(cpu, op=dist.ReduceOp.SUM)
    cpu /= world

    wrong = torch.zeros(len(shapes), len(variants), dtype=torch.int64)
    if cfg["check"]:
        ex.FAULT.enabled = bool(cfg.get("inject_fault"))
        for si, shp in enumerate(shapes):
            for vi, (v, c) in enumerate(variants):
                x = rank_input(rank // cfg["tp"], si, shp, dtype, salt=1).to(device)  # fresh data
                got = r.run(v, c, x)
                wrong[si, vi] = int((got.cpu() != r.expected(v, si, shp, dtype, salt=1)).sum())
        ex.FAULT.enabled = False
        dist.all_reduce(wrong, op=dist.ReduceOp.SUM)

    if rank == 0:
        records = _records(cfg, r.layout, variants, times, cpu, wrong, bytes_per_call)
        _print_table(cfg, records)
        if cfg.get("out"):
            write_records(cfg["out"], records, append=cfg.get("append", False))
            print(f"# wrote {len(records)} records to {cfg['out']}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _records(cfg, layout, variants, times, cpu, wrong, bytes_per_call) -> list[dict]:
    run_id = cfg.get("run_id") or new_run_id()
    env = environment()
    env.update({"backend": cfg.get("backend", "gloo"), "emulated": os.environ.get("MONTA_EMULATED") == "1"})
    source = "emulated" if os.environ.get("MONTA_EMULATED") == "1" else "measured"
    records = []
    for si, size in enumerate(cfg["sizes"]):
        legacy_t = None
        rows = []
        for vi, (v, c) in enumerate(variants):
            samples = [t * 1e6 for t in times[si, vi].tolist()]
            m = summarize(samples)
            algbw, busbw = alltoall_bw(size, m["time_us"], layout.ep)
            inter, intra = bytes_per_call[(si, vi)]
            m.update(samples_us=samples, algbw_GBps=algbw, busbw_GBps=busbw, inter_bytes=inter, intra_bytes=intra,
                     wrong=int(wrong[si, vi]), cpu_us=float(cpu[si, vi].median()) * 1e6, checked=bool(cfg["check"]))
            if v == "legacy":
                legacy_t = m["time_us"]
            rows.append((v, c, m))
        for v, c, m in rows:
            m["speedup_vs_legacy"] = legacy_t / m["time_us"] if legacy_t else None
            params = {"size_bytes": size, "variant": v, "chunks": c, "nodes": layout.nodes,
                      "gpus_per_node": layout.gpus_per_node, "tp": layout.tp, "ep": layout.ep, "dtype": cfg["dtype"],
                      "experts": cfg["experts"], "hidden": cfg["hidden"], "topology": cfg.get("topology", {}).get("name"),
                      "inter_gbps": cfg.get("topology", {}).get("inter_gbps"),
                      "intra_gbps": cfg.get("topology", {}).get("intra_gbps")}
            records.append(make_record(kind="alltoall", source=source, experiment=cfg.get("experiment", "alltoall"),
                                       params=params, metrics=m, config=cfg, env=env, run_id=run_id))
    return records


def _print_header(cfg, layout, hosts) -> None:
    env = environment()
    print(f"# monta bench alltoall  (monta {env['monta']}, torch {torch.__version__}, python {env['python']}, "
          f"commit {env.get('git_commit')})")
    print(f"# layout: {layout.describe()}; backend {cfg.get('backend', 'gloo')}")
    topo = cfg.get("topology") or {}
    print(f"# network: {topo.get('description', 'unshaped')}")
    knobs = {k: cfg[k] for k in ("sizes", "variants", "chunks", "dtype", "experts", "hidden", "warmup", "iters", "check")}
    print("# " + " ".join(f"{k}={v}" for k, v in knobs.items()))
    print("# size = bytes of one rank's [E, C, M] dispatch buffer; algbw = size / time; busbw = algbw * (EP-1)/EP;")
    print("# time = median over iterations of the slowest rank; inter/intra = bytes this rank sent per call;")
    print("# a2a / ag rows = the drop-side AllToAll and the AllGather alone (the halves monta overlaps).")
    for h in hosts:
        print(f"#   rank {h['rank']:3d}  node {h['node']}  host {h['host']}  addr {h['addr']}  pid {h['pid']}  {h['device']}")


def _print_table(cfg, records) -> None:
    hdr = (f"{'size(B)':>10} {'variant':>9} {'chunks':>6} {'time(us)':>11} {'p10':>10} {'p90':>10} {'algbw(GB/s)':>11} "
           f"{'busbw(GB/s)':>11} {'inter(B)':>10} {'intra(B)':>10} {'cpu(us)':>10} {'#wrong':>6} {'speedup':>7}")
    print(hdr)
    for rec in records:
        p, m = rec["params"], rec["metrics"]
        wrong = m["wrong"] if m["checked"] else "N/A"
        sp = f"{m['speedup_vs_legacy']:.2f}" if m["speedup_vs_legacy"] else "-"
        print(f"{p['size_bytes']:>10} {p['variant']:>9} {p['chunks']:>6} {m['time_us']:>11.1f} {m['time_us_p10']:>10.1f} "
              f"{m['time_us_p90']:>10.1f} {m['algbw_GBps']:>11.3f} {m['busbw_GBps']:>11.3f} {m['inter_bytes']:>10} "
              f"{m['intra_bytes']:>10} {m['cpu_us']:>10.0f} {wrong:>6} {sp:>7}")
    _print_footer(records)


def summary_rows(records) -> list[dict[str, Any]]:
    """Per size: monta (best chunks) vs legacy and deepspeed, and the overlap efficiency bound."""
    by_size: dict[int, dict[tuple[str, int], dict]] = {}
    for rec in records:
        by_size.setdefault(rec["params"]["size_bytes"], {})[(rec["params"]["variant"], rec["params"]["chunks"])] = rec["metrics"]
    out = []
    for size, vs in sorted(by_size.items()):
        monta = {c: m for (v, c), m in vs.items() if v == "monta"}
        if not monta:
            continue
        best_c = min(monta, key=lambda c: monta[c]["time_us"])
        t_m = monta[best_c]["time_us"]
        row = {"size_bytes": size, "best_chunks": best_c, "t_monta": t_m}
        if ("legacy", 1) in vs:
            row["vs_legacy"] = vs[("legacy", 1)]["time_us"] / t_m
        if ("deepspeed", 1) in vs:
            row["vs_deepspeed"] = vs[("deepspeed", 1)]["time_us"] / t_m
        if ("a2a", 1) in vs and ("ag", 1) in vs and "vs_deepspeed" in row:
            a, g = vs[("a2a", 1)]["time_us"], vs[("ag", 1)]["time_us"]
            row["ideal_vs_deepspeed"] = (a + g) / max(a, g)
            row["overlap_efficiency"] = row["vs_deepspeed"] / row["ideal_vs_deepspeed"]
            row["cpu_a2a_us"], row["cpu_ag_us"] = vs[("a2a", 1)]["cpu_us"], vs[("ag", 1)]["cpu_us"]
            row["cpu_deepspeed_us"], row["cpu_monta_us"] = vs[("deepspeed", 1)]["cpu_us"], monta[best_c]["cpu_us"]
            # Emulated ranks share this machine's cores: monta cannot finish before all ranks' CPU
            # work has run, so max(t_a2a, t_ag, CPU floor) bounds it from below, not max(t_a2a, t_ag).
            ranks, cores = records[0]["params"]["nodes"] * records[0]["params"]["gpus_per_node"], _cores()
            row["cpu_floor_us"] = ranks * row["cpu_monta_us"] / cores
            bound = max(a, g, row["cpu_floor_us"])
            row["cpu_ideal_vs_deepspeed"] = vs[("deepspeed", 1)]["time_us"] / bound
            row["cpu_overlap_efficiency"] = row["vs_deepspeed"] / row["cpu_ideal_vs_deepspeed"]
        out.append(row)
    return out


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _print_footer(records) -> None:
    rows = summary_rows(records)
    if not rows:
        return
    print("# summary per size: monta (best chunks) speedup vs legacy and vs deepspeed; ideal overlap gain "
          "(t_a2a + t_ag) / max(t_a2a, t_ag); efficiency = achieved / ideal;")
    print("# CPU floor = ranks x monta's CPU time per rank / cores of this machine (emulated ranks share them); "
          "ideal given CPU = t_deepspeed / max(t_a2a, t_ag, CPU floor)")
    for row in rows:
        parts = [f"{format_size(row['size_bytes']):>6}", f"best chunks {row['best_chunks']}"]
        if "vs_legacy" in row:
            parts.append(f"vs legacy {row['vs_legacy']:.2f}x")
        if "vs_deepspeed" in row:
            parts.append(f"vs deepspeed {row['vs_deepspeed']:.2f}x")
        if "ideal_vs_deepspeed" in row:
            parts.append(f"ideal {row['ideal_vs_deepspeed']:.2f}x  efficiency {100 * row['overlap_efficiency']:.0f}%")
            parts.append(f"cpu/iter/rank a2a {row['cpu_a2a_us'] / 1e3:.1f} ms, ag {row['cpu_ag_us'] / 1e3:.1f} ms, "
                         f"deepspeed {row['cpu_deepspeed_us'] / 1e3:.1f} ms, monta {row['cpu_monta_us'] / 1e3:.1f} ms")
            if not os.environ.get("CUDA_VISIBLE_DEVICES"):
                parts.append(f"CPU floor {row['cpu_floor_us'] / 1e3:.0f} ms -> ideal {row['cpu_ideal_vs_deepspeed']:.2f}x, "
                             f"efficiency {100 * row['cpu_overlap_efficiency']:.0f}%")
        print("# " + "  ".join(parts))
    n_wrong = sum(r["metrics"]["wrong"] for r in records)
    checked = all(r["metrics"]["checked"] for r in records)
    print(f"# Out of bounds values : {n_wrong if checked else 'N/A'} {'OK' if checked and n_wrong == 0 else ''}")
    busbw = [r["metrics"]["busbw_GBps"] for r in records if r["params"]["variant"] not in ("a2a", "ag")]
    print(f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):.4f} GB/s")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
