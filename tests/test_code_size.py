"""Small modules with one job: no file in monta/, baselines/, analysis/ or workflows/ over 400 lines and no
function over 80 lines, unless a ``# size: why`` comment says why (on the file's first line; on a function's
``def`` line or the line right above it). Snakemake's rule files (.smk) are held to the file limit."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("monta", "baselines", "analysis", "workflows")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
MARK = "# size:"

# Known exceptions, each a file or "file:function" (paths relative to the repository), while a split is
# under way; empty: every part is within the limits or says why.
KNOWN: set[str] = set()


def _sources(root: Path):
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".smk") and path.is_file() and "__pycache__" not in path.parts:
                yield path


def oversized(root: Path) -> list[str]:
    """Every file over MAX_FILE_LINES and Python function over MAX_FUNCTION_LINES under ``root``'s FOLDERS
    without the size mark, as "path (N lines)" / "path:function (N lines)"."""
    found = []
    for path in _sources(root):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        lines = text.splitlines()
        if len(lines) > MAX_FILE_LINES and not (lines and MARK in lines[0]):
            found.append(f"{rel} ({len(lines)} lines)")
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            marked = any(MARK in lines[i] for i in (node.lineno - 1, node.lineno - 2) if i >= 0)
            if length > MAX_FUNCTION_LINES and not marked:
                found.append(f"{rel}:{node.name} ({length} lines)")
    return found


def test_no_file_or_function_in_the_code_over_the_limits_without_a_reason():
    found = [f for f in oversized(ROOT) if f.split(" (")[0] not in KNOWN]
    assert not found, "split these or say why with a '# size: why' comment:\n" + "\n".join(found)


def test_the_known_exceptions_are_still_over_the_limits():
    """An entry of KNOWN that has been split no longer excuses anything: drop it."""
    still = {f.split(" (")[0] for f in oversized(ROOT)}
    assert KNOWN <= still, f"no longer over the limits, remove from KNOWN: {sorted(KNOWN - still)}"


def test_the_check_sees_a_long_function_and_honours_the_mark_in_every_folder(tmp_path):
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "monta" / "long.py").write_text(f"def long():\n{body}")
    (tmp_path / "monta" / "marked.py").write_text(f"def marked():  {MARK} a table of cases, one line each\n{body}")
    (tmp_path / "analysis" / "big.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    (tmp_path / "baselines" / "big_marked.py").write_text(f"{MARK} generated\n" + "x = 1\n" * MAX_FILE_LINES)
    (tmp_path / "workflows" / "rules.smk").write_text("rule a:\n    shell: 'true'\n" * (MAX_FILE_LINES // 2 + 1))
    (tmp_path / "workflows" / "lib.py").write_text(f"def long():\n{body}")
    (tmp_path / "tests").mkdir()  # outside the checked folders: never reported
    (tmp_path / "tests" / "long.py").write_text(f"def long():\n{body}")
    assert oversized(tmp_path) == [
        "monta/long.py:long (81 lines)",
        f"analysis/big.py ({MAX_FILE_LINES + 1} lines)",
        "workflows/lib.py:long (81 lines)",
        f"workflows/rules.smk ({MAX_FILE_LINES + 2} lines)",
    ]
