"""Per-rank timestamps of MoNTA's chunk pipeline on the emulator: the project's own pass
(``monta.comm.exchange.run_pass``, the 1/TP slice cut by ``monta_split``) with its AllToAll handles stamped
when each rank leaves each chunk's AllToAll, next to the inter-node AllToAll of the whole slice alone, and
local rank 0 of every node sampling its loopback's and NIC's transmitted bytes (/proc/net/dev).

The k-chunk bound (``monta.chunking.pipeline_span``) counts each chunk's AllToAll as ending at once on every
rank, so at r < 1 the last chunk's whole AllGather (its drain) follows the AllToAll. The report says when a
node's ranks left the last chunk's AllToAll, how long the pass ran after the last of them left (the drain
measured) against the drain the bound counts, how many of that AllGather's bytes the loopback carried before
the last rank left, and what ``monta.emulate.early_gather`` makes of the leaving times (docs/testbed.md).

    monta emulate run --nodes 2 --gpus-per-node 8 --topology p4de@0.015 -- \\
        python tools/chunk_phases.py rank 4M 8 4 chunks.json [TP]   (TP: default the node; EP the rest)
    python tools/chunk_phases.py report chunks.json LOOPBACK_GBPS   (the loopback's shaped rate, e.g. 0.6923)

Usage errors print one line and exit 2.
"""

from __future__ import annotations

import json
import os
import sys
import time

from phase_args import fail, load, number, start_sampler

HIDDEN = (
    1024  # float32 elements per token row, as `monta bench alltoall`: the buffer is [experts = EP, capacity, HIDDEN]
)


def _buffer(size: int, experts: int, tp: int, chunks: int):
    import torch

    row = experts * HIDDEN * 4
    capacity = size // row
    if capacity % tp or capacity // tp < chunks:
        _fail(f"SIZE {size} B: the capacity {capacity} must split over TP {tp} into at least {chunks} slots per rank")
    return torch.ones(experts, capacity, HIDDEN)


def rank_main(size: int, chunks: int, iters: int, out: str, tp: int | None = None) -> None:
    import torch
    import torch.distributed as dist

    from monta.chunking import monta_split
    from monta.comm.collectives import all_to_all
    from monta.comm.exchange import PassSpec, exchange_mesh, flat_all_to_all, run_pass
    from monta.mesh import build_mesh
    from monta.parallel import ParallelLayout

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    gpn = int(os.environ["LOCAL_WORLD_SIZE"])
    tp = tp or gpn  # TP inside a node (default: the whole node), EP the DP degree, as `monta bench alltoall`
    if gpn % tp:
        _fail(f"TP {tp} does not divide the node's {gpn} ranks")
    nodes, ep = world // gpn, world // tp
    mesh = exchange_mesh(build_mesh(ParallelLayout(nodes, gpn, tp=tp, ep=ep)))
    x = _buffer(size, ep, tp, chunks)
    whole = x.view(ep, tp, -1, HIDDEN)[:, mesh.tp.index].contiguous()
    leaves: list[float] = []

    class Stamped:  # the pass's AllToAll handle, stamped when this rank leaves it
        def __init__(self, work):
            self.work = work

        def wait(self):
            self.work.wait()
            leaves.append(time.monotonic())

    def stamped(recv, send, g, meter, phase):
        return Stamped(flat_all_to_all(recv, send, g, meter, phase))

    samples, stop = start_sampler(rank % gpn == 0)
    rows = []
    for it in range(iters + 1):  # the first round warms up
        for mode in ("monta", "a2a"):
            dist.barrier()
            leaves.clear()
            t0 = time.monotonic()
            if mode == "monta":
                run_pass(x, PassSpec(drop_in=True, gather_out=True), mesh, chunks, alltoall=stamped)
            else:
                all_to_all(torch.empty_like(whole), whole, mesh.ep.group).wait()
            if it:
                rows.append(
                    {"it": it, "mode": mode, "rank": rank, "t0": t0, "leaves": list(leaves), "end": time.monotonic()}
                )
    stop.set()
    every_rows, every_samples = [None] * world, [None] * world
    dist.all_gather_object(every_rows, rows)
    dist.all_gather_object(every_samples, samples)
    if rank == 0:
        slots = x.shape[1] // tp
        meta = {"size": size, "tp": tp, "nodes": nodes, "chunks": chunks, "split": monta_split(slots, chunks)}
        meta["row_bytes"] = ep * HIDDEN * 4  # one slot of the slice: a row per expert
        meta["gpus_per_node"] = gpn
        got = {"meta": meta, "rows": [r for rs in every_rows for r in rs]}
        got["samples"] = {str(i): s for i, s in enumerate(every_samples) if s}
        with open(out, "w") as f:
            json.dump(got, f)
    dist.barrier()  # every rank done with every communicator before any tears its own down
    dist.destroy_process_group()


def _node_lines(d: dict, it: int, node: int, loopback_Bps: float) -> list[str]:
    from monta.emulate.early_gather import early_bytes_in_groups

    meta = d["meta"]
    tp, gpn = meta["tp"], meta.get("gpus_per_node", meta["tp"])
    mine = [r for r in d["rows"] if r["it"] == it and r["mode"] == "monta" and r["rank"] // gpn == node]
    t0 = min(r["t0"] for r in mine)
    last = sorted(r["leaves"][-1] for r in mine)
    slice_bytes = meta["split"][-1] * meta["row_bytes"]  # what one rank sends each peer in the last AllGather
    total = gpn * (tp - 1) * slice_bytes  # the node's TP groups' last AllGathers, together on its loopback
    drain_s = total / loopback_Bps  # the bound's drain: that AllGather at the loopback rate
    tail_s = max(r["end"] for r in mine) - last[-1]
    s = d["samples"].get(str(node * gpn), [])
    before = [lo for t, lo, _ in s if t <= last[0]]
    until = [lo for t, lo, _ in s if t <= last[-1]]
    early = (until[-1] - before[-1]) if before and until else float("nan")
    # each TP group's pairs (``early_gather``): a node of TP2 pairs has no early bytes within a pair
    model = early_bytes_in_groups([(r["rank"] // tp, r["leaves"][-1]) for r in mine], slice_bytes, loopback_Bps)
    return [
        f"  node {node}: left the last chunk's AllToAll at {1e3 * (last[0] - t0):.0f}-{1e3 * (last[-1] - t0):.0f} ms "
        f"(spread {1e3 * (last[-1] - last[0]):.1f} ms); after the last left the pass ran {1e3 * tail_s:.1f} ms, the "
        f"bound's drain {1e3 * drain_s:.1f} ms; loopback bytes while they left {early / 2**10:.0f} KiB of the last "
        f"AllGather's {total / 2**10:.0f} KiB, early_gather {model / 2**10:.0f} KiB"
    ]


def report(path: str, loopback_gbps: float) -> list[str]:
    d = load("chunk_phases.py", path)
    meta, rows = d["meta"], d["rows"]
    lines = [f"{meta['size'] / 2**20:g} MiB per rank, {meta['chunks']} chunks cut {meta['split']}"]
    for it in sorted({r["it"] for r in rows}):

        def span(mode: str, it: int = it) -> str:
            rs = [r for r in rows if r["it"] == it and r["mode"] == mode]
            # from the first rank's start (a world barrier releases ranks up to ~0.3 s apart on a slow clock, and
            # the first one's bytes are on the NIC from then on), and as the bench times it: the slowest rank's own
            whole = max(r["end"] for r in rs) - min(r["t0"] for r in rs)
            own = max(r["end"] - r["t0"] for r in rs)
            return f"{1e3 * whole:.0f} ms (the slowest rank's own {1e3 * own:.0f})"

        lines.append(f"iteration {it}: monta {span('monta')}, the AllToAll alone {span('a2a')}")
        for node in range(meta["nodes"]):
            lines += _node_lines(d, it, node, loopback_gbps * 1e9 / 8)
    return lines


USAGE = (
    "usage: chunk_phases.py rank SIZE CHUNKS ITERS OUT.json [TP] (under `monta emulate run`) "
    "| report OUT.json LOOPBACK_GBPS"
)


def _fail(why: str) -> None:
    fail("chunk_phases.py", why)


def _number(text: str, what: str, kind=int) -> float:
    return number("chunk_phases.py", text, what, kind)


def main(argv: list[str]) -> None:
    from monta.units import parse_size

    if len(argv) in (5, 6) and argv[0] == "rank":
        missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR") if k not in os.environ]
        if missing:
            how = "run it under `monta emulate run ... -- python tools/chunk_phases.py rank`"
            _fail(f"rank mode needs {', '.join(missing)}: {how}")
        try:
            size = parse_size(argv[1])
        except ValueError as e:
            _fail(f"SIZE {argv[1]!r}: {e}")
        tp = int(_number(argv[5], "TP")) if len(argv) == 6 else None
        rank_main(size, int(_number(argv[2], "CHUNKS")), int(_number(argv[3], "ITERS")), argv[4], tp)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # as monta.emulate.forkstart's ranks end: no finalization of gloo communicators
    elif len(argv) == 3 and argv[0] == "report":
        if not os.path.isfile(argv[1]):
            _fail(f"{argv[1]}: no such file (write it with the rank mode first)")
        print("\n".join(report(argv[1], _number(argv[2], "LOOPBACK_GBPS", float))))
    else:
        _fail(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
