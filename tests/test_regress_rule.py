"""One description of the regression gate: ``monta.regress_rule.GATE_RULE``. Every place that states
the rule (``monta regress --help``, the table's header, README.md, docs/pipeline.md, docs/testbed.md,
the report's caption) quotes it word for word, and :func:`monta.regress.decide` honours the bounds
it names, read from the text itself: a rule changed in the code and not in the words (or the other
way round) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from monta import regress
from monta.cli import build_parser
from monta.regress_rule import DEFAULT_THRESHOLD, GATE_RULE

ROOT = Path(__file__).resolve().parents[1]
QUOTING = ["README.md", "docs/pipeline.md", "docs/testbed.md", "workflows/report/regress.rst"]


def _flat(text: str) -> str:
    """Text as prose: comment marks at line starts, backticks and line breaks gone, spaces single."""
    text = re.sub(r"(?m)^\s*#+ ?", " ", text).replace("`", "")
    return " ".join(text.split())


@pytest.mark.parametrize("name", QUOTING)
def test_each_doc_quotes_the_rule_of_the_code(name):
    text = _flat((ROOT / name).read_text())
    assert _flat(GATE_RULE) in text, f"{name} must state the gate's rule as monta.regress_rule.GATE_RULE says it"


@pytest.mark.parametrize("name", QUOTING)
def test_no_doc_keeps_the_old_rule(name):
    """The old words said the CI itself lies above 1 + T/2: a stricter rule than the code's."""
    text = _flat((ROOT / name).read_text())
    assert not re.search(r"(CI|interval) lies (wholly )?above 1 \+ (T|threshold)/2", text), name


def test_help_and_table_quote_the_rule(capsys):
    with pytest.raises(SystemExit):
        build_parser("regress").parse_args(["regress", "--help"])
    assert _flat(GATE_RULE) in _flat(capsys.readouterr().out)
    row = {"status": "ok", "kind": "alltoall", "source": "emulated", "point": "size_bytes=1", "from": "samples"}
    row |= {"baseline": 1.0, "current": 1.0, "slowdown": 1.0, "ci_lo": 0.9, "ci_hi": 1.1, "lo": 0.9, "hi": 1.1}
    row |= {"spread": 0.025, "runs": 1, "n": "5/5", "injected": None, "without_injection": None}
    table = regress.format_table([row], "time_us", 0.2, 0.95)
    assert _flat(GATE_RULE) in _flat(table) and "1 + T/2 = 1.100" in table


def _bounds() -> dict[str, float]:
    """The rule's numbers as functions of T, parsed from its words (not from decide())."""
    m = re.search(
        r"above (1 \+ T/2) and its CI.*lies above (1);.*below (1/\(1 \+ T/2\)).*both (1) and (1 \+ T);", GATE_RULE
    )
    assert m, GATE_RULE
    return dict(zip(("regressed", "lo_regressed", "improved", "lo_inconclusive", "hi_inconclusive"), m.groups()))


@pytest.mark.parametrize("T", [0.05, DEFAULT_THRESHOLD, 0.3])
def test_decide_honours_the_bounds_the_words_name(T):
    b = {k: eval(v, {"T": T}) for k, v in _bounds().items()}  # the expressions are "1 + T/2" and the like
    up, down = 1.0001, 0.9999
    # REGRESSED: slowdown above 1 + T/2 and the CI above 1; just under either bound it is not
    assert regress.decide(b["regressed"] * up, b["lo_regressed"] * up, b["regressed"] * 1.01, T) == "REGRESSED"
    assert regress.decide(b["regressed"] * down, b["lo_regressed"] * up, b["regressed"] * 1.01, T) != "REGRESSED"
    assert regress.decide(b["regressed"] * up, b["lo_regressed"] * down, b["regressed"] * 1.01, T) != "REGRESSED"
    # improved: the mirror image
    assert regress.decide(b["improved"] * down, b["improved"] * 0.99, down, T) == "improved"
    assert regress.decide(b["improved"] * up, b["improved"] * 0.99, down, T) != "improved"
    # inconclusive: the CI holds both 1 and 1 + T
    assert regress.decide(1.0, b["lo_inconclusive"] * down, b["hi_inconclusive"] * up, T) == "inconclusive"
    assert regress.decide(1.0, b["lo_inconclusive"] * down, b["hi_inconclusive"] * down, T) == "ok"
    # the run-to-run spread widens the CI before the bounds apply: a CI just above 1 no longer is
    assert regress.decide(b["regressed"] * 1.01, 1.001, b["regressed"] * 1.02, T, noise=0.05) != "REGRESSED"


def test_the_rule_names_the_cli_default():
    p = build_parser("regress")
    sub = next(a for a in p._actions if a.dest == "command").choices["regress"]
    assert sub.get_default("threshold") == DEFAULT_THRESHOLD
    assert f"{DEFAULT_THRESHOLD:.2f} by default" in GATE_RULE
