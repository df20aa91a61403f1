"""The README's one-node torchrun recipe (``--launcher env --backend nccl``) runs as written under gloo on
CPU: the same command with the backend, the rank count and the sizes made small, four ranks started by
torchrun, and its records checked (what ran, on which ranks, every variant verified, the bytes it moved)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_recipe() -> list[str]:
    """The README's torchrun command, its continuation lines joined."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("torchrun --standalone"))
    text = ""
    for line in lines[start:]:
        text += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            break
    return shlex.split(text)


def _set(tokens: list[str], flag: str, value: str) -> None:
    tokens[tokens.index(flag) + 1] = value


def test_readme_recipe_is_the_nccl_one_node_run():
    cmd = readme_recipe()
    assert cmd[:2] == ["torchrun", "--standalone"] and cmd[cmd.index("-m") + 1] == "monta.cli"
    for flag, value in (("--launcher", "env"), ("--backend", "nccl"), ("--nodes", "1")):
        assert cmd[cmd.index(flag) + 1] == value
    assert cmd[cmd.index("--nproc-per-node") + 1] == cmd[cmd.index("--gpus-per-node") + 1]


def test_recipe_runs_under_gloo_on_cpu(tmp_path):
    cmd = readme_recipe()
    out = tmp_path / "one-node.jsonl"
    for flag, value in (("--backend", "gloo"), ("--nproc-per-node", "4"), ("--gpus-per-node", "4"), ("--tp", "2"),
                        ("--sizes", "256K"), ("--chunks", "1,2"), ("--out", str(out))):  # fmt: skip
        _set(cmd, flag, value)
    cmd = [sys.executable, "-m", "torch.distributed.run", *cmd[1:], "--iters", "2", "--warmup", "1", "--no-wandb"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MONTA_WANDB": "0", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    rows = sorted((r["params"]["variant"], r["params"]["chunks"]) for r in recs)
    assert rows == [("a2a", 1), ("ag", 1), ("deepspeed", 1), ("legacy", 1), ("monta", 1), ("monta", 2)]
    for r in recs:
        assert r["source"] == "measured" and r["kind"] == "alltoall"
        assert r["env"]["launcher"] == "torchrun" and r["env"]["dist"]["world_size"] == "4"
        assert r["env"]["backend"] == "gloo" and r["config"]["backend"] == "gloo"
        assert (r["params"]["nodes"], r["params"]["gpus_per_node"], r["params"]["tp"], r["params"]["ep"]) == (
            1,
            4,
            2,
            2,
        )
        assert r["metrics"]["checked"] is True and r["metrics"]["wrong"] == 0
        assert r["metrics"]["inter_bytes"] == 0  # one node: nothing leaves it
    by = {(r["params"]["variant"], r["params"]["chunks"]): r["metrics"] for r in recs}
    # TP 2 of a 256 KiB buffer: each rank of a TP pair gathers its partner's half (128 KiB) inside the node
    assert by[("monta", 2)]["intra_bytes"] == by[("deepspeed", 1)]["intra_bytes"] > 0
