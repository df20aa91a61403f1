"""The AllReduce as NCCL runs it (collectives.allreduce): ring, the 2-node tree, NVLink SHARP; a calibrated
curve or an emulator profile keeps the ring."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monta.hardware.links import Link
from monta.hardware.profile import get_cluster
from monta.parallel import GroupShape
from monta.perfmodel.network import collectives

GiB = 2**30


def _busbw(c, S, g):
    return collectives.busbw_GBps("allreduce", S, collectives.allreduce(S, g, c).time_us, g.size)


def test_the_two_node_tree_halves_the_network_bytes_and_nothing_else():
    a100 = replace(get_cluster("a100", 2), nccl_arch="")  # the link model alone: 8 x HDR, network-bound on 2 nodes
    ring = replace(a100, allreduce_algorithms=("ring",))
    full = GroupShape(16, 8, 8)
    t_ring, t_tree = collectives.allreduce(GiB, full, ring), collectives.allreduce(GiB, full, a100)
    assert t_tree.time_us < t_ring.time_us
    assert t_tree.inter_bytes == pytest.approx(GiB / 8)  # S per node over its NICs, a rank's share S / p
    # busbw: ring ~ the node's NICs, the tree up to 2x that (NCCL maintainers, claims C14), no more
    nics = a100.nics_per_node * a100.inter.bandwidth_GBps
    assert _busbw(ring, GiB, full) == pytest.approx(nics, rel=0.08)
    assert nics < _busbw(a100, GiB, full) <= 2 * nics
    # One rank per node (a DP group): the tree sends what the ring sends; more than 2 nodes: rings only
    assert collectives.allreduce(GiB, GroupShape(2, 1, 8), a100) == collectives.allreduce(
        GiB, GroupShape(2, 1, 8), ring
    )
    four = replace(get_cluster("a100", 4), nccl_arch="")
    assert collectives.allreduce(GiB, GroupShape(32, 8, 8), four) == collectives.allreduce(
        GiB, GroupShape(32, 8, 8), replace(four, allreduce_algorithms=("ring",))
    )


def test_what_the_two_node_tree_gains_under_ncclcaps_depends_on_the_nics():
    """With NCCL's model (nccl_tuning): the tree's bus bandwidth is capped per graph channel (perChMaxTreeBw, one
    channel per NIC below 25 GB/s), so its 2x network saving shows where the NICs are slow for their count and
    vanishes where they are many: a DGX A100's 8 HDR NICs run the ring at 1 GiB (NVIDIA states 192 GB/s, claims C09),
    4 x 100 Gb/s NICs run the tree, between the NICs' rate and twice it."""
    full = GroupShape(16, 8, 8)
    dgx = get_cluster("a100", 2)
    nics = dgx.nics_per_node * dgx.inter.bandwidth_GBps
    ring_only = replace(dgx, allreduce_algorithms=("ring",))
    assert _busbw(dgx, GiB, full) == pytest.approx(_busbw(ring_only, GiB, full)) == pytest.approx(nics, rel=0.03)
    few = replace(dgx, nics_per_node=4, inter=replace(dgx.inter, bandwidth_GBps=11.75))  # 4 x 100 Gb/s at 94%
    slow = 4 * 11.75
    assert slow * 1.3 < _busbw(few, GiB, full) < 2 * slow
    assert _busbw(replace(few, allreduce_algorithms=("ring",)), GiB, full) == pytest.approx(slow, rel=0.03)


def test_nvlink_sharp_on_one_nvswitch3_node():
    h100 = get_cluster("h100")
    g = GroupShape(8, 8, 8)
    bus = _busbw(h100, 8 * GiB, g)
    assert bus == pytest.approx(h100.nvls_algbw_GBps * 2 * 7 / 8, rel=0.05)  # busbw = algbw x 2(n-1)/n
    assert bus > _busbw(replace(h100, allreduce_algorithms=("ring",)), 8 * GiB, g)
    assert get_cluster("a100").nvls_algbw_GBps == 0 and "nvls" not in get_cluster("a800").allreduce_algorithms


def test_measured_curves_and_emulator_profiles_keep_the_ring():
    a100 = get_cluster("a100", 2)  # a measured AllReduce curve is end to end: no NCCL terms on top of it either
    g = GroupShape(16, 8, 8)
    fitted = replace(a100, collective_links=a100.collective_links + ((("allreduce", "inter"), Link(5.0, 0.0)),))
    half = collectives.reducescatter(GiB, g, fitted, ("allreduce", "reducescatter", "allgather"))
    assert collectives.allreduce(GiB, g, fitted) == half + half
    from monta.hardware.links import Cluster

    assert Cluster.allreduce_algorithms == ("ring",)  # what a link profile (gloo) builds
