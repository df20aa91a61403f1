"""Each pipeline config stands alone: its dry run's commands, parsed by the real CLI parser.

A --configfile is not layered on config/default.yaml (the emulated cluster): keys it leaves out take
config/schema.yaml's defaults. So config/a800.yaml (real nodes) runs none of the emulator's flags.
"""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from monta.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
EMULATOR_FLAGS = ["--emulate", "--topology", "--inter-gbps", "--intra-gbps", "--allow-unshaped", "--latency-us"]
EMULATOR_SETTINGS = ["--adaptive", "--max-iters", "--budget-s", "--target-ci"]
_SHELL_STOPS = {">", "2>", "|", ";", "&&", "||", "2>&1", ">>"}


def dry_run(tmp_path: Path, *configfiles: str) -> list[list[str]]:
    """The `monta ...` commands a dry run would start, each as its argument list (launcher prefix cut)."""
    args = [SNAKEMAKE, "-n", "-p", "--directory", str(tmp_path), "-s", str(ROOT / "Snakefile")]
    if configfiles:
        args += ["--configfile", *configfiles]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    commands = []
    for line in out.splitlines():
        if not line.startswith("Shell command:") or " monta " not in f" {line}":
            continue
        tokens = shlex.split(line.removeprefix("Shell command:"), posix=True)
        while "monta" in tokens:
            tokens = tokens[tokens.index("monta") :]
            end = next((i for i, t in enumerate(tokens) if t in _SHELL_STOPS), len(tokens))
            commands.append(tokens[:end])
            tokens = tokens[end:]
    assert commands, out[-3000:]
    return commands


def parses(command: list[str]) -> None:
    """Parse with the CLI's own parser (nothing runs); an unknown flag exits 2."""
    build_parser(command[1]).parse_args(command[1:])


def benches(commands, which):
    return [c for c in commands if c[1:3] == ["bench", which]]


def test_a800_runs_no_emulator_flag_and_its_own_counts(tmp_path):
    commands = dry_run(tmp_path, "config/a800.yaml")
    for c in commands:
        parses(c)
        assert not set(c) & set(EMULATOR_FLAGS + EMULATOR_SETTINGS), c
        assert "emulate" not in c, c
    a2a, step = benches(commands, "alltoall"), benches(commands, "step")
    assert a2a and step
    # the file's own repetition (fixed iterations as nccl-tests runs them) and its own step count
    assert all(c[c.index("--iters") + 1] == "20" and c[c.index("--warmup") + 1] == "5" for c in a2a)
    assert all(c[c.index("--launcher") + 1] == "env" and c[c.index("--backend") + 1] == "nccl" for c in a2a)
    assert {c[c.index("--steps") + 1] for c in step} == {"10"}  # ablation steps included: not the emulator's 2
    # The model scores itself against the cluster's own AllToAll records, on predict.cluster (no profile).
    (acc,) = [c for c in commands if c[1:3] == ["predict", "accuracy"]]
    assert acc[acc.index("--cluster") + 1] == "a800-8nic" and "--profile" not in acc
    assert "results/alltoall/a800-2x8.jsonl" in acc


def test_default_runs_the_emulated_cluster(tmp_path):
    # No --configfile: the embedded config/default.yaml, the emulated 4-NIC A800.
    commands = dry_run(tmp_path)
    for c in commands:
        parses(c)
    sweep = [c for c in benches(commands, "alltoall") if "--check" in c]
    assert {c[c.index("--topology") + 1] for c in sweep} == {"a800-4nic@0.125", "a800-4nic@0.0625"}
    assert all(c[c.index("--max-iters") + 1] == "40" and c[c.index("--budget-s") + 1] == "20" for c in sweep)
    assert {c[c.index("--launcher") + 1] for c in benches(commands, "step")} == {"emulate"}


def test_a_config_file_alone_gets_the_schemas_defaults(tmp_path):
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())["properties"]
    mine = tmp_path / "mine.yaml"
    mine.write_text("experiment: mine\n")
    commands = dry_run(tmp_path / "run", str(mine))
    a2a = schema["alltoall"]["properties"]
    sweep = [c for c in benches(commands, "alltoall") if "--check" in c]
    assert sweep
    for c in sweep:
        parses(c)
        assert c[c.index("--iters") + 1] == str(a2a["iters"]["default"])
        assert c[c.index("--warmup") + 1] == str(a2a["warmup"]["default"])
        assert c[c.index("--chunks") + 1] == ",".join(map(str, a2a["chunks"]["default"]))
        assert "--adaptive" not in c  # max_iters' default 0: exactly --iters iterations
    steps = schema["step"]["properties"]["steps"]["default"]
    assert {c[c.index("--steps") + 1] for c in benches(commands, "step")} == {str(steps)}


@pytest.mark.parametrize("name", ["test", "slurm-local"])
def test_small_configs_parse(tmp_path, name):
    commands = dry_run(tmp_path, f"config/{name}.yaml")
    for c in commands:
        parses(c)
    assert benches(commands, "alltoall") and benches(commands, "step")


def dry_run_result(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    mine = tmp_path / "mine.yaml"
    mine.write_text(text)
    args = [SNAKEMAKE, "-n", "-p", "--directory", str(tmp_path / "run"), "-s", str(ROOT / "Snakefile")]
    return subprocess.run([*args, "--configfile", str(mine)], cwd=ROOT, capture_output=True, text=True, timeout=300)


# One-key configs as a user writes them (every other key the schema's default): each dry run yields commands
# that all pass their benchmark's own argument check, the checks `main` runs before any rank starts.
ONE_KEY_RUNS = [
    'alltoall: {sizes: "4M:16M:2"}\n',
    "step: {steps: 2}\n",
    "network: {inter_gbps: 0.25}\n",
    "alltoall: {clusters: [{name: 1x4, nodes: 1, gpus_per_node: 4, tp: 4}]}\n",
    "step: {compute: real}\n",
    "ablation: {size: 8M}\n",
]


@pytest.mark.parametrize("text", ONE_KEY_RUNS)
def test_a_one_key_config_yields_commands_that_pass_their_checks(tmp_path, monkeypatch, text):
    from monta.commandcheck import check

    commands = dry_run(tmp_path / "run", str(_write(tmp_path, text)))
    assert benches(commands, "alltoall") and benches(commands, "step")
    monkeypatch.chdir(tmp_path / "run")  # --out is relative to the run folder: its write probe lands there
    for c in commands:
        check(c[1:])  # raises (or exits 2) with the CLI's one line


def _write(tmp_path: Path, text: str) -> Path:
    mine = tmp_path / "mine.yaml"
    mine.write_text(text)
    return mine


# One-key (or one-section) configs whose settings contradict the schema's others: refused by the config
# check, one line naming the key and what to change, before any job.
ONE_KEY_REFUSALS = [
    ('network: {topology: ""}\n', "config key step.compute = 'modeled'", "network.topology"),
    ("network: {intra_gbps: 3.4}\n", "config key step.compute = 'modeled'", "network.intra_gbps"),
    ("regress: {cluster: 2x8}\n", "config key regress.cluster = '2x8'", "alltoall.clusters: 2x4"),
    # the mini's 2 experts cannot spread over EP = 4 nodes, its 4 KV heads not over TP 8
    (
        "step: {clusters: [{name: 4x2, nodes: 4, gpus_per_node: 2, tp: 2}]}\n",
        "config key step.clusters[0] (4x2: 4 nodes, TP 2)",
        "num_experts=2 is not divisible by ep=4",
    ),
    (
        "step: {clusters: [{name: 2x8, nodes: 2, gpus_per_node: 8, tp: 8}]}\n",
        "config key step.clusters[0] (2x8: 2 nodes, TP 8)",
        "num_kv_heads=4 is not divisible by tp=8",
    ),
    ("alltoall: {chunks: [4, 8]}\n", "config key alltoall.min_chunk = '1M': in the sweep of 2x4", "(4, 8) of 2 MiB"),
    # the ratio ablation's floor grows with its rate: 4 MiB at 0.5 Gbit/s leaves 4 MiB no chunk of 2 or 4
    (
        "alltoall: {chunks: [2, 4]}\nablation: {buffer_sizes: ''}\n",
        "config key alltoall.min_chunk = '1M': in ablation.inter_gbps 0.5 (the floor scaled to 4 MiB)",
        "(2, 4) of 4 MiB",
    ),
    ("alltoall: {chunks: [2, 4]}\n", "in ablation.buffer_sizes", "(2, 4) of 256 KiB"),
]


@pytest.mark.parametrize("text,key,names", ONE_KEY_REFUSALS)
def test_a_contradictory_config_is_refused_in_one_line(tmp_path, text, key, names):
    proc = dry_run_result(tmp_path, text)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "invalid config:" in line]
    assert len(lines) == 1 and key in lines[0] and names in lines[0], (proc.stdout + proc.stderr)[-2000:]


def test_the_old_failure_is_what_the_command_check_catches(tmp_path, monkeypatch):
    """What a one-key config ran before the schema's defaults formed a pipeline: modeled compute on hand-set
    links. The step's own check refuses it, so the dry-run test above can fail."""
    from monta.commandcheck import check

    monkeypatch.chdir(tmp_path)
    step = "bench step --nodes 2 --gpus-per-node 4 --tp 4 --steps 1 --launcher emulate --compute modeled"
    with pytest.raises(ValueError, match="needs a topology that emulates a cluster preset"):
        check([*step.split(), "--inter-gbps", "2.0"])
    check([*step.split(), "--topology", "a800-4nic@0.125"])
