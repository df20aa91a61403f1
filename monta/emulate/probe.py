"""Rank program measuring raw TCP throughput from rank 0 to a same-node and an other-node rank.

Plain sockets, no torch: quick enough for tests, and it shows what the shaped links carry before
gloo's own overheads. Run under ``launch``; rank 0 prints one JSON line with the rates.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import time

_CHUNK = 1 << 20


def _port(rank: int) -> int:
    return int(os.environ["MASTER_PORT"]) + 1 + rank


def _receive(expected: int) -> None:
    """Accept one sender, time first byte to last byte, send the rate (bytes/s) back."""
    rank = int(os.environ["RANK"])
    with socket.create_server((os.environ["MONTA_BIND_ADDR"], _port(rank))) as server:
        server.settimeout(60)
        conn, _ = server.accept()
        with conn:
            buf = bytearray(_CHUNK)
            got = conn.recv_into(buf)
            t0 = time.perf_counter()
            while got < expected:
                n = conn.recv_into(buf)
                if n == 0:
                    raise ConnectionError(f"sender closed after {got} of {expected} bytes")
                got += n
            elapsed = time.perf_counter() - t0
            conn.sendall(struct.pack("!d", got / max(elapsed, 1e-9)))


def _send(addr: str, rank: int, nbytes: int) -> float:
    deadline = time.monotonic() + 30
    while True:  # the receiver may not be listening yet
        try:
            conn = socket.create_connection((addr, _port(rank)), timeout=60)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with conn:
        payload = memoryview(bytes(_CHUNK))
        sent = 0
        while sent < nbytes:
            n = min(_CHUNK, nbytes - sent)
            conn.sendall(payload[:n])
            sent += n
        reply = b""
        while len(reply) < 8:
            part = conn.recv(8 - len(reply))
            if not part:
                raise ConnectionError("receiver closed without reporting its rate")
            reply += part
        return struct.unpack("!d", reply)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=32 << 20, help="bytes per transfer")
    args = ap.parse_args(argv)
    rank, gpn = int(os.environ["RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    world = int(os.environ["WORLD_SIZE"])
    addrs = os.environ["MONTA_NODE_ADDRS"].split(",")
    intra_peer = 1 if gpn > 1 else None
    inter_peer = gpn if world > gpn else None
    if rank in (intra_peer, inter_peer):
        _receive(args.bytes)
        return 0
    if rank != 0:
        return 0
    out = {"bytes": args.bytes}
    # One after the other, so the two transfers do not share the CPU.
    if intra_peer is not None:
        out["intra_GBps"] = _send(addrs[0], intra_peer, args.bytes) / 1e9
    if inter_peer is not None:
        out["inter_GBps"] = _send(addrs[1], inter_peer, args.bytes) / 1e9
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
