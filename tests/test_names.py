"""One spelling per name (docs/design.md#names): in monta/, baselines/ and analysis/ a Python identifier for
the router's top-k is ``top_k``. ``topk`` stays only where a user meets it: a flag's dest (``args.topk``),
a config key, a record's field, a string key; the one Python field under that name is the bench's
``AlltoallConfig.topk``, whose ``to_dict`` is the records' ``config``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("monta", "baselines", "analysis")
OLD = "topk"

# Classes whose field keeps the user-facing spelling (path, class): the records' keys are read back by name.
ALLOWED_FIELDS = {("monta/bench/alltoall/config.py", "AlltoallConfig")}


def _defines(node: ast.AST) -> bool:
    """Whether ``node`` names, binds or defines the identifier OLD (a read of someone's attribute, such as
    ``args.topk``, and a keyword argument, a string key in disguise, do not)."""
    if isinstance(node, ast.Name):
        return node.id == OLD
    if isinstance(node, ast.arg):
        return node.arg == OLD
    if isinstance(node, ast.Attribute):
        return node.attr == OLD and isinstance(node.ctx, ast.Store)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == OLD
    return False


def old_spellings(rel: str, source: str) -> list[str]:
    """``rel:line`` of each identifier spelled OLD in ``source``, the ALLOWED_FIELDS' class fields aside."""
    tree = ast.parse(source)
    allowed = set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and (rel, cls.name) in ALLOWED_FIELDS:
            allowed |= {id(t) for stmt in cls.body if isinstance(stmt, ast.AnnAssign) for t in ast.walk(stmt.target)}
    return [f"{rel}:{n.lineno}" for n in ast.walk(tree) if _defines(n) and id(n) not in allowed]


def test_python_spells_top_k_one_way():
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += old_spellings(path.relative_to(ROOT).as_posix(), path.read_text())
    assert found == [], (
        f"name these top_k (docs/design.md#names), or add a user-facing field to ALLOWED_FIELDS: {found}"
    )


def test_the_check_finds_each_kind_of_definition_and_spares_user_facing_reads():
    source = """
def f(topk):
    topk = 2
    obj.topk = topk
    return args.topk + cfg.topk + len(dict(topk=1))

class RunModel:
    topk: int

class AlltoallConfig:
    topk: int
"""
    lines = [int(x.split(":")[1]) for x in old_spellings("monta/bench/alltoall/config.py", source)]
    assert sorted(lines) == [2, 3, 4, 4, 8]
    assert len(old_spellings("monta/other.py", source)) == 6  # the AlltoallConfig field only in its own file
