"""How far apart a gloo world barrier releases the emulated ranks, on the host's one monotonic clock: twelve
barriers, every other one right after a 256 KiB exchange with a rank on the other node, and each node's TCP
retransmission counters over the run (docs/testbed.md, the chunk pipeline's drain).

    monta emulate run --nodes 2 --gpus-per-node 8 --topology p4de@0.015 -- python tools/barrier_skew.py
"""

from __future__ import annotations

import os
import sys
import time


def _tcp() -> dict[str, int]:
    """This namespace's TCP retransmission counters (/proc/net/snmp, /proc/net/netstat)."""
    got = {}
    for path, head in (("/proc/net/snmp", "Tcp:"), ("/proc/net/netstat", "TcpExt:")):
        rows = [line.split() for line in open(path) if line.startswith(head)]
        got.update(zip(rows[0][1:], map(int, rows[1][1:]), strict=True))
    return {k: got.get(k, 0) for k in ("RetransSegs", "TCPTimeouts", "TCPSpuriousRTOs", "TCPLossProbes")}


def main() -> None:
    if "RANK" not in os.environ:
        print("barrier_skew.py: run it under `monta emulate run ... -- python tools/barrier_skew.py`", file=sys.stderr)
        raise SystemExit(2)
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    x, before, out = torch.ones(1 << 16), _tcp(), []
    for i in range(12):
        if i % 2:  # a bulk exchange across the NIC first
            peer = (rank + world // 2) % world
            for q in (dist.isend(x, peer), dist.irecv(torch.empty_like(x), peer)):
                q.wait()
        dist.barrier()
        out.append(time.monotonic())
    tcp = {k: v - before[k] for k, v in _tcp().items()}
    every, counters = [None] * world, [None] * world
    dist.all_gather_object(every, out)
    dist.all_gather_object(counters, tcp if rank % local == 0 else None)
    if rank == 0:
        for i in range(12):
            ts = [e[i] for e in every]
            what = "after a bulk exchange" if i % 2 else "after a barrier"
            print(f"barrier {i + 1:2d} ({what}): released over {1e3 * (max(ts) - min(ts)):.1f} ms")
        for node, c in enumerate(c for c in counters if c is not None):
            print(f"node {node}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # as monta.emulate.forkstart's ranks end: no finalization of gloo communicators


if __name__ == "__main__":
    main()
