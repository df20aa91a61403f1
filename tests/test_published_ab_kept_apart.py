"""The A/B rows kept apart (data/published/steps-ab-kept-apart.csv: ModelZoo's long-context forced/dropless rows
between 16K and 128K, Megatron-Bridge's HybridEP EP-overlap pair) are priced by the same command, calibrated with
the project's table, and score as docs/results/published-steps.md ("Six A/B rows kept apart") reports."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from monta.perfmodel.reports import published_steps as PS

ROOT = Path(__file__).resolve().parents[1]
STEPS = ROOT / "data" / "published" / "steps.csv"
AB = ROOT / "data" / "published" / "steps-ab-kept-apart.csv"
OTHERS = [ROOT / "data" / "published" / f for f in ("steps-bridge-releases.csv", "steps-bridge-releases-recipes.csv")]


def test_the_file_has_the_tables_columns_no_seen_row_and_new_ids():
    ours = list(csv.DictReader(STEPS.open()))
    rows = list(csv.DictReader(AB.open()))
    assert list(rows[0].keys()) == list(ours[0].keys())
    assert len(rows) == 6 and not any(r["seen_by"] for r in rows)
    used = {r["id"] for f in [STEPS, *OTHERS] for r in csv.DictReader(f.open())}
    assert not {r["id"] for r in rows} & used  # ids never reused


@pytest.fixture(scope="module")
def scored():
    recs, prs = PS.price_steps(PS.read_step_rows(AB), reference=PS.read_step_rows(STEPS))
    return recs, prs, PS.step_summary(recs, prs)


def test_every_row_priced_and_calibrated_from_other_sources(scored):
    recs, _, _ = scored
    assert all(r["predicted_blind"] and r["predicted_calibrated"] for r in recs)
    assert all(r["source"] not in r["calibration"]["pool_sources"] for r in recs)


def test_the_score_the_docs_report(scored):
    """Forced-balance rows within 12% blind; three pairs, all in the measured direction; the two known misses:
    real routing costs the runs more than the skew model prices, A2A overlap gains them less."""
    recs, prs, s = scored
    assert s["forced_blind"]["n"] == 4 and s["forced_blind"]["median"] <= 0.07
    assert max(abs(r["error_blind"]) for r in recs if r["routing"] == "forced") <= 0.12
    assert len(prs) == 3 and all(p["direction_right"] for p in prs)
    routing = [p for p in prs if p["setting"] == "routing"]
    overlap = [p for p in prs if p["setting"] == "a2a_overlap"]
    assert len(routing) == 2 and all(p["predicted_ratio"] > p["measured_ratio"] for p in routing)
    assert len(overlap) == 1 and overlap[0]["predicted_ratio"] < overlap[0]["measured_ratio"]


def test_the_two_sources_calibrate_each_other(scored):
    """The command pools the file's own rows of the other source with the reference table's: the ModelZoo rows'
    pool holds the Bridge skill's source, and priced against steps.csv alone their factors differ."""
    recs, _, _ = scored
    zoo = [r for r in recs if r["source"] == "mcore-modelzoo"]
    assert all("bridge-skills" in r["calibration"]["pool_sources"] for r in zoo)
    alone, _ = PS.price_steps(
        [r for r in PS.read_step_rows(AB) if r.text("source") == "mcore-modelzoo"], reference=PS.read_step_rows(STEPS)
    )
    assert "bridge-skills" not in alone[0]["calibration"]["pool_sources"]
    assert alone[0]["calibration"]["rest_factor"] != zoo[0]["calibration"]["rest_factor"]
