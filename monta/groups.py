"""DeepSpeed's view of a ``monta.mesh.Mesh``: the Megatron-style ``mpu`` adapter and its expert groups.

Groups are passed around explicitly as the mesh, never read from globals; DeepSpeed's own registry
is filled from the same layout so stock and monta layers share groups.
"""

from __future__ import annotations

from monta.mesh import Mesh


class MPU:
    """The Megatron-style ``mpu`` object DeepSpeed queries for tensor/data parallel groups."""

    def __init__(self, mesh: Mesh):
        self._mesh = mesh

    def get_tensor_model_parallel_world_size(self) -> int:
        return self._mesh.layout.tp

    def get_tensor_model_parallel_rank(self) -> int:
        return self._mesh.tp.index

    def get_tensor_model_parallel_group(self):
        return self._mesh.tp.group

    def get_model_parallel_world_size(self) -> int:
        return self._mesh.layout.tp

    def get_model_parallel_rank(self) -> int:
        return self._mesh.tp.index

    def get_model_parallel_group(self):
        return self._mesh.tp.group

    def get_data_parallel_world_size(self) -> int:
        return self._mesh.layout.dp

    def get_data_parallel_rank(self) -> int:
        return self._mesh.rank // self._mesh.layout.tp

    def get_data_parallel_group(self):
        return self._mesh.dp.group

    def get_data_parallel_group_ranks(self):
        return list(self._mesh.dp.ranks)

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


def init_deepspeed_groups(mesh: Mesh, expert_tp: bool) -> None:
    """Register this layout with DeepSpeed: its mpu and its expert groups (named ``ep_size_<ep>``).

    DeepSpeed's non-expert-TP path with an mpu builds consecutive EP groups that ignore TP, so
    we build the TP-strided groups ourselves in both modes; they equal the layout's EP groups.
    Existing groups of the same name are kept (DeepSpeed's rule); call ``reset_deepspeed_groups``
    first to switch a world to another layout.
    """
    from deepspeed.utils import groups

    layout = mesh.layout
    if layout.tp > 1:
        groups.mpu = MPU(mesh)
    if layout.tp > 1 and expert_tp:
        groups._create_expert_data_and_model_parallel(layout.ep, mpu=groups.mpu)
    elif layout.tp > 1:
        groups._create_expert_and_data_parallel(layout.ep, mp_size=layout.tp, mp_mode="tp")
    else:
        groups._create_expert_and_data_parallel(layout.ep)
    name = f"ep_size_{layout.ep}"
    got = sorted(groups._get_expert_parallel_group_ranks(name))
    want = sorted(mesh.ep.ranks)
    if got != want:  # internal invariant: our layout mirrors DeepSpeed's construction
        raise RuntimeError(f"DeepSpeed built EP group {got} but the layout says {want}")
