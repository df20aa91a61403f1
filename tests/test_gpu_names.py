"""One GPU-name lookup (monta/hardware/gpus.py): a GPU as drivers, nccl-tests logs and published tables name it
-> the cluster file of its node type, whose figures (the bench's peak for MFU, the collectives' NCCL generation)
are read from the file; the bench, ``monta calibrate`` and ``monta predict published`` all ask it."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
import yaml

from monta.bench.step.compute import peak_tflops
from monta.hardware import clusterfile as CF
from monta.hardware.gpus import GPU_NAMES, arch_of, cluster_of_gpu
from monta.perfmodel.reports.calibrate import _preset_for
from monta.perfmodel.reports.published_rows import gpu_file


def test_every_name_leads_to_a_shipped_file_of_its_generation():
    for entry in GPU_NAMES:
        assert CF.load_cluster(entry.cluster).name == entry.cluster
    for name in CF.cluster_names():
        # A file's own gpu.model names its generation as the lookup does (what prices its collectives).
        assert CF.load_cluster(name).nccl_arch == arch_of(CF.read(name).doc["gpu"].get("model", "")), name


@pytest.mark.parametrize(
    "name, cluster",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA GH200 480GB", "h100"),
        ("H200 141GB (Azure ND H200 v5)", "h100"),
        ("NVIDIA H800", "h800"),
        ("NVIDIA A800-SXM4-80GB", "a800-4nic"),
        ("A100-SXM4-80GB (Azure NDm A100 v4)", "a100"),
        ("Tesla V100-SXM2-32GB", "p3dn"),
        ("NVIDIA B200", "b200"),
        ("GB200", "gb200"),
        ("B300 SXM6 AC", "b300"),
        ("A100 (p4de) / V100 (p3dn)", "a100"),
        ("NVIDIA L40S", None),
        ("SM90 (Hopper; exact model not stated)", None),
    ],
)
def test_a_gpu_name_finds_its_cluster_file(name, cluster):
    assert cluster_of_gpu(name) == cluster


def test_a_gpu_with_another_gpus_links_counts_only_where_links_are_enough():
    """The H20 has the H100's NVLink4 but a seventh of its compute: a collective is priced on h100's links,
    the bench reports no MFU against the H100's peak."""
    assert cluster_of_gpu("NVIDIA H20", links_only=True) == "h100" and cluster_of_gpu("NVIDIA H20") is None
    assert peak_tflops("NVIDIA H20", None) is None and gpu_file("H20") == "h100"


def test_the_benchs_peak_is_the_cluster_files(tmp_path, monkeypatch):
    assert peak_tflops("NVIDIA H100 80GB HBM3", None) == CF.load_cluster("h100").peak_tflops == 989
    assert peak_tflops("NVIDIA B200", None) == CF.load_cluster("b200").peak_tflops
    assert peak_tflops("NVIDIA H100 80GB HBM3", 500.0) == 500.0 and peak_tflops("NVIDIA L40S", None) is None
    # A changed file changes the peak: the number lives in the file, nowhere else.
    for p in CF.clusters_dir().glob("*.yaml"):
        shutil.copy(p, tmp_path / p.name)
    doc = yaml.safe_load((tmp_path / "h100.yaml").read_text())
    doc["gpu"]["peak_tflops"] = 700
    (tmp_path / "h100.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setenv(CF.ENV_DIR, str(tmp_path))
    assert peak_tflops("NVIDIA H100 80GB HBM3", None) == 700


def test_published_collectives_price_a_gpu_by_name_only_with_nccls_constants_for_it():
    assert gpu_file("H100 80GB HBM3") == "h100" and gpu_file("A800") == "a800-4nic"
    assert gpu_file("B300 SXM6 AC") is None and gpu_file("B200 (AWS p6-b200)") is None  # a `cluster` column does


def test_calibrate_takes_the_logs_gpu_file_as_its_base():
    logs = [SimpleNamespace(gpu="NVIDIA H100 80GB HBM3"), SimpleNamespace(gpu="NVIDIA H100 80GB HBM3")]
    assert _preset_for(logs) == "h100"
    assert _preset_for([SimpleNamespace(gpu="NVIDIA A800-SXM4-80GB")]) == "a800-4nic"
    for gpus in (["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"], ["NVIDIA L40S"], ["NVIDIA H20"], []):
        with pytest.raises(ValueError, match="pass --cluster"):
            _preset_for([SimpleNamespace(gpu=g) for g in gpus])
