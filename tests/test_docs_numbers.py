"""Numbers the README and the docs quote come from one source each, so they cannot drift apart.

Run times: docs/results/make-reproduce.md's Timings table holds every one (with its command and the range over
the runs); the README links it and quotes none, and the code (monta/, baselines/, analysis/, workflows/, the
Makefile) states neither a run time nor a result stamped with one of this project's commits: a results page
holds those; nor do the pipeline's configs (config/*.yaml), in the docs' form or a config comment's ("~9 s").
Counts of shipped files: the docs' words match the files.
"""

import re
import subprocess
from pathlib import Path

import pytest

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


# The code's folders and files that must hold no run time; monta/units.py formats durations (its docstring's
# examples are a formatter's, not a run's).
CODE = ("monta", "baselines", "analysis", "workflows", "Makefile", "Snakefile")
FORMATTER = {"monta/units.py"}
# "at 8d1c76f", "commit c664ae2": a stamp, when the hash is one of this repository's commits
STAMP = re.compile(r"\b(?:at|commit) ([0-9a-f]{7,12})\b")


def code_files():
    for name in CODE:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(path.rglob("*"))
        for f in files:
            if f.is_file() and (f.suffix in (".py", ".smk") or f.name in ("Makefile", "Snakefile")):
                if "__pycache__" not in f.parts:
                    yield f


def test_the_readme_links_the_timings_page_and_quotes_no_run_time():
    readme = (ROOT / "README.md").read_text()
    assert "docs/results/make-reproduce.md#timings" in readme
    assert DURATION.findall(readme) == [], "README run times belong on docs/results/make-reproduce.md#timings"
    assert TEST_COUNT.findall(readme) == [], "README test counts belong on docs/results/make-reproduce.md#timings"


def test_the_code_states_no_run_time():
    found = [
        f"{f.relative_to(ROOT)}: {m}"
        for f in code_files()
        if f.relative_to(ROOT).as_posix() not in FORMATTER
        for m in DURATION.findall(f.read_text())
    ]
    assert not found, "run times belong on docs/results/make-reproduce.md#timings:\n" + "\n".join(found)


# A run time as a config comment writes one: "~9 s", "~3 min", "about 100 s", "20 minutes" (ms: an operation's cost)
CONFIG_TIME = re.compile(r"(?<![\w.])\d+(?:\.\d+)? ?(?:s|sec|seconds?|min|minutes?|h|hours?)\b")


def test_the_configs_state_no_run_time():
    found = [
        f"{f.relative_to(ROOT)}: {m}"
        for f in sorted((ROOT / "config").glob("*.yaml"))
        for m in DURATION.findall(f.read_text()) + CONFIG_TIME.findall(f.read_text())
    ]
    assert not found, "run times belong on docs/results/make-reproduce.md#timings:\n" + "\n".join(found)


def test_the_config_pattern_reads_a_comment_s_run_times():
    text = "takes ~9 s here, added ~3 min, about 100 s, under 20 minutes; not 20 ms, 1.3-1.6 ms, budget_s: 20 or 2x8"
    assert CONFIG_TIME.findall(text) == ["9 s", "3 min", "100 s", "20 minutes"]


def test_the_code_stamps_nothing_with_a_commit_of_this_project():
    """A hash of this repository in a comment or docstring dates a result; its results page carries it. A
    hash of another project (an upstream source the code follows) is a citation and stays."""
    if not (ROOT / ".git").exists():
        pytest.skip("no git history to tell this project's commits from other hashes")
    stamps = {(f, h) for f in code_files() for h in STAMP.findall(f.read_text())}
    ours = [
        f"{f.relative_to(ROOT)}: {h}"
        for f, h in sorted(stamps)
        if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{h}^{{commit}}"], capture_output=True).returncode
        == 0
    ]
    assert not ours, "move these to their results page:\n" + "\n".join(ours)


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
