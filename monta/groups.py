"""torch.distributed process groups for a ParallelLayout, and the DeepSpeed ``mpu`` adapter.

Groups are passed around explicitly as a ``ProcessGroups`` object, never read from globals;
DeepSpeed's own registry is filled from the same layout so stock and monta layers share groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from monta.parallel import ParallelLayout


@dataclass
class ProcessGroups:
    """This rank's groups: tensor parallel, data parallel, expert parallel, expert data parallel."""

    layout: ParallelLayout
    rank: int
    tp: Any
    dp: Any
    ep: Any
    edp: Any

    @property
    def tp_rank(self) -> int:
        return self.layout.tp_rank(self.rank)


def new_groups(layout: ParallelLayout, kind: str, rank: int) -> Any:
    """Fresh communicators for every ``kind`` group of the layout (collective); returns this rank's."""
    mine = None
    # Every rank must call new_group for every group, in the same order.
    for g in layout.groups_of(kind):
        handle = dist.new_group(list(g.ranks))
        if rank in g.ranks:
            mine = handle
    return mine


def build_process_groups(layout: ParallelLayout) -> ProcessGroups:
    """Create this layout's groups (collective: every rank must call it)."""
    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialized; call deepspeed.init_distributed() first")
    if dist.get_world_size() != layout.world_size:
        raise ValueError(
            f"layout {layout.describe()} needs {layout.world_size} ranks, but the world has {dist.get_world_size()}"
        )
    rank = dist.get_rank()
    return ProcessGroups(layout, rank, *(new_groups(layout, k, rank) for k in ("tp", "dp", "ep", "edp")))


class MPU:
    """The Megatron-style ``mpu`` object DeepSpeed queries for tensor/data parallel groups."""

    def __init__(self, pgs: ProcessGroups):
        self._pgs = pgs

    def get_tensor_model_parallel_world_size(self) -> int:
        return self._pgs.layout.tp

    def get_tensor_model_parallel_rank(self) -> int:
        return self._pgs.tp_rank

    def get_tensor_model_parallel_group(self):
        return self._pgs.tp

    def get_model_parallel_world_size(self) -> int:
        return self._pgs.layout.tp

    def get_model_parallel_rank(self) -> int:
        return self._pgs.tp_rank

    def get_model_parallel_group(self):
        return self._pgs.tp

    def get_data_parallel_world_size(self) -> int:
        return self._pgs.layout.dp

    def get_data_parallel_rank(self) -> int:
        return self._pgs.rank // self._pgs.layout.tp

    def get_data_parallel_group(self):
        return self._pgs.dp

    def get_data_parallel_group_ranks(self):
        return list(self._pgs.layout.group_of("dp", self._pgs.rank).ranks)

    def get_pipeline_model_parallel_world_size(self) -> int:
        return 1


def reset_deepspeed_groups() -> None:
    """Forget DeepSpeed's cached expert groups and mpu, so one world can host several layouts."""
    from deepspeed.utils import groups

    groups._EXPERT_PARALLEL_GROUP.clear()
    groups._EXPERT_PARALLEL_GROUP_RANKS.clear()
    groups._EXPERT_DATA_PARALLEL_GROUP.clear()
    groups._EXPERT_DATA_PARALLEL_GROUP_RANKS.clear()
    groups.mpu = None
    groups.expert_tensor_parallel_world_size = 1


def init_deepspeed_groups(pgs: ProcessGroups, expert_tp: bool) -> None:
    """Register this layout with DeepSpeed: its mpu and its expert groups (named ``ep_size_<ep>``).

    DeepSpeed's non-expert-TP path with an mpu builds consecutive EP groups that ignore TP, so
    we build the TP-strided groups ourselves in both modes; they equal the layout's EP groups.
    Existing groups of the same name are kept (DeepSpeed's rule); call ``reset_deepspeed_groups``
    first to switch a world to another layout.
    """
    from deepspeed.utils import groups

    layout = pgs.layout
    if layout.tp > 1:
        groups.mpu = MPU(pgs)
    if layout.tp > 1 and expert_tp:
        groups._create_expert_data_and_model_parallel(layout.ep, mpu=groups.mpu)
    elif layout.tp > 1:
        groups._create_expert_and_data_parallel(layout.ep, mp_size=layout.tp, mp_mode="tp")
    else:
        groups._create_expert_and_data_parallel(layout.ep)
    name = f"ep_size_{layout.ep}"
    got = sorted(groups._get_expert_parallel_group_ranks(name))
    want = sorted(layout.group_of("ep", pgs.rank).ranks)
    if got != want:  # internal invariant: our layout mirrors DeepSpeed's construction
        raise RuntimeError(f"DeepSpeed built EP group {got} but the layout says {want}")
