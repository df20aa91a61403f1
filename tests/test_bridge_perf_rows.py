"""tools/bridge_perf_rows.py turns Megatron-Bridge's performance tables into step rows, and a file of rows the
project never saw (data/published/steps-bridge-releases.csv) is priced by the same command, calibrated with the
project's table through ``--calibrate-with``."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest

from monta.cli import main
from monta.perfmodel.reports import published_steps as PS

ROOT = Path(__file__).resolve().parents[1]
STEPS = ROOT / "data" / "published" / "steps.csv"
KEPT_APART = ROOT / "data" / "published" / "steps-bridge-releases.csv"

# The pages' table header, as they print it
HEAD = (
    "| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU "
    "| Model TFLOP / sec / GPU |\n|--------|--------|-----------|-----|-----|-----------------|"
    "----|----|----|----|----|-----------------------|-------------------------|\n"
)
PAGE = """# Performance
## 26.08 NeMo Container

### Pre-Training Performance

#### Model: DeepSeekV3

{HEAD}| DGX-GB300 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 2 | 1 | 8 | 32 | 6288 | 1635 |
| DGX-B300 | 256 | MXFP8 | 4096 | 2 | 4096 | 1 | 8 | 1 | n/a | 8 | 3541 | 920 |

#### Model: Nemotron_3_Nano

{HEAD}| DGX-GB300 | 8 | MXFP8 | 512 | 4 | 8192 | 1 | 1 | 1 | n/a | 8 | 39936 | 901 |

### SFT Performance

#### Model: DeepSeekV3

{HEAD}| DGX-GB300 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 2 | 1 | 8 | 32 | 9999 | 9999 |

## 26.06 NeMo Container

### Pre-Training Performance

#### Model: DeepSeekV3

{HEAD}| DGX-GB300 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 2 | 1 | 8 | 32 | 6338 | 1648 |
""".replace("{HEAD}", HEAD)


def test_the_tool_takes_the_named_releases_pretraining_rows_with_the_templates_shape(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bridge_perf_rows.py"), str(page), "--source", "bridge-perf",
         "--url", "https://example.invalid/page.md", "--releases", "26.08", "--first-id", "900"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(run.stdout)))
    assert [r["id"] for r in rows] == ["S900", "S901"]  # not SFT, not 26.06, not the template-less Nemotron
    assert "Nemotron_3_Nano (no template): 1 row(s)" in run.stderr
    a, b = rows
    assert (a["gpu"], a["network"], a["precision"], a["vpp"], a["value"]) == ("GB300", "nvl72", "mxfp8", "8", "6288")
    assert (b["gpu"], b["network"], b["vpp"], b["micro_batch"], b["pp"]) == ("B300", "ib", "1", "2", "8")
    assert a["global_batch_tokens"] == str(4096 * 4096) and a["routing"] == "forced" and not a["seen_by"]
    # Megatron-Bridge's layouts by virtual stages: 2 x 8 = 16 and 8 x 1 = 8, the MTP layer with the loss
    assert (a["pp_layout"], b["pp_layout"]) == ("Et*4|(t*4|)*14tmL", "Et*8|(t*8|)*6t*5mL")
    template = next(r for r in csv.DictReader(STEPS.open()) if r["id"] == "S64")
    assert all(a[c] == template[c] for c in ("layers", "hidden", "experts", "topk", "attention", "kv_lora_rank"))


def test_the_kept_apart_file_has_the_tables_columns_and_no_seen_row():
    ours = list(csv.DictReader(STEPS.open()))
    rows = list(csv.DictReader(KEPT_APART.open()))
    assert list(rows[0].keys()) == list(ours[0].keys())
    assert len(rows) >= 80 and not any(r["seen_by"] for r in rows)
    assert not {r["id"] for r in rows} & {r["id"] for r in ours}  # ids never reused


@pytest.fixture(scope="module")
def kept_apart():
    return PS.price_steps(PS.read_step_rows(KEPT_APART), reference=PS.read_step_rows(STEPS))


def test_calibrate_with_prices_every_row_from_the_other_tables_sources_and_scores_none_of_them(kept_apart):
    recs, _ = kept_apart
    rows = list(csv.DictReader(KEPT_APART.open()))
    assert [r["id"] for r in recs] == [r["id"] for r in rows]  # the reference rows are not scored
    alone, _ = PS.price_steps(PS.read_step_rows(KEPT_APART))
    # alone the H100 rows have no other source of their generation; with the project's table they have
    h100 = [r for r in recs if r["gpu"] == "H100"]
    assert h100 and all(r["predicted_calibrated"] for r in h100)
    assert all(r.get("reason_calibrated") for r in alone if r["gpu"] == "H100")
    # a source key both files use never calibrates its own rows: no pool holds the row's own source
    assert all(r["source"] not in r["calibration"]["pool_sources"] for r in recs)
    assert any("bridge-perf-archive" in r["calibration"]["pool_sources"] for r in recs if r["source"] == "bridge-perf")


def test_same_source_leaves_one_publishers_pages_out_together():
    rows, ref = PS.read_step_rows(KEPT_APART), PS.read_step_rows(STEPS)
    bridge = {"bridge-perf", "bridge-perf-archive"}
    recs, _ = PS.price_steps(rows, reference=ref, same_source=[bridge])
    assert all(not bridge & set(r["calibration"]["pool_sources"]) for r in recs)
    assert all("_group" not in r for r in recs)
    by_page, _ = PS.price_steps(rows, reference=ref)
    assert [r["predicted_calibrated"] for r in recs] != [r["predicted_calibrated"] for r in by_page]


def test_same_source_needs_two_keys_once(capsys):
    for bad in (["x"], ["a,b", "b,c"]):
        args = [a for v in bad for a in ("--same-source", v)]
        assert main(["predict", "published", "--data", str(KEPT_APART), *args]) == 2
        assert "--same-source" in capsys.readouterr().err


def test_release_drift_compares_one_configuration_across_releases():
    """Two releases of one configuration and a third row of another: one configuration, its earliest and latest
    release's errors (ordered by version, not by text: 26.10 after 26.8)."""
    rows = list(csv.DictReader(KEPT_APART.open()))
    base = next(r for r in rows if r["model"] == "Qwen3-30B-A3B" and r["gpu"] == "GB300")
    early, late, other = dict(base), dict(base), dict(base)
    early.update(id="S1", software="Megatron-Bridge 26.8", value="30000")
    late.update(id="S2", software="Megatron-Bridge 26.10", value="45000")
    other.update(id="S3", software="Megatron-Bridge 26.8", micro_batch="4")
    table = [PS.Row(r) for r in (early, late, other)]
    recs, prs = PS.price_steps(table)
    d = PS.step_summary(recs, prs, table)["release_drift"]
    e = {r["id"]: r["error_blind"] for r in recs}
    assert d["configurations"] == 1
    assert (d["earliest"], d["latest"]) == (e["S1"], e["S2"]) and d["change"] == e["S2"] - e["S1"] < 0


def test_calibrate_with_bad_files_are_one_line_usage_errors(tmp_path, capsys):
    for bad, says in ((tmp_path / "nope.csv", "no such file"),
                      (ROOT / "data" / "published" / "collectives.csv", "not a step table")):  # fmt: skip
        assert main(["predict", "published", "--data", str(KEPT_APART), "--calibrate-with", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0] and "--calibrate-with" in err[0]


def test_the_kept_apart_score_and_the_release_drift_the_docs_report(kept_apart):
    """docs/results/published-steps.md, "Software releases": blind 20% on the 88 rows, 4% ratio error on their
    15 pairs, release medians from +20% (26.02.01) to -18% (26.08), 23 configurations under several releases."""
    recs, prs = kept_apart
    s = PS.step_summary(recs, prs)
    assert s["forced_blind"]["n"] == 88 and s["forced_blind"]["median"] <= 0.21
    assert s["pairs"] >= 15 and s["pair_ratio_error"]["median"] <= 0.05
    rel = s["by_software"]
    assert rel["Megatron-Bridge 26.02.01"]["median_signed_blind"] > 0.1
    assert rel["Megatron-Bridge 26.08"]["median_signed_blind"] < -0.1
    assert sum(v["n"] for v in rel.values()) == 88
    rows = PS.read_step_rows(KEPT_APART)
    drift = PS.step_summary(recs, prs, rows)["release_drift"]
    assert drift["configurations"] == 23 and drift["latest"] < drift["earliest"]
    models = s["by_model"]
    assert sum(v["n"] for v in models.values()) == 88 and models["GPT-OSS-120B"]["median_signed_blind"] > 0.3
    assert set(models["GPT-OSS-120B"]["by_release"]) <= set(rel)
