"""The one mesh (monta.mesh): its axes are the layout's groups, its node geometry is where the ranks sit,
and the group types it replaced do not come back."""

from __future__ import annotations

import ast
import copy
import pathlib

import pytest

from monta.mesh import AXES, Mesh, MeshAxis, mesh_from_groups, solo_mesh
from monta.parallel import ParallelLayout

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The runtime group types the mesh replaced (issue 45): one group type (MeshAxis) plus the layout.
REMOVED = ("ProcessGroups", "ExchangeGroups", "Comm", "EPGeometry", "TPGroup")


def _classes(folder: pathlib.Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(str(path.relative_to(folder.parent)))
    return found


def test_no_removed_group_type_is_defined_again():
    classes = {**_classes(ROOT / "monta")}
    for name, where in _classes(ROOT / "baselines").items():
        classes.setdefault(name, []).extend(where)
    back = {name: classes[name] for name in REMOVED if name in classes}
    assert not back, f"group types replaced by monta.mesh are defined again: {back}"
    assert classes["MeshAxis"] == ["monta/mesh.py"] and classes["Mesh"] == ["monta/mesh.py"]


def test_the_check_sees_a_class_in_a_subpackage(tmp_path):
    (tmp_path / "monta" / "comm").mkdir(parents=True)
    (tmp_path / "monta" / "comm" / "m.py").write_text("def f():\n    class EPGeometry:\n        pass\n")
    assert _classes(tmp_path / "monta") == {"EPGeometry": ["monta/comm/m.py"]}


@pytest.mark.parametrize(
    "nodes,gpn,tp,ep", [(2, 4, 2, 4), (2, 4, 1, 8), (2, 4, 4, 2), (4, 2, 1, 4), (2, 8, 8, 2), (1, 4, 2, 2)]
)
def test_every_rank_axis_is_its_layout_group(nodes, gpn, tp, ep):
    layout = ParallelLayout(nodes, gpn, tp=tp, ep=ep)
    for rank in range(layout.world_size):
        mesh = mesh_from_groups(layout, rank, {})
        for name in AXES:
            axis = mesh[name]
            assert axis.ranks == layout.group_of(name, rank).ranks
            assert axis.ranks[axis.index] == rank and axis.size == len(axis.ranks)
        assert mesh.tp.index == layout.tp_rank(rank)
        assert (mesh.tp.size, mesh.ep.size, mesh.dp.size, mesh.edp.size) == (tp, ep, layout.dp, layout.expert_dp)


def test_the_ep_axis_knows_its_nodes_and_rails():
    """2 nodes x 4 ranks, TP 2, EP 4: rank 2's EP group is 0, 2, 4, 6 (two on each node)."""
    ep = mesh_from_groups(ParallelLayout(2, 4, tp=2, ep=4), 2, {}).ep
    assert ep.ranks == (0, 2, 4, 6) and ep.index == 1
    assert ep.node == (0, 0, 1, 1) and ep.local == (0, 1, 0, 1)
    assert (ep.nodes, ep.per_node, ep.my_node, ep.my_local) == (2, 2, 0, 1)
    assert ep.member(1, 1) == 3 and ep.node_members(1) == [2, 3]
    with pytest.raises(ValueError, match="no ep member at node 2"):
        ep.member(2, 0)


def test_an_axis_uneven_over_the_nodes_is_refused_when_asked_for_its_geometry():
    # 3 nodes x 4, EP 3: rank 3's EP group 3, 4, 5 holds one rank of node 0 and two of node 1
    ep = mesh_from_groups(ParallelLayout(3, 4, tp=1, ep=3), 3, {}).ep
    assert ep.ranks == (3, 4, 5)
    with pytest.raises(ValueError, match="different rank counts per node"):
        assert ep.per_node


def test_a_mesh_is_shared_not_copied_and_rebinds_an_axis():
    mesh = solo_mesh()
    assert copy.deepcopy(mesh) is mesh and copy.deepcopy(mesh.tp) is mesh.tp  # DeepSpeed deep-copies experts
    other = mesh.replace(ep=mesh.ep.rebind("a communicator"))
    assert isinstance(other, Mesh) and isinstance(other.ep, MeshAxis)
    assert other.ep.group == "a communicator" and other.ep.ranks == (0,) and mesh.ep.group is None
    with pytest.raises(KeyError, match="mesh axis 'pp'"):
        mesh["pp"]
    with pytest.raises(ValueError, match="a solo mesh is one rank"):
        solo_mesh(ParallelLayout(1, 2))


def test_the_models_shapes_from_degrees_are_the_layouts_counted_ones():
    """``axis_shapes`` (degrees only: the performance model's strategies) and ``ParallelLayout.shape`` (a
    real layout's groups counted) agree on TP, EP and DP for every layout whose groups tile the nodes."""
    from monta.parallel import GroupShape, axis_shapes

    checked = 0
    for nodes in range(1, 7):
        for gpn in (1, 2, 4, 6, 8):
            for tp in (t for t in range(1, gpn + 1) if gpn % t == 0):
                for ep in range(1, nodes * gpn // tp + 1):
                    try:
                        layout = ParallelLayout(nodes, gpn, tp=tp, ep=ep)
                    except ValueError:
                        continue
                    model = axis_shapes(gpn, tp=tp, ep=ep, lanes=layout.dp)
                    for kind in ("tp", "ep", "dp"):
                        try:
                            counted = layout.shape(kind)
                        except ValueError:  # a group uneven over the nodes: the model's shape is conservative
                            continue
                        assert model[kind] == counted, (layout.describe(), kind)
                        checked += 1
    assert checked > 500
    assert ParallelLayout(2, 4, tp=2, ep=4).shape("ep") == GroupShape(4, 2, 4)
    assert axis_shapes(8, ep=16) == {**axis_shapes(8, ep=16, lanes=16)}  # lanes default: the EP group's
    assert axis_shapes(8, ep=16)["edp"] == GroupShape(1, 1, 8)


def test_a_mesh_axis_shape_is_its_layouts():
    layout = ParallelLayout(2, 4, tp=2, ep=4)
    for rank in range(layout.world_size):
        mesh = mesh_from_groups(layout, rank, {})
        assert all(mesh[kind].shape == layout.shape(kind, rank) for kind in AXES)
