"""The duplex transport (one TCP connection per direction on gloo) moves exactly what gloo's own
collectives move, and the exchange binds it or gloo's groups as $MONTA_GLOO_TRANSPORT says."""

from __future__ import annotations

import pytest

import duplex_cases

pytestmark = pytest.mark.slow

# 2 nodes x 2 ranks: EP-like strided pairs, TP-like node pairs, and the whole world of 4.
PATTERNS = {"strided": [[0, 2], [1, 3]], "per-node": [[0, 1], [2, 3]], "world": [[0, 1, 2, 3]]}


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("dtype,rows", [("float32", 1), ("float32", 3), ("bfloat16", 2), ("float16", 2)])
def test_duplex_collectives_equal_gloos_own(dist_world, name, dtype, rows):
    for r in dist_world(4).run(duplex_cases.collectives_case, pattern=PATTERNS[name], dtype=dtype, rows=rows):
        assert r["a2a_equal"] and r["ag_equal"], r
        assert r["ranks"] == sorted(r["ranks"]) and r["dtype"] == f"torch.{dtype}"
        assert len(r["errors"]) == 2 and "do not split evenly" in r["errors"][0], r["errors"]


@pytest.mark.parametrize("name", ["strided", "world"])
def test_duplex_through_host_copies_equals_gloos_own(dist_world, name):
    """The path a CUDA tensor takes (copies to host, received ones copied back on wait; it ran on an
    H200 in tools/gpu_check.py): the same bytes as gloo's own collectives, this rank's own block kept."""
    for r in dist_world(4).run(
        duplex_cases.collectives_case, pattern=PATTERNS[name], dtype="bfloat16", rows=2, staged=True
    ):
        assert r["a2a_equal"] and r["ag_equal"], r


def test_transport_is_chosen_by_the_environment_and_both_agree(dist_world):
    w = dist_world(4)
    duplex = w.run(duplex_cases.transport_case, nodes=2, gpn=2, tp=2, ep=2, transport="duplex")
    native = w.run(duplex_cases.transport_case, nodes=2, gpn=2, tp=2, ep=2, transport="native")
    for d, n in zip(duplex, native):
        assert d["ep_duplex"] and d["tp_duplex"] and not n["ep_duplex"] and not n["tp_duplex"]
        assert d["out"] == n["out"]  # same bytes in the same places, only the transport differs
    bad = w.run(duplex_cases.transport_case, nodes=2, gpn=2, tp=2, ep=2, transport="rdma")
    assert all("MONTA_GLOO_TRANSPORT='rdma': choose one of duplex, native" in r["error"] for r in bad)
