"""The emulated NIC's token bucket in the model (monta.perfmodel.network.bucket): a calibrated AllToAll curve
holds the bucket's free bytes at its own rate and node shape; priced at another clock or shape, each call
gets the bucket's bytes free again, as the shaper gives them (a byte count, not a time)."""

from __future__ import annotations

import pytest

from monta.emulate.shaping import burst_bytes
from monta.perfmodel.network import bucket
from monta.perfmodel.network import collectives as C
from monta.perfmodel.network.collectives import GroupShape
from monta.perfmodel.network.profile import LinkProfile

GBPS = 0.125  # the calibration's NIC rate (the pipeline's 2 x 4)
BW_GBPS = 0.0149  # the payload rate calibrate fits there
LAT_US = 800.0
SIZES = [4096 * 2**i for i in range(13)]  # 4 KiB .. 16 MiB, as calibrate's collective sweep
FREE = burst_bytes(GBPS) * 1448 / 1514  # the 32 KiB bucket's payload


def _node_bytes(size: float, gpn: int, nodes: int = 2) -> float:
    return gpn * size * (nodes - 1) / nodes  # every rank of a node sends S (nodes-1)/nodes off it


def _profile() -> LinkProfile:
    """A calibration whose strided AllToAll (2 x 4) took exactly latency + (node bytes - bucket) / rate."""
    times = [[s, LAT_US + (_node_bytes(s, 4) - FREE) / (BW_GBPS * 1e3)] for s in SIZES if _node_bytes(s, 4) > 2 * FREE]
    link = {"bandwidth_GBps": BW_GBPS, "latency_us": LAT_US, "efficiency": [[4096, 0.5], [16 << 20, 1.0]]}
    return LinkProfile.from_dict(
        {
            "schema": "monta.linkprofile/1",
            "name": "bucket",
            "source": "emulated",
            "topology": {"nodes": 2, "gpus_per_node": 4, "inter_gbps": GBPS, "intra_gbps": 1.7},
            "links": {"intra": dict(link, bandwidth_GBps=0.2), "inter": link},
            "collectives": {"alltoall": {"inter_all": times}},
        }
    )


def _inter_us(cluster, size: float, gpn: int) -> float:
    return C.alltoall(size, GroupShape(2, 1, gpn), cluster).inter_us


def test_the_bucket_is_the_shapers():
    assert bucket.free_bytes(0.125) == pytest.approx(32 * 1024 * 1448 / 1514)
    assert bucket.free_bytes(None) == bucket.free_bytes(0) == 0.0  # unshaped: no bucket
    fast = bucket.free_bytes(10.0)  # 0.25 ms at the rate, above the 32 KiB floor
    assert fast == pytest.approx(burst_bytes(10.0) * 1448 / 1514) and fast > bucket.free_bytes(0.125)


def test_at_its_own_clock_and_shape_the_curve_gives_back_what_was_measured():
    prof = _profile()
    cl = prof.cluster(2, 4)
    for s, t in prof.collectives["alltoall"]["inter_all"]:
        assert _inter_us(cl, s, 4) == pytest.approx(t, rel=1e-9)


@pytest.mark.parametrize("factor, gpn", [(2, 8), (4, 8), (8.33, 8), (4, 4)])
def test_on_a_slower_clock_or_another_node_each_call_gets_the_buckets_bytes_free(factor, gpn):
    """The bucket saves its bytes whatever the rate: bucket / rate of time, F x more on a clock F x slower.
    Before the bucket was priced apart, the rescaled curve credited the calibration's time instead
    (at 2 x 8 and F = 4, half the saving; at p4de's clock of the 2 x 8 sweep, F = 8.33, a quarter)."""
    cl = _profile().rescaled(factor).cluster(2, gpn)
    rate = BW_GBPS * 1e3 / factor  # bytes per us on the slower clock
    for s in SIZES[4:]:
        size = s / factor  # a calibrated point, moved to the size that takes as long on the slower clock
        n = _node_bytes(size, gpn)
        if n < 2 * FREE:  # a call the bucket nearly swallows keeps its floor (5% of its time)
            continue
        assert _inter_us(cl, size, gpn) == pytest.approx(LAT_US + (n - FREE) / rate, rel=1e-9)
    # The p4de reading (docs/results/where-8x.md): 1/TP of the bytes and the same bucket make legacy's
    # AllToAll more than TP x as long as deepspeed's: TP x (bytes) - bucket over (bytes) - bucket.
    big, small = _inter_us(cl, SIZES[-1] / factor, gpn), _inter_us(cl, SIZES[-4] / factor, gpn)
    assert big - LAT_US > 8 * (small - LAT_US)


def test_no_bucket_no_credit():
    prof = _profile()
    link = prof.cluster(2, 4).link("inter", "alltoall")
    assert bucket.credited(link, lambda s: s, 0.0) is link
    assert bucket.sustained([(1.0, 10.0)], 0.0, 1.0) == [(1.0, 10.0)]
