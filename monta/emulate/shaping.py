"""``tc`` command lines that shape one emulated link: an htb rate limit with ACKs first, netem delay.

Pure functions returning argv lists, so what the emulator does to a link can be read and tested.
"""

from __future__ import annotations

# htb bucket: 0.25 ms at the rate (measured: 32 KiB, 0.26 ms, gives ~96% of 1 Gbit/s), with a floor
# of a few frames at the slow emulated rates. A full bucket lets its bytes through unshaped, which a
# real NIC never does: with the old 32 KiB floor every exchange that started on an idle NIC finished
# 32 KiB / rate early (17.5 ms at p4de's 0.015 Gbit/s), a TP x larger share of a 1/TP AllToAll than
# of legacy's, and read monta / legacy above TP (docs/testbed.md, the NIC's bucket). At 4 KiB the
# links still deliver their rate (htb lets a packet overdraw the bucket; measured 100-101%).
# Loopback carries 64 KiB packets, so its bucket must hold one.
_MIN_BURST_BYTES = 4 * 1024
# TCP payload per frame on the emulated NIC (1448 B in a 1514 B frame; htb counts frames).
PAYLOAD_SHARE = 1448 / 1514
_MIN_BURST_BYTES_LO = 80 * 1024
_BURST_SECONDS = 0.00025
# Bulk queue depth as time at the shaped rate. Deep FIFOs delay the ACKs of the opposite
# direction and make TCP retransmit spuriously; measured with one plain FIFO (tbf) for both,
# 8 MiB each way at 1 Gbit/s took 1.5-3x the ideal time, with small packets (ACKs) in their own
# higher-priority class 1.05-1.1x and no retransmissions.
# The floor must hold the windows of several concurrent flows: with 256 KiB, 4 flows of 1 MiB
# (an 8-rank AllToAll) at 0.25 Gbit/s overflowed it, TCP hit its 200 ms retransmit timeout, and
# the AllToAll took 2.1-4.3x its ideal time; with 4 MiB it took 1.05-1.6x with no timeouts
# (8 MiB: slower again, the queueing delays the piggy-backed ACKs).
_QUEUE_SECONDS = 0.005
_MIN_QUEUE_BYTES = 4 * 1024 * 1024
_NETEM_LIMIT_PACKETS = 100_000  # netem's default 1000 packets drops bulk traffic at Gbit/s rates
# u32 match on the IPv4 total-length field (offset 2): below 128 bytes = pure ACKs and control.
_SMALL_PACKET = ["match", "u16", "0x0000", "0xff80", "at", "2"]


def burst_bytes(gbps: float, dev: str = "eth0") -> int:
    floor = _MIN_BURST_BYTES_LO if dev == "lo" else _MIN_BURST_BYTES
    return max(floor, int(gbps * 1e9 / 8 * _BURST_SECONDS))


# A node's loopback carries every intra-node flow of its ranks at once: an AllGather over 8 ranks
# starts 56 flows together, and with a 4 MiB FIFO their first windows overflowed it; the tail
# drops cost a 200 ms retransmit timeout in a third of the iterations (a 1-2 MiB AllGather took
# ~70 or ~215 ms, nothing between). The loopback's bulk leaf therefore holds what a node's flows
# can have in flight (each socket's initial 4 MiB window) instead of dropping it.
_LO_QUEUE_BYTES = 256 * 1024 * 1024


def queue_bytes(gbps: float, dev: str = "eth0") -> int:
    if dev == "lo":
        return _LO_QUEUE_BYTES
    return max(_MIN_QUEUE_BYTES, int(gbps * 1e9 / 8 * _QUEUE_SECONDS))


def link_commands(dev: str, gbps: float | None, delay_us: float = 0.0) -> list[list[str]]:
    """tc argv lists that make egress of ``dev`` run at ``gbps`` Gbit/s after ``delay_us`` of delay.

    Rate: htb class 1:1 at the rate, split into 1:10 (small packets, priority 0) and 1:20 (bulk,
    default), both allowed to borrow the whole rate. Delay: netem as the leaf of both classes
    (or as the root when there is no rate). Nothing when neither is set.
    """
    base = ["tc", "qdisc", "add", "dev", dev]
    delay = [] if delay_us <= 0 else ["netem", "delay", f"{delay_us:g}us", "limit", str(_NETEM_LIMIT_PACKETS)]
    if gbps is None:
        return [base + ["root", "handle", "1:"] + delay] if delay else []
    rate, burst = f"{int(gbps * 1e9)}bit", str(burst_bytes(gbps, dev))
    share = f"{int(gbps * 1e9 / 20)}bit"  # guaranteed to the small-packet class; it may borrow the rest

    def cls(parent: str, classid: str, guaranteed: str, *prio: str) -> list[str]:
        return [
            "tc",
            "class",
            "add",
            "dev",
            dev,
            "parent",
            parent,
            "classid",
            classid,
            "htb",
            "rate",
            guaranteed,
            "ceil",
            rate,
            "burst",
            burst,
            "cburst",
            burst,
            *prio,
        ]

    return [
        base + ["root", "handle", "1:", "htb", "default", "20"],
        cls("1:", "1:1", rate),
        cls("1:1", "1:10", share, "prio", "0"),
        cls("1:1", "1:20", f"{int(gbps * 1e9) - int(gbps * 1e9 / 20)}bit", "prio", "1"),
        base + ["parent", "1:10", "handle", "10:"] + (delay or ["pfifo", "limit", "1000"]),
        base + ["parent", "1:20", "handle", "20:"] + (delay or ["bfifo", "limit", str(queue_bytes(gbps, dev))]),
        [
            "tc",
            "filter",
            "add",
            "dev",
            dev,
            "parent",
            "1:",
            "protocol",
            "ip",
            "prio",
            "1",
            "u32",
            "match",
            "ip",
            "protocol",
            "6",
            "0xff",
            *_SMALL_PACKET,
            "flowid",
            "1:10",
        ],
    ]
