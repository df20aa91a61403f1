"""data/published/: the published measurements and claims parse, are complete and keep the shared rows intact.

The shared file (/work/shared/data/published-collectives.csv) is compared cell by cell when it is present; the
digest below pins the same 35 rows (ids, order and every cell of the 15 original columns) for checkouts without it.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "data" / "published"
COLLECTIVES = PUBLISHED / "collectives.csv"
CLAIMS = PUBLISHED / "claims.csv"
SHARED = Path("/work/shared/data/published-collectives.csv")

BASE_COLUMNS = [
    "id", "source_url", "gpu", "nodes", "gpus_per_node", "nic_per_node", "nic_gbps", "nvlink", "collective",
    "size_bytes", "time_us", "algbw_GBps", "busbw_GBps", "dtype", "notes",
]  # fmt: skip
COLUMNS = BASE_COLUMNS + ["source", "health", "metric", "seen"]
# The model terms a row may have shaped (``seen``; docs/results/published-measurements.md names them next to each term)
SEEN_TERMS = {"tree", "nvls", "tree-cap", "curve-under-latency", "peer-post", "net-plugin"}
CLAIM_ROLES = {"test", "input", "construction", "seen", "advice"}
HEALTH = {"healthy", "misconfigured", "degraded", "suspect", "approximate", "unknown"}
METRICS = {"busbw_GBps", "algbw_GBps", "time_us", "bottleneck_GBps"}
NUMERIC = ["nodes", "gpus_per_node", "nic_per_node", "nic_gbps", "size_bytes", "time_us", "algbw_GBps", "busbw_GBps"]
INTEGER = ["nodes", "gpus_per_node", "nic_per_node", "size_bytes"]
ORIGINAL_IDS = [
    "P01", "P02", "P04", "P05", "P06", "P07", "P09", "P11", "P12", "P14", "P15", "P17", "P19", "P21", "P22",
    "P23", "P24", "P25", "P27", "P29", "P31", "P33", "P34", "P35", "P36", "P39", "P41", "P42", "P44", "P45",
    "P46", "P47", "P48", "P49", "P50",
]  # fmt: skip
# sha256 of json.dumps([[cell for the 15 columns] for each shared row]) (the shared file as of issue 30)
ORIGINAL_DIGEST = "2a6497300be5f57d7e11e14de467a17244cea21216ce10c13379ea61b8d6a96d"


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def digest(rows: list[dict[str, str]]) -> str:
    blob = json.dumps([[row[c] for c in BASE_COLUMNS] for row in rows], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


@pytest.fixture(scope="module")
def table() -> list[dict[str, str]]:
    header, rows = read(COLLECTIVES)
    assert header == COLUMNS
    return rows


def test_every_row_is_complete_and_well_formed(table):
    assert len(table) >= 60
    for row in table:
        where = row["id"]
        assert None not in row and all(v is not None for v in row.values()), where  # no short or long rows
        assert row["source_url"].startswith("https://"), where
        assert row["source"].strip() and row["notes"].strip() and row["collective"].strip(), where
        assert row["health"] in HEALTH, where
        assert row["metric"] in METRICS, where
        # the named measurement is present (bottleneck bandwidth is kept in busbw_GBps)
        column = "busbw_GBps" if row["metric"] == "bottleneck_GBps" else row["metric"]
        assert row[column].strip(), where
        assert set(filter(None, row["seen"].split(";"))) <= SEEN_TERMS, where


def test_ids_unique_and_numbers_positive(table):
    ids = [row["id"] for row in table]
    assert len(ids) == len(set(ids))
    for row in table:
        for key in NUMERIC:
            cell = row[key].strip()
            if not cell:
                continue
            value = float(cell)
            assert math.isfinite(value) and value > 0, (row["id"], key, cell)
            if key in INTEGER:
                assert value == int(value), (row["id"], key, cell)


def test_sources_are_many_and_each_key_names_one_url(table):
    urls: dict[str, set[str]] = {}
    for row in table:
        urls.setdefault(row["source"], set()).add(row["source_url"])
    assert len(urls) >= 12
    assert {key: u for key, u in urls.items() if len(u) > 1} == {}


def test_library_bandwidth_is_never_called_busbw(table):
    # DeepEP / UCCL-EP publish their own "bottleneck bandwidth": the metric must say so.
    for row in table:
        if row["collective"].startswith(("deepep_", "uccl_ep_")):
            assert row["metric"] == "bottleneck_GBps", row["id"]


def test_original_rows_present_and_unchanged(table):
    first = table[: len(ORIGINAL_IDS)]
    assert [row["id"] for row in first] == ORIGINAL_IDS
    assert digest(first) == ORIGINAL_DIGEST
    if SHARED.is_file():
        header, shared = read(SHARED)
        assert header == BASE_COLUMNS
        assert [[row[c] for c in BASE_COLUMNS] for row in first] == [[row[c] for c in BASE_COLUMNS] for row in shared]


def test_readme_source_table_matches_the_rows(table):
    # The README's table of sources (key, URL, rows) is hand-written: it must say what the CSV holds.
    text = (PUBLISHED / "README.md").read_text(encoding="utf-8")
    listed = {
        m.group(1): (m.group(2), int(m.group(3)))
        for m in re.finditer(r"^\| `([^`]+)` \| \[[^\]]*\]\(([^)]+)\) \| [^|]* \| (\d+) \|", text, re.M)
    }
    actual: dict[str, tuple[str, int]] = {}
    for row in table:
        url, n = actual.get(row["source"], (row["source_url"], 0))
        actual[row["source"]] = (url, n + 1)
    assert listed == actual


def test_claims_parse_with_sources_and_json():
    header, claims = read(CLAIMS)
    assert header == ["id", "source_url", "claim", "kind", "params", "expected", "role", "role_note"]
    assert len({c["id"] for c in claims}) == len(claims) > 0
    for c in claims:
        assert c["source_url"].startswith("https://"), c["id"]
        assert c["claim"].strip() and c["kind"].strip(), c["id"]
        assert isinstance(json.loads(c["params"]), dict), c["id"]
        assert isinstance(json.loads(c["expected"]), dict) and json.loads(c["expected"]), c["id"]
        assert c["role"] in CLAIM_ROLES and c["role_note"].strip(), c["id"]
