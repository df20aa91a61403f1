"""Rank program measuring what the emulated links deliver: TCP goodput at 1..N concurrent flows per
direction, both directions at once (as an exchange loads a NIC), repeated, between two nodes and inside one.

Plain sockets, no torch. One connection per flow and direction (the transport the exchanges use on
gloo). Run under ``launch``: local rank 0 of node 0 pairs with local rank 0 of node 1 (inter) and
with local rank 1 of node 0 (intra); rank 0 prints one JSON line with every repetition's rates.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import threading
import time

from monta.percentiles import percentile

_CHUNK = 1 << 20
_CONNECT_S = 30.0


def _port(rank: int, link: str) -> int:
    return int(os.environ["MASTER_PORT"]) + 1 + 2 * rank + (link == "inter")


def _connect(addr: str, port: int) -> socket.socket:
    deadline = time.monotonic() + _CONNECT_S
    while True:  # the peer may not be listening yet
        try:
            s = socket.create_connection((addr, port), timeout=120)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = s.recv(n - len(buf))
        if not part:
            raise ConnectionError("probe peer closed the connection")
        buf += part
    return buf


class Endpoint:
    """One side of a probed link: a control connection plus ``flows`` data connections each way."""

    def __init__(self, me_rank: int, peer_rank: int, peer_addr: str, bind_addr: str, link: str):
        self.lead = me_rank < peer_rank  # the lower rank connects the control socket and says go
        self.link = link
        server = socket.create_server((bind_addr, _port(me_rank, link)))
        server.settimeout(600)  # the intra peer waits while the inter link is probed
        self.server = server
        self.peer = (peer_addr, _port(peer_rank, link))
        if self.lead:
            self.ctrl = _connect(*self.peer)
        else:
            self.ctrl, _ = server.accept()
        self.send_socks: list[socket.socket] = []
        self.recv_socks: list[socket.socket] = []

    def open(self, flows: int) -> None:
        """(Re)open ``flows`` sending and receiving connections (only this direction's data on each)."""
        self.close_data()
        for _ in range(flows):
            # Alternate who connects so neither side's accept queue can deadlock the other's.
            if self.lead:
                self.send_socks.append(_connect(*self.peer))
                self.recv_socks.append(self.server.accept()[0])
            else:
                self.recv_socks.append(self.server.accept()[0])
                self.send_socks.append(_connect(*self.peer))

    def close_data(self) -> None:
        for s in self.send_socks + self.recv_socks:
            s.close()
        self.send_socks, self.recv_socks = [], []

    def round(self, nbytes: int) -> tuple[float, float]:
        """Both directions at once, ``nbytes`` per direction split over the flows; returns the
        seconds from the common start to the last byte received on this side and on the peer's."""
        flows = len(self.send_socks)
        per = [nbytes // flows + (1 if i < nbytes % flows else 0) for i in range(flows)]
        # Start together: the lead sends go and starts; the other starts when go arrives (half an RTT later).
        if self.lead:
            self.ctrl.sendall(b"g")
        else:
            _recv_exact(self.ctrl, 1)
        t0 = time.perf_counter()
        errors: list[BaseException] = []

        def send(s: socket.socket, n: int) -> None:
            try:
                payload = memoryview(bytes(min(_CHUNK, max(n, 1))))
                while n > 0:
                    k = min(len(payload), n)
                    s.sendall(payload[:k])
                    n -= k
            except BaseException as e:  # reported below
                errors.append(e)

        def recv(s: socket.socket, n: int) -> None:
            try:
                buf = bytearray(_CHUNK)
                while n > 0:
                    got = s.recv_into(buf, min(len(buf), n))
                    if got == 0:
                        raise ConnectionError("probe flow closed early")
                    n -= got
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=send, args=(s, n)) for s, n in zip(self.send_socks, per)]
        threads += [threading.Thread(target=recv, args=(s, n)) for s, n in zip(self.recv_socks, per)]
        for t in threads:
            t.start()
        receivers = threads[flows:]
        for t in receivers:
            t.join()
        elapsed = time.perf_counter() - t0
        for t in threads[:flows]:
            t.join()
        if errors:
            raise errors[0]
        # Swap timings so the lead knows both directions; then both wait for each other.
        self.ctrl.sendall(struct.pack("!d", elapsed))
        return elapsed, struct.unpack("!d", _recv_exact(self.ctrl, 8))[0]

    def close(self) -> None:
        self.close_data()
        self.ctrl.close()
        self.server.close()


def run_link(ep: Endpoint, flows: list[int], nbytes: int, reps: int) -> dict[str, list[float]]:
    """{flows: [[rate this way, rate the other way] in bytes/s per repetition]}; one unrecorded warm-up per level."""
    out: dict[str, list[list[float]]] = {}
    for k in flows:
        ep.open(k)
        rates = []
        for i in range(reps + 1):
            mine, theirs = ep.round(nbytes)
            if i:  # the first round opens the windows (slow start): a warm-up, as gloo's connections are warm
                rates.append([nbytes / mine, nbytes / theirs])
        out[str(k)] = rates
    ep.close_data()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, required=True, help="bytes per direction and repetition (all flows)")
    ap.add_argument("--intra-bytes", type=int, default=None, help="the same for the intra-node link")
    ap.add_argument("--flows", default="1,2,4,8,16", help="concurrency levels (flows per direction)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per level")
    args = ap.parse_args(argv)
    rank, gpn = int(os.environ["RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    world = int(os.environ["WORLD_SIZE"])
    addrs = os.environ["MONTA_NODE_ADDRS"].split(",")
    bind = os.environ["MONTA_BIND_ADDR"]
    flows = [int(f) for f in args.flows.split(",")]
    pairs = {}
    if world > gpn:
        pairs["inter"] = (0, gpn, args.bytes)
    if gpn > 1:
        pairs["intra"] = (0, 1, args.intra_bytes or args.bytes)
    result: dict[str, object] = {"flows": flows, "reps": args.reps, "links": {}, "bytes": {}}
    # One link after the other, so the two do not compete for the CPU.
    for link, (a, b, nbytes) in pairs.items():
        if rank not in (a, b):
            continue
        peer = b if rank == a else a
        ep = Endpoint(rank, peer, addrs[peer // gpn], bind, link)
        try:
            result["links"][link] = run_link(ep, flows, nbytes, args.reps)
            result["bytes"][link] = nbytes
        finally:
            ep.close()
    if rank == 0:
        print(json.dumps(result), flush=True)
    return 0


def summarize(result: dict, rates_gbps: dict[str, float | None]) -> list[dict]:
    """Per link and concurrency level: p10/p50/p90 goodput (Gbit/s), share of the configured rate
    (None where unshaped) and the p90/p10 spread. The payload ceiling on the emulated NIC is
    1448/1514 = 95.6% of the configured (frame) rate.

    The NIC is shaped per direction, so each direction of each repetition is one sample. A node's
    intra-node link is its loopback, one queue that all its ranks' traffic shares in both
    directions (the configured rate is the node's aggregate), so there a sample is the sum of both
    directions of a repetition."""
    rows = []
    for link, levels in result["links"].items():
        for flows, rounds in levels.items():
            if link == "intra":
                g = [(a + b) * 8 / 1e9 for a, b in rounds]
            else:
                g = [r * 8 / 1e9 for pair in rounds for r in pair]
            p10, p50, p90 = (percentile(g, q) for q in (10, 50, 90))
            conf = rates_gbps.get(link)
            rows.append(
                {
                    "link": link,
                    "flows": int(flows),
                    "n": len(g),
                    "p10_gbps": p10,
                    "p50_gbps": p50,
                    "p90_gbps": p90,
                    "min_gbps": min(g),
                    "configured_gbps": conf,
                    "share_p50": p50 / conf if conf else None,
                    "share_p10": p10 / conf if conf else None,
                    "spread": p90 / p10 if p10 > 0 else float("inf"),
                }
            )
    return rows


if __name__ == "__main__":
    sys.exit(main())
