"""The typed run configs are the single source of a run's settings: ``monta bench alltoall``'s flags take
their defaults and help from AlltoallConfig's fields, a bare command builds the config's defaults, and the
config crosses to the ranks as JSON that round-trips and refuses what it does not know."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from monta.bench.alltoall.config import AlltoallAids, AlltoallConfig
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


def _step_args(*flags: str) -> argparse.Namespace:
    from monta.bench.step import args as step_args

    p = argparse.ArgumentParser()
    step_args.add_arguments(p)
    return p.parse_args(list(flags))


def test_a_bare_step_command_builds_the_step_configs_defaults():
    from monta import variants as registry
    from monta.bench.step.args import step_config
    from monta.bench.step.config import StepConfig
    from monta.model.config import resolve_config

    cfg = step_config(_step_args())
    # the model's resolved config and every registered variant are what the flags' None defaults stand for
    want = StepConfig(overrides=resolve_config(StepConfig().model).to_dict(), variants=registry.names())
    assert cfg == want and (cfg.tp, cfg.ep, cfg.steps, cfg.chunks) == (4, 2, 10, 4)


def test_the_step_config_round_trips_as_the_records_spec_and_refuses_an_unknown_key():
    from monta.bench.step.args import step_config
    from monta.bench.step.config import StepConfig

    cfg = step_config(_step_args("--variants", "deepspeed,monta", "--steps", "3", "--chunks", "2"))
    spec = cfg.to_dict()
    assert spec["layout"] == {"nodes": 2, "gpus_per_node": 4, "tp": 4, "ep": 2} and "chunks_requested" not in spec
    assert StepConfig.from_dict(json.loads(json.dumps(spec))) == cfg
    # what the launch and the rank learn are fields set by a new config: the records' spec keys as before
    ran = dataclasses.replace(cfg, emulated=True, topology={"name": "x"}, chunks_used=2)
    d = ran.to_dict()
    assert (d["chunks"], d["chunks_requested"], d["emulated"], d["topology"]) == (2, 2, True, {"name": "x"})
    assert "clock" not in d and "device" not in d and StepConfig.from_dict(d) == ran
    with pytest.raises(ValueError, match=r"^StepConfig: unknown setting stepz \(known: .*\); remove it$"):
        StepConfig.from_dict({**spec, "stepz": 3})
    with pytest.raises(ValueError, match=r"^StepConfig: unknown setting pp "):
        StepConfig.from_dict({**spec, "layout": {**spec["layout"], "pp": 2}})


@pytest.mark.parametrize("name", ["model", "chunks", "steps", "warmup", "seed", "compute", "contention", "routing"])
def test_a_step_flags_help_and_default_are_its_fields(name):
    from monta.bench.step.config import StepConfig
    from monta.runconfig import flag_default

    p = argparse.ArgumentParser()
    from monta.bench.step import args as step_args

    step_args.add_arguments(p)
    a = next(a for a in p._actions if a.dest == name)
    assert a.help == help_of(StepConfig, name) and a.default == flag_default(StepConfig, name)


def test_the_lancet_partitions_default_is_the_models():
    from monta.bench.step.config import StepConfig
    from monta.variants import PARTITIONS

    assert StepConfig().lancet_partitions == PARTITIONS


@pytest.mark.parametrize("name", ["step-2x4-tp4-c664ae2.jsonl", "step-2x8-tp8-c664ae2.jsonl"])
def test_the_committed_emulated_step_records_spec_reads_back_whole(name):
    """An emulated run on the clock (its topology, clock and resolved chunks in the spec): the spec every
    committed record carries is a StepConfig's to_dict, key for key."""
    from pathlib import Path

    from monta.bench.step.config import StepConfig

    path = Path(__file__).parent / "data" / name
    specs = [json.loads(line)["config"]["spec"] for line in path.read_text().splitlines() if line.strip()]
    assert specs and all(s["emulated"] and s["clock"] and "chunks_requested" in s for s in specs)
    for spec in specs:
        assert StepConfig.from_dict(spec).to_dict() == spec


# The pipeline's own defaults (config/schema.yaml) where they deliberately differ from the bench's: the
# measurement the emulated pipeline trusts on 2 shared cores (docs/testbed.md), not a bare command's.
# Every other key the schema shares with a run config must have the config's default; a key that comes
# to agree must leave this table, and a new difference fails until it is named here with its reason.
PIPELINE_OWN = {
    ("alltoall", "sizes"): "from 2M: at 1 MiB the emulator's host work, not its links, sets the time",
    ("alltoall", "chunks"): "1 chunk too: the chunk-count ablation reads the sweep",
    ("alltoall", "iters"): "10 fixed iterations where max_iters is 0",
    ("alltoall", "budget_s"): "60 s of extra iterations per size within the pipeline's time",
    ("alltoall", "check"): "every pipeline sweep is checked",
    ("alltoall", "min_chunk"): "the chunk floor of the emulated sweeps",
    ("step", "steps"): "5 steps on the A800 clock (a step repeats to under 1%)",
    ("step", "warmup"): "1 warm-up step on the clock",
    ("step", "compute"): "modeled: the pipeline's step runs on the A800 clock",
    ("step", "variants"): "the training-step variants (the bench's default: every registered one)",
    ("step", "micro_batch"): "32 sequences: at the preset's 64 the emulated ranks wait for the 2 cores",
}


def _as_config_value(section: str, key: str, value):
    """A schema default in the run config's terms (text parsed as the flag parses it; 0 = the preset's)."""
    from monta import validate as V
    from monta.units import parse_size

    if section == "alltoall":
        return {
            "sizes": lambda: tuple(V.sizes(value)),
            "variants": lambda: tuple(value),
            "chunks": lambda: tuple(value),
            "min_chunk": lambda: parse_size(value),
            "inject_slowdown": lambda: value or None,
        }.get(key, lambda: value)()
    if key in ("layers", "seq", "micro_batch"):
        return value or None
    return tuple(value) if key == "variants" else value


def _config_default(section: str, key: str):
    from monta.bench.alltoall.config import ADAPTIVE_DEFAULTS, AlltoallAids, AlltoallConfig
    from monta.bench.step.config import StepConfig
    from monta.runconfig import default_of

    if section == "alltoall":
        if key == "target_ci":  # the pipeline's max_iters > iters is --adaptive: its knob's default
            return ADAPTIVE_DEFAULTS[key]
        cls = AlltoallAids if key in {f.name for f in dataclasses.fields(AlltoallAids)} else AlltoallConfig
        return default_of(cls, key)
    if key in ("layers", "seq", "micro_batch", "topk", "capacity_factor"):  # model overrides: the preset's
        from monta.model.config import resolve_config

        preset = resolve_config(StepConfig().model).to_dict()
        return {"layers": None, "seq": None, "micro_batch": None}.get(key, preset.get({"topk": "top_k"}.get(key, key)))
    return default_of(StepConfig, key)


def test_the_pipeline_schemas_defaults_are_the_run_configs_or_named_as_its_own():
    from pathlib import Path

    import yaml

    from monta.bench.alltoall.config import AlltoallAids, AlltoallConfig
    from monta.bench.step.config import StepConfig

    schema = yaml.safe_load((Path(__file__).parents[1] / "config" / "schema.yaml").read_text())["properties"]
    fields = {
        "alltoall": {f.name for c in (AlltoallConfig, AlltoallAids) for f in dataclasses.fields(c)},
        "step": {f.name for f in dataclasses.fields(StepConfig)}
        | {"layers", "seq", "micro_batch", "topk", "capacity_factor"},
    }
    shared, differ = 0, set()
    for section in ("alltoall", "step"):
        for key, prop in schema[section]["properties"].items():
            if key not in fields[section] or "default" not in prop:
                continue
            shared += 1
            if _as_config_value(section, key, prop["default"]) != _config_default(section, key):
                differ.add((section, key))
    assert shared == 22  # every key of the two sections that a run config holds
    assert differ == set(PIPELINE_OWN), f"name these in PIPELINE_OWN or align them: {differ ^ set(PIPELINE_OWN)}"


def test_exchanges_is_the_flag_and_variants_an_alias_that_warns(capsys):
    from monta.bench.alltoall import build_config

    base = ["bench", "alltoall", "--launcher", "env", "--sizes", "64K", "--hidden", "256"]
    new = build_config(_parser().parse_args([*base, "--exchanges", "deepspeed,monta"]))
    assert capsys.readouterr().err == ""
    old = build_config(_parser().parse_args([*base, "--variants", "deepspeed,monta"]))
    assert old == new and new.variants == ("deepspeed", "monta")
    assert capsys.readouterr().err == "monta: warning: --variants is deprecated; use --exchanges\n"
    with pytest.raises(ValueError, match=r"^--exchanges deepspeed,tutel: unknown 'tutel'"):
        build_config(_parser().parse_args([*base, "--exchanges", "deepspeed,tutel"]))
