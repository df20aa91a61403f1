"""`monta bench alltoall --preset pipeline` runs the pipeline's 2 x 4 sweep: the config it builds equals the
one built from the command the pipeline's dry run would start (config/default.yaml read, not copied); a
flag given wins; and a bare run names the settings it has unlike the pipeline's."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from monta.bench import alltoall, pipeline_preset
from monta.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def parse(*argv: str, bench: str = "alltoall"):
    sub = build_parser("bench")._subparsers._group_actions[0].choices["bench"]
    return sub._subparsers._group_actions[0].choices[bench].parse_args(list(argv))


def _pipeline_command(tmp_path: Path, bench: str = "alltoall") -> list[str]:
    """The `monta bench BENCH ... --out results/BENCH/2x4.jsonl` the default config's dry run starts."""
    snakemake = str(Path(sys.executable).parent / "snakemake")
    args = [snakemake, "-n", "-p", "--directory", str(tmp_path), "-s", str(ROOT / "Snakefile")]
    target = f"results/{bench}/2x4.jsonl"
    proc = subprocess.run(args + [target], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for line in (proc.stdout + proc.stderr).splitlines():
        if f"monta bench {bench}" in line and target in line:
            words = shlex.split(line.split(f"monta bench {bench}", 1)[1])
            return words[: words.index(">")] if ">" in words else words
    raise AssertionError(f"no bench {bench} command in the dry run")


def _config(args):
    cfg = alltoall.build_config(args)
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("out", "append", "experiment")}


def test_the_preset_builds_the_pipelines_sweep(tmp_path):
    pipeline = parse(*_pipeline_command(tmp_path))
    pipeline.out = None
    mine = parse("--preset", "pipeline")
    alltoall._preset(mine)
    assert _config(mine) == _config(pipeline)
    assert pipeline_preset.differences(mine) == []


def test_the_step_preset_builds_the_pipelines_step(tmp_path):
    from monta.bench.common_args import network
    from monta.bench.step.args import step_config as spec

    pipeline = parse(*_pipeline_command(tmp_path, "step"), bench="step")
    pipeline.out = None
    mine = parse("--preset", "pipeline", "--experiment", pipeline.experiment, bench="step")
    assert pipeline_preset.preset(mine, "step").startswith("# --preset pipeline")
    assert spec(mine) == spec(pipeline)
    assert network(mine).describe() == network(pipeline).describe()
    assert pipeline_preset.differences(mine, "step") == []
    bare = pipeline_preset.preset(parse(bench="step"), "step")
    assert "--compute real (pipeline: modeled)" in bare


def test_the_preset_reads_the_default_config_and_a_given_flag_wins():
    a = yaml.safe_load((ROOT / "config/default.yaml").read_text())["alltoall"]
    args = parse("--preset", "pipeline", "--sizes", "4M", "--iters", "7")
    alltoall._preset(args)
    assert (args.sizes, args.iters) == ("4M", 7)
    assert args.chunks == ",".join(map(str, a["chunks"])) and args.min_chunk == str(a["min_chunk"])
    assert args.max_iters == a["max_iters"] and args.adaptive is True


def test_a_bare_run_names_what_differs_from_the_pipeline(tmp_path):
    a = yaml.safe_load((ROOT / "config/default.yaml").read_text())["alltoall"]
    line = alltoall._preset(parse())
    assert line.startswith("# unlike the pipeline's 2 x 4 sweep (--preset pipeline runs it): ")
    assert f"--min-chunk 0 (pipeline: {a['min_chunk']})" in line
    assert f"--sizes 1M:16M:2 (pipeline: {a['sizes']})" in line and "--check off (pipeline: on)" in line
    assert "--nodes" not in line and "--tp" not in line  # the default shape is the pipeline's


def test_a_config_without_the_sections_is_one_line(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("network: {}\n")
    try:
        pipeline_preset.pipeline_settings(bad)
    except ValueError as e:
        assert str(e).startswith(f"--preset pipeline: cannot read the pipeline's settings from {bad}")
    else:
        raise AssertionError("no error")


def test_off_the_emulator_the_preset_leaves_the_network_clock_and_chunk_floor_alone():
    """Under torchrun/srun (--launcher env) the network is the cluster's: the records must not claim the
    emulated A800, and the emulator's chunk floor and clock stay off; the sweep's sizes and chunks still apply."""
    bare = parse("--launcher", "env", "--backend", "gloo")
    args = parse("--preset", "pipeline", "--launcher", "env", "--backend", "gloo")
    pipeline_preset.preset(args, "alltoall")
    for dest in ("topology", "inter_gbps", "intra_gbps", "min_chunk", "dilation"):
        assert getattr(args, dest) == getattr(bare, dest), dest
    emulated = parse("--preset", "pipeline")
    pipeline_preset.preset(emulated, "alltoall")
    assert args.sizes == emulated.sizes != bare.sizes and args.chunks == emulated.chunks
    assert emulated.topology != bare.topology and emulated.min_chunk != bare.min_chunk
