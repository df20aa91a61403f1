"""The rank layout (nodes x ranks per node; TP, EP, DP degrees), its groups' ranks, and their shapes on
the nodes (``GroupShape``: what the performance model prices a collective on).

Pure data, pure Python at import: the performance model enumerates thousands of layouts without torch;
the process groups themselves are built from a layout as one ``monta.mesh.Mesh``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

INTRA = "intra"
INTER = "inter"


def expert_parallel_ranks(world_size: int, tp: int, ep: int, pp: int = 1) -> tuple[list[list[int]], list[list[int]]]:
    """EP and expert-DP rank lists, built exactly as DeepSpeed's ``groups._get_expert_parallel_ranks``.

    Reimplemented (and checked against DeepSpeed in the tests) so that planning thousands of
    layouts does not import deepspeed. Data-parallel lanes stride by TP; EP groups are
    consecutive runs of a lane, so with TP = ranks per node they cross nodes.
    """
    dp_world = world_size // (tp * pp)
    pp_stride = world_size // pp
    dp_groups = [
        list(range(start + i, start + pp_stride, tp)) for start in range(0, world_size, pp_stride) for i in range(tp)
    ]
    ep_groups: list[list[int]] = []
    edp_groups: list[list[int]] = []
    for lane in dp_groups:
        parts = [lane[i : i + ep] for i in range(0, dp_world, ep)]
        ep_groups.extend(parts)
        edp_groups.extend([list(x) for x in zip(*parts)])
    return ep_groups, edp_groups


@dataclass(frozen=True)
class GroupShape:
    """How a group sits on the nodes: size, ranks per node, concurrent ranks per node (every rank of a
    node runs a same-shaped collective at the same time in SPMD code)."""

    size: int
    ranks_per_node: int
    concurrent_per_node: int

    def __post_init__(self) -> None:
        if self.size < 1 or self.ranks_per_node < 1 or self.size % self.ranks_per_node:
            raise ValueError(f"group of {self.size} ranks cannot have {self.ranks_per_node} on each node")

    @property
    def nodes(self) -> int:
        return self.size // self.ranks_per_node

    @property
    def link(self) -> str:
        return INTRA if self.nodes == 1 else INTER

    @classmethod
    def strided(cls, size: int, stride: int, gpus_per_node: int) -> GroupShape:
        """Ranks r, r+stride, ... (Megatron/DeepSpeed rank order): a node holds gpn/stride of them."""
        per_node = max(1, min(size, gpus_per_node // stride)) if stride < gpus_per_node else 1
        while size % per_node:  # a group that does not tile nodes evenly: be conservative
            per_node -= 1
        return cls(size, per_node, gpus_per_node)


def axis_shapes(
    gpus_per_node: int, tp: int = 1, ep: int = 1, lanes: int | None = None, cp: int = 1
) -> dict[str, GroupShape]:
    """The shapes of a layout's axes from its degrees alone, in Megatron/DeepSpeed rank order (TP
    innermost, then CP, EP over the ``lanes`` data-parallel lanes that stride by TP, expert-DP the rest;
    ``lanes`` None: just the EP group's): what the performance model prices a strategy on without a world
    to count (``ParallelLayout.shape`` counts a real layout's groups; both agree on TP, EP and DP wherever
    the groups tile the nodes evenly, tests/test_mesh.py)."""
    lanes = ep if lanes is None else lanes
    return {
        "tp": GroupShape.strided(tp, 1, gpus_per_node),
        "cp": GroupShape.strided(cp, tp, gpus_per_node),
        "ep": GroupShape.strided(ep, tp, gpus_per_node),
        "dp": GroupShape.strided(lanes, tp, gpus_per_node),
        "edp": GroupShape.strided(lanes // ep, tp * ep, gpus_per_node),
    }


@dataclass(frozen=True)
class Group:
    """One process group of the layout: its ranks, its role, and the link class it spans."""

    kind: str
    ranks: tuple[int, ...]
    link: str  # INTRA when all ranks share a node, else INTER

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class ParallelLayout:
    """Validated parallel layout of a job: ``nodes`` x ``gpus_per_node`` ranks, TP inside a node.

    TP groups are consecutive ranks inside a node (Megatron convention); DP lanes stride by TP;
    EP groups split each DP lane as DeepSpeed does; expert-DP groups are the rest.
    """

    nodes: int
    gpus_per_node: int
    tp: int = 1
    ep: int = 1
    pp: int = 1
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "tp", "ep", "pp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be a positive integer")
        if self.tp > self.gpus_per_node:
            raise ValueError(
                f"tp={self.tp} is larger than a node (gpus_per_node={self.gpus_per_node}); "
                "tensor parallelism must stay inside a node"
            )
        if self.gpus_per_node % self.tp:
            raise ValueError(f"tp={self.tp} does not divide gpus_per_node={self.gpus_per_node}")
        if self.world_size % (self.tp * self.pp):
            raise ValueError(
                f"tp*pp={self.tp * self.pp} does not divide world size {self.world_size} "
                f"({self.nodes} nodes x {self.gpus_per_node})"
            )
        if self.dp % self.ep:
            raise ValueError(
                f"ep={self.ep} does not divide the data-parallel degree dp={self.dp} "
                f"(world {self.world_size} / tp {self.tp} / pp {self.pp})"
            )

    # -- degrees -------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp)

    @property
    def expert_dp(self) -> int:
        return self.dp // self.ep

    def node_of(self, rank: int) -> int:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside world of size {self.world_size}")
        return rank // self.gpus_per_node

    def link_between(self, a: int, b: int) -> str:
        return INTRA if self.node_of(a) == self.node_of(b) else INTER

    def _group(self, kind: str, ranks: list[int]) -> Group:
        link = INTRA if len({self.node_of(r) for r in ranks}) == 1 else INTER
        return Group(kind, tuple(ranks), link)

    # -- groups --------------------------------------------------------------------------
    @cached_property
    def tp_groups(self) -> tuple[Group, ...]:
        return tuple(self._group("tp", list(range(s, s + self.tp))) for s in range(0, self.world_size, self.tp))

    @cached_property
    def dp_groups(self) -> tuple[Group, ...]:
        stride = self.world_size // self.pp
        return tuple(
            self._group("dp", list(range(s + i, s + stride, self.tp)))
            for s in range(0, self.world_size, stride)
            for i in range(self.tp)
        )

    @cached_property
    def _expert_groups(self) -> tuple[tuple[Group, ...], tuple[Group, ...]]:
        ep, edp = expert_parallel_ranks(self.world_size, self.tp, self.ep, self.pp)
        return tuple(self._group("ep", g) for g in ep), tuple(self._group("edp", g) for g in edp)

    @property
    def ep_groups(self) -> tuple[Group, ...]:
        return self._expert_groups[0]

    @property
    def expert_dp_groups(self) -> tuple[Group, ...]:
        return self._expert_groups[1]

    def groups_of(self, kind: str) -> tuple[Group, ...]:
        return {"tp": self.tp_groups, "dp": self.dp_groups, "ep": self.ep_groups, "edp": self.expert_dp_groups}[kind]

    def group_of(self, kind: str, rank: int) -> Group:
        for g in self.groups_of(kind):
            if rank in g.ranks:
                return g
        raise ValueError(f"rank {rank} is in no {kind} group")  # unreachable for a valid layout

    def tp_rank(self, rank: int) -> int:
        return rank % self.tp

    def shape(self, kind: str, rank: int = 0) -> GroupShape:
        """How ``rank``'s ``kind`` group sits on the nodes, counted (ranks on its first node); every
        group of a kind has the same shape in these layouts, so rank 0's stands for all."""
        ranks = self.group_of(kind, rank).ranks
        first = self.node_of(ranks[0])
        return GroupShape(len(ranks), sum(1 for r in ranks if self.node_of(r) == first), self.gpus_per_node)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "world_size": self.world_size,
            "tp": self.tp,
            "ep": self.ep,
            "pp": self.pp,
            "dp": self.dp,
            "expert_dp": self.expert_dp,
        }

    def describe(self) -> str:
        ep_link = self.ep_groups[0].link if self.ep_groups else "-"
        return (
            f"{self.nodes} nodes x {self.gpus_per_node} ranks: TP{self.tp} EP{self.ep} DP{self.dp} "
            f"(EP groups are {ep_link}-node)"
        )
