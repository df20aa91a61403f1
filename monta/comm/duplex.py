"""Full-duplex transport for gloo: the exchange's AllToAll and AllGather as point-to-point sends,
each direction of a rank pair on its own TCP connection (lower -> higher on one communicator, higher -> lower
on its twin).

Why: gloo has one TCP connection per rank pair, and large messages in both directions of one
connection at once take turns instead of flowing together (measured on the emulated cluster: a
2-rank exchange took 1.05x-2.1x its ideal time, iteration by iteration; see
docs/testbed.md). A real NIC (InfiniBand, RoCE, NVLink) carries both directions independently, so one
connection per direction is the faithful emulation; it changes no byte, only the transport.
NCCL keeps its native collectives (``transport_for``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

TRANSPORTS = ("duplex", "native")
ENV = "MONTA_GLOO_TRANSPORT"  # duplex (default on gloo) | native: gloo's own collectives (the old behaviour)
_TAG_SPACE = 1 << 20  # per-group call counter, wrapped; every member calls in the same order


def transport_for(backend: str | None = None) -> str:
    """'duplex' on gloo unless $MONTA_GLOO_TRANSPORT says 'native'; always 'native' on other backends."""
    backend = backend or (dist.get_backend() if dist.is_initialized() else "gloo")
    if backend != "gloo":
        return "native"
    choice = os.environ.get(ENV, "duplex").strip() or "duplex"
    if choice not in TRANSPORTS:
        raise ValueError(f"{ENV}={choice!r}: choose one of {', '.join(TRANSPORTS)}")
    return choice


class _Batch:
    """The async handle of a batch of point-to-point operations (what a collective's Work offers).
    ``landing``: (device tensor, host copy) pairs received through host memory, copied in on wait."""

    def __init__(self, works: list[Any], landing: list[tuple[torch.Tensor, torch.Tensor]] | None = None):
        self._works = works
        self._landing = landing or []

    def wait(self, timeout: Any = None) -> bool:
        for w in self._works:
            w.wait()
        for dst, host in self._landing:
            dst.copy_(host)
        self._works, self._landing = [], []
        return True

    def is_completed(self) -> bool:
        """Whether the transfers are done; data received through host copies lands only on ``wait``."""
        return all(w.is_completed() for w in self._works)


class DuplexGroup:
    """A group of ranks with two communicators: ``up`` carries data to higher ranks, ``down`` to lower.

    Each member holds the same object for its group; ``all_to_all`` and ``all_gather`` have the
    semantics of ``all_to_all_single`` (even split along dim 0) and ``all_gather_into_tensor``.
    """

    def __init__(self, ranks: Sequence[int], up: Any, down: Any, rank: int):
        self.ranks = tuple(ranks)
        self.up, self.down = up, down
        self.rank = rank
        self.index = self.ranks.index(rank)
        self._calls = 0

    @property
    def size(self) -> int:
        return len(self.ranks)

    def _tag(self) -> int:
        self._calls += 1
        return self._calls % _TAG_SPACE

    def _exchange(self, *parts: tuple[list[torch.Tensor | None], list[torch.Tensor | None]]) -> _Batch:
        """Post every receive, then every send, peers in rotated order (rank i starts at i+1) so that
        not everyone sends to the same peer first; gloo's sends are asynchronous, nothing blocks.
        ``parts``: (sends, recvs) per message kind, each kind its own tag; all in one batch, so several
        tensors per peer (rows and the routing data beside them) cost one wait, not one each."""
        n, me = self.size, self.index
        tags = [self._tag() for _ in parts]
        peers = [(me + k) % n for k in range(1, n)]
        parts, landing = _through_host(parts, own=me)
        works = []
        for p in peers:
            # data from a lower rank travels up, from a higher rank down
            comm = self.up if p < me else self.down
            for tag, (_, recvs) in zip(tags, parts):
                if recvs[p] is not None:
                    works.append(dist.irecv(recvs[p], src=self.ranks[p], group=comm, tag=tag))
        for p in peers:
            comm = self.up if p > me else self.down
            for tag, (sends, _) in zip(tags, parts):
                if sends[p] is not None:
                    works.append(dist.isend(sends[p], dst=self.ranks[p], group=comm, tag=tag))
        return _Batch(works, landing)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor) -> _Batch:
        n = self.size
        if inp.numel() % n or out.numel() != inp.numel():
            raise ValueError(
                f"all_to_all: {inp.numel()} elements do not split evenly over {n} ranks (output has {out.numel()})"
            )
        src, dst = inp.contiguous().view(n, -1), out.view(n, -1)
        dst[self.index].copy_(src[self.index])
        return self._exchange(([src[p] for p in range(n)], [dst[p] for p in range(n)]))

    def all_to_all_v(self, sends: list[torch.Tensor | None], recvs: list[torch.Tensor | None], *more) -> _Batch:
        """Uneven AllToAll: ``sends[p]`` to member p, ``recvs[p]`` from it (None: nothing; the own entry
        is the caller's to copy). Both sides agree on the sizes beforehand (a count exchange). ``more``:
        further (sends, recvs) pairs travelling in the same batch."""
        return self._exchange((sends, recvs), *more)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor) -> _Batch:
        n = self.size
        if out.numel() != n * inp.numel():
            raise ValueError(f"all_gather: output holds {out.numel()} elements, expected {n} x {inp.numel()}")
        src, dst = inp.contiguous().view(-1), out.view(n, -1)
        dst[self.index].copy_(src)
        return self._exchange(([src] * n, [dst[p] for p in range(n)]))


STAGE_ENV = "MONTA_TEST_STAGE_HOST"  # TEST AID: "1" stages CPU tensors too, so the CPU tests run that path


def _through_host(parts: tuple, own: int) -> tuple[tuple, list[tuple[torch.Tensor, torch.Tensor]]]:
    """gloo's point-to-point sends read and write host memory only (a CUDA pointer fails in ``writev``
    with "Bad address", seen on an H200 with ranks sharing the GPU over gloo): device tensors travel
    through host copies, the received ones copied back when the batch is waited on. CPU tensors pass
    as they are (the emulator's case), so nothing changes there. ``own``: this rank's entry, which no peer
    sends (the caller copied it already): it is left out, or the wait would overwrite it."""
    forced = os.environ.get(STAGE_ENV) == "1"  # read once per exchange, not once per tensor

    def _staged(t: torch.Tensor) -> bool:
        return t.is_cuda or forced

    if not any(t is not None and _staged(t) for sends, recvs in parts for t in (*sends, *recvs)):
        return parts, []
    landing: list[tuple[torch.Tensor, torch.Tensor]] = []

    def host_recv(p: int, t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None or p == own or not _staged(t):
            return t
        landing.append((t, torch.empty(t.shape, dtype=t.dtype)))
        return landing[-1][1]

    copies: dict[int, torch.Tensor] = {}  # one host copy per tensor: an AllGather sends one tensor to all

    def host_send(p: int, t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None or p == own or not _staged(t):
            return None if p == own else t
        if id(t) not in copies:
            copies[id(t)] = t.cpu()
        return copies[id(t)]

    staged = tuple(
        (
            [host_send(p, t) for p, t in enumerate(sends)],
            [host_recv(p, t) for p, t in enumerate(recvs)],
        )
        for sends, recvs in parts
    )
    return staged, landing


# Built groups per world (keyed by the default process group) and pattern. Every rank makes the
# same sequence of calls, so every rank hits or misses the cache together and the collective
# new_group calls stay matched; without it each MoE layer built two more communicators per group
# (a test session of ~130 layers spent most of its time creating them).
_CACHE: dict[Any, dict[tuple, DuplexGroup | None]] = {}


def duplex_groups(groups: Sequence[Sequence[int]], rank: int, *, fresh: bool = False) -> DuplexGroup | None:
    """Two communicators for every group in ``groups`` (collective: every rank of the world calls it
    with the same list, in the same order); returns this rank's, or None if it is in none. The same
    pattern in the same world returns the same groups unless ``fresh`` (exchanges that may run at
    the same time, on different threads, need their own)."""
    key = tuple(tuple(r) for r in groups)
    world = dist.distributed_c10d._get_default_group()
    cache = _CACHE.setdefault(world, {}) if not fresh else {}
    if key in cache:
        return cache[key]
    mine = None
    for ranks in groups:
        ranks = list(ranks)
        up, down = dist.new_group(ranks), dist.new_group(ranks)
        if rank in ranks:
            mine = DuplexGroup(ranks, up, down, rank)
    cache[key] = mine
    return mine
