"""The emulated NIC's token bucket, priced: the bytes each inter-node AllToAll gets through unshaped.

The emulator shapes a node's NIC with htb (``monta.emulate.shaping``), whose bucket holds ``burst_bytes``
(max(32 KiB, 0.25 ms at the rate): 32 KiB at every emulated NIC rate) and refills at the rate while the link
idles. So an AllToAll that starts on an idle link sends its first bucket's worth at once, and its last byte
leaves that much earlier than bytes / rate: a fixed saving in BYTES per exchange and direction, hence in time
bucket / rate, which grows as the clock slows and is a larger share of a smaller exchange. Measured
(docs/testbed.md, "the NIC's bucket"): 2 x 2 at 0.015 and 0.04 Gbit/s, an exchange after an idle link took
bytes / rate minus 15-17 ms and 4-6 ms, the bucket's 17.5 and 6.6 ms less the call's own overhead; a
256 KiB bucket saved up to its own 46 ms (p10).

A link profile's AllToAll curve is measured at one rate and one node shape, where the bucket's share of each
size is what it is; ``sustained`` takes it out (the curve left is the link's rate and the host's time per
message), and ``credited`` puts it back for the shape and the clock a record ran on. At the calibration's
own shape and clock the two cancel exactly.
"""

from __future__ import annotations

from collections.abc import Callable

from monta.perfmodel.network.links import Link

PAYLOAD_SHARE = 1448 / 1514  # a full TCP segment's payload over its frame: what the bucket's bytes carry
_FLOOR = 0.05  # as the profile's other fits: a call keeps at least 5% of its time (a tiny one is not free)


def free_bytes(inter_gbps: float | None) -> float:
    """Payload bytes the emulated NIC's full bucket passes unshaped at ``inter_gbps`` (0: an unshaped link)."""
    if not inter_gbps or inter_gbps <= 0:
        return 0.0
    from monta.emulate.shaping import burst_bytes  # the shaper's own rule, one place

    return burst_bytes(float(inter_gbps)) * PAYLOAD_SHARE


def sustained(points: list[tuple[float, float]], bucket: float, bandwidth_GBps: float) -> list[tuple[float, float]]:
    """(size, busy us) points measured through a full bucket -> (size, busy us) had the bucket been empty:
    each call's last byte would have left ``bucket`` / rate later."""
    extra_us = bucket / (bandwidth_GBps * 1e3)
    return [(s, busy + extra_us) for s, busy in points]


def credited(link: Link, node_bytes: Callable[[float], float], bucket: float) -> Link:
    """``link``'s curve (by the AllToAll's per-rank size S) with ``bucket`` bytes of each call's
    ``node_bytes(S)`` free: a call of n node bytes at efficiency e takes (n - bucket) / (rate x e), so its
    efficiency becomes n / (n / e - bucket), at any rate (bucket and n are both bytes)."""
    if bucket <= 0:
        return link
    pts = []
    for size, eff in link.efficiency:
        n = node_bytes(size)
        shaped = n / eff  # bytes' worth of link time the call takes without the bucket
        pts.append((size, n / max(shaped - bucket, _FLOOR * shaped)))
    return Link(link.bandwidth_GBps, link.latency_us, tuple(pts))
