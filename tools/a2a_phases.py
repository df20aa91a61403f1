"""Per-rank timestamps of an unchunked exchange's two phases on the emulator: stock DeepSpeed's order, the
inter-node AllToAll of the 1/TP slice then the node's AllGather (the composite), next to each phase alone,
with local rank 0 of every node sampling its loopback's and NIC's transmitted bytes (/proc/net/dev) and its
TCP retransmissions. The report says when each rank left the AllToAll, how many of the node's AllGather
bytes the loopback carried before the last one left, and what ``monta.emulate.early_gather`` makes of those
leaving times (docs/testbed.md, the early AllGather).

    monta emulate run --nodes 2 --gpus-per-node 8 --topology a800-4nic@0.0625 -- \\
        python tools/a2a_phases.py rank 16M 3 phases.json
    python tools/a2a_phases.py report phases.json LOOPBACK_GBPS   (the loopback's shaped rate, e.g. 0.8511)

Usage errors (a bad size, count or rate, a missing file, ``rank`` outside ``monta emulate run``) print one
line and exit 2.
"""

from __future__ import annotations

import json
import os
import sys
import time

from phase_args import fail, load, number, start_sampler

MODES = ("composite", "a2a", "ag")


def _retrans() -> int:
    rows = [line.split() for line in open("/proc/net/snmp") if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("RetransSegs")])


def rank_main(size: int, iters: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from monta.comm.duplex import duplex_groups

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = int(os.environ["LOCAL_WORLD_SIZE"])  # TP = a whole node, EP over the nodes
    nodes = world // tp
    node_group = duplex_groups([list(range(n * tp, (n + 1) * tp)) for n in range(nodes)], rank)
    ep_group = duplex_groups([[i + n * tp for n in range(nodes)] for i in range(tp)], rank)
    elems = size // 4 // tp  # float32 elements of the 1/TP slice
    x, a_out, g_out = torch.ones(elems), torch.empty(elems), torch.empty(elems * tp)
    samples, stop = start_sampler(rank % tp == 0)
    rows = []
    for it in range(iters + 1):  # the first round warms up
        for mode in MODES:
            dist.barrier()
            r0, t0, ta, tg = _retrans(), time.monotonic(), None, None
            if mode != "ag":
                ep_group.all_to_all(a_out, x).wait()
                ta = time.monotonic()
            if mode != "a2a":
                node_group.all_gather(g_out, a_out).wait()
                tg = time.monotonic()
            if it:
                rows.append(
                    {"it": it, "mode": mode, "rank": rank, "t0": t0, "ta": ta, "tg": tg, "retrans": _retrans() - r0}
                )
    stop.set()
    every_rows, every_samples = [None] * world, [None] * world
    dist.all_gather_object(every_rows, rows)
    dist.all_gather_object(every_samples, samples)
    if rank == 0:
        meta = {"size": size, "tp": tp, "nodes": nodes}
        got = {"meta": meta, "rows": [r for rs in every_rows for r in rs]}
        got["samples"] = {str(i): s for i, s in enumerate(every_samples) if s}
        with open(out, "w") as f:
            json.dump(got, f)
    # every rank done with every communicator before any tears its own down: a rank that left first aborted
    # in gloo's teardown once ("terminate called without an active exception", a fresh clone's CI)
    dist.barrier()
    dist.destroy_process_group()


def report(path: str, loopback_gbps: float) -> list[str]:
    from monta.emulate.early_gather import early_bytes

    d = load("a2a_phases.py", path)
    meta, rows = d["meta"], d["rows"]
    tp, slice_bytes = meta["tp"], meta["size"] / meta["tp"]
    lines = []
    for it in sorted({r["it"] for r in rows}):
        got = {m: [r for r in rows if r["it"] == it and r["mode"] == m] for m in MODES}
        comp = got["composite"]
        t0, last_a = max(r["t0"] for r in comp), max(r["ta"] for r in comp)

        def span(rs, key):
            return 1e3 * (max(r[key] for r in rs) - max(r["t0"] for r in rs))

        lines.append(
            f"iteration {it}: composite {span(comp, 'tg'):.0f} ms; AllToAll alone {span(got['a2a'], 'ta'):.0f} ms, "
            f"AllGather alone {span(got['ag'], 'tg'):.0f} ms (sum {span(got['a2a'], 'ta') + span(got['ag'], 'tg'):.0f})"
        )
        ends = sorted(comp, key=lambda r: r["ta"])
        lines.append(
            "  left the AllToAll (ms, rank:time): " + " ".join(f"{r['rank']}:{1e3 * (r['ta'] - t0):.0f}" for r in ends)
        )
        for node in range(meta["nodes"]):
            mine = [r for r in comp if r["rank"] // tp == node]
            s = d["samples"].get(str(node * tp), [])
            before = [lo for t, lo, _ in s if t <= t0]
            until = [lo for t, lo, _ in s if t <= last_a]
            measured = (until[-1] - before[-1]) / 2**20 if before and until else float("nan")
            model = early_bytes([r["ta"] for r in mine], slice_bytes, loopback_gbps * 1e9 / 8) / 2**20
            retrans = sum(r["retrans"] for r in mine if r["rank"] % tp == 0)
            lines.append(
                f"  node {node}: loopback bytes before the last rank left {measured:.1f} MiB, early_gather "
                f"{model:.1f} MiB; TCP retransmissions in the composite {retrans}"
            )
    return lines


USAGE = "usage: a2a_phases.py rank SIZE ITERS OUT.json (under `monta emulate run`) | report OUT.json LOOPBACK_GBPS"


def _fail(why: str) -> None:
    fail("a2a_phases.py", why)


def _number(text: str, what: str, kind=int) -> float:
    return number("a2a_phases.py", text, what, kind)


def main(argv: list[str]) -> None:
    from monta.units import parse_size

    if len(argv) == 4 and argv[0] == "rank":
        missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR") if k not in os.environ]
        if missing:
            need = ", ".join(missing)
            _fail(f"rank mode needs {need}: run it under `monta emulate run ... -- python tools/a2a_phases.py rank`")
        try:
            size = parse_size(argv[1])
        except ValueError as e:
            _fail(f"SIZE {argv[1]!r}: {e}")
        rank_main(size, int(_number(argv[2], "ITERS")), argv[3])
        # End as the project's forked ranks do (monta.emulate.forkstart): without the interpreter's finalization,
        # in which a gloo communicator still referenced (the duplex groups' cache) aborted one rank in about ten
        # ("terminate called without an active exception", no Python frame; a fresh clone's CI and a loop here).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    elif len(argv) == 3 and argv[0] == "report":
        if not os.path.isfile(argv[1]):
            _fail(f"{argv[1]}: no such file (write it with the rank mode first)")
        print("\n".join(report(argv[1], _number(argv[2], "LOOPBACK_GBPS", float))))
    else:
        _fail(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
