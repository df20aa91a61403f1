"""The early AllGather of an unchunked exchange on the emulator: what a node's loopback carries before its last
rank leaves the AllToAll (monta.emulate.early_gather), checked by hand."""

from __future__ import annotations

import pytest

from monta.emulate.early_gather import early_bytes, early_bytes_in_groups


def test_pairs_that_have_both_left_send_at_the_loopback_rate_until_the_last_rank_leaves():
    # two ranks leave at 0 s: their 2 slices (1 B each way) are ready, and the loopback (1 B/s) moves 1 B by 1 s
    assert early_bytes([0.0, 0.0, 1.0, 1.0], 1.0, 1.0) == pytest.approx(1.0)
    # given time, they send no more than their own slices: 2 B, whatever the gap
    assert early_bytes([0.0, 0.0, 10.0], 1.0, 1.0) == pytest.approx(2.0)
    assert early_bytes([0.0, 0.0, 1.0, 2.0], 1.0, 1.0) == pytest.approx(2.0)
    # a third rank at 2 s adds 4 slices (6 ready), the next second moves 1 more: 2 + 1
    assert early_bytes([0.0, 0.0, 2.0, 3.0], 1.0, 1.0) == pytest.approx(3.0)
    # ranks that leave together leave nothing to hide; one rank alone has no pair
    assert early_bytes([5.0] * 8, 1 << 20, 1e8) == 0.0
    assert early_bytes([0.0, 9.0], 1.0, 1.0) == 0.0


def test_bad_input_says_what_to_give():
    with pytest.raises(ValueError, match="give >= 2 ranks"):
        early_bytes([0.0], 1.0, 1.0)
    with pytest.raises(ValueError, match="positive rate"):
        early_bytes([0.0, 1.0], 1.0, 0.0)


def test_a_node_of_several_groups_gathers_only_within_each():
    # TP2 pairs (0, 0) and (1, 1) on one node: pair 0 leaves at 0 s, pair 1 at 5 s; pair 0's 2 slices drain by 2 s
    assert early_bytes_in_groups([(0, 0.0), (0, 0.0), (1, 5.0), (1, 5.0)], 1.0, 1.0) == pytest.approx(2.0)
    # ranks of different pairs leaving early have nothing to send each other
    assert early_bytes_in_groups([(0, 0.0), (1, 0.0), (0, 5.0), (1, 5.0)], 1.0, 1.0) == 0.0
    # one group is early_bytes
    ends = [0.0, 0.3, 0.1, 0.7]
    assert early_bytes_in_groups([(3, t) for t in ends], 1e3, 1e4) == pytest.approx(early_bytes(ends, 1e3, 1e4))
