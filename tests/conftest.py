"""Shared pytest fixtures: persistent gloo worlds of 4 and 8 ranks (started lazily, once per session)."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("WANDB_MODE", "offline")
sys.path.insert(0, os.path.dirname(__file__))

# The test-only variant plugin (tests/plugins/monta_toy_variant), installed by `make test-plugins` into a
# folder of its own: on the path of this process and of every process it starts (ranks, snakemake).
TEST_PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "test-plugins")
if os.path.isdir(TEST_PLUGINS):
    sys.path.insert(0, TEST_PLUGINS)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TEST_PLUGINS, os.environ.get("PYTHONPATH")) if p)

from dist_world import DistWorld  # noqa: E402

_worlds: dict[int, DistWorld] = {}


def get_world(size: int) -> DistWorld:
    if size not in _worlds:
        for other in list(_worlds):  # one world at a time: 2 cores, and ranks idle-poll
            _worlds.pop(other).close()
        _worlds[size] = DistWorld(size)
    return _worlds[size]


@pytest.fixture(scope="module")
def dist_world():
    """Factory: ``dist_world(n)`` returns the module's n-rank world (closed after the module: idle
    ranks holding dozens of gloo groups still cost CPU that later tests need)."""
    yield get_world
    for w in _worlds.values():
        w.close()
    _worlds.clear()
