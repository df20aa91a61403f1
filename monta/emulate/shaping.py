"""``tc`` command lines that shape one emulated link (tbf for rate, netem for latency).

Pure functions returning argv lists, so what the emulator does to a link can be read and tested.
"""

from __future__ import annotations

# tbf's bucket must hold at least one (GSO) packet and about a millisecond of traffic, else it
# throttles below the set rate; larger buckets let short transfers run unshaped.
_MIN_BURST_BYTES = 128 * 1024
_BURST_SECONDS = 0.001
# Queue depth of the shaper, as time at the shaped rate: deep enough that TCP is not pushed into
# loss recovery (goodput falls well below the rate), shallow enough to keep latency sane.
_QUEUE_LATENCY = "50ms"
_NETEM_LIMIT_PACKETS = 100_000  # netem's default 1000 packets drops bulk traffic at Gbit/s rates


def burst_bytes(gbps: float) -> int:
    return max(_MIN_BURST_BYTES, int(gbps * 1e9 / 8 * _BURST_SECONDS))


def link_commands(dev: str, gbps: float | None, delay_us: float = 0.0) -> list[list[str]]:
    """tc argv lists that make egress of ``dev`` run at ``gbps`` Gbit/s after ``delay_us`` of delay.

    Nothing is returned when neither is set: the device keeps its default qdisc.
    """
    rate = None if gbps is None else ["tbf", "rate", f"{int(gbps * 1e9)}bit",
                                      "burst", str(burst_bytes(gbps)), "latency", _QUEUE_LATENCY]
    delay = None if delay_us <= 0 else ["netem", "delay", f"{delay_us:g}us", "limit", str(_NETEM_LIMIT_PACKETS)]
    base = ["tc", "qdisc", "add", "dev", dev]
    if rate and delay:
        # netem first, tbf as its child (the layout netem's documentation gives for delay + rate).
        return [base + ["root", "handle", "1:"] + delay, base + ["parent", "1:1", "handle", "10:"] + rate]
    if rate or delay:
        return [base + ["root", "handle", "1:"] + (rate or delay)]
    return []
