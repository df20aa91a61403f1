"""`make test` lints the project's code, not a run's outputs: a results folder a user set aside
(`mv results results-1`, as the docs do between runs) holds executed notebooks with the run's long
paths, and must not fail the lint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).parent / "ruff"


def test_a_results_folder_set_aside_is_not_linted(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    cell = {
        "cell_type": "code",
        "metadata": {},
        "execution_count": 1,
        "outputs": [],
        "source": ["x = " + "1 + " * 80 + "1\n"],
    }
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    for folder in ("results", "results-1", "results-R2/analysis"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "nb_step.ipynb").write_text(json.dumps(nb))
    (tmp_path / "ok.py").write_text("x = 1\n")
    proc = subprocess.run([str(RUFF), "check", "."], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the same line in a module of the project is reported: the scope excludes outputs, not the rule
    (tmp_path / "long.py").write_text("x = " + "1 + " * 80 + "1\n")
    proc = subprocess.run([str(RUFF), "check", "."], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "E501" in proc.stdout, proc.stdout
