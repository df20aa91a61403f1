"""Faults on the emulated cluster (docs/reliability.md, classes 5-7), through the same cases `make faults` runs
(tools/faults.py): a rank stopped by SIGSTOP is named well before the collective timeout, a
SIGKILLed rank is named and nothing is left running, a rank cannot write into the user's
read-only (555) folder, and a SIGKILLed run's work folder is removed by the next run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from monta.emulate.launcher import namespace_problem

pytestmark = [pytest.mark.slow, pytest.mark.netns]
PROBLEM = namespace_problem()

_spec = importlib.util.spec_from_file_location("faults", Path(__file__).resolve().parents[1] / "tools" / "faults.py")
faults = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(faults)
EMULATED = [(name, fn) for _, name, emulator, fn in faults.CASES if emulator]


@pytest.mark.skipif(PROBLEM is not None, reason=f"no user namespaces: {PROBLEM}")
@pytest.mark.timeout(400)
@pytest.mark.parametrize("name,fn", EMULATED, ids=[n for n, _ in EMULATED])
def test_fault_on_the_emulated_cluster_is_handled(name, fn, tmp_path):
    print(fn(tmp_path))  # raises faults.NotHandled with what went wrong
