"""Measures the emulated links with gloo and writes the link profile the performance model reads.

Rank program (``python -m monta.emulate.calibrate --raw PATH``): point-to-point ping-pong within a
node and between nodes, then AllToAll and AllGather sweeps on an intra-node group (the ranks of
node 0) and an inter-node group (local rank 0 of every node), then the two patterns the token
exchanges run with every rank busy at once (SPMD): an inter-node AllToAll on each of the strided
groups {l, l+gpn, ...} together, and an AllGather on every node's group together, each with the
CPU time it costs per rank (all ranks share this machine's cores). ``build_profile`` turns the raw
numbers into ``monta.linkprofile/1``. Sizes: point-to-point = bytes per message; AllToAll = bytes
each rank sends in total (nccl-tests' S); AllGather = bytes of the gathered output per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from monta.atomic import write_atomic
from monta.emulate.topology import Topology
from monta.hardware.profile import PROFILE_SCHEMA

_LATENCY_BYTES = 8


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"size sweep {min_bytes}..{max_bytes} x{factor}: need 1 <= min <= max and factor >= 2")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def _iters(nbytes: int) -> int:
    # Enough repeats for a stable median on small sizes, few on big ones to stay under 2 minutes.
    return 10 if nbytes < (256 << 10) else 5


def _concurrent_iters(op: str, nbytes: int) -> int:
    # Many ranks on few cores are noisy (+-25% between single calls): 30 calls per point where a call
    # is short, fewer where one takes a second or more (AllToAll of 4 MiB and up).
    return 30 if nbytes <= (1 << 20) or op == "allgather" else 12 if nbytes <= (4 << 20) else 5


# -- rank side (torch imported only here) ----------------------------------------------------
def _make_groups(pattern: list[list[int]], rank: int, transport: str):
    """This rank's group of ``pattern`` on the exchange's transport (collective: all ranks)."""
    import torch.distributed as dist

    from monta.comm.duplex import duplex_groups

    if transport == "duplex":
        return duplex_groups(pattern, rank)
    mine = None
    for ranks in pattern:
        g = dist.new_group(ranks)
        mine = g if rank in ranks else mine
    return mine


def _pingpong(rank: int, a: int, b: int, nbytes: int, iters: int) -> float | None:
    """Median one-way time (s) of an nbytes message a->b->a; None on ranks not in the pair."""
    import torch
    import torch.distributed as dist

    buf = torch.zeros(nbytes, dtype=torch.uint8)
    times = []
    for _ in range(iters + 1):  # +1: warm-up (connection set-up, allocation)
        if rank == a:
            t0 = time.perf_counter()
            dist.send(buf, b)
            dist.recv(buf, b)
            times.append(time.perf_counter() - t0)
        elif rank == b:
            dist.recv(buf, a)
            dist.send(buf, a)
    return statistics.median(times[1:]) / 2 if times else None


def _collective_call(op: str, n: int, nbytes: int, group):
    """One warmed-up call of the exchange's own ``op`` (async + wait: on gloo a blocking AllGather runs
    10-25% slower) of about ``nbytes`` over a group of ``n``, as a function to time."""
    import torch

    from monta.comm.collectives import all_gather, all_to_all

    elems = max(n, nbytes // 4 // n * n)  # float32, divisible by the group size
    if op == "alltoall":
        inp, out = torch.ones(elems), torch.empty(elems)
        run = lambda: all_to_all(out, inp, group).wait()  # noqa: E731
    else:
        inp, out = torch.ones(elems // n), torch.empty(elems)
        run = lambda: all_gather(out, inp, group).wait()  # noqa: E731
    run()  # warm-up
    return run


def _collective(op: str, members: list[int], group, barrier, rank: int, nbytes: int, iters: int) -> float | None:
    """Median over iterations of the slowest member's time (s); None off the group."""
    import torch
    import torch.distributed as dist

    if rank not in members:
        return None
    run = _collective_call(op, len(members), nbytes, group)
    times = torch.zeros(iters, dtype=torch.float64)
    for i in range(iters):
        dist.barrier(group=barrier)
        t0 = time.perf_counter()
        run()
        times[i] = time.perf_counter() - t0
    dist.all_reduce(times, op=dist.ReduceOp.MAX, group=barrier)
    return float(times.median())


def _concurrent(op: str, ranks: list[int], group, world: int, nbytes: int, iters: int) -> list[float]:
    """[size, slowest rank's median time (s), mean CPU seconds per rank and call] with every rank
    running ``op`` in its own group of the pattern at the same time. A world barrier before each call:
    in an exchange the ranks reach each chunk's collective out of step (other work runs in between),
    which a back-to-back loop would hide (it measures ~30% less)."""
    import torch
    import torch.distributed as dist

    run = _collective_call(op, len(ranks), nbytes, group)
    times = torch.zeros(iters, dtype=torch.float64)
    cpu = torch.zeros(1, dtype=torch.float64)
    for i in range(iters):
        dist.barrier()  # whole world: the groups start together, as in the exchange
        t0, c0 = time.perf_counter(), time.process_time()  # process time: gloo's threads too
        run()
        times[i] = time.perf_counter() - t0
        cpu += time.process_time() - c0
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    dist.all_reduce(cpu)
    return [nbytes, float(times.median()), float(cpu) / iters / world]


def _copy_Bps() -> float:
    """Memory copy rate of one rank alone (the exchange packs its slice and copies what arrives)."""
    import torch

    src, dst = torch.ones(16 << 18), torch.empty(16 << 18)  # 16 MiB of float32
    rates = []
    for _ in range(6):
        t0 = time.perf_counter()
        dst.copy_(src)
        rates.append(src.numel() * 4 / (time.perf_counter() - t0))
    return statistics.median(rates[1:])


def _measure(raw_path: str, sizes: list[int], coll_sizes: list[int]) -> None:
    import torch.distributed as dist

    from monta.comm.duplex import transport_for

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    gpn = int(os.environ["LOCAL_WORLD_SIZE"])
    nodes = world // gpn
    transport = transport_for("gloo")
    groups = {"intra": list(range(gpn)), "inter": [k * gpn for k in range(nodes)]}
    # The benchmarks' transport, so the profile describes what the exchanges actually run on.
    handles = {link: _make_groups([ranks], rank, transport) for link, ranks in groups.items()}
    barriers = {link: dist.new_group(ranks) for link, ranks in groups.items()}  # for barrier / all_reduce
    pairs = {"intra": (0, 1), "inter": (0, gpn)}
    # Every rank in one group of each concurrent pattern; new_group is collective, so all create all.
    strided = [[local + k * gpn for k in range(nodes)] for local in range(gpn)]
    per_node = [list(range(k * gpn, (k + 1) * gpn)) for k in range(nodes)]
    mine = {
        name: (next(r for r in pattern if rank in r), _make_groups(pattern, rank, transport))
        for name, pattern in (("inter_all", strided), ("intra_all", per_node))
    }
    raw: dict[str, Any] = {
        "groups": groups,
        "latency_s": {},
        "p2p": {},
        "alltoall": {},
        "allgather": {},
        "concurrent": {},
        "cores": len(os.sched_getaffinity(0)),
        "transport": transport,
    }
    for link, (a, b) in pairs.items():
        raw["latency_s"][link] = _pingpong(rank, a, b, _LATENCY_BYTES, 50)
        raw["p2p"][link] = [[s, _pingpong(rank, a, b, s, _iters(s))] for s in sizes]
        dist.barrier()
    for op in ("alltoall", "allgather"):
        for link in groups:
            raw[op][link] = [
                [s, _collective(op, groups[link], handles[link], barriers[link], rank, s, _iters(s))]
                for s in coll_sizes
            ]
            dist.barrier()
    for op, name in (("alltoall", "inter_all"), ("allgather", "intra_all")):
        ranks, group = mine[name]
        raw["concurrent"][f"{op}.{name}"] = [
            _concurrent(op, ranks, group, world, s, _concurrent_iters(op, s)) for s in coll_sizes
        ]
    # The others wait at the barrier, blocked, so rank 0 has a core to itself.
    if rank == 0:
        raw["copy_Bps"] = _copy_Bps()
    dist.barrier()
    if rank == 0:
        Path(raw_path).write_text(json.dumps(raw))
    dist.destroy_process_group()


# -- profile assembly (pure) -----------------------------------------------------------------
def fit_bandwidth(points: list[list[float]]) -> float:
    """Asymptotic bandwidth (bytes/s) of (size, seconds) points: the slope of t = a + size / B
    fitted on the sizes within 16x of the largest (the best rate among them if the fit fails).

    Mid-size messages can beat it (a full tbf bucket passes ~32 KiB unshaped), so an efficiency
    above 1 is a measurement, not an error."""
    largest = max(s for s, _ in points)
    big = [(s, t) for s, t in points if s * 16 >= largest]
    best_big = max(s / t for s, t in big)
    if len(big) < 2:
        return best_big
    ms = statistics.fmean(s for s, _ in big)
    mt = statistics.fmean(t for _, t in big)
    var = sum((s - ms) ** 2 for s, _ in big)
    slope = sum((s - ms) * (t - mt) for s, t in big) / var
    # A slope far off the rates actually seen means noise dominated the fit.
    if slope <= 0 or not 0.5 * best_big <= 1.0 / slope <= 2.0 * best_big:
        return best_big
    return 1.0 / slope


def build_profile(
    raw: dict[str, Any], topology: Topology, nodes: int, gpus_per_node: int, name: str | None = None
) -> dict[str, Any]:
    links = {}
    for link in ("intra", "inter"):
        points = raw["p2p"][link]
        bw = fit_bandwidth(points)
        links[link] = {
            "bandwidth_GBps": round(bw / 1e9, 6),
            "latency_us": round(raw["latency_s"][link] * 1e6, 3),
            "efficiency": [[int(s), round(s / t / bw, 4)] for s, t in points],
        }
    collectives = {
        op: {link: [[int(s), round(t * 1e6, 3)] for s, t in raw[op][link]] for link in ("intra", "inter")}
        for op in ("alltoall", "allgather")
    }
    profile = {
        "schema": PROFILE_SCHEMA,
        "name": name or topology.name,
        "source": "emulated",
        "topology": {
            **topology.to_dict(),
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "intra_group": raw["groups"]["intra"],
            "inter_group": raw["groups"]["inter"],
        },
        "links": links,
        "collectives": collectives,
        "transport": raw.get("transport", "native"),
    }
    conc = raw.get("concurrent") or {}
    if conc:
        # Wall time of the SPMD patterns next to the other collectives; their CPU cost per rank
        # (and the cores every rank of the emulated cluster shares) under "host".
        for key, points in conc.items():
            op, name = key.split(".")
            collectives[op][name] = [[int(s), round(t * 1e6, 3)] for s, t, _ in points]
        if raw.get("copy_Bps"):
            profile["compute"] = {"copy_GBps": round(raw["copy_Bps"] / 1e9, 3)}
        profile["host"] = {
            "cores": int(raw["cores"]),
            "cpu_us": {key: [[int(s), round(c * 1e6, 3)] for s, _, c in points] for key, points in conc.items()},
        }
    return profile


def calibrate(
    nodes: int,
    gpus_per_node: int,
    topology: Topology,
    out: str | os.PathLike,
    *,
    name: str | None = None,
    min_bytes: int = 1 << 10,
    max_bytes: int = 16 << 20,
    allow_unshaped: bool = False,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Run the measurement on an emulated cluster and write the profile to ``out`` atomically."""
    from monta.emulate.launcher import launch

    if nodes < 2 or gpus_per_node < 2:
        raise ValueError(
            f"calibration needs >= 2 nodes and >= 2 ranks per node (got {nodes} x {gpus_per_node}) "
            "to measure both intra- and inter-node links"
        )
    sizes = sweep_sizes(min_bytes, max_bytes)
    # Collectives at every power of two: the htb bucket lets transfers of tens of KiB pass unshaped,
    # so their time bends sharply between 64 KiB and 256 KiB, right where a chunked exchange's
    # pieces land; interpolating across 4x steps there made the model pick too many chunks
    # (chunk pick 6/11 -> 10/11 within 5% of the best, MAPE 9.6% -> 7.7%, same measurements).
    coll_sizes = sweep_sizes(max(min_bytes, 4 << 10), max_bytes, factor=2)
    out = Path(out)
    raw_path = out.with_name(f".{out.name}.raw-{os.getpid()}")
    try:
        launch(
            [
                sys.executable,
                "-m",
                "monta.emulate.calibrate",
                "--raw",
                str(raw_path),
                "--sizes",
                ",".join(map(str, sizes)),
                "--coll-sizes",
                ",".join(map(str, coll_sizes)),
            ],
            nodes,
            gpus_per_node,
            topology,
            allow_unshaped=allow_unshaped,
            timeout_s=timeout_s,
            preload=("torch", "torch.distributed"),  # forked ranks, one import (monta.emulate.forkstart)
        )
        profile = build_profile(json.loads(raw_path.read_text()), topology, nodes, gpus_per_node, name)
    finally:
        raw_path.unlink(missing_ok=True)
    write_atomic(out, json.dumps(profile, indent=1) + "\n")
    return profile


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="rank side of `monta emulate calibrate`")
    ap.add_argument("--raw", required=True)
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--coll-sizes", required=True)
    args = ap.parse_args(argv)
    _measure(args.raw, [int(s) for s in args.sizes.split(",")], [int(s) for s in args.coll_sizes.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
