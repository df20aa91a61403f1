"""The one mesh of a job's parallel groups: built once from a ``ParallelLayout`` (the plain description),
it gives every axis (tp, dp, ep, edp) as a ``MeshAxis``: its communicator, its members' global ranks,
this rank's index on it and how its members sit on the nodes.

torchtitan's ``ParallelDims`` + ``DeviceMesh``, in the project's terms. Torch-free at import (the
performance model and the CLI import the layout beside it); ``build_mesh`` imports torch.distributed.
Several meshes may be built from one layout (the model's TP linears and the background gradient sync
run on communicators of their own, so their collectives never interleave with the exchange's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from monta.parallel import GroupShape, ParallelLayout

AXES = ("tp", "dp", "ep", "edp")


@dataclass(frozen=True, eq=False)
class MeshAxis:
    """One axis of the mesh as this rank sees it: the communicator (a ProcessGroup, a
    ``monta.comm.duplex.DuplexGroup``, or None for a one-rank axis never built), its members' global
    ranks in member order, this rank, and the layout (where each rank's node is)."""

    name: str
    group: Any
    ranks: tuple[int, ...]
    rank: int
    layout: ParallelLayout = field(repr=False)

    def __deepcopy__(self, memo):  # shared, never copied: it names a communicator (DeepSpeed deep-copies experts)
        return self

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def index(self) -> int:
        """This rank's member index on the axis."""
        return self.ranks.index(self.rank)

    # -- node geometry (what token exchanges route by) -------------------------------------------
    @cached_property
    def _geometry(self) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        phys = [self.layout.node_of(r) for r in self.ranks]
        order = list(dict.fromkeys(phys))
        node = tuple(order.index(n) for n in phys)
        local = tuple(sum(1 for q in range(i) if node[q] == node[i]) for i in range(len(node)))
        counts = {n: node.count(n) for n in set(node)}
        if len(set(counts.values())) != 1:
            raise ValueError(f"{self.name} group {list(self.ranks)} holds different rank counts per node {counts}")
        return node, local, counts[0]

    @property
    def node(self) -> tuple[int, ...]:
        """Each member's node, numbered 0.. in order of appearance on the axis."""
        return self._geometry[0]

    @property
    def local(self) -> tuple[int, ...]:
        """Each member's position among its node's members (its local index, the rail it sits on)."""
        return self._geometry[1]

    @property
    def per_node(self) -> int:
        """Members on each node the axis spans (every node holds the same number)."""
        return self._geometry[2]

    @property
    def nodes(self) -> int:
        return self.size // self.per_node

    @property
    def my_node(self) -> int:
        return self.node[self.index]

    @property
    def my_local(self) -> int:
        return self.local[self.index]

    @property
    def shape(self) -> GroupShape:
        """How the axis sits on the nodes, as the performance model prices it (no communicator in it)."""
        return GroupShape(self.size, self.per_node, self.layout.gpus_per_node)

    def member(self, node: int, local: int) -> int:
        """The member index at (node, local index)."""
        for i, (n, j) in enumerate(zip(self.node, self.local)):
            if n == node and j == local:
                return i
        raise ValueError(f"no {self.name} member at node {node}, local index {local}")

    def node_members(self, node: int) -> list[int]:
        """The member indices on ``node`` (intra-node peers); same-``local`` members are the inter-node peers."""
        return [i for i, n in enumerate(self.node) if n == node]

    def rebind(self, group: Any, ranks: tuple[int, ...] | None = None) -> MeshAxis:
        """The same axis on another communicator of the same members (``ranks``: its member order)."""
        return dataclasses.replace(self, group=group, ranks=tuple(self.ranks if ranks is None else ranks))


@dataclass(frozen=True, eq=False)
class Mesh:
    """This rank's parallel groups, one ``MeshAxis`` per axis (``mesh.tp``, ``mesh["ep"]``), and the
    layout they were built from."""

    layout: ParallelLayout
    rank: int
    axes: dict[str, MeshAxis]

    def __deepcopy__(self, memo):
        return self

    def __getitem__(self, name: str) -> MeshAxis:
        try:
            return self.axes[name]
        except KeyError:
            raise KeyError(f"mesh axis {name!r}: this mesh has {', '.join(self.axes)}") from None

    @property
    def tp(self) -> MeshAxis:
        return self["tp"]

    @property
    def dp(self) -> MeshAxis:
        return self["dp"]

    @property
    def ep(self) -> MeshAxis:
        return self["ep"]

    @property
    def edp(self) -> MeshAxis:
        return self["edp"]

    def replace(self, **axes: MeshAxis) -> Mesh:
        """This mesh with some axes on other communicators (the exchange's duplex or DeepSpeed's EP group)."""
        return Mesh(self.layout, self.rank, {**self.axes, **axes})

    def describe(self) -> str:
        return f"rank {self.rank} of {self.layout.describe()}"


def mesh_from_groups(layout: ParallelLayout, rank: int, groups: dict[str, Any]) -> Mesh:
    """The mesh of ``rank`` given a communicator per axis (None: a one-rank axis, or none built); the
    members come from the layout, in its (sorted) order, as ``new_group`` orders them."""
    axes = {}
    for name in AXES:
        ranks = layout.group_of(name, rank).ranks
        axes[name] = MeshAxis(name, groups.get(name), tuple(ranks), rank, layout)
    return Mesh(layout, rank, axes)


def solo_mesh(layout: ParallelLayout | None = None) -> Mesh:
    """A one-rank mesh with no communicators (rank 0 of a one-rank layout): single-process checks and tools."""
    layout = layout or ParallelLayout(1, 1)
    if layout.world_size != 1:
        raise ValueError(f"a solo mesh is one rank; layout {layout.describe()} has {layout.world_size}")
    return mesh_from_groups(layout, 0, {})


def new_groups(layout: ParallelLayout, name: str, rank: int) -> Any:
    """Fresh communicators for every ``name`` group of the layout (collective); returns this rank's."""
    import torch.distributed as dist

    mine = None
    # Every rank must call new_group for every group, in the same order.
    for g in layout.groups_of(name):
        handle = dist.new_group(list(g.ranks))
        if rank in g.ranks:
            mine = handle
    return mine


def build_mesh(layout: ParallelLayout) -> Mesh:
    """Create the layout's communicators and this rank's mesh (collective: every rank must call it)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialized; call deepspeed.init_distributed() first")
    if dist.get_world_size() != layout.world_size:
        raise ValueError(
            f"layout {layout.describe()} needs {layout.world_size} ranks, but the world has {dist.get_world_size()}"
        )
    rank = dist.get_rank()
    return mesh_from_groups(layout, rank, {name: new_groups(layout, name, rank) for name in AXES})
