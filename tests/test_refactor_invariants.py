"""Numbers the exchange refactor (issue 32) must not change, against the values stored before it
(``tests/data/refactor_invariants.json``; its ``commit`` names the code they came from, written by
``python tests/invariant_cases.py --write``): every variant's training-step losses and final parameters
(within test_step's cross-machine tolerance: CPU kernels sum in other orders on other machines) and exchange
bytes, the AllToAll bench's bytes, outputs and checks for every exchange, and the performance model's
predictions (exchange times and bytes, byte formulas, step times) at fixed points."""

from __future__ import annotations

import json

import pytest

import invariant_cases as cases

STORED = json.loads(cases.DATA.read_text())
REF_RTOL = 1e-6  # tests/test_step.py's REF_RTOL: another machine's CPU kernels sum in other orders


def test_the_model_predicts_what_it_did_before_the_refactor():
    got = cases.model_points()
    want = STORED["model"]
    assert got["variants"][: len(want["variants"])] == want["variants"]  # names added since come after
    for part in ("exchange", "reference", "formula", "step"):
        assert set(got[part]) == set(want[part]), part
        for key, value in want[part].items():
            assert _close(got[part][key], value), (part, key, got[part][key], value)


def _close(got, want) -> bool:
    """Equal, floats within 1e-12 relative: the model is plain float arithmetic, but libm's log2/exp may
    round the last bit differently on another machine."""
    if isinstance(want, float) and isinstance(got, (int, float)):
        return got == pytest.approx(want, rel=1e-12, abs=1e-12)
    if isinstance(want, dict) and isinstance(got, dict):
        return set(got) == set(want) and all(_close(got[k], want[k]) for k in want)
    if isinstance(want, list) and isinstance(got, (list, tuple)):
        return len(got) == len(want) and all(_close(g, w) for g, w in zip(got, want))
    return got == want


@pytest.fixture(scope="module")
def step_runs(dist_world):
    return dist_world(4).run(cases.step_case, cases.step_variants(), timeout_s=1200)[0]


def test_every_variant_trains_to_the_same_losses_and_bytes(step_runs):
    """Bytes exactly; losses and final parameters within REF_RTOL. Not bitwise, not even where this machine
    reproduces deepspeed's stored losses bitwise: on one machine of this project's kind, 2dh's parameters
    differed from the stored ones in the 10th digit (its intra-node hop's kernels summed in another order)
    while deepspeed's matched to the bit (seen at 187d22a and later, on the machine of 2026-11-28)."""
    want = STORED["step"]
    assert set(step_runs) == set(want)
    for v, w in want.items():
        got = step_runs[v]
        assert (got["inter_bytes"], got["intra_bytes"]) == (w["inter_bytes"], w["intra_bytes"]), v
        for part in ("losses", "params"):
            assert [float.fromhex(x) for x in got[part]] == pytest.approx(
                [float.fromhex(x) for x in w[part]], rel=REF_RTOL
            ), (v, part)


@pytest.mark.parametrize(("tp", "k"), [(1, 1), (2, 2), (4, 4)])
def test_the_bench_moves_the_same_bytes_and_values(dist_world, tp, k):
    got = dist_world(8).run(cases.bench_case, tp, k)
    want = STORED["bench"][f"tp{tp}/k{k}"]
    assert got == want
    assert all(row["wrong"] == 0 for rank in got for row in rank.values())
