"""Numbers the README and the docs quote come from one source each, so they cannot drift apart.

Run times: docs/results/make-reproduce.md's Timings table holds every one (with its command and the range over
the runs); the README quotes only those. Counts of shipped files: the docs' words match the files.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# "18 min 36 s", "2 min 47 s - 2 min 50 s", "9.4-9.6 min", "3 min": a run time as the docs write one
DURATION = re.compile(
    r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? min(?: \d+ s)?(?: - \d+ min(?: \d+ s)?)?(?![\w-])|\b\d+ s - \d+ min\b"
)
TEST_COUNT = re.compile(r"\b(\d{3,}) tests\b")


def timings_section() -> str:
    page = (ROOT / "docs" / "results" / "make-reproduce.md").read_text()
    start = page.index("## Timings")
    return page[start : page.index("\n## ", start + 1)]


def test_every_run_time_the_readme_quotes_is_on_the_timings_page():
    source = timings_section()
    readme = (ROOT / "README.md").read_text()
    quoted = DURATION.findall(readme)
    assert "18 min 36 s - 18 min 58 s" in quoted  # the headline: a range over fresh clones, not one run
    stray = [t for t in quoted if t not in source]
    assert not stray, f"README times not on docs/results/make-reproduce.md#timings: {stray}"
    for count in TEST_COUNT.findall(readme):
        assert f"{count} tests" in source, count


def test_the_timings_table_gives_each_time_its_command_and_runs():
    rows = [line for line in timings_section().splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 5
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        what, command, time, runs = cells
        assert "`" in command and DURATION.search(time) and runs, row


def test_the_duration_pattern_reads_the_forms_the_docs_use():
    text = "took 18 min 36 s - 18 min 58 s, then 2 min 47 s, 9.4-9.6 min and 3 min; not 20 minutes or --budget-s 20"
    assert DURATION.findall(text) == ["18 min 36 s - 18 min 58 s", "2 min 47 s", "9.4-9.6 min", "3 min"]


def test_the_calibration_page_counts_the_logs_that_ship():
    logs = sorted(p.name for p in (ROOT / "data" / "published" / "nccl-tests").glob("*.log"))
    words = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
    page = (ROOT / "docs" / "calibrate.md").read_text()
    assert f"holds {words[len(logs)]} public logs" in page
    table = [line for line in page.splitlines() if re.match(r"\| `[\w.-]+\.log` \|", line)]
    assert sorted(re.match(r"\| `([\w.-]+)`", line).group(1) for line in table) == logs
