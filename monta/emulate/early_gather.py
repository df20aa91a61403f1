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
    the node's loopback rate (bytes/s). One AllGather group: the whole node."""
    return early_bytes_in_groups([(0, t) for t in ends_s], slice_bytes, loopback_Bps)


def early_bytes_in_groups(leaves: Sequence[tuple[int, float]], slice_bytes: float, loopback_Bps: float) -> float:
    """``early_bytes`` for a node holding several AllGather (TP) groups: ``leaves`` (group, time) per rank of
    the node; after each rank leaves, every pair of one group that has both left has its slices ready, and the
    node's loopback drains them at its rate until the node's last rank leaves."""
    if len(leaves) < 2 or slice_bytes < 0 or loopback_Bps <= 0:
        raise ValueError(
            f"{len(leaves)} ranks, slice {slice_bytes} B, loopback {loopback_Bps} B/s: "
            "give >= 2 ranks, a slice >= 0 and a positive rate"
        )
    ranks = sorted(((float(t), g) for g, t in leaves), key=lambda x: x[0])
    left: dict[int, int] = {}
    done = 0.0
    for (t, g), (t_next, _) in zip(ranks, ranks[1:]):  # those left by t have [t, t_next] to drain
        left[g] = left.get(g, 0) + 1
        ready = sum(k * (k - 1) for k in left.values()) * slice_bytes
        done += min(ready - done, loopback_Bps * (t_next - t))
    return done
