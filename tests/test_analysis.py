"""Analysis functions and a papermill-executed notebook on synthetic records.

The records are written with monta.results.make_record, exactly as the benchmarks write them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from monta.results import make_record
from monta_analysis import (
    alltoall_tables,
    claims,
    display,
    figures,
    frames,
    step_tables,
    table_files,
)  # analysis/, installed as monta_analysis (pyproject.toml)

ROOT = Path(__file__).resolve().parents[1]

ENV = {"python": "3.11", "host": "test"}


def a2a(size, variant, chunks, time_us, source="emulated", tp=4, gpus=4, inter_gbps=2.0, inter_bytes=None):
    params = {
        "size_bytes": size,
        "variant": variant,
        "chunks": chunks,
        "nodes": 2,
        "gpus_per_node": gpus,
        "tp": tp,
        "ep": 2,
        "dtype": "float32",
        "iters": 10,
    }
    if inter_gbps is not None:
        params["inter_gbps"] = inter_gbps
    metrics = {
        "time_us": time_us,
        "time_us_p10": time_us * 0.9,
        "time_us_p90": time_us * 1.1,
        "algbw_GBps": size / time_us / 1e3,
        "busbw_GBps": size / time_us / 1e3 * 0.875,
        "inter_bytes": inter_bytes if inter_bytes is not None else size,
        "intra_bytes": size,
        "wrong": 0,
    }
    return make_record(kind="alltoall", source=source, experiment="t", params=params, metrics=metrics, env=ENV)


def step(variant, step_ms, source="emulated"):
    phases = {
        "attention": 2.0,
        "gate": 0.5,
        "dispatch": step_ms * 0.3,
        "experts": 3.0,
        "combine": step_ms * 0.2,
        "grad_sync": 1.0,
        "optimizer": 0.5,
    }
    return make_record(
        kind="step",
        source=source,
        experiment="t",
        params={
            "variant": variant,
            "nodes": 2,
            "gpus_per_node": 4,
            "tp": 4,
            "model": "mini",
            "topk": 2,
            "capacity_factor": 1.0,
            "seq": 128,
            "layers": 2,
        },
        metrics={
            "step_ms": step_ms,
            "tokens_per_s": 1e5 / step_ms,
            "loss": 5.0,
            "breakdown_ms": phases,
            "peak_mem_bytes": 1 << 20,
        },
        env=ENV,
    )


def alltoall_records():
    recs = []
    for size in (1 << 20, 4 << 20):
        base = size / 1000.0
        recs.append(a2a(size, "legacy", 1, base * 4, inter_bytes=4 * size))
        recs.append(a2a(size, "deepspeed", 1, base * 2))
        for c, f in ((1, 1.8), (2, 1.2), (4, 1.0)):
            recs.append(a2a(size, "monta", c, base * f))
    for gbps, legacy in ((1.0, 8000.0), (4.0, 3000.0)):  # ratio ablation at 4 MiB
        recs.append(a2a(4 << 20, "legacy", 1, legacy, inter_gbps=gbps))
        recs.append(a2a(4 << 20, "deepspeed", 1, legacy / 2, inter_gbps=gbps))
        recs.append(a2a(4 << 20, "monta", 2, legacy / 4, inter_gbps=gbps))
    return recs


def test_alltoall_summary_speedups_and_best_chunks():
    table = alltoall_tables.alltoall_table(alltoall_records())
    summary = alltoall_tables.alltoall_summary(table)
    row = summary[(summary["size_bytes"] == 1 << 20) & (summary["inter_gbps"] == 2.0)].iloc[0]
    assert row["best_chunks"] == 4
    assert row["speedup_vs_legacy"] == pytest.approx(4.0)
    assert row["speedup_vs_deepspeed"] == pytest.approx(2.0)
    assert row["inter_bytes_ratio"] == pytest.approx(4.0)
    assert row["cluster"] == "2x4 TP4"


def test_routing_mode_and_dilation_are_points_of_their_own_and_show_only_where_they_differ():
    """A hot-node sweep, a layer-mode sweep and a run at dilation 2 beside a W0 dispatch sweep at the
    same cluster and size are four points, never one median; a plain sweep shows none of these columns."""
    plain = alltoall_records()
    assert not {"routing", "mode", "dilation"} & set(
        alltoall_tables.alltoall_summary(alltoall_tables.alltoall_table(plain)).columns
    )
    extra = []
    for key, value in (("routing", "hotnode"), ("mode", "layer"), ("dilation", 2.0)):
        for r in (a2a(1 << 20, "legacy", 1, 9000.0), a2a(1 << 20, "monta", 1, 3000.0)):
            r["params"][key] = value
            extra.append(r)
    summary = alltoall_tables.alltoall_summary(alltoall_tables.alltoall_table(plain + extra))
    at = summary[(summary["size_bytes"] == 1 << 20) & (summary["inter_gbps"] == 2.0)]
    assert len(at) == 4
    assert sorted(at["routing"]) == ["W0", "W0", "W0", "hotnode"]
    assert sorted(at["mode"]) == ["dispatch", "dispatch", "dispatch", "layer"]
    # the W0 dispatch point kept its own medians: the skewed runs' 9 ms legacy did not join them
    w0 = at[(at["routing"] == "W0") & (at["mode"] == "dispatch") & (at["dilation"].isna())].iloc[0]
    assert w0["speedup_vs_legacy"] == pytest.approx(4.0)


def test_chunk_and_ratio_ablation():
    table = alltoall_tables.alltoall_table(alltoall_records())
    chunks = alltoall_tables.chunk_ablation(table)
    one_mib = chunks[(chunks["size_bytes"] == 1 << 20) & (chunks["inter_gbps"] == 2.0)].set_index("chunks")
    assert one_mib.loc[4, "rel_to_1_chunk"] == pytest.approx(1.0 / 1.8)
    ratio = alltoall_tables.ratio_ablation(alltoall_tables.alltoall_summary(table))
    assert sorted(ratio["inter_gbps"]) == [1.0, 2.0, 4.0]
    assert (ratio["speedup_vs_legacy"] > 1).all()


def test_a_ratio_point_whose_chunks_the_floor_left_out_is_marked_on_its_figure(tmp_path):
    """The ratio ablation's fastest link scales the chunk floor to the whole 4 MiB buffer: monta ran one chunk
    there. Its table says which rows the floor left out, and the figure rings that point and names them."""
    import matplotlib.pyplot as plt

    recs = [r for r in alltoall_records() if r["params"]["size_bytes"] == 4 << 20]
    for r in recs:
        if r["params"]["inter_gbps"] == 4.0:
            r["metrics"]["not_run"] = {"rows": ["monta2", "monta4"], "why": "a chunk under --min-chunk 4 MiB"}
    ratio = alltoall_tables.ratio_ablation(
        alltoall_tables.alltoall_summary(alltoall_tables.alltoall_table(recs))
    ).set_index("inter_gbps")
    assert ratio.loc[4.0, "left_out"] == "monta2, monta4" and ratio["left_out"].isna().sum() == len(ratio) - 1
    fig, ax = plt.subplots()
    figures._mark_left_out(ax, ratio.reset_index())
    assert [t.get_text() for t in ax.texts] == ["chunk floor: monta2, monta4 not run"]
    assert len(ax.collections) == 2  # both speedups of that point ringed
    plt.close(fig)
    assert figures.ratio_ablation(ratio.reset_index(), tmp_path).exists()
    md = table_files.write_table(ratio.reset_index(), tmp_path, "ratio", "ratio")[0].read_text()
    assert "left out by the chunk floor" in md and "monta2, monta4" in md


def test_step_table_and_breakdown():
    recs = [step("deepspeed", 20.0), step("monta", 16.0), step("lina", 12.5)]
    t = step_tables.step_table(recs).set_index("variant")
    assert t.loc["monta", "speedup_vs_deepspeed"] == pytest.approx(1.25)
    assert t.loc["lina", "speedup_vs_deepspeed"] == pytest.approx(1.6)
    long = step_tables.step_breakdown(step_tables.step_table(recs))
    assert set(long["phase"]) == {"attention", "gate", "dispatch", "experts", "combine", "grad_sync", "optimizer"}
    assert long[(long["variant"] == "monta") & (long["phase"] == "dispatch")]["ms"].iloc[0] == pytest.approx(4.8)


def test_step_breakdown_stacks_disjoint_parts_only():
    rec = step("monta", 20.0)
    rec["metrics"]["breakdown_ms"].update(forward=20.0, backward=6.0, dispatch_bwd=1.0, combine_bwd=2.0, exchange=13.0)
    long = step_tables.step_breakdown(step_tables.step_table([rec]))
    parts = dict(zip(long["phase"], long["ms"]))
    assert not {"forward", "backward", "exchange"} & set(parts)  # totals are not stacked on their parts
    assert parts["forward_other"] == pytest.approx(20.0 - (2.0 + 0.5 + 6.0 + 3.0 + 4.0))
    assert parts["backward_compute"] == pytest.approx(3.0) and "backward_other" not in parts
    assert sum(parts.values()) == pytest.approx(20.0 + 6.0 + 1.0 + 0.5)  # forward + backward + grad sync + optimizer


def test_predicted_vs_measured_matches_only_same_link():
    recs = [
        a2a(1 << 20, "monta", 2, 1000.0),
        a2a(1 << 20, "monta", 2, 1100.0, source="predicted"),
        # an A800 prediction (no emulated bandwidth) must not be scored against the emulator
        a2a(1 << 20, "monta", 2, 50.0, source="predicted", inter_gbps=None),
    ]
    pvm = alltoall_tables.predicted_vs_measured(recs)
    assert len(pvm) == 1
    assert pvm["error_pct"].iloc[0] == pytest.approx(10.0)


def test_paper_comparison_says_what_each_difference_means_and_no_data():
    paper = yaml.safe_load((ROOT / "analysis" / "paper.yaml").read_text())
    recs = [
        a2a(1 << 20, "legacy", 1, 8000.0, tp=8, gpus=8),
        a2a(1 << 20, "monta", 4, 2000.0, tp=8, gpus=8),
        step("deepspeed", 20.0),
        step("lina", 14.0),
        step("legacy", 23.0),
        step("monta", 20.0),
    ]
    cmp = claims.paper_comparison(recs, paper).set_index("claim")
    assert "deviation_pct" not in cmp.columns
    row = cmp[cmp.index.str.startswith("MoNTA AllToAll vs DeepSpeed")].iloc[0]
    # 4x is under the 8x claim and under 90% of the 6.9x ceiling the A800 sets: not reproduced, not "bound"
    assert row["ours"] == "4.00x" and row["meaning"] == "not reproduced: 4.00x is 50% under 8x"
    lat = cmp[cmp.index.str.startswith("MoNTA overall latency") & cmp.index.str.contains("vs legacy")].iloc[0]
    assert lat["ours"] == "13.0%" and lat["meaning"] == "reproduced: within 10% of 13%"
    stock = cmp[cmp.index.str.startswith("MoNTA overall latency") & cmp.index.str.contains("stock")].iloc[0]
    assert stock["ours"] == "0.0%" and stock["meaning"].startswith("not reproduced")  # monta 20 ms = deepspeed
    inside = cmp[cmp.index.str.startswith("Lina priority")].iloc[0]  # 20/14 = 1.43 just above 1.42
    assert inside["meaning"] == "reproduced: within 10% of 1.36-1.42x's range"
    lancet = cmp[cmp.index.str.startswith("Lancet end-to-end speedup, maximum")].iloc[0]
    assert lancet["ours"] == "no data" and lancet["meaning"] == "no data"
    assert len(paper["claims"]) >= 9 and all("arxiv" in c["source"] for c in paper["claims"])


def test_a_verdict_names_what_the_difference_means():
    from monta_analysis.claims import verdict

    eight = {"value": 8.0, "unit": "x"}
    bound = {"value": 6.9, "why": "TP / (r + 1/k)"}
    assert verdict(7.5, eight, bound) == ("reproduced", "within 10% of 8x")
    assert verdict(10.0, eight) == ("exceeded", "+25% over 8x")  # no ceiling stated
    assert verdict(6.5, eight, bound) == ("bound below the claim", "at most 6.90x here: TP / (r + 1/k)")
    # past the ceiling physics sets, even near the claim: a testbed bug until shown otherwise
    assert verdict(7.8, eight, bound) == ("above its bound", "7.80x over the bound 6.90x: check the testbed")
    assert verdict(6.5, eight) == ("not reproduced", "6.50x is 19% under 8x")  # no ceiling stated: a shortfall
    assert verdict(0.05, {"value": 0.13, "unit": "fraction"}) == ("not reproduced", "5.0% is 62% under 13%")


def _pred(size, variant, chunks, t, cluster, **metrics):
    r = a2a(size, variant, chunks, t, source="predicted", tp=8, gpus=8, inter_gbps=None)
    r["params"]["cluster"] = cluster
    r["metrics"].update(metrics)
    return r


def test_paper_comparison_pairs_predictions_of_one_cluster_only():
    """An A800 prediction is paired with the A800 legacy prediction, never with the emulator profile's
    (ms-scale) legacy, and `predict accuracy` rows (scored against a measurement) are no claim."""
    paper = yaml.safe_load((ROOT / "analysis" / "paper.yaml").read_text())
    recs = [
        _pred(1 << 24, "legacy", 1, 300.0, "a800-8nic"),
        _pred(1 << 24, "monta", 4, 100.0, "a800-8nic"),
        _pred(1 << 24, "monta", 1, 50.0, "a800-4nic"),  # no legacy for this cluster: no pair
        _pred(1 << 24, "legacy", 1, 9e6, "emulator:lp", measured_us=8e6),
        _pred(1 << 24, "monta", 2, 2e6, "emulator:lp", measured_us=2.1e6),
    ]
    row = claims.paper_comparison(recs, paper).set_index("claim")
    row = row[row.index.str.startswith("MoNTA AllToAll vs DeepSpeed")].iloc[0]
    assert row["ours_source"] == "predicted" and row["ours"] == "3.00x" and row["points"] == 1


def test_empty_records_degrade_to_no_data(tmp_path):
    assert alltoall_tables.alltoall_table([]).empty and step_tables.step_table([]).empty
    assert figures.alltoall_comparison(alltoall_tables.alltoall_table([]), tmp_path) is None
    md, csv, tex = table_files.write_table(step_tables.step_table([]), tmp_path, "empty", "nothing")
    assert "no data" in md.read_text() and "no data" in csv.read_text() and tex.exists()
    assert frames.load([tmp_path / "absent.jsonl"]) == []


def test_figures_written(tmp_path):
    table = alltoall_tables.alltoall_table(alltoall_records())
    paths = [
        figures.alltoall_comparison(table, tmp_path),
        figures.chunk_ablation(alltoall_tables.chunk_ablation(table), tmp_path),
        figures.ratio_ablation(alltoall_tables.ratio_ablation(alltoall_tables.alltoall_summary(table)), tmp_path),
        figures.step_breakdown(step_tables.step_breakdown(step_tables.step_table([step("deepspeed", 20.0)])), tmp_path),
        figures.predicted_vs_measured(
            alltoall_tables.predicted_vs_measured(
                [a2a(1 << 20, "monta", 2, 1000.0), a2a(1 << 20, "monta", 2, 1100.0, source="predicted")]
            ),
            tmp_path,
        ),
    ]
    for p in paths:
        assert p is not None and p.stat().st_size > 5000 and p.read_bytes()[:4] == b"\x89PNG"


def test_record_shapes_of_the_real_producers():
    """Shapes the benchmarks and the performance model actually write: accuracy records carry
    their measurement, predicted steps state step_time_us, named clusters stay apart."""
    acc = make_record(
        kind="alltoall",
        source="predicted",
        experiment="accuracy",
        env=ENV,
        params={
            "size_bytes": 1 << 20,
            "variant": "monta",
            "chunks": 2,
            "nodes": 2,
            "gpus_per_node": 4,
            "tp": 4,
            "ep": 2,
        },
        metrics={"time_us": 900.0, "measured_us": 1000.0, "error": -0.1},
    )
    pvm = alltoall_tables.predicted_vs_measured([acc])
    assert pvm["error_pct"].tolist() == pytest.approx([-10.0])
    steps = [
        make_record(
            kind="step",
            source="predicted",
            experiment="p",
            env=ENV,
            params={
                "variant": v,
                "nodes": 2,
                "gpus_per_node": 8,
                "tp": 8,
                "cluster": c,
                "model": "moe-2x70b",
                "seq": 8192,
                "layers": 24,
            },
            metrics={"step_time_us": t * (2 if c == "a800-4nic" else 1)},
        )
        for c in ("a800-4nic", "a800-8nic")
        for v, t in (("deepspeed", 2000.0), ("monta", 1600.0))
    ]
    t = step_tables.step_table(steps)
    assert sorted(set(t["cluster"])) == ["a800-4nic 2x8 TP8", "a800-8nic 2x8 TP8"]
    assert t["speedup_vs_deepspeed"].max() == pytest.approx(1.25)
    assert t.loc[t["cluster"].str.startswith("a800-8nic") & (t["variant"] == "monta"), "step_ms"].item() == 1.6


def test_alltoall_comparison_data_drops_components_and_empty_panels():
    recs = alltoall_records()
    recs += [a2a(1 << 20, "a2a", 1, 500.0), a2a(1 << 20, "ag", 1, 300.0)]  # the exchange's halves alone
    # predicted records that state a time but no bandwidth (like `monta predict accuracy` writes)
    recs += [
        make_record(
            kind="alltoall",
            source="predicted",
            experiment="accuracy",
            env=ENV,
            params={"size_bytes": 1 << 20, "variant": v, "chunks": 1, "nodes": 2, "gpus_per_node": 4, "tp": 4, "ep": 2},
            metrics={"time_us": 900.0, "measured_us": 1000.0},
        )
        for v in ("legacy", "monta")
    ]
    table = alltoall_tables.alltoall_table(recs)
    assert {"a2a", "ag"} <= set(table["variant"]) and "predicted" in set(table["source"])
    data, y = figures.alltoall_comparison_data(table)
    # time in ms, never the emulator's tiny bus bandwidths (0.004 GB/s on the A800 clock)
    assert y == "time_ms" and (data[y] == data["time_us"] / 1000).all()
    assert not set(data["variant"]) & figures.COMPONENTS
    assert set(data["series"]) == {"emulated 2x4 TP4"}  # the predicted series has nothing to plot: no panel
    assert set(data["inter_gbps"]) == {2.0}  # ratio-ablation points are not mixed into the sweep


def test_chunk_ablation_figure_plots_measured_only(tmp_path):
    table = alltoall_tables.alltoall_table([a2a(1 << 20, "monta", c, 100.0 * c, source="predicted") for c in (1, 2, 4)])
    chunks = alltoall_tables.chunk_ablation(table)
    assert not chunks.empty
    assert figures.chunk_ablation(chunks, tmp_path) is None  # predicted curves are not an ablation measurement


def test_step_panel_titles_are_short_two_line():
    keys = [
        ("emulated", "2x4 TP4", "moe-2x70b-mini[capacity_factor=1.0,topk=2]"),
        ("emulated", "2x4 TP4", "moe-2x70b-mini[capacity_factor=2.0,topk=2]"),
    ]
    assert figures.step_panel_titles(keys) == [
        "emulated 2x4 TP4\ntop-k 2, capacity 1.0",
        "emulated 2x4 TP4\ntop-k 2, capacity 2.0",
    ]
    mixed = figures.step_panel_titles(
        [("emulated", "2x4 TP4", "mini"), ("predicted", "a800-8nic 2x8 TP8", "moe-2x70b")]
    )
    assert mixed == ["emulated 2x4 TP4\nmini", "predicted a800-8nic 2x8 TP8\nmoe-2x70b"]


# -- the report for people: units, filled columns, names, summary -------------------------------
def test_sig3_plain_notation():
    from monta_analysis.display import fmt_bytes, sig3

    assert [sig3(x) for x in (306600.0, 3066.0, 44.8067, 4.5, 0.02431, 9.996, 1.0)] == [
        "307000",
        "3070",
        "44.8",
        "4.50",
        "0.0243",
        "10.0",
        "1.00",
    ]
    assert [fmt_bytes(b) for b in (65536, 1 << 20, 3 << 19, 1 << 30)] == ["64 KiB", "1 MiB", "1.50 MiB", "1 GiB"]


def _paper_pred(size, t, legacy, deepspeed, chunks, cluster="a800-8nic"):
    """What `monta predict paper` writes: monta at the model's own chunk count, the baselines as metrics."""
    return make_record(
        kind="alltoall",
        source="predicted",
        experiment="p",
        env=ENV,
        params={
            "size_bytes": size,
            "variant": "monta",
            "chunks": chunks,
            "nodes": 2,
            "gpus_per_node": 8,
            "tp": 8,
            "ep": 2,
            "cluster": cluster,
        },
        metrics={
            "time_us": t,
            "legacy_us": legacy,
            "deepspeed_us": deepspeed,
            "speedup": legacy / t,
            "speedup_vs_deepspeed": deepspeed / t,
        },
    )


def test_summary_table_fills_what_the_model_knows_and_reads_in_human_units(tmp_path):
    emulated = [
        a2a(16 << 20, "legacy", 1, 3066000.0, inter_bytes=4 << 20),
        a2a(16 << 20, "deepspeed", 1, 480000.0),
        a2a(16 << 20, "monta", 4, 346000.0, inter_bytes=1 << 20),
    ]
    # a800-4nic: paper predictions only (no legacy/deepspeed records); a800-8nic: the sweep's records
    # at chunk counts 1/2 plus the paper's faster 3 chunks, which states no inter-node bytes
    pred = [
        _paper_pred(16 << 20, 255.06, 1148.0, 341.9, 3, "a800-4nic"),
        _paper_pred(16 << 20, 230.34, 592.0, 272.4, 3),
    ]
    for v, c, t in (("legacy", 1, 592.0), ("deepspeed", 1, 272.4), ("monta", 2, 240.0)):
        pred.append(_pred(16 << 20, v, c, t, "a800-8nic", inter_bytes=(8 if v == "legacy" else 1) * float(1 << 20)))
        del pred[-1]["params"]["dtype"]  # as `monta predict alltoall` writes them: bytes, no dtype
    summary = alltoall_tables.alltoall_summary(alltoall_tables.alltoall_table(emulated + pred)).set_index("cluster")
    four = summary.loc["a800-4nic 2x8 TP8"]
    assert four["legacy_us"] == pytest.approx(1148.0) and four["deepspeed_us"] == pytest.approx(341.9)
    # bytes from the model itself: 16 MiB over TP 8 and EP 2 leaves 1 MiB per rank for the other node
    assert four["monta_inter_bytes"] == 1 << 20 and four["inter_bytes_ratio"] == 8.0
    eight = summary.loc["a800-8nic 2x8 TP8"]
    assert eight["best_chunks"] == 3 and eight["monta_inter_bytes"] == 1 << 20 and eight["inter_bytes_ratio"] == 8.0
    assert eight["inter_gbps"] == pytest.approx(8 * 23.5 * 8)  # the preset's 8 NICs, per node like the emulator's
    md, csv, _ = table_files.write_table(summary.reset_index(), tmp_path, "s", "caption")
    text = md.read_text()
    assert "e+" not in text and "nan" not in text.lower()
    assert "| 3070 ms " in text and "| 346 ms " in text and "| 8.86x " in text  # emulated: ms, 3 significant digits
    # one unit per column: the predictions' us read in the emulator's ms beside them (1148 us, 230.34 us)
    assert "| 1.15 ms " in text and "| 0.230 ms " in text and "| 16 MiB " in text and " us " not in text
    assert "dtype float32" in text.splitlines()[0]  # one value for the table: said once, in the caption
    assert "3066000" in csv.read_text()  # the CSV keeps the raw numbers


def test_emulator_profile_is_named_by_its_links():
    acc = make_record(
        kind="alltoall",
        source="predicted",
        experiment="accuracy",
        env=ENV,
        params={
            "size_bytes": 1 << 20,
            "variant": "monta",
            "chunks": 2,
            "nodes": 2,
            "gpus_per_node": 4,
            "tp": 4,
            "ep": 2,
            "cluster": "emulator:custom",
        },
        metrics={"time_us": 900.0, "measured_us": 1000.0},
        config={"profile": {"name": "custom", "topology": {"name": "custom", "inter_gbps": 0.25, "intra_gbps": None}}},
    )
    df = frames.to_frame([acc])
    assert df["cluster"].tolist() == ["emulator links (inter 0.25 Gbit/s, intra unshaped) 2x4 TP4"]
    assert df["inter_gbps"].tolist() == [0.25]


def test_a_prediction_of_a_slower_sweep_is_labelled_with_the_rate_it_was_priced_at():
    """`predict accuracy` prices the 2x8 sweep (run at half the network section's rate) on the profile rescaled
    to 0.0625 Gbit/s: its rows say 0.0625, not the profile's 0.125 (a 9030 ms measurement beside a "predicted
    9020 ms at 0.125" reads as a 2x error)."""
    profile = {"name": "a800-4nic@0.125", "topology": {"name": "a800-4nic", "inter_gbps": 0.125, "intra_gbps": 1.7}}
    measured = [
        a2a(16 << 20, "monta", 4, 9030000.0, tp=8, gpus=8, inter_gbps=0.0625),
        a2a(16 << 20, "monta", 4, 4500000.0, tp=4, gpus=4, inter_gbps=0.125),
    ]
    acc = [_accuracy(16 << 20, 4, 9020000.0, 9030000.0, gpus=8), _accuracy(16 << 20, 4, 4400000.0, 4500000.0)]
    for r in acc:
        r["config"] = {"profile": profile}
    df = frames.to_frame(measured + acc, "alltoall")
    pred = df[df["source"] == "predicted"].set_index("gpus_per_node")
    assert pred.loc[8, "inter_gbps"] == 0.0625 and pred.loc[4, "inter_gbps"] == 0.125
    assert pred.loc[8, "cluster"] == "emulator links (inter 0.0625 Gbit/s, intra 0.85 Gbit/s) 2x8 TP8"
    assert pred.loc[4, "cluster"] == "emulator links (inter 0.125 Gbit/s, intra 1.7 Gbit/s) 2x4 TP4"
    pvm = alltoall_tables.predicted_vs_measured(measured + acc).set_index("gpus_per_node")
    assert pvm.loc[8, "inter_gbps"] == 0.0625 and pvm.loc[8, "predicted_us"] == 9020000.0


def test_tp_ablation_is_its_own_table_and_figure(tmp_path):
    recs = alltoall_records()  # 2x4 TP4 at 1 and 4 MiB
    for tp in (1, 2):  # the ablation points: one size each
        for v, c, f in (("legacy", 1, 1.0 + tp), ("deepspeed", 1, 1.5), ("monta", 2, 1.0)):
            recs.append(a2a(4 << 20, v, c, 1000.0 * f, tp=tp))
    table = alltoall_tables.alltoall_table(recs)
    tp = alltoall_tables.tp_ablation(alltoall_tables.alltoall_summary(table))
    assert tp["tp"].tolist() == [1, 2, 4] and set(tp["size_bytes"]) == {4 << 20}
    assert tp["speedup_vs_legacy"].tolist() == pytest.approx([2.0, 3.0, 4.0 / 1.0])
    data, _ = figures.alltoall_comparison_data(table)
    assert set(data["series"]) == {"emulated 2x4 TP4"}  # no single-point TP1/TP2 panels
    path = figures.tp_ablation(tp, tmp_path)
    assert path is not None and path.stat().st_size > 5000


def _accuracy(size, chunks, predicted, measured, gpus=4, cpu_bound=None):
    return make_record(
        kind="alltoall",
        source="predicted",
        experiment="accuracy",
        env=ENV,
        params={
            "size_bytes": size,
            "variant": "monta",
            "chunks": chunks,
            "nodes": 2,
            "gpus_per_node": gpus,
            "tp": gpus,
            "ep": 2,
            "cluster": "emulator:custom",
        },
        metrics={"time_us": predicted, "measured_us": measured, "measured_cpu_bound": cpu_bound},
    )


def test_chunk_pick_follows_the_models_rule_on_recorded_predictions():
    from monta_analysis import summary

    recs = [
        _accuracy(1 << 20, 1, 100.0, 100.0),
        _accuracy(1 << 20, 2, 99.8, 90.0),  # 0.2% faster: a tie, keeps 1
        _accuracy(4 << 20, 1, 400.0, 400.0),
        _accuracy(4 << 20, 4, 300.0, 310.0),
        _accuracy(4 << 20, 8, 290.0, 300.0),
    ]
    picks = {setup[0]: (best, pick, loss) for setup, best, pick, loss, _ in summary.chunk_picks(recs)}
    assert picks[1 << 20] == (2, 1, pytest.approx(100.0 / 90.0 - 1))  # a miss: 11% off the best measured
    assert picks[4 << 20] == (8, 8, 0.0)


def test_the_chunk_pick_count_names_the_sizes_whose_timings_were_cpu_bound():
    """A miss whose best count was timed CPU-bound is still counted, and the summary also gives the
    count over the sizes where neither timing was."""
    from monta_analysis import summary

    recs = [
        _accuracy(1 << 20, 1, 100.0, 100.0),
        _accuracy(1 << 20, 2, 99.8, 90.0, cpu_bound=True),  # a miss
        _accuracy(4 << 20, 1, 400.0, 400.0, cpu_bound=False),
        _accuracy(4 << 20, 4, 300.0, 310.0),
    ]
    assert [bound for *_, bound in summary.chunk_picks(recs)] == [True, False]
    line = summary.model_line(recs)
    assert "at **1 of 2** buffer sizes (1 of 1 where neither timing was CPU-bound)" in line, line


def _headline_records():
    recs = alltoall_records()
    recs += [
        a2a(16 << 20, "legacy", 1, 3066000.0, tp=8, gpus=8),
        a2a(16 << 20, "deepspeed", 1, 480000.0, tp=8, gpus=8),
        a2a(16 << 20, "monta", 4, 346000.0, tp=8, gpus=8),
        a2a(8 << 20, "monta", 4, 200000.0, tp=8, gpus=8),
    ]
    recs += [_paper_pred(16 << 20, 230.34, 592.0, 272.4, 3), _paper_pred(64 << 20, 748.1, 1799.7, 865.6, 3)]
    recs += [step("deepspeed", 20.0), step("monta", 16.0), step("lina", 12.5), step("legacy", 25.0)]
    recs += [_accuracy(1 << 20, 1, 110.0, 100.0), _accuracy(1 << 20, 2, 80.0, 100.0)]  # MAPE 15%, pick 2: 0% off
    return recs


def test_the_claims_table_gives_paper_emulated_predicted_and_a_verdict_with_its_reason():
    from monta_analysis import claims

    paper = yaml.safe_load((ROOT / "analysis" / "paper.yaml").read_text())
    rows = claims.claims_table(_headline_records(), paper)
    assert rows[0] == "| claim | paper | emulated | predicted | verdict |"
    assert len(rows) == 2 + sum("short" in c for c in paper["claims"])  # one row per claim with a short line
    # 346 ms vs legacy's 3066 ms at TP8: 8.86x, past paper.yaml's ceiling for this cluster (and TP = 8) by more
    # than 10%: a testbed bug until shown otherwise, not "exceeded"; the A800 prediction 2.57x
    assert "| AllToAll 8x vs DeepSpeed under TP8 | 8x | 8.86x | 2.57x | **above its bound** (8.86x over the bound" in (
        "\n".join(rows)
    )
    # step: monta 16 ms vs legacy 25 ms = 36% reduction, the claim 13%
    assert (
        "| 13% step-time improvement (ours vs legacy) | 13% | 36.0% | no data | **exceeded** (+177% over 13%) |" in rows
    )


def test_the_provenance_line_names_commit_host_cores_torch_and_when():
    from monta_analysis import claims

    recs = [a2a(1 << 20, "monta", 4, 1000.0), a2a(2 << 20, "monta", 4, 1000.0)]
    for r, stamp in zip(recs, ("2026-11-27T01:00:00+00:00", "2026-11-27T01:19:00+00:00")):
        r["env"] = {"git_commit": "187d22a1b2c3", "host": "box", "cpus": 2, "torch": "2.13.0", "python": "3.11.9"}
        r["timestamp"] = stamp
    assert claims.provenance(recs) == (
        "**Provenance**: commit 187d22a1b2c3 · host box · 2 cores · torch 2.13.0 · python 3.11.9 · measured "
        "2026-11-27T01:00:00+00:00 to 2026-11-27T01:19:00+00:00 (UTC; the records' env)."
    )


def test_summary_states_the_headline_numbers_with_links(tmp_path):
    from monta.regress import compare, format_table
    from monta_analysis import summary

    recs = _headline_records()
    base = [a2a(1 << 20, "monta", 4, 1000.0), a2a(4 << 20, "monta", 4, 1000.0)]
    cur = [a2a(1 << 20, "monta", 4, 1000.0), a2a(4 << 20, "monta", 4, 3000.0)]
    for r in base + cur:
        r["metrics"]["samples_us"] = [r["metrics"]["time_us"] * f for f in (0.99, 1.0, 1.01, 1.0, 0.995)]
    regress_md = tmp_path / "alltoall.md"  # the table `monta regress` writes
    regress_md.write_text(format_table(compare(base, cur), "time_us", 0.10, 0.95))
    paper = yaml.safe_load((ROOT / "analysis" / "paper.yaml").read_text())
    lines = summary.summarize(recs, paper, regress_md, lambda target: target)
    text = "\n".join(lines)
    # the headline: the largest TP measured, its largest buffer with every variant
    assert (
        "**TP AllToAll**, emulated 2x8 TP8 @ 2 Gbit/s, 16 MiB per rank: monta (4 chunks) 346 ms: **8.86x** "
        "over legacy (3070 ms), **1.39x** over deepspeed (480 ms). [table](tables/alltoall_summary.md)"
    ) in text
    assert "a800-8nic 2x8 TP8: up to **2.57x** over legacy at 16 MiB (1.18x over deepspeed there)" in text
    assert "mini: monta 16.0 ms, **1.25x** over deepspeed (20.0 ms); lina 1.60x, legacy 0.800x over deepspeed." in text
    assert "MAPE **15.0%** over 2 points" in text and "at **1 of 1** buffer sizes" in text
    assert "2 matched points, **1 regressed** (1 improved" not in text  # the 1 MiB point is unchanged
    assert "2 matched points, **1 regressed**" in text and "threshold 10%" in text
    # the paper's numbers are the claims table's (it opens the report); the summary links the full comparison
    assert "AllToAll 8x vs DeepSpeed" not in text and "[table](tables/paper_comparison.md)" in text
    assert all(line.startswith("- ") for line in lines)
    assert summary.regress_line(None).startswith("**Regression check**: not run")


def test_a_run_with_an_injected_slowdown_opens_its_summary_with_a_test_aid_banner():
    """`make reproduce INJECT=monta:0.10` (the regression gate's check): the report must not pass off
    the slowed variant's figures as measurements; a run without injection has no banner."""
    from monta_analysis import summary

    recs = alltoall_records()
    assert summary.injection_line(recs) is None
    assert not any("TEST AID" in line for line in summary.summarize(recs, None, None, lambda t: None))
    for r in recs:
        if r["params"]["variant"] == "monta":
            r["metrics"]["injected_slowdown"] = 0.1
    lines = summary.summarize(recs, None, None, lambda t: None)
    assert lines[0].startswith("- **TEST AID: injected slowdown (monta +10%)**"), lines[0]
    assert "not measurements of the code" in lines[0]


def test_summary_shows_paired_ratios_with_intervals_and_names_cpu_bound_points(tmp_path):
    recs = alltoall_records()
    for r in recs:
        m, p = r["metrics"], r["params"]
        if p["variant"] == "monta" and p["chunks"] == 4 and p.get("inter_gbps") == 2.0:
            m.update(
                speedup_vs_legacy=3.9,
                speedup_vs_legacy_ci=[3.8, 4.05],
                speedup_vs_deepspeed=2.1,
                speedup_vs_deepspeed_ci=[2.0, 2.2],
                overlap_efficiency=0.9,
                overlap_efficiency_ci=[0.8, 0.97],
                iters=12,
            )
        m["cpu_bound"] = p["size_bytes"] == 1 << 20 and p["variant"] == "legacy"
    summary = alltoall_tables.alltoall_summary(alltoall_tables.alltoall_table(recs))
    shown, note = alltoall_tables.with_intervals(summary)
    row = shown[(shown["size_bytes"] == 4 << 20) & (shown["inter_gbps"] == 2.0)].iloc[0]
    assert row["vs legacy, paired [95% CI]"] == "3.90x [3.80x, 4.05x]"
    assert row["overlap efficiency [95% CI]"] == "90% [80%, 97%]" and row["CPU-bound"] == "no"
    small = shown[(shown["size_bytes"] == 1 << 20)].iloc[0]
    assert small["CPU-bound"] == "yes"  # its legacy timing was: the whole point is
    # named once, with its rate: the records ran this cluster at three inter-node rates
    assert note.startswith("CPU-BOUND: 1 of 4 measured points (2x4 TP4 @2 Gbit/s 1 MiB)")
    assert "paired_vs_legacy" not in shown.columns and "cpu_bound" not in shown.columns
    md = table_files.write_table(shown, tmp_path, "s", "cap")[0].read_text()
    assert "3.90x [3.80x, 4.05x]" in md and "nan" not in md.lower()


def test_a_plugin_exchange_gets_its_own_column_in_the_alltoall_summary():
    """A plugin's exchange (tests/plugins: toy-exchange) measured next to the core's: its best time is
    a column of the summary, headed by its name, in the run's unit."""
    from monta_analysis import display

    recs = alltoall_records() + [a2a(1 << 20, "toy-exchange", 1, 2500.0), a2a(4 << 20, "toy-exchange", 1, 9000.0)]
    summary = alltoall_tables.alltoall_summary(alltoall_tables.alltoall_table(recs))
    row = summary[(summary["size_bytes"] == 1 << 20) & (summary["inter_gbps"] == 2.0)].iloc[0]
    assert row["toy-exchange_us"] == 2500.0 and row["monta_us"] == pytest.approx(1048.576)
    shown = display.humanize(summary)
    assert "toy-exchange" in shown.columns and "2.50 ms" in set(shown["toy-exchange"])


def _map_record(tp, variant, time_us, experts=16, topk=8, size=2**20):
    rec = make_record(
        kind="alltoall",
        source="emulated",
        experiment="exchange-map",
        params={"size_bytes": size, "variant": variant, "chunks": 2 if variant == "monta" else 1, "tp": tp,
                "ep": 8 // tp, "nodes": 2, "gpus_per_node": 4},
        metrics={"time_us": time_us, "time_us_p10": time_us * 0.98, "time_us_p90": time_us * 1.02, "iters": 10,
                 "inter_bytes": 1000, "cpu_bound": False},
    )  # fmt: skip
    rec["config"] = {"nodes": 2, "gpus_per_node": 4, "ep": 8 // tp, "experts": experts, "topk": topk,
                     "hidden": 256, "dtype": "float32"}  # fmt: skip
    return rec


def test_exchange_map_winner_pick_and_report():
    """The map's verdicts: measured winner, the model's pick (here: a synthetic profile-free check of
    the bookkeeping through ``winners``), near ties flagged, MAPE over every exchange."""
    from monta_analysis import exchange_map as em

    pts = []
    for v, meas, pred in (("deepspeed", 100.0, 100.0), ("node-dedup", 50.0, 55.0), ("allgather", 52.0, 50.0)):
        pts.append({"tp": 2, "ep": 4, "experts": 16, "topk": 8, "size_bytes": 2**20, "variant": v, "chunks": 1,
                    "measured_us": meas, "p10_us": meas, "p90_us": meas, "iters": 10, "predicted_us": pred,
                    "inter_bytes": 0, "wrong": 0, "cpu_bound": False})  # fmt: skip
    (w,) = em.winners(pts)
    assert (w["measured_winner"], w["model_pick"], w["agree"]) == ("node-dedup", "allgather", False)
    assert w["margin"] == pytest.approx(1.04) and w["vs_deepspeed"] == pytest.approx(2.0)
    text = em.report(pts, [w], [])
    assert "at **0 of 1** points" in text and "MAPE over all exchanges **4.6%**" in text
    pts[1]["measured_us"] = 51.5  # within 3% of allgather: a near tie
    (w,) = em.winners(pts)
    assert "(near tie)" in em.report(pts, [w], [])


def test_exchange_map_prices_every_exchange_from_records(tmp_path):
    """From bench records and a profile: one point per exchange, each with the model's prediction."""
    from monta.hardware.profile import LinkProfile
    from monta_analysis import exchange_map as em

    profile = LinkProfile.from_dict(
        {
            "schema": "monta.linkprofile/1",
            "name": "test-emu",
            "source": "emulated",
            "topology": {"nodes": 2, "gpus_per_node": 4, "intra_group": [0, 1, 2, 3], "inter_group": [0, 4]},
            "links": {
                "intra": {"bandwidth_GBps": 1.0, "latency_us": 60.0, "efficiency": [[4096, 0.3], [1048576, 1.0]]},
                "inter": {"bandwidth_GBps": 0.125, "latency_us": 120.0, "efficiency": [[4096, 0.4], [1048576, 1.0]]},
            },
        }
    )
    recs = [_map_record(2, v, t) for v, t in (("deepspeed", 100.0), ("monta", 90.0), ("node-dedup", 40.0))]
    pts = em.points(recs, profile)
    assert [p["variant"] for p in pts] == ["deepspeed", "monta", "node-dedup"]
    assert all(p["predicted_us"] > 0 for p in pts)
    by = {p["variant"]: p["predicted_us"] for p in pts}
    assert by["node-dedup"] < by["deepspeed"]  # top-8 on 16 experts: a token crosses once, not up to 8 times
    # a size rerun at half the rates (--dilation auto) is priced at them: the model's time, the clock's
    topo = {"inter_gbps": 1.0, "intra_gbps": 8.0}
    at = LinkProfile.from_dict({**profile.to_dict(), "topology": {**profile.to_dict()["topology"], **topo}})
    slow = [_map_record(2, "deepspeed", 200.0)]
    slow[0]["params"].update({"inter_gbps": 0.5, "intra_gbps": 4.0, "dilation": 2.0})
    fast = [_map_record(2, "deepspeed", 100.0)]
    fast[0]["params"].update(topo)
    (p2,), (p1,) = em.points(slow, at), em.points(fast, at)
    assert 1.5 < p2["predicted_us"] / p1["predicted_us"] <= 2.0
    slow[0]["params"]["intra_gbps"] = 8.0  # another intra:inter ratio: no clock to price it on
    with pytest.raises(ValueError, match="another intra:inter ratio"):
        em.points(slow, at)


def test_the_report_says_how_the_host_held_up_and_what_the_chunk_floor_left_out():
    from monta_analysis.summary import host_line

    def a2a(size, bound=False, left=None):
        p = {"nodes": 2, "gpus_per_node": 4, "tp": 4, "inter_gbps": 0.125, "size_bytes": size}
        m = {"cpu_bound": bound, **({"not_run": {"rows": left, "why": "x"}} if left else {})}
        return {"kind": "alltoall", "source": "emulated", "params": p, "metrics": m}

    recs = [a2a(2 << 20, left=["monta4", "monta8"]), a2a(2 << 20), a2a(4 << 20, bound=True), a2a(4 << 20)]
    recs += [{"kind": "step", "source": "emulated", "params": {}, "metrics": {"cpu_bound": b}} for b in (1, 0)]
    recs.append({**a2a(8 << 20, bound=True), "source": "predicted"})  # a prediction has no host
    line = host_line(recs)
    assert line.startswith("**The host**: 1 of 2 AllToAll points CPU-bound (2x4 TP4 @ 0.125 Gbit/s 4 MiB: ")
    assert "1 of 2 step records CPU-bound" in line
    assert line.endswith("left out by the chunk floor (chunks whose host work, not the links, would set their time "
                         "here; docs/testbed.md): 2x4 TP4 @ 0.125 Gbit/s 2 MiB: monta4, monta8.")  # fmt: skip
    assert host_line([{**a2a(1 << 20), "source": "predicted"}]) is None
    # a real network's records (SLURM, NCCL) have no emulated rate
    real = a2a(1 << 20, bound=True)
    real["source"], real["params"]["inter_gbps"] = "measured", None
    assert host_line([real]).startswith("**The host**: 1 of 1 AllToAll points CPU-bound (2x4 TP4 1 MiB: ")


def test_the_predicted_step_names_exposed_and_total_gradient_sync_apart(tmp_path):
    """`monta predict paper` states the sync's whole time (grad_sync_us, the same for every variant) and the part
    the step waits for (grad_us): the table shows both, named apart, the exposed one what `predict paper` prints."""
    from monta.cli import main
    from monta.results import read_records

    assert main(["predict", "paper", "--out", str(tmp_path / "paper.jsonl")]) == 0
    recs = [r for r in read_records(tmp_path / "paper.jsonl") if r["params"].get("cluster") == "a800-4nic"]
    table = step_tables.predicted_step_table(recs).set_index("variant")
    assert {"grad_sync_exposed_ms", "grad_sync_total_ms"} <= set(table.columns) and "grad_sync_ms" not in table
    by_variant = {r["params"]["variant"]: r["metrics"] for r in recs if r["kind"] == "step"}
    for v, m in by_variant.items():
        assert table.loc[v, "grad_sync_exposed_ms"] == pytest.approx(m["grad_us"] / 1000)
        assert table.loc[v, "grad_sync_total_ms"] == pytest.approx(m["grad_sync_us"] / 1000)
    assert table["grad_sync_total_ms"].nunique() == 1 and table["grad_sync_exposed_ms"].nunique() > 1
    shown = display.humanize(table.reset_index()[["variant", "grad_sync_exposed_ms", "grad_sync_total_ms"]])
    assert list(shown.columns) == ["variant", "grad sync exposed", "grad sync total"]


def test_one_unit_per_column_where_predictions_sit_beside_measurements():
    df = pd.DataFrame({"source": ["emulated", "predicted"], "time_us": [346000.0, 230.0]})
    assert display.humanize(df)["time"].tolist() == ["346 ms", "0.230 ms"]
    only_predicted = pd.DataFrame({"source": ["predicted"], "time_us": [230.0]})
    assert display.humanize(only_predicted)["time"].tolist() == ["230 us"]


# An absolute path of this machine (a checkout, a temp dir, a home), as it would leak into a page read elsewhere.
MACHINE_PATH = r"(?<![\w.:/\]\)])/(?:work|tmp|home|root|Users|var|private)/"


def test_the_report_opens_with_the_claims_then_provenance_and_holds_no_machine_path(tmp_path):
    import re

    from monta.results import write_records
    from monta_analysis import report

    res = tmp_path / "results"
    write_records(res / "alltoall/2x8.jsonl", _headline_records())
    manifest = report.Manifest("paper", res)
    manifest.section("Published numbers vs ours", [])
    manifest.save()
    published = res / "tables/published.md"
    published.parent.mkdir(parents=True)
    rows = "\n".join(f"| row {i} | {tmp_path}/data/published/collectives.csv |" for i in range(300))
    published.write_text(f"**Published**\n\n| what | file |\n|---|---|\n{rows}\n")
    contention = res / "tables/contention-model.txt"
    contention.write_text(
        f"# moe-2x70b step, 16 x a800-4nic [{ROOT / 'clusters' / 'a800-4nic.yaml'}]\nmonta 1.0\n"
        f"wrote 44 records to {res / 'predict' / 'contention.jsonl'}\n"  # the command's stdout, not its table
    )
    out = res / "report.md"
    args = [str(manifest.path), "--out", str(out), "--records", str(res / "alltoall/2x8.jsonl")]
    args += ["--paper", str(ROOT / "analysis/paper.yaml"), "--published", str(published)]
    assert report.main([*args, "--contention", str(contention)]) == 0
    text = out.read_text()
    lines = text.splitlines()
    # the title, then the claims table first, then the provenance line
    assert lines[:4] == ["# monta results", "", "## Did it reproduce?", ""]
    assert lines[4] == "| claim | paper | emulated | predicted | verdict |"
    assert "| AllToAll 8x vs DeepSpeed under TP8 | 8x | 8.86x | 2.57x | **above its bound** (8.86x over the bound" in (
        "\n".join(lines)
    )
    first_other = next(i for i, line in enumerate(lines[4:], 4) if not line.startswith("|"))
    assert lines[first_other + 1].startswith("**Provenance**: commit ")
    assert re.findall(MACHINE_PATH, text) == [], [line for line in lines if re.search(MACHINE_PATH, line)]
    assert "[clusters/a800-4nic.yaml]" in text and "monta 1.0" in text  # the checkout's file, named as there
    assert "wrote 44 records" not in text  # no stray stdout
    # the published table is linked, not pasted: 300 rows are a link and a count
    assert "row 17" not in text and "[the table](tables/published.md), 300 rows" in text


def test_a_long_table_is_linked_with_its_row_count_a_short_one_pasted(tmp_path):
    from monta_analysis import report

    res = tmp_path / "results"
    long = table_files.write_table(pd.DataFrame({"size_bytes": [float(i) for i in range(1, 101)]}), res, "long", "Long")
    short = table_files.write_table(pd.DataFrame({"size_bytes": [1.0, 2.0]}), res, "short", "Short")
    manifest = report.Manifest("x", res)
    manifest.section("A long one", long)
    manifest.section("A short one", short)
    text = report.render([manifest.save()], res / "report.md")
    assert "**Long**\n\n100 rows: [the table](tables/long.md) (longer than 40 rows" in text
    assert "| 100 B " not in text and "| 2 B " in text


def test_machine_paths_become_relative_or_short():
    from monta_analysis.report import no_machine_paths

    base = Path("/srv/run/results")
    text = f"see {ROOT}/clusters/h100.yaml and /srv/run/results/logs/a.log, /opt/x/y/z.csv; https://a.b/c/d"
    assert no_machine_paths(text, base) == "see clusters/h100.yaml and logs/a.log, y/z.csv; https://a.b/c/d"
