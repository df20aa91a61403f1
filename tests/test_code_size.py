"""Small modules with one job: no file in monta/ over 400 lines and no function over 80 lines, unless a
``# size: why`` comment says why (on the file's first line; on a function's ``def`` line or the line
right above it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
MARK = "# size:"

# Known exceptions, each a file or "file:function" (paths relative to the repository), while a split is
# under way; empty: every part of monta/ is within the limits or says why.
KNOWN: set[str] = set()


def oversized(root: Path) -> list[str]:
    """Every file over MAX_FILE_LINES and function over MAX_FUNCTION_LINES under ``root``/monta without the
    size mark, as "path (N lines)" / "path:function (N lines)"."""
    found = []
    for path in sorted((root / "monta").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        lines = text.splitlines()
        if len(lines) > MAX_FILE_LINES and not (lines and MARK in lines[0]):
            found.append(f"{rel} ({len(lines)} lines)")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            marked = any(MARK in lines[i] for i in (node.lineno - 1, node.lineno - 2) if i >= 0)
            if length > MAX_FUNCTION_LINES and not marked:
                found.append(f"{rel}:{node.name} ({length} lines)")
    return found


def test_no_file_or_function_in_monta_over_the_limits_without_a_reason():
    found = [f for f in oversized(ROOT) if f.split(" (")[0] not in KNOWN]
    assert not found, "split these or say why with a '# size: why' comment:\n" + "\n".join(found)


def test_the_known_exceptions_are_still_over_the_limits():
    """An entry of KNOWN that has been split no longer excuses anything: drop it."""
    still = {f.split(" (")[0] for f in oversized(ROOT)}
    assert KNOWN <= still, f"no longer over the limits, remove from KNOWN: {sorted(KNOWN - still)}"


def test_the_check_sees_a_long_function_and_honours_the_mark(tmp_path):
    pkg = tmp_path / "monta"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (pkg / "long.py").write_text(f"def long():\n{body}")
    (pkg / "marked.py").write_text(f"def marked():  {MARK} a table of cases, one line each\n{body}")
    (pkg / "big.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    (pkg / "big_marked.py").write_text(f"{MARK} generated\n" + "x = 1\n" * MAX_FILE_LINES)
    assert oversized(tmp_path) == [f"monta/big.py ({MAX_FILE_LINES + 1} lines)", "monta/long.py:long (81 lines)"]
