"""How much of an unchunked exchange's AllGather runs before its AllToAll has ended on every rank of a node.

Where a node's ranks leave the inter-node AllToAll at different times (on the emulator they did, up to a
third of its time apart, while its nodes restarted TCP's slow start after idle: docs/testbed.md, the early
AllGather), the exchange's AllGather (point to point, every pair of the node's ranks: ``monta.comm.duplex``;
gloo sends once the receiver has posted) moves a pair's slices as soon as both of them have left. Those bytes
go on the node's loopback, otherwise idle during the AllToAll, so part of the AllGather hides behind it. Given
when each of a node's ranks left, ``early_bytes`` is what the loopback carries until the last one leaves:
after the k-th rank leaves, k (k - 1) slices are ready, drained at the loopback's rate.
"""

from __future__ import annotations

from collections.abc import Sequence


def early_bytes(ends_s: Sequence[float], slice_bytes: float, loopback_Bps: float) -> float:
    """Bytes of the node's AllGather sent before its last rank left the AllToAll: ``ends_s`` when each of
    the node's ranks left it (any origin), ``slice_bytes`` what one rank sends each peer, ``loopback_Bps``
    the node's loopback rate (bytes/s)."""
    if len(ends_s) < 2 or slice_bytes < 0 or loopback_Bps <= 0:
        raise ValueError(
            f"{len(ends_s)} ranks, slice {slice_bytes} B, loopback {loopback_Bps} B/s: "
            "give >= 2 ranks, a slice >= 0 and a positive rate"
        )
    ends = sorted(float(t) for t in ends_s)
    done = 0.0
    for k in range(1, len(ends)):  # k ranks have left during [ends[k-1], ends[k]]
        ready = k * (k - 1) * slice_bytes
        done += min(ready - done, loopback_Bps * (ends[k] - ends[k - 1]))
    return done
