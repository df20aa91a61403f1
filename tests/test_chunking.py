"""monta.chunking: the chunk count as a value (Fixed | Auto), its one parser, its split rules and the
capacity formula; single process, no collectives."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from monta.chunking import (
    AUTO_CANDIDATES,
    Auto,
    Fixed,
    capacity_slice,
    dispatch_bytes,
    equal_split,
    expert_capacity,
    is_auto,
    monta_split,
    parse_chunks,
    parse_chunks_list,
    pipeline_bound,
    pipeline_span,
)


def test_parse_chunks_reads_auto_and_integers():
    assert parse_chunks("auto") == Auto() == parse_chunks(" auto ") == parse_chunks(Auto())
    assert parse_chunks(4) == Fixed(4) == parse_chunks("4") == parse_chunks(Fixed(4))
    assert Auto().candidates == AUTO_CANDIDATES == tuple(range(1, 17))
    assert (Fixed(4).as_json(), Auto().as_json(), str(Fixed(3)), str(Auto())) == (4, "auto", "3", "auto")
    assert parse_chunks(Fixed(4).as_json()) == Fixed(4) and parse_chunks(Auto().as_json()) == Auto()
    assert is_auto("auto") and is_auto(Auto()) and not is_auto(4) and not is_auto("4") and not is_auto(None)


@pytest.mark.parametrize(
    "value,match",
    [
        ("four", r"chunks='four': give an integer >= 1 or 'auto'"),
        (0, "chunks=0 must be >= 1"),
        (-2, "chunks=-2 must be >= 1"),
        ("0", "chunks=0 must be >= 1"),
        (True, "give an integer >= 1 or 'auto'"),
        (2.5, "give an integer >= 1 or 'auto'"),
    ],
)
def test_parse_chunks_refuses_in_one_line(value, match):
    with pytest.raises(ValueError, match=match):
        parse_chunks(value)


def test_parse_chunks_list_keeps_the_predict_messages():
    assert parse_chunks_list("1,2,4,auto") == [Fixed(1), Fixed(2), Fixed(4), Auto()]
    assert parse_chunks_list([1, "auto"]) == [Fixed(1), Auto()]
    with pytest.raises(ValueError, match=r"chunks 'x': expected positive integers or 'auto' \(e.g. 1,2,4,auto\)"):
        parse_chunks_list("1,x")
    with pytest.raises(ValueError, match="chunks 0: must be >= 1"):
        parse_chunks_list("0")
    with pytest.raises(ValueError, match="give at least one chunk count"):
        parse_chunks_list(" , ")


def test_resolve_fixed_as_asked_auto_through_the_chooser_within_the_slice():
    asked = []

    def chooser(nbytes, layout, cands):
        asked.append((nbytes, layout, cands))
        return cands[-1]

    assert Fixed(8).resolve(1e6, "L", 4, chooser) == 8 and not asked  # the layer caps it, and says so
    assert Auto().resolve(1e6, "L", 4, chooser) == 4
    assert asked == [(1e6, "L", (1, 2, 3, 4))]
    assert Auto().resolve(1e6, "L", 100, chooser) == 16  # the default search stops at 16
    assert Auto((2, 4, 8)).resolve(1, "L", 5, chooser) == 4
    assert Auto((4, 8)).within(2) == (2,)  # nothing fits: the largest count the slice can run
    assert Auto((2, 2, 1)).candidates == (1, 2)
    with pytest.raises(ValueError, match="needs a chooser"):
        Auto().resolve(1, "L", 4)
    with pytest.raises(ValueError, match="positive integers"):
        Auto((0, 2))


def test_splits_keep_their_rules():
    assert equal_split(10, 3) == [4, 3, 3] and equal_split(8, 4) == [2, 2, 2, 2]
    assert monta_split(1024, 8) == [68, 137, 137, 137, 137, 136, 136, 136]  # first chunk half size
    assert monta_split(1000, 3) == [334, 333, 333] == equal_split(1000, 3)  # equal below 4 chunks
    for cap in range(1, 200):
        for k in range(1, min(cap, 20) + 1):
            m, e = monta_split(cap, k), equal_split(cap, k)
            assert sum(m) == sum(e) == cap and min(m) >= 1 and len(m) == len(e) == k
            assert max(e) - min(e) <= 1
    with pytest.raises(ValueError, match="between 1 and the capacity slice 4"):
        monta_split(4, 5)


def _simulated_span(sizes: list[int], r: float) -> float:
    """The chunk pipeline run event by event: each chunk's AllToAll on one link after the previous one's,
    its AllGather (r x as long) on the other after its AllToAll and the previous AllGather; the span over
    the whole AllToAll's time."""
    total, a2a_done, ag_done = float(sum(sizes)), 0.0, 0.0
    for x in sizes:
        a2a_done += x / total
        ag_done = max(ag_done, a2a_done) + r * x / total
    return ag_done


def test_the_pipeline_bound_is_that_of_the_split_monta_runs():
    rng = random.Random(43)
    for _ in range(300):  # any chunk sizes: the longest-path formula against the event-by-event pipeline
        sizes = [rng.randint(1, 50) for _ in range(rng.randint(1, 12))]
        r = rng.choice([0.0, 1.0, 2.0, 1 + 1 / len(sizes)]) if rng.random() < 0.2 else rng.uniform(0, 5)
        assert pipeline_span(sizes, r) == pytest.approx(_simulated_span(sizes, r), rel=1e-12)
    for cap, k, r in [(1024, 8, 0.3), (1024, 8, 1.03), (256, 4, 0.45), (4096, 16, 2.5), (1000, 3, 1.5)]:
        assert pipeline_bound(8, r, k, cap) == pytest.approx(8 / _simulated_span(monta_split(cap, k), r), rel=1e-12)
    for k in range(4, 17):  # the closed forms of the half-size first chunk
        w = 1 / (k - 0.5)
        for r in (0.0, 0.3, 0.99, 1.0, 1.5, 2.0, 3.7):
            span = 1 + r * w if r <= 1 else r + w * (3 - r) / 2 if r <= 2 else r + w / 2
            assert pipeline_bound(8, r, k) == pytest.approx(8 / span, rel=1e-12)
    for k in (1, 2, 3):  # equal chunks below 4: the equal-chunk bound
        for r in (0.3, 1.7):
            assert pipeline_bound(8, r, k) == pytest.approx(8 / max(1 + r / k, r + 1 / k), rel=1e-12)
    # p4de's ratio (r 0.30): 7.69 for MoNTA's 8 chunks, under the equal-chunk 7.71; it gains over equal
    # chunks only from r = 1 + 1/k on (the 4-NIC A800's r 1.03 included: 6.89 against 6.93).
    assert round(pipeline_bound(8, 0.30, 8), 2) == 7.69 < round(8 / (1 + 0.30 / 8), 2) == 7.71
    assert pipeline_bound(8, 1.03, 8) < 8 / (1.03 + 1 / 8)
    assert pipeline_bound(8, 1.126, 8) > 8 / (1.126 + 1 / 8) and pipeline_bound(8, 1.124, 8) < 8 / (1.124 + 1 / 8)
    with pytest.raises(ValueError, match="one positive share per chunk"):
        pipeline_span([1, 0], 0.5)
    with pytest.raises(ValueError, match="must be >= 0"):
        pipeline_span([1, 1], -1.0)


def test_capacity_is_deepspeeds():
    """expert_capacity equals DeepSpeed's _capacity (float32 arithmetic included) on random shapes."""
    torch = pytest.importorskip("torch")
    from deepspeed.moe.sharded_moe import _capacity

    rng = random.Random(7)
    for _ in range(3000):
        t, e = rng.randint(1, 50000), rng.choice([1, 2, 3, 4, 7, 8, 16, 64])
        cf, k, mc = rng.choice([0.5, 1.0, 1.1, 1.25, 1.3, round(rng.uniform(0.1, 3), 3)]), rng.choice([1, 2]), 4
        want = int(_capacity(SimpleNamespace(shape=(t, e)), torch.tensor(cf * k), torch.tensor(mc)))
        assert expert_capacity(t, e, cf, k, mc) == want, (t, e, cf, k)
    assert expert_capacity(8192, 2, 1.0, 2, 4) == 8192 and expert_capacity(4, 8, 1.0, 1, 4) == 4
    assert dispatch_bytes(2, 8192, 128, 4) == 2 * 8192 * 128 * 4
    assert capacity_slice(8192, 4) == 2048 and capacity_slice(2, 4) == 1
