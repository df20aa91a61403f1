"""Shared pytest fixtures: persistent gloo worlds of 4 and 8 ranks (started lazily, at most once per size
and module; a world that failed is not started again, see tests/dist_world.py)."""

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

# Ranks load DeepSpeed's CPU comm op from the venv's build folder (built by `make setup`), as under
# `make test`; a bare `pytest` otherwise made the first rank build it in ~/.cache inside a world's start.
try:
    from monta import extensions

    extensions.configure(os.environ)
except ImportError:
    pass

from dist_world import DistWorld, WorldStartError  # noqa: E402

_worlds: dict[int, DistWorld] = {}
_started_in_module: set[int] = set()
_start_failures: dict[int, str] = {}  # size -> why it did not start: not tried again this session


def get_world(size: int) -> DistWorld:
    if size in _worlds:
        return _worlds[size]
    if size in _start_failures:
        raise WorldStartError(f"not started again this session: {_start_failures[size]}")
    if size in _started_in_module:
        # Bounded cost: each size starts once per module (minutes for 8 ranks on a loaded machine).
        raise RuntimeError(
            f"the {size}-rank world was already started and closed in this module: order its tests so that "
            "each world size's cases run together"
        )
    for other in list(_worlds):  # one world at a time: 2 cores, and ranks idle-poll
        _worlds.pop(other).close()
    _started_in_module.add(size)
    try:
        _worlds[size] = DistWorld(size)
    except WorldStartError as e:
        _start_failures[size] = str(e).splitlines()[0]
        raise
    return _worlds[size]


@pytest.fixture(scope="module")
def dist_world():
    """Factory: ``dist_world(n)`` returns the module's n-rank world (closed after the module: idle
    ranks holding dozens of gloo groups still cost CPU that later tests need)."""
    yield get_world
    for w in _worlds.values():
        w.close()
    _worlds.clear()
    _started_in_module.clear()
