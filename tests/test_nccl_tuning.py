"""NCCL's protocol model for real clusters (monta/perfmodel/network/nccl_tuning.py, nccl_collectives.py): latencies
and bandwidth shares as NCCL's tuner computes them, fewer channels for small messages, the protocol and algorithm
the tuner would pick, the per-peer cost of a grouped AllToAll; the emulator and fitted curves keep the link model."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from monta.hardware import clusterfile as CF
from monta.hardware.gpus import arch_of
from monta.hardware.profile import get_cluster
from monta.parallel import GroupShape
from monta.perfmodel.network import collectives
from monta.perfmodel.network import nccl_collectives as N
from monta.perfmodel.network import nccl_fit as F
from monta.perfmodel.network import nccl_tuning as T

KiB, MiB, GiB = 2**10, 2**20, 2**30


def test_the_cluster_files_name_their_generation_and_the_emulator_none():
    assert [get_cluster(n).nccl_arch for n in ("a100", "a800", "h100", "h800", "p3dn")] == [
        "ampere", "ampere", "hopper", "hopper", "volta"
    ]  # fmt: skip
    assert arch_of("Mystery GPU") == "" and arch_of("NVIDIA H20") == "hopper"


def test_latencies_are_nccls_formulas():
    # ring AllGather, 16 ranks on 2 nodes, LL: base 6.6 + 14 intra steps x max(0.6, 1 us post) + 1 x 2.7 (NET)
    assert T.latency_us("ring", "LL", "allgather", 16, 2, "ampere", MiB, 16) == pytest.approx(6.6 + 14 * 1.0 + 2.7)
    # one rank per node: the network step is the tree's (5.0 with LL), "fully exposed"
    assert T.latency_us("ring", "LL", "allgather", 4, 4, "ampere", MiB, 16) == pytest.approx(6.6 + 3 * 5.0)
    # Simple: the network post counts 3 x 1 us per intra step; AllReduce: 2 (n-1) steps, x 1.4 plateau on Ampere
    assert T.latency_us("ring", "Simple", "allreduce", 16, 2, "ampere", MiB, 16) == pytest.approx(
        (8.4 + 28 * 3.4 + 2 * 14.0) * 1.4
    )
    # tree: 2 x ((ppn - 1) x intra + log2(nodes) x inter); one node: NVLink steps only
    assert T.latency_us("tree", "LL128", "allreduce", 32, 4, "hopper", MiB, 16) == pytest.approx(
        14.0 + 2 * (7 * 1.25 + 2 * 8.5)
    )
    assert T.latency_us("ring", "LL", "allgather", 8, 1, "ampere", MiB, 24) == pytest.approx(6.6 + 7 * 0.6)
    assert T.latency_us("nvls", "Simple", "allreduce", 8, 1, "hopper", MiB, 32) == 25.0


def test_protocol_shares_and_channels():
    # LL moves half the bytes per line, at most llMaxBw; LL128 0.92, at most 20 GB/s a channel on Ampere
    assert T.busbw_share("ring", "LL", "allreduce", 100.0, 1, "ampere", 12) == 50.0
    assert T.busbw_share("ring", "LL", "allreduce", 300.0, 1, "ampere", 12) == 87.7
    assert T.busbw_share("ring", "LL", "allreduce", 300.0, 2, "ampere", 8) == 39.0
    assert T.busbw_share("ring", "LL128", "allreduce", 100.0, 2, "ampere", 8) == pytest.approx(92.0)
    assert T.busbw_share("ring", "LL128", "allreduce", 300.0, 2, "ampere", 8) == 160.0
    # the tree: 0.92 of its rate, at most perChMaxTreeBw per graph channel (Ampere, 2 nodes: 23.6)
    assert T.busbw_share("tree", "Simple", "allreduce", 300.0, 2, "ampere", 4) == pytest.approx(4 * 23.6)
    # channels: one per NIC below 25 GB/s, doubled at or above (not on Hopper with > 4 below 50); comm = 2 x graph
    a100 = get_cluster("a100", 2)
    assert T.graph_channels(a100, 2) == 8 and T.channels(a100, 2) == 16
    h100 = get_cluster("h100", 2)
    assert T.graph_channels(h100, 2) == 8 and T.graph_channels(replace(h100, nics_per_node=4), 2) == 8
    # Simple needs 512 threads x 64 B a channel: 256 KiB runs 8 channels, 1 MiB all 16
    assert T.active_channels(256 * KiB, 16, "ring", "Simple", 16) == 8.0
    assert T.active_channels(MiB, 16, "ring", "Simple", 16) == 16.0


def test_small_messages_pay_nccls_latency_and_large_ones_the_link_rate():
    a100 = get_cluster("a100")
    g = GroupShape(8, 8, 8)
    links = replace(a100, nccl_arch="")
    small, large = collectives.allreduce(MiB, g, a100), collectives.allreduce(GiB, g, a100)
    assert small.time_us > collectives.allreduce(MiB, g, links).time_us + 10  # at least a ring's LL latency more
    assert large.time_us == pytest.approx(collectives.allreduce(GiB, g, links).time_us, rel=0.02)
    # the protocol NCCL's tuner would pick: LL at 64 KiB, Simple at 1 GiB (the least time in its model)
    bw = collectives.allgather(8 * KiB, g, N.bare(a100))
    assert N.priced("allgather", 64 * KiB, 8, 1, a100, {"ring": bw})[2] == "LL"
    bw = collectives.allgather(GiB / 8, g, N.bare(a100))
    assert N.priced("allgather", GiB, 8, 1, a100, {"ring": bw})[2] == "Simple"


def test_time_never_falls_as_the_size_grows():
    for name, nodes in (("a100", 1), ("a100", 2), ("h100", 2), ("a800", 2)):
        c = get_cluster(name, nodes)
        sizes = [2**k for k in range(12, 31)]
        for op in ("allreduce", "allgather", "reducescatter", "alltoall"):
            times = [F.predict_us(c, op, nodes, 8, s) for s in sizes]
            assert all(b >= a for a, b in zip(times, times[1:])), (name, nodes, times)


def test_a_flat_alltoall_pays_per_remote_peer_and_2dh_per_remote_node():
    c = get_cluster("a100", 4)
    g = GroupShape(32, 8, 8)
    flat, hier = collectives.alltoall(KiB, g, c), collectives.alltoall(KiB, g, c, hierarchical=True)
    bare_flat = collectives.alltoall(KiB, g, N.bare(c))
    # LL (a peer's 32 B fit the LL threshold): base + one NET step + 24 remote peers x 2 us, bytes at half rate
    assert flat.time_us == pytest.approx(6.6 + 2.7 + 24 * T.PEER_POST_US + 2 * bare_flat.time_us)
    assert hier.time_us < flat.time_us  # two calls, but 3 remote peers instead of 24
    # the same bytes either way
    assert (flat.inter_bytes, flat.intra_bytes) == (collectives.alltoall(KiB, g, N.bare(c)).inter_bytes, 7 / 32 * KiB)


def test_the_emulator_and_fitted_curves_keep_the_link_model():
    a800 = get_cluster("a800", 2)
    emu = replace(a800, host_cores=2)
    g = GroupShape(16, 8, 8)
    links = replace(a800, nccl_arch="")
    for f in (
        lambda c: collectives.alltoall(MiB, g, c),
        lambda c: collectives.allgather(MiB, g, c),
        lambda c: collectives.allreduce(MiB, g, c),
    ):
        assert f(replace(emu, nccl_arch="")) == f(emu)  # host_cores: gloo on the emulator, priced as calibrated
        assert f(links) != f(a800)
    from monta.perfmodel.network.nccl_fit import Point, fit_cluster

    pts = [Point.of("alltoall", 2, 8, s, busbw_GBps=20.0 * s / (s + MiB)) for s in (MiB, 16 * MiB, 256 * MiB)]
    assert fit_cluster(a800, pts).nccl_arch == ""


def test_a_cluster_file_can_turn_the_protocol_model_off(tmp_path):
    doc = yaml.safe_load((CF.clusters_dir() / "a100.yaml").read_text())
    doc["name"] = "fitted"
    doc["nccl"]["protocols"] = False
    (tmp_path / "fitted.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert CF.read(tmp_path / "fitted.yaml").cluster.nccl_arch == ""
    doc["nccl"]["protocols"] = "no"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ValueError, match="nccl.protocols"):
        CF.read(tmp_path / "bad.yaml")
    # a fitted cluster written back says so, and reads back without the protocol model
    written = CF.dump(replace(get_cluster("a100"), nccl_arch="", name="refit"), tmp_path / "refit.yaml", base="a100")
    assert yaml.safe_load(written.read_text())["nccl"]["protocols"] is False
    assert CF.read(written).cluster.nccl_arch == "" and CF.read("a100").cluster.nccl_arch == "ampere"


def test_a_network_plugins_stated_latency_and_protocols():
    """aws-ofi-nccl on EFA states 75 us (p4d/p4de/p5) that NCCL's tuner adds to each network step, twice with
    Simple, and leaves A100s (p4d/p4de) on Simple; on p5 a step takes AWS's modelled 20 us (+3 with Simple); NCCL's
    own IB transport states none."""
    assert T.net_latency_us("", "ampere") == 0.0 and T.protocols("", "ampere") == T.PROTOCOLS
    assert [T.net_step_us("", "hopper", "Simple", tuned) for tuned in (True, False)] == [0.0, 0.0]
    assert T.net_latency_us("efa", "ampere") == 75.0 and T.protocols("efa", "ampere") == ("Simple",)
    assert T.net_latency_us("efa", "volta") == 150.0 and T.protocols("efa", "hopper") == T.PROTOCOLS
    assert [T.net_step_us("efa", "ampere", "Simple", tuned) for tuned in (True, False)] == [150.0, 150.0]
    assert [T.net_step_us("efa", "hopper", p, False) for p in ("LL", "Simple")] == [20.0, 23.0]
    assert T.net_step_us("efa", "hopper", "LL", True) == 75.0
    ib = T.latency_us("ring", "Simple", "allgather", 16, 2, "ampere", MiB, 16)
    assert T.latency_us("ring", "Simple", "allgather", 16, 2, "ampere", MiB, 16, 150.0) == pytest.approx(ib + 150)
    ll = T.latency_us("tree", "LL", "allreduce", 16, 2, "hopper", MiB, 16)
    assert T.latency_us("tree", "LL", "allreduce", 16, 2, "hopper", MiB, 16, 75.0) == pytest.approx(ll + 2 * 75)
    ib_c = get_cluster("a100", 2)
    efa = replace(ib_c, net_plugin="efa")
    g = GroupShape(16, 8, 8)
    bw = collectives.allgather(KiB / 16, g, N.bare(ib_c))
    assert N.priced("allgather", KiB, 16, 2, ib_c, {"ring": bw})[2] == "LL"
    t, _, proto = N.priced("allgather", KiB, 16, 2, efa, {"ring": bw})
    assert proto == "Simple" and t.time_us > 150
    # a flat AllToAll across nodes: Simple and the plugin's latency, x2 for the flush; inside one node nothing moves
    flat = collectives.alltoall(KiB, g, efa).time_us
    bare = collectives.alltoall(KiB, g, N.bare(ib_c)).time_us
    assert flat == pytest.approx(8.4 + 14.0 + 150 + 8 * T.PEER_POST_US + bare)
    one = GroupShape(8, 8, 8)
    assert (
        collectives.alltoall(MiB, one, replace(efa, nodes=1)).time_us
        == collectives.alltoall(MiB, one, get_cluster("a100")).time_us
    )
    # p5: the tuner chooses with the stated 75 us, the choice takes the wire's 20 us (+3 Simple) per network step
    h100 = get_cluster("h100", 2)
    h_efa = replace(h100, net_plugin="efa")
    bw = collectives.allgather(MiB / 16, g, N.bare(h100))
    t, algo, proto = N.priced("allgather", MiB, 16, 2, h_efa, {"ring": bw})
    step = T.net_step_us("efa", "hopper", proto, False)
    bus = N._busbw("allgather", MiB, bw.time_us, 16, "ring")
    assert t.time_us == pytest.approx(N._time("allgather", algo, proto, MiB, 16, 2, h100, bus, False) + step)
