"""No import cycle among monta's and monta_baselines' modules (module- and function-level imports both
count), and the arrows point downhill: the exchange (monta.comm), the MoE layer (monta.moe) and the model
(monta.model) import nothing of the performance model (monta.perfmodel). ``Auto`` chunk counts reach them
through a chooser the top of the stack injects; Lancet's partition count lives with the schedules. The
emulator imports neither the bench nor the performance model, the performance model not the bench, and the
hardware (monta.hardware: links, cluster files, link profiles, GPU names) none of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "import_cycles.py"
REGISTRY = ("monta.variants", "monta.exchanges", "monta.variant_names", "monta.variant_parts")


FORBIDDEN = (
    "monta.comm:monta.perfmodel",
    "monta.moe:monta.perfmodel",
    "monta.model:monta.perfmodel",
    # The emulator builds its topologies and profiles from monta.hardware, below the bench and the model.
    "monta.emulate:monta.bench",
    "monta.emulate:monta.perfmodel",
    "monta.perfmodel:monta.bench",
    # The hardware is the ground floor: it imports none of the rooms that read it.
    *(f"monta.hardware:monta.{room}" for room in ("emulate", "bench", "perfmodel", "comm", "moe", "model")),
)
# The exchange registry (monta.variants, its entries' type and parts) never imports the model, nor the module
# above both that registers the core's entries with the model's steps (monta.core_exchanges: an entry point).
FORBIDDEN += tuple(f"{r}:{d}" for r in REGISTRY for d in ("monta.perfmodel", "monta.core_exchanges"))


def test_no_import_cycle_and_the_runtime_never_imports_the_performance_model():
    r = subprocess.run(
        [sys.executable, str(TOOL), *(a for rule in FORBIDDEN for a in ("--forbid", rule))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cycle:" not in r.stdout and "forbidden:" not in r.stdout
    assert "no import cycle" in r.stdout


def test_the_check_finds_a_cycle_and_a_forbidden_edge(tmp_path):
    """The tool itself: a planted cycle (lazy import included) and a forbidden edge are reported."""
    sys.path.insert(0, str(TOOL.parent))
    try:
        import import_cycles as ic
    finally:
        sys.path.remove(str(TOOL.parent))
    (tmp_path / "monta" / "comm").mkdir(parents=True)
    (tmp_path / "monta" / "perfmodel").mkdir()
    (tmp_path / "baselines").mkdir()
    for d in ("monta", "monta/comm", "monta/perfmodel", "baselines"):
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "monta" / "comm" / "a.py").write_text("def f():\n    from monta.perfmodel import b\n")
    (tmp_path / "monta" / "perfmodel" / "b.py").write_text("from ..comm import a\n")
    g = ic.graph(tmp_path)
    # `from P import m` imports the package P (its __init__) and the module P.m
    assert g["monta.comm.a"] == {"monta.perfmodel", "monta.perfmodel.b"}
    assert g["monta.perfmodel.b"] == {"monta.comm", "monta.comm.a"}
    assert ic.cycles(g) == [["monta.comm.a", "monta.perfmodel.b", "monta.comm.a"]]
    assert ic.forbidden(g, [("monta.comm", "monta.perfmodel")]) == [
        ("monta.comm.a", "monta.perfmodel"),
        ("monta.comm.a", "monta.perfmodel.b"),
    ]


def test_the_packages_list_names_every_package_folder():
    """pyproject.toml lists the packages by hand (package-dir installs baselines/ and analysis/ as
    monta_baselines and monta_analysis, which packages.find cannot): a folder of modules left off it
    would be missing from a wheel."""
    tomllib = pytest.importorskip("tomllib")
    st = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for pkg, folder in st["package-dir"].items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.parent.relative_to(ROOT / folder)
            if not any(part in ("build", "__pycache__") or part.startswith(".") for part in rel.parts):
                found.add(".".join([pkg, *rel.parts]))
    assert sorted(st["packages"]) == sorted(found)
    assert not {"baselines", "analysis"} & {p.split(".")[0] for p in st["packages"]}
