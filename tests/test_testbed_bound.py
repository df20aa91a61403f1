"""The emulated 8x claim is judged against the testbed's bound with the NIC's token bucket, computed from the
record that reached it (monta.emulate.bound, monta_analysis.testbed_bound), not against the typed bound."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from monta.emulate.bound import bucket_bound, record_bound
from monta.results import make_record
from monta_analysis import claims

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def _rec(variant, chunks, time_us, ratio=None, ci=None, size=16 * MIB, inter=1 * MIB, intra=14 * MIB):
    """A 2 x 8, TP8 record of `monta bench alltoall` on a800-4nic@0.0625 (the pipeline's 2 x 8 clock)."""
    params = {
        "size_bytes": size,
        "variant": variant,
        "chunks": chunks,
        "nodes": 2,
        "gpus_per_node": 8,
        "tp": 8,
        "ep": 2,
        "experts": 2,
        "hidden": 1024,
        "dtype": "float32",
        "inter_gbps": 0.0625,
        "intra_gbps": 0.8511,
    }
    metrics = {"time_us": time_us, "inter_bytes": inter, "intra_bytes": intra, "wrong": 0}
    if ratio is not None:
        metrics["speedup_vs_legacy"] = ratio
        metrics["speedup_vs_legacy_ci"] = ci or [ratio, ratio]
    return make_record(kind="alltoall", source="emulated", experiment="t", params=params, metrics=metrics, env={})


def test_the_testbed_bound_is_the_pipeline_bound_with_one_bucket_off_both_exchanges():
    # 16 MiB on 2 x 8: a node's 8 ranks send 1 MiB each off the node at 0.0625 Gbit/s (payload 1448 of 1514 B
    # per frame) and 14 MiB each on the loopback at 0.8511 Gbit/s; MoNTA's 8 chunks of the 256-slot slice are
    # [17, 35, 34, 34, 34, 34, 34, 34]; at r < 1 the span is the AllToAll plus the last chunk's AllGather.
    a = 8 * MIB / (0.0625e9 / 8 * 1448 / 1514)
    g = 8 * 14 * MIB / (0.8511e9 / 8)
    b = 4 * 1024 / (0.0625e9 / 8)
    span = 1 + (g / a) * 34 / 256
    want = (8 * a - b) / (a * span - b)
    got = record_bound(_rec("monta", 8, 1.28e6)["params"], _rec("monta", 8, 1.28e6)["metrics"])
    assert got["value"] == pytest.approx(want, rel=1e-9) and got["value"] == pytest.approx(7.078, abs=1e-3)
    assert got["chunks"] == 8 and got["bucket_ms"] == pytest.approx(0.524, abs=1e-3)
    # without the bucket it is the chunking module's pipeline bound of the same split
    assert bucket_bound(8, a, g, [17, 35] + [34] * 6, 0.0) == pytest.approx(8 / span)
    # a record that does not state its shaped rates has no testbed bound
    bare = _rec("monta", 8, 1.28e6)
    del bare["params"]["intra_gbps"]
    assert record_bound(bare["params"], bare["metrics"]) is None


def _claims(monta_ratio, ci):
    legacy = 9.0e6
    recs = [
        _rec("legacy", 1, legacy, inter=8 * MIB, intra=0),
        _rec("monta", 8, legacy / monta_ratio, ratio=monta_ratio, ci=ci),
        _rec("monta", 4, legacy / 6.2, ratio=6.2),
    ]
    paper = yaml.safe_load((ROOT / "analysis" / "paper.yaml").read_text())
    return "\n".join(claims.claims_table(recs, paper))


def test_the_8x_verdict_quotes_the_computed_bound_and_fails_past_it():
    # 7.04x, the fresh clone's 2 x 8 16 MiB reading: over the typed 6.90x, under the testbed's 7.08x
    within = _claims(7.04, [7.01, 7.12])
    assert "| 8x | 7.04x | no data | **bound below the claim** (at most 7.08x here: the testbed's bound" in within
    assert "6.90x" not in within
    # a ratio whose interval lies above the testbed's bound is a testbed bug until shown otherwise
    above = _claims(7.30, [7.20, 7.40])
    assert "**above its bound** (7.30x over the bound 7.08x: check the testbed)" in above
    # above the bound's value but with the bound inside its interval: not shown to be past it
    assert "**bound below the claim**" in _claims(7.15, [7.05, 7.25])


def test_every_point_past_its_own_bound_is_named_not_only_the_best():
    from monta_analysis.testbed_bound import past_own_bound

    recs = [
        _rec("monta", 8, 1_280_000, 7.04, [7.01, 7.12]),  # under its bound (7.10x): not named
        _rec("monta", 4, 720_000, 7.30, [7.20, 7.40], size=8 * MIB),  # CI above its own bound: named
        _rec("monta", 2, 830_000, 9.0, [5.0, 9.5], size=8 * MIB),  # value above, interval not: not named
        _rec("deepspeed", 1, 2_000_000, 9.0, [8.9, 9.1]),  # only MoNTA's ratio over legacy has this bound
    ]
    past = past_own_bound(recs)
    assert len(past) == 1 and past[0].startswith("2 x 8 8 MiB, 4 chunks: 7.30x (CI low 7.20) over its bound"), past
    assert past_own_bound(recs[:1]) == []


def test_the_bound_takes_legacy_as_measured_and_tells_the_drain_from_a_testbed_bug():
    from monta.emulate.bound import legacy_as_measured
    from monta_analysis.testbed_bound import past_own_bound

    got = record_bound(_rec("monta", 8, 1.28e6)["params"], _rec("monta", 8, 1.28e6)["metrics"])
    a, b, s = got["a2a_ms"], got["bucket_ms"], got["span"]
    legacy_ms = 8 * a * 1.01  # legacy 1% over TP x its link time (its own host work)
    both = legacy_as_measured(got, legacy_ms)
    assert both["chunks"] == pytest.approx(legacy_ms / (a * s - b)) and both["bytes"] == pytest.approx(
        legacy_ms / (a - b)
    )
    assert got["value"] < both["chunks"] < both["bytes"] < 8.1
    recs = [
        _rec("legacy", 1, legacy_ms * 1e3, inter=8 * MIB, intra=0),
        # over the TP A bound (7.08x) but under legacy as measured (7.15x): legacy's own work, not named
        _rec("monta", 8, 1_260_000, 7.12, [7.10, 7.13]),
        # a second run's legacy is not this run's
        _rec("legacy", 1, 1.5 * legacy_ms * 1e3, inter=8 * MIB, intra=0),
    ]
    for r in recs[:2]:
        r["run_id"] = "run-a"
    assert past_own_bound(recs) == []
    drain = _rec("monta", 8, 1_200_000, 7.60, [7.50, 7.70])  # past the split's bound, under the bytes' bound
    bug = _rec("monta", 8, 1_100_000, 8.40, [8.30, 8.50])  # past what MoNTA's bytes allow
    one = _rec("monta", 1, 2_000_000, 4.50, [4.40, 4.60])  # one chunk: the whole AllGather follows, none hides
    drain["run_id"] = bug["run_id"] = one["run_id"] = "run-a"
    assert past_own_bound(recs + [one])[0].endswith("under its bytes' bound 8.08x (cause not measured)")
    past = past_own_bound(recs + [drain, bug])
    assert len(past) == 2
    assert past[0].startswith("2 x 8 16 MiB, 8 chunks: 7.60x (CI low 7.50) over its bound 7.15x, under its bytes'")
    assert (
        past[0].endswith("(the drain)") and past[1].endswith("(a testbed bug)") and "OVER its bytes' bound" in past[1]
    )
    # the 8x verdict judges its best point against the same bound the list uses: legacy as measured in its run
    from monta_analysis.testbed_bound import testbed_bound

    ours = {"variant": "monta", "baseline": "legacy", "kind": "alltoall"}
    verdict = testbed_bound(recs + [drain], ours, "emulated")
    assert verdict["value"] == pytest.approx(both["chunks"]) and "legacy as measured L = " in verdict["why"]


def test_the_allgather_is_the_intra_node_bytes_the_alltoall_did_not_send():
    # 2 x 4 at TP2 (the pipeline's TP ablation): EP4 has two members on each node, so a rank's AllToAll sends half
    # as much on its node's loopback as off it (the other member: 1 of the 2 peers off the node); only the rest of
    # the intra-node bytes is the AllGather's. 4 MiB: a 2 MiB slice, 1 MiB off the node, 0.5 MiB to the node's
    # other EP member, 2 MiB to the TP peer.
    params = {
        **_rec("monta", 1, 326_000)["params"],
        "gpus_per_node": 4,
        "tp": 2,
        "ep": 4,
        "experts": 4,
        "size_bytes": 4 * MIB,
        "inter_gbps": 0.125,
        "intra_gbps": 1.7021,
    }
    metrics = {"time_us": 326_000, "inter_bytes": 1 * MIB, "intra_bytes": 2.5 * MIB}
    got = record_bound(params, metrics)
    a = 4 * MIB / (0.125e9 / 8 * 1448 / 1514)
    g = 4 * 2 * MIB / (1.7021e9 / 8)
    assert got["a2a_ms"] == pytest.approx(1e3 * a) and got["r"] == pytest.approx(g / a)
    # TP = the node (EP one member per node): every intra-node byte is the AllGather's
    tp8 = _rec("monta", 8, 1.28e6)
    assert record_bound(tp8["params"], tp8["metrics"])["r"] == pytest.approx(0.983, abs=1e-3)
