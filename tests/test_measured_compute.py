"""A GPU's measured compute table (data/measured/gpu-compute-h100.json) as a calibration input of the run step
model: ``monta predict published --compute-table FILE``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monta.cli import main
from monta.perfmodel.reports import published_steps as PS
from monta.perfmodel.training.gemm_eff import depth_eff, k_half
from monta.perfmodel.training.measured_compute import fit_table, load_compute_table

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "data" / "measured" / "gpu-compute-h100.json"
H200 = ROOT / "data" / "measured" / "gpu-compute-h200.json"  # an H200's table: priced on the h100 cluster file
STEPS = ROOT / "data" / "published" / "steps.csv"


def _kernel(shape, phase, tflops_at_asymptote, kh, peak):
    m, k, n = shape
    flops = 2.0 * m * k * n
    depth = {"fwd": k, "dX": n, "dW": m}[phase]
    return {"shape": shape, "flops": flops, "us": flops / (tflops_at_asymptote * depth_eff(depth, kh) * 1e6)}


def test_the_fit_recovers_a_gemm_asymptote_and_the_attention_rate():
    """Kernels that run exactly at 0.7 x peak x depth_eff(K) of their phase give back 0.7, whatever their depths;
    the router gate (memory-bound) is left out; attention: fwd + bwd FLOPs over their time."""
    peak, hbm = 989.0, 3350.0
    kh = k_half(peak, hbm, fp8=False)
    kernels = {
        f"{name}.{phase}": _kernel(shape, phase, 0.7 * peak, kh, peak)
        for name, shape in (("a", [8192, 256, 4096]), ("b", [64, 8192, 1024]))
        for phase in ("fwd", "dX", "dW")
    }
    kernels["gate.fwd"] = {"shape": [8192, 8192, 2], "flops": 2.7e8, "us": 60.0}
    kernels["attn_core.fwd"] = {"flops": 1e11, "us": 1e11 / (0.5 * peak * 1e6)}
    kernels["attn_core.bwd"] = {"flops": 2e11, "us": 2e11 / (0.3 * peak * 1e6)}
    gemm, attn, used = fit_table({"kernels": kernels}, peak, hbm)
    assert gemm == pytest.approx(0.7) and used == 6
    assert attn == pytest.approx(3e11 / (1e11 / 0.5 + 2e11 / 0.3))


def test_the_stored_h100_table_reads_as_the_h100_cluster_s_efficiencies():
    """The H100's GEMMs ran at 662-801 TFLOP/s (of 989): their asymptote lies in that range over the peak, above
    the cluster file's assumed 0.6; flash attention fwd + bwd at 498 and 356 TFLOP/s: below its assumed 0.45."""
    t = load_compute_table(STORED)
    assert t.cluster == "h100" and t.kernels == 15 and t.gpu == "H100"
    assert 662 / 989 < t.gemm_eff < 801 / 989
    assert 356 / 989 < t.attn_eff < 498 / 989


def test_the_table_reprices_only_the_rows_of_its_gpu():
    rows = PS.read_step_rows(STEPS)
    table = load_compute_table(STORED)
    plain, _ = PS.price_steps(rows)
    measured, _ = PS.price_steps(rows, [table])
    moved = 0
    for a, b in zip(plain, measured):
        if a["predicted_blind"] is None:
            assert b["predicted_blind"] is None
        elif a["cluster"] == "h100" and a["gpu"] == "H100":
            assert b["compute_table"] == str(STORED)
            moved += b["predicted_blind"] != pytest.approx(a["predicted_blind"], rel=1e-6)
        else:
            assert b["compute_table"] is None and b["predicted_blind"] == a["predicted_blind"]
    assert moved >= 15


def test_a_bad_table_or_a_collectives_file_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "other"}))
    assert main(["predict", "published", "--data", str(STEPS), "--compute-table", str(bad)]) == 2
    assert "not a monta.gpu-compute/1 table" in capsys.readouterr().err
    coll = ROOT / "data" / "published" / "collectives.csv"
    assert main(["predict", "published", "--data", str(coll), "--compute-table", str(STORED)]) == 2
    assert "is not a step table" in capsys.readouterr().err


def test_an_h200_table_does_not_calibrate_the_h100_rows(capsys):
    """Both GPUs are priced on the h100 cluster file, but the H200's measured compute is not the H100's: its table
    reprices no H100 row, and a table that fits no row is refused, naming its GPU and the rows'."""
    t = load_compute_table(H200)
    assert (t.cluster, t.gpu) == ("h100", "H200") and t.fits("NVIDIA H200") and not t.fits("H100")
    rows = PS.read_step_rows(STEPS)
    plain, _ = PS.price_steps(rows)
    measured, _ = PS.price_steps(rows, [t])
    assert [r["predicted_blind"] for r in measured] == [r["predicted_blind"] for r in plain]
    assert all(r["compute_table"] is None for r in measured)
    assert main(["predict", "published", "--data", str(STEPS), "--compute-table", str(H200)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"monta: error: --compute-table {H200}: measured on NVIDIA H200 (H200), but the h100 rows of {STEPS} "
        "ran on H100: drop it or give a table measured on their GPU"
    )


def test_a_table_whose_device_is_not_its_cluster_s_gpu_is_refused(tmp_path):
    table = json.loads(STORED.read_text())
    wrong = tmp_path / "a100-named-h100.json"
    wrong.write_text(json.dumps({**table, "device_name": "NVIDIA A100-SXM4-80GB"}))
    with pytest.raises(ValueError) as e:
        load_compute_table(wrong)
    assert str(e.value) == (
        f"--compute-table {wrong}: its device 'NVIDIA A100-SXM4-80GB' is not a GPU of the cluster it names "
        "(h100): rescore it with the device's --cluster"
    )
