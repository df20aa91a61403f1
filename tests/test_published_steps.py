"""`monta predict published` on a table of published MoE training steps: every row priced blind and calibrated
or given its reason, A/B pairs found from the columns, the raw shared table's columns accepted, nothing keyed to
ids or sources."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from monta.cli import main
from monta.perfmodel.reports import published_steps as PS
from monta.perfmodel.reports.published import Row
from monta.perfmodel.training.run_shape import run_model

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "published" / "steps.csv"
RAW = ROOT / "tests" / "data" / "published-steps-raw.csv"  # rows copied unchanged from the shared table


@pytest.fixture(scope="module")
def priced():
    return PS.price_steps(PS.read_step_rows(DATA))


def test_every_row_is_priced_or_says_why_and_far_off_rows_say_why(priced):
    recs, _ = priced
    assert len(recs) == len(list(csv.DictReader(DATA.open())))
    for r in recs:
        if r["predicted_blind"] is None or abs(r["error_blind"]) > PS.EXPLAIN_ABOVE:
            assert r["reason"], r["id"]
        if r["predicted_blind"] is not None and r["predicted_calibrated"] is None:
            assert r.get("reason_calibrated"), r["id"]


def test_the_score_the_docs_report(priced):
    """The figures docs/results/published-steps.md states (the issue's targets are NOT all met: see there)."""
    recs, prs = priced
    s = PS.step_summary(recs, prs)
    assert s["priced_blind"] >= 25 and s["priced_sources"] >= 8
    # bounds just above the score (docs/results/published-steps.md, "The host floor by graph scope": blind 19.8%,
    # calibrated 14.2%, unseen rows 7.7%): a regression of a point fails
    assert s["forced_blind"]["median"] <= 0.20  # the blind target (25%) met; the calibrated one (12%) not
    assert s["forced_calibrated"]["median"] <= 0.15
    assert s["pairs"] == 20 and s["pairs_direction_right"] >= 18
    assert s["pair_ratio_error"]["median"] <= 0.16
    # the rows no term was chosen with in view, scored apart: a pair is seen when either of its rows is
    forced = [r for r in recs if r["predicted_blind"] is not None and r["routing"] == "forced"]
    assert s["unseen_forced_blind"]["n"] == sum(not r["seen_by"] for r in forced) < len(forced)
    assert s["unseen_forced_blind"]["median"] <= 0.085
    assert s["unseen_pairs"] == sum(not p["seen"] for p in prs) < s["pairs"]
    assert all(p["seen"] for p in prs if p["pair"] == "S10 -> S11")
    # forced-balance and real-routing rows are scored apart
    assert s["real_blind"]["n"] == 4 and s["forced_blind"]["n"] + s["real_blind"]["n"] <= s["priced_blind"]


def test_flop_count_matches_the_sources_that_state_tokens_and_tflops():
    """DeepSeek-V3 without MTP (Bridge 25.11: 782 TFLOPS at 3139 tok/s = 249.1 GFLOP/token) and Qwen3-235B
    (1575 tok/s, 233 TFLOPS = 147.9) within 1%."""
    rows = {r.id: r for r in PS.read_step_rows(DATA)}
    for rid, gflop in (("S27", 249.1), ("S20", 147.9)):
        m, _ = run_model(rows[rid].num, rows[rid].text)
        assert m.model_flops_per_token(4096) / 1e9 == pytest.approx(gflop, rel=0.01)


def test_real_routing_costs_through_the_skew_model(priced):
    recs, prs = priced
    by = {r["id"]: r for r in recs}
    assert by["S16"]["terms"]["routing_skew"] > 1.0 and by["S15"]["terms"]["routing_skew"] == 1.0
    pair = next(p for p in prs if p["setting"] == "routing")
    assert pair["predicted_ratio"] < 1.0 and pair["measured_ratio"] < 1.0


def test_the_raw_shared_columns_are_priced_the_same_way(tmp_path, capsys):
    """A file with only the shared table's columns: priced, unpriced rows say why, the command writes records."""
    out = tmp_path / "r.jsonl"
    assert main(["predict", "published", "--data", str(RAW), "--out", str(out)]) == 0
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    rows = {r["id"]: r for r in recs if r["kind"] == "published-step"}
    assert set(rows) == {"S10", "S11", "S15", "S16", "S20", "S27", "S31", "S45", "S56"}
    for rid in ("S10", "S15", "S20", "S27", "S31"):
        assert rows[rid]["predicted_blind"] > 0, rows[rid]
    assert "not a step figure" in rows["S45"]["reason"]
    assert "model shape not stated" in rows["S56"]["reason"]
    assert rows["S16"]["routing"] == "real"  # from the notes: the raw table has no routing column
    assert rows["S10"]["seen_by"] == ""  # no seen_by column: every row counts as unseen
    assert "A/B pair" in capsys.readouterr().out


def test_renaming_ids_and_sources_changes_nothing(priced, tmp_path):
    recs, prs = priced
    rows = list(csv.DictReader(DATA.open()))
    renamed = [{**r, "id": f"X{i}", "source": f"src{i % 5}", "source_url": f"https://example.org/{i % 5}"}
               for i, r in enumerate(rows)]  # fmt: skip
    f = tmp_path / "mine.csv"
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(reversed(renamed))
    mine, mine_pairs = PS.price_steps(PS.read_step_rows(f))
    by = {r["id"]: r for r in mine}
    for i, r in enumerate(recs):
        assert by[f"X{i}"]["predicted_blind"] == r["predicted_blind"], r["id"]

    def canon(ps):  # a pair read in the other order has both ratios inverted
        return sorted(
            (round(p["measured_ratio"], 9), round(p["predicted_ratio"], 9))
            if p["measured_ratio"] >= 1
            else (round(1 / p["measured_ratio"], 9), round(1 / p["predicted_ratio"], 9))
            for p in ps
        )

    assert canon(mine_pairs) == canon(prs)


def test_a_row_without_a_layout_or_gpu_file_says_why():
    def row(**kw):
        base = dict(id="a", metric="tokens_per_s_per_gpu", value="100", gpu="H100", layers="2", hidden="1024",
                    ffn_hidden="512", experts="8", topk="2", seq_len="4096", global_batch_tokens="65536", gpus="16",
                    tp="2", ep="8", pp="1")  # fmt: skip
        return Row({**base, **kw})

    assert "does not divide" in PS.blind(row(tp="3"))["reason"]
    assert "does not divide the 8 experts" in PS.blind(row(ep="16", tp="1"))["reason"]
    assert "no cluster file" in PS.blind(row(gpu="Mystery"))["reason"]
    assert PS.blind(row())["predicted_blind"] > 0


def test_the_unit_column_converts_the_value_or_says_why():
    row = {r["id"]: r for r in csv.DictReader(DATA.open())}["S10"]  # 19.7 s per step
    in_s = PS.blind(Row(row))
    in_ms = PS.blind(Row({**row, "value": "19700", "unit": "ms"}))
    assert in_ms["measured"] == pytest.approx(19.7) and in_ms["error_blind"] == pytest.approx(in_s["error_blind"])
    bad = PS.blind(Row({**row, "unit": "min"}))
    assert bad["predicted_blind"] is None and "unit 'min' of step_time_s is not one of s, ms" in bad["reason"]
    mfu = {**row, "metric": "mfu", "unit": "%", "value": "30"}
    pct, frac = PS.blind(Row(mfu)), PS.blind(Row({**mfu, "value": "0.3", "unit": "fraction"}))
    assert frac["measured"] == pytest.approx(30.0) and frac["error_blind"] == pytest.approx(pct["error_blind"])


def test_a_collectives_file_still_goes_to_the_collective_pricing(tmp_path):
    assert not PS.is_step_table(ROOT / "data" / "published" / "collectives.csv")
    assert PS.is_step_table(DATA) and PS.is_step_table(RAW)


def test_the_paper_step_line_carries_the_step_score_band(priced, tmp_path):
    from monta.perfmodel.reports.paper import step_band, step_band_line

    recs, prs = priced
    e = PS.step_summary(recs, prs)["pair_ratio_error"]
    b = step_band(0.939, str(DATA))
    assert b["median_band"] == pytest.approx((1 - 0.939 * (1 + e["median"]), 1 - 0.939 * (1 - e["median"])))
    assert step_band(0.939, str(tmp_path / "none.csv")) is None
    assert "error band from the published-steps score" in step_band_line(0.939)


def test_a_file_without_the_added_columns_reads_precision_dispatcher_and_routing_from_the_row(tmp_path):
    """The shared table's raw columns: FP8 / DeepEP / real routing as the row's system and notes name them."""
    rows = {r.id: r for r in PS.read_step_rows(RAW)}
    s10, _ = PS.layout_of(rows["S10"])
    assert (s10.precision, s10.dispatcher, s10.routing) == ("bf16", "deepep", "forced")
    s16, _ = PS.layout_of(rows["S16"])
    assert s16.routing == "real"
    s20, _ = PS.layout_of(rows["S20"])
    assert s20.precision == "fp8"


def test_calibration_fits_a_compute_and_a_rest_factor():
    """Points made from a known (a, g) are fitted back exactly; fewer than MIN_FIT_ROWS fit one factor."""
    a, g = 1.4, 2.2
    pts = [(a * c + g * r, c, r) for c, r in ((5e6, 1e6), (2e6, 3e6), (9e6, 0.5e6), (1e6, 1e6), (4e6, 2e6))]
    fa, fg = PS._fit(pts)
    assert fa == pytest.approx(a, rel=1e-6) and fg == pytest.approx(g, rel=1e-6)
    fa, fg = PS._fit(pts[:2])
    assert fa == fg == pytest.approx(((a * 5 + g) / 6 + (a * 2 + g * 3) / 5) / 2)
    # one row of another software stage, measured 2x slower, does not move a least-absolute-deviations fit
    tm, c, r = pts[0]
    fa, fg = PS._fit([*pts, (2 * tm, c, r)])
    assert fa == pytest.approx(a, rel=1e-6) and fg == pytest.approx(g, rel=1e-6)


def test_calibration_pools_one_gpu_generation_and_leaves_the_row_s_source_out(priced):
    """A B300 row (no other source has a B300 row) is calibrated from the other sources' Blackwell rows; an
    H100 row's pool holds no Blackwell row; no row's pool holds its own source."""
    recs, _ = priced
    by_id = {r["id"]: r for r in recs}
    forced = [r for r in recs if r["predicted_blind"] is not None and r["routing"] == "forced"]
    blackwell = {"gb200", "gb300", "b200", "b300"}
    for rid, pool in (("S65", blackwell), ("S04", {"h100", "h800"})):
        r = by_id[rid]
        want = [o for o in forced if o["cluster"] in pool and o["source"] != r["source"]]
        assert r["predicted_calibrated"] is not None and r["calibration"]["rows"] == len(want) > 0
        assert r["calibration"]["estimator"] == "pooled-lad-2" and r["calibration"]["chosen_by"] == "fixed"
        assert r["calibration"]["sources"] == len({o["source"] for o in want})
    assert not any(r["cluster"] == "b300" and r["source"] != by_id["S65"]["source"] for r in forced)


def test_a_dense_layer_waits_on_the_host_without_the_expert_ops():
    """A model too small to cover the host floor: each dense layer adds a dense layer's floor (attention, norms,
    its MLP), not the MoE layer's (router, preprocess, exchange, 64 local experts at 3 ops each)."""
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.training.host_floor import HOST_US_PER_OP, OPS_ATTENTION, OPS_DENSE_MLP
    from monta.perfmodel.training.run_shape import RunModel
    from monta.perfmodel.training.run_step import Layout, price_run

    c = get_cluster("h100").with_nodes(1, 1)
    shape = dict(hidden=256, ffn=256, experts=64, top_k=2, heads=4, head_dim=64, vocab=1000, dense_ffn=1024)
    s = Layout(gpus=1, seq=256, global_batch_tokens=256 * 4)
    moe_only = price_run(RunModel(layers=2, **shape), s, c)
    with_dense = price_run(RunModel(layers=4, dense_layers=2, **shape), s, c)
    per_dense_layer = (with_dense["host_floor_us"] - moe_only["host_floor_us"]) / (2 * s.num_micro)
    # the floor less the dense layer's own few microseconds of GPU work
    floor = 3 * (OPS_ATTENTION + OPS_DENSE_MLP) * HOST_US_PER_OP
    assert 0.98 * floor < per_dense_layer < floor


def test_the_paper_setup_priced_by_the_scored_run_model_agrees_with_the_step_model():
    """The run model, given a monta.variants exchange on DeepSpeed's layout, prices the paper's 2x70B step: its
    monta-vs-deepspeed improvement is within one point of predict_step's, monta beats deepspeed beats legacy."""
    from monta.perfmodel.reports.paper import run_model_steps, step_setup

    st = step_setup("a800-4nic", None, "none")
    t = run_model_steps(st)
    assert t["monta"] < t["deepspeed"] < t["legacy"]
    steps = st["steps"]
    ref = 1 - steps["monta"].total_us / steps["deepspeed"].total_us
    assert 1 - t["monta"] / t["deepspeed"] == pytest.approx(ref, abs=0.01)


def test_a_shallower_gemm_reaches_less_of_its_peak_as_measured():
    """The depth law reproduces DeepGEMM's H800 FP8 table (M = 4096) within 5% and the project's own H100 BF16
    table within 8%; a fine-grained FFN of the same FLOPs (4x the experts at a quarter of the width) prices
    slower in the step model, in FP8 more than in BF16."""
    from monta.perfmodel.training.gemm_eff import depth_eff, k_half

    kh = k_half(1979.0, 3350.0, fp8=True)
    top = 1358 / depth_eff(16384, kh)
    for k, tflops in ((512, 590), (1536, 990), (2048, 1025), (7168, 1304), (16384, 1358)):
        assert top * depth_eff(k, kh) == pytest.approx(tflops, rel=0.05), k
    assert k_half(2 * 1979.0, 3350.0, fp8=True) == pytest.approx(2 * kh)
    table = json.loads((ROOT / "data" / "measured" / "gpu-compute-h100.json").read_text())["kernels"]
    kh = k_half(989.0, 3350.0, fp8=False)
    depth = {"attn_qkv.dX": 1280, "attn_out.fwd": 1024, "expert_down.fwd": 3584, "expert_up.dX": 7168}
    top = table["expert_up.fwd"]["tflops"] / depth_eff(8192, kh)
    for name, k in depth.items():
        assert top * depth_eff(k, kh) == pytest.approx(table[name]["tflops"], rel=0.08), name
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.training.run_shape import RunModel
    from monta.perfmodel.training.run_step import Layout, price_run

    c = get_cluster("h100").with_nodes(1, 8)
    coarse = RunModel(layers=4, hidden=4096, ffn=4096, experts=64, top_k=2, heads=32, head_dim=128, vocab=1000)
    fine = RunModel(layers=4, hidden=4096, ffn=1024, experts=256, top_k=8, heads=32, head_dim=128, vocab=1000)
    assert coarse.model_flops_per_token(4096) == pytest.approx(fine.model_flops_per_token(4096), rel=0.01)
    slower = {}
    for precision in ("bf16", "fp8"):
        s = Layout(gpus=8, ep=8, seq=4096, global_batch_tokens=8 * 4096 * 4, precision=precision)
        slower[precision] = price_run(fine, s, c)["compute_us"] / price_run(coarse, s, c)["compute_us"]
    assert 1.0 < slower["bf16"] < slower["fp8"] and slower["fp8"] > 1.05


def test_the_last_pipeline_stage_carries_the_head_and_the_mtp_layers():
    """Megatron's default split: decoder layers evenly over the stages, the MTP layers and the output layer on the
    last, which paces the step. One stage prices the whole model as before; with PP the step is longer than an even
    split of the same work by what the last stage adds, and the more so the bigger the vocabulary."""
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.training.run_shape import RunModel
    from monta.perfmodel.training.run_step import Layout, price_run, slowest_stage

    m = RunModel(layers=8, hidden=2048, ffn=1024, experts=16, top_k=2, dense_layers=1, dense_ffn=4096, heads=16,
                 head_dim=128, vocab=150000, mtp=1)  # fmt: skip
    assert slowest_stage(m, 1) == (8.0, 1.0, 1.0)
    assert slowest_stage(m, 4) == (3.0, 0.0, 1.0)  # 2 decoder layers of 8/4 (both MoE) + the MTP layer
    c = get_cluster("h100").with_nodes(4, 8)
    s = Layout(gpus=32, ep=8, pp=4, seq=4096, global_batch_tokens=32 * 4096 * 8)
    t = price_run(m, s, c)
    assert t["last_stage_us"] > 0.1 * t["total_us"]
    small = price_run(RunModel(**{**m.__dict__, "vocab": 15000, "assumed": ()}), s, c)
    assert small["last_stage_us"] < 0.5 * t["last_stage_us"]
    one = price_run(m, Layout(gpus=8, ep=8, seq=4096, global_batch_tokens=8 * 4096 * 8), c.with_nodes(1, 8))
    assert one["last_stage_us"] == 0.0
