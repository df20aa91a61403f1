"""Per-rank byte accounting of the token exchange, split by link class (intra-/inter-node).

A collective's logical traffic is counted per peer: what this rank must deliver to each peer,
classified by whether that peer sits on the same node. Algorithms (ring, tree) move the same
per-rank volume for AllToAll and AllGather, so this is what the links have to carry.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from monta.parallel import INTER, INTRA, ParallelLayout


@dataclass
class TrafficMeter:
    """Bytes this rank sent, keyed by (link, op, phase); ``phase`` is e.g. 'dispatch/fwd'. ``fault``: TEST
    AID, a ``monta.testaids.Fault`` the exchange's pass calls as it places each chunk (None: none)."""

    layout: ParallelLayout
    rank: int
    counts: dict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    fault: Any = None

    def _add(self, peers: tuple[int, ...], bytes_per_peer: int, op: str, phase: str) -> None:
        for peer in peers:
            if peer != self.rank:
                self.counts[(self.layout.link_between(self.rank, peer), op, phase)] += bytes_per_peer

    def all_to_all(self, group_ranks: tuple[int, ...], input_bytes: int, phase: str) -> None:
        n = len(group_ranks)
        if input_bytes % n:
            raise ValueError(f"AllToAll input of {input_bytes} B does not split over {n} ranks")
        self._add(group_ranks, input_bytes // n, "alltoall", phase)

    def all_gather(self, group_ranks: tuple[int, ...], input_bytes: int, phase: str) -> None:
        self._add(group_ranks, input_bytes, "allgather", phase)

    def sends(self, peer_bytes: dict[int, int], op: str, phase: str) -> None:
        """Uneven traffic: ``peer_bytes`` maps a global rank to the bytes this rank sends it (an
        AllToAllV's rows, a gather of rows of its own size); op ``meta`` for routing metadata."""
        for peer, n in peer_bytes.items():
            if peer != self.rank and n:
                self.counts[(self.layout.link_between(self.rank, peer), op, phase)] += n

    def bytes(self, link: str | None = None, op: str | None = None, phase: str | None = None) -> int:
        return sum(
            v
            for (lk, o, ph), v in self.counts.items()
            if (link is None or lk == link)
            and (op is None or o == op)
            and (phase is None or ph == phase or ph.startswith(phase + "/"))
        )

    @property
    def inter(self) -> int:
        return self.bytes(INTER)

    @property
    def intra(self) -> int:
        return self.bytes(INTRA)

    def reset(self) -> None:
        self.counts.clear()

    def summary(self) -> dict[str, int]:
        return {"inter_bytes": self.inter, "intra_bytes": self.intra}

    def payload(self, link: str) -> int:
        """Bytes on ``link`` without the routing metadata (what the exchange's formulas count)."""
        return self.bytes(link) - self.bytes(link, op="meta")
