"""tools/gpu_compute_table.py: its arithmetic on the CPU (reduced widths), and the table it measured on a GPU
(data/measured/gpu-compute-h100.json) scored against the performance model's compute estimates."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "data" / "measured" / "gpu-compute-h100.json"


def _tool():
    spec = importlib.util.spec_from_file_location("gpu_compute_table", ROOT / "tools" / "gpu_compute_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tool():
    return _tool()


def test_the_cpu_run_times_every_piece_and_prices_it_with_the_model(tool, tmp_path):
    from monta.hardware.profile import get_cluster
    from monta.model.config import PRESETS
    from monta.perfmodel.training.compute import forward_pieces_us

    assert tool.main(["--device", "cpu", "--scale", "64", "--reps", "1", "--rounds", "2", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "gpu-compute.json").read_text())
    s = res["shapes"]
    for name, (M, K, N) in tool.gemm_cases(s).items():
        for phase in ("fwd", "dX", "dW"):
            r = res["kernels"][f"{name}.{phase}"]
            assert r["shape"] == [M, K, N] and r["flops"] == 2.0 * M * K * N and r["us_min"] <= r["us"] <= r["us_max"]
    assert {"attn_core.fwd", "attn_core.bwd", "chunk_copy"} <= set(res["kernels"])
    # The model's estimates are the step model's own pieces at the same (reduced) widths.
    m = PRESETS["moe-2x70b"].with_overrides(hidden=128, ffn=56 * 8, vocab=62 * 8, seq=128, heads=64, kv_heads=8)
    assert res["model"]["pieces_us"] == pytest.approx(forward_pieces_us(m, 128, 128, 8, get_cluster("h100")))
    by = {(r["piece"], r["phase"]): r for r in res["score"]}
    ex = by[("experts", "bwd")]
    assert ex["model_us"] == pytest.approx(2 * res["model"]["pieces_us"]["experts"])
    assert ex["error"] == pytest.approx((ex["model_us"] - ex["measured_us"]) / ex["measured_us"])
    assert "| experts | bwd |" in (tmp_path / "gpu-compute.md").read_text()


def test_the_stored_gpu_table_names_its_gpu_and_holds_every_piece(tool):
    res = json.loads(STORED.read_text())
    assert "H100" in res["device_name"] and res["dtype"] == "bfloat16" and res["scale"] == 1
    assert res["shapes"]["h"] == 8192 and res["shapes"]["R"] == 16384
    names = {f"{g}.{p}" for g in tool.gemm_cases(res["shapes"]) for p in ("fwd", "dX", "dW")}
    assert names | {"attn_core.fwd", "attn_core.bwd", "chunk_copy"} <= set(res["kernels"])
    assert {"expert_up.fwd", "attn_core.fwd", "gate.fwd"} <= set(res["contention"])


def test_the_models_compute_estimates_against_the_h100_table(tool):
    """The model's h100 file against what an H100 measured: the GEMM-bound pieces within 30% (it assumes 60% of
    peak; the H100 ran 65-80%), so a change to the compute model that moves them further shows here. The gate is
    memory-bound ([T, 8192] x [8192, 2] reads the activations): the FLOP model cannot price it and is not held to it."""
    res = json.loads(STORED.read_text())
    model = tool.model_estimates("h100", 1)
    for r in tool.score(res["kernels"], model):
        if r["piece"] in ("attention", "attention_core", "experts", "head", "chunk_copy"):
            assert abs(r["error"]) <= 0.30, r
