"""Rank entry of ``monta bench alltoall`` (``python -m monta.bench.alltoall.worker CONFIG.json``):
reads the sweep (``AlltoallConfig``), joins the world, then warms up, times and checks every variant
(``runner``, stopping each size by ``adaptive.StopRule``); rank 0 prints the header and the
table (``table``) and writes the records (``records``).

Started once per rank by the launcher with torchrun's environment (RANK, WORLD_SIZE, MASTER_*).
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist

from monta.bench.adaptive import StopRule
from monta.bench.alltoall.config import AlltoallConfig
from monta.bench.alltoall.records import build_records
from monta.bench.alltoall.runner import (
    Runner,
    buffer_shape,
    check_chunks,
    check_layer,
    check_routes,
    rank_input,
    time_sizes,
    variant_rows,
    warm_up,
)
from monta.bench.alltoall.table import print_header, print_table
from monta.bench.hostload import HostLoad, own_run_delay_s
from monta.comm.collectives import group_backend
from monta.dtypes import DTYPE_BYTES, torch_dtype
from monta.progress import beat, start_live
from monta.results import write_records
from monta.testaids import Slowdown

COLLECTIVE_TIMEOUT_S = 300  # a collective that waits longer fails the rank (a peer is gone)


def rank_device(kind: str, backend: str) -> torch.device:
    """This rank's device: auto is CUDA with nccl, the CPU otherwise; a CUDA rank takes GPU LOCAL_RANK mod the
    GPUs, so several gloo ranks can share one (NCCL refuses two ranks on one device)."""
    if kind == "auto":
        kind = "cuda" if backend == "nccl" else "cpu"
    if kind == "cpu":
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % max(1, torch.cuda.device_count()))
    torch.cuda.set_device(device)
    return device


def main(cfg_path: str) -> int:
    with open(cfg_path) as f:
        cfg = AlltoallConfig.from_json(f.read())
    beat("joining the process group (init_process_group)")
    dist.init_process_group(group_backend(cfg.backend), timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    torch.set_num_threads(1)
    beat("building the process groups")
    r = Runner(cfg)
    rank, world = r.rank, r.layout.world_size
    device = rank_device(cfg.device, cfg.backend)
    dtype = torch_dtype(cfg.dtype)
    shapes = [buffer_shape(s, cfg.experts, cfg.hidden, DTYPE_BYTES[cfg.dtype], cfg.tp) for s in cfg.sizes]
    variants = variant_rows(cfg)
    check_chunks(cfg, variants, shapes)
    slowdown = Slowdown.from_dict(cfg.aids.inject_slowdown)

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
        print_header(cfg, r.layout, hosts, r.transport)

    # one routing per size (the balanced one unless --routing), the same for every exchange
    points = [r.point(shp) for shp in shapes]
    inputs = [
        rank_input(rank // cfg.tp, i, shp, dtype, 0, cfg.topk, points[i]).to(device) for i, shp in enumerate(shapes)
    ]
    if rank == 0:  # progress lines on stdout, which the launcher streams live: per size warm-up, timing, check
        start_live(len(shapes) * (2 + int(cfg.aids.check)))
    warm_up(r, variants, inputs, cfg.sizes, cfg.warmup)

    load = HostLoad().start() if rank == 0 else None
    tm = time_sizes(r, variants, inputs, cfg.sizes, StopRule.from_config(cfg, variants), slowdown, load)
    if load is not None:
        load.stop()
    # per size and variant: the ranks' scheduler run delay and the wall time it accrued over
    measured_wait = torch.tensor([float(own_run_delay_s() is not None)], dtype=torch.float64)
    dist.all_reduce(tm.waits, op=dist.ReduceOp.SUM)
    dist.all_reduce(measured_wait, op=dist.ReduceOp.MIN)

    if cfg.aids.check and cfg.mode == "layer":
        wrong = check_layer(r, variants, shapes, cfg.sizes, dtype, device, inject_fault=cfg.aids.inject_fault)
        held = None  # the layer's output is per token: the routes held are dispatch mode's figure
    elif cfg.aids.check:
        wrong, held = check_routes(r, variants, shapes, cfg.sizes, dtype, device, inject_fault=cfg.aids.inject_fault)
    else:
        wrong = torch.zeros(len(shapes), len(variants), dtype=torch.int64)
        held = None

    beat("writing the records")
    if rank == 0:
        host = [[load.window(tm.spans[si][vi]) for vi in range(len(variants))] for si in range(len(shapes))]
        if float(measured_wait[0]):  # the ranks' own wait for a core, averaged over ranks
            for si in range(len(shapes)):
                for vi in range(len(variants)):
                    d, w = tm.waits[si, vi].tolist()
                    host[si][vi]["rank_wait"] = d / w if w > 0 else None
        records = build_records(cfg, r.layout, variants, tm, wrong, host, r.transport, slowdown)
        if cfg.mode == "dispatch":  # the byte formulas are one dispatch's; a layer call moves four passes
            add_formulas(records, cfg, r, inputs, tm, variants)
        add_routing(records, cfg, r, points, variants, held)
        print_table(records)
        if cfg.out:
            write_records(cfg.out, records, append=cfg.append)
            print(f"# wrote {len(records)} records to {cfg.out}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def add_formulas(records, cfg: AlltoallConfig, r: Runner, inputs, tm, variants) -> None:
    """Each record's inter-node payload (bytes without routing metadata) beside its exchange's formula,
    evaluated on this rank's routing (rank 0: member 0 of its EP group, node 0)."""
    from monta.bench.routes import inter_formula

    geo = r.exchange_mesh.ep  # the EP axis: its nodes and members per node
    elsize = DTYPE_BYTES[cfg.dtype]
    at = {(size, v, c): (si, vi) for si, size in enumerate(cfg.sizes) for vi, (v, c) in enumerate(variants)}
    for rec in records:
        p, m = rec["params"], rec["metrics"]
        si, vi = at[(p["size_bytes"], p["variant"], p["chunks"])]
        meta = tm.meta_per_call.get((si, vi), 0)
        text, value = inter_formula(p["variant"], inputs[si], geo.nodes, geo.per_node, cfg.tp, elsize)
        m.update(inter_meta_bytes=meta, inter_payload_bytes=m["inter_bytes"] - meta)
        if value is not None:
            m.update(inter_formula=text, inter_formula_bytes=value)


def add_routing(records, cfg: AlltoallConfig, r: Runner, points, variants, held) -> None:
    """Under a skewed routing, each record's routing facts: the spec (params), realized MaxVio, the
    routes dropped at the buffer's capacity (0 for a dropless exchange, which says so) and, with --check,
    the routes its output held. The balanced routing's records stay as they were."""
    at = {(size, v, c): (si, vi) for si, size in enumerate(cfg.sizes) for vi, (v, c) in enumerate(variants)}
    for rec in records:
        p, m = rec["params"], rec["metrics"]
        si, vi = at[(p["size_bytes"], p["variant"], p["chunks"])]
        if points[si] is None:
            continue
        facts = points[si].facts()
        p["routing"] = facts.pop("routing")
        dropless = not r.capacity_based(p["variant"])
        m.update(facts, dropless=dropless)
        if dropless:
            m.update(dropped_routes=0, dropped_tokens=0, drop_fraction=0.0)
        if held is not None and p["variant"] not in ("a2a", "ag"):
            m["held_routes"] = int(held[si, vi])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
