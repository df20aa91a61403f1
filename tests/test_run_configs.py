"""The typed run configs are the single source of a run's settings: ``monta bench alltoall``'s flags take
their defaults and help from AlltoallConfig's fields, a bare command builds the config's defaults, and the
config crosses to the ranks as JSON that round-trips and refuses what it does not know."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from monta.bench.alltoall_config import AlltoallAids, AlltoallConfig
from monta.runconfig import help_of


def _parser() -> argparse.ArgumentParser:
    from monta.bench.cli import register

    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    return p


def _action(p: argparse.ArgumentParser, dest: str) -> argparse.Action:
    sub = p._subparsers._group_actions[0].choices["bench"]._subparsers._group_actions[0].choices["alltoall"]
    return next(a for a in sub._actions if a.dest == dest)


def test_a_bare_alltoall_command_builds_the_configs_defaults():
    from monta.bench.alltoall import build_config

    cfg = build_config(_parser().parse_args(["bench", "alltoall", "--launcher", "env", "--backend", "gloo"]))
    # what the flags cannot know without a network (the emulated profile's description) aside, every
    # field is the dataclass's default: the flags' text defaults parse to the fields' values
    assert dataclasses.replace(cfg, topology={}) == AlltoallConfig()
    assert cfg.sizes == (1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20) and cfg.max_iters == cfg.iters == 5


@pytest.mark.parametrize("name", ["hidden", "warmup", "iters", "topk", "routing", "mode", "capacity_factor", "dtype"])
def test_a_flags_help_and_default_are_its_fields(name):
    a = _action(_parser(), name)
    assert a.help == help_of(AlltoallConfig, name) and a.default == getattr(AlltoallConfig(), name)


def test_the_check_and_test_aids_are_a_sub_config_read_from_their_flags():
    from monta.bench.alltoall import build_config

    args = ["bench", "alltoall", "--launcher", "env", "--sizes", "64K", "--hidden", "256"]
    cfg = build_config(_parser().parse_args([*args, "--inject-fault", "--inject-slowdown", "monta:0.1"]))
    assert cfg.aids == AlltoallAids(
        check=True, inject_fault=True, inject_slowdown={"variant": "monta", "fraction": 0.1}
    )
    assert _action(_parser(), "inject_slowdown").help == help_of(AlltoallAids, "inject_slowdown")


def test_the_config_round_trips_and_refuses_an_unknown_key():
    cfg = AlltoallConfig(sizes=[65536], chunks=[1, 2], aids=AlltoallAids(check=True), routing="W3", min_chunk=4096)
    d = json.loads(cfg.to_json())
    assert AlltoallConfig.from_dict(d) == cfg and d["check"] is True and d["sizes"] == [65536]
    # the records' config keeps its keys: the aids sit beside the other settings, and the defaults that
    # came later are left out
    assert "aids" not in d and "mode" not in AlltoallConfig().to_dict()
    with pytest.raises(ValueError, match=r"^AlltoallConfig: unknown setting chunk \(known: .*\); remove it$"):
        AlltoallConfig.from_dict({**d, "chunk": 4})
