"""Clusters as files (clusters/*.yaml, monta.hardware.clusterfile): every shipped file loads and
sources every number; the old Python presets' numbers and predictions are unchanged; a malformed file is
one error line through the CLI; a user's own file works end to end; the emulator's rho comes from the files."""

from __future__ import annotations

import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest
import yaml

from monta.chunking import parse_chunks_list
from monta.hardware import clusterfile as CF
from monta.hardware.links import CURVES, Cluster, Link
from monta.hardware.profile import get_cluster
from monta.perfmodel.network.alltoall import make_layout, sweep

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20

# The Python literals of monta/hardware/links.py at commit 84ba819 (_a800, _a100, _hopper), the
# presets the files replace: (nvlink GB/s, nvlink us, nic GB/s, nic us, NICs per node, peak TFLOP/s,
# copy GB/s, HBM GB/s). All had 8 GPUs per node, 80 GB, gemm_eff 0.6, attn_eff 0.45, the SimAI AllToAll
# curves on both links and an intra-node AllGather link (same bandwidth, latency 0, SimAI's NVLink table).
OLD_LITERALS = {
    "a800-4nic": (160.0, 10.0, 23.5, 15.0, 4, 312.0, 800.0, 2039.0),
    "a800-8nic": (160.0, 10.0, 23.5, 15.0, 8, 312.0, 800.0, 2039.0),
    "a100": (240.0, 10.0, 23.5, 15.0, 8, 312.0, 800.0, 2039.0),
    "h100": (360.0, 8.0, 46.0, 12.0, 8, 989.0, 1300.0, 3350.0),
    "h800": (160.0, 8.0, 46.0, 12.0, 8, 989.0, 1300.0, 3350.0),
}

# Fixed points: the outputs of the functions behind `monta predict alltoall` (sweep on 2 x 8, TP8; per
# size: legacy, deepspeed, monta 1 chunk, monta 4 chunks, (auto's chunks, its time), us) and `monta predict
# paper` (best MoNTA speedup over legacy, layers that fit, step us of legacy / deepspeed / monta) computed
# with the literal presets at commit 84ba819, before the presets became files.
FIXED = {
    "a800-4nic": {
        "alltoall": {
            1048576: (
                85.81534847790509,
                35.48455855973814,
                35.48455855973814,
                72.17552998830956,
                (1, 35.48455855973814),
            ),
            4194304: (
                298.26139391162036,
                96.93823423895255,
                96.93823423895255,
                108.70211995323825,
                (2, 88.67295423895256),
            ),
            16777216: (
                1148.0455756464814,
                342.7529369558102,
                342.7529369558102,
                254.808479812953,
                (3, 248.67144362247683),
            ),
        },
        "paper_speedup": 4.616716575584766,
        "layers": 24,
        "step_us": (2732395.0841299198, 1934192.3535377502, 1815663.8898223198),
    },
    "a800-8nic": {
        "alltoall": {
            1048576: (
                51.06303423895255,
                31.14051927986907,
                31.14051927986907,
                67.83149070844048,
                (1, 31.14051927986907),
            ),
            4194304: (
                159.2521369558102,
                79.56207711947629,
                79.56207711947629,
                91.32596283376199,
                (2, 71.29679711947628),
            ),
            16777216: (
                592.0085478232407,
                273.2483084779051,
                273.2483084779051,
                208.4607950619593,
                (6, 203.62076776670136),
            ),
        },
        "paper_speedup": 2.9074075022717474,
        "layers": 24,
        "step_us": (2138477.844280639, 1819576.1679620887, 1741329.738466416),
    },
    "a100": {
        "alltoall": {
            1048576: (
                51.06303423895255,
                27.69987927986907,
                27.69987927986907,
                66.8484507084405,
                (1, 27.69987927986907),
            ),
            4194304: (159.2521369558102, 65.79951711947628, 65.79951711947628, 87.393802833762, (2, 64.41551711947628)),
            16777216: (
                592.0085478232407,
                218.19806847790508,
                218.19806847790508,
                169.57521133504792,
                (3, 160.81673514457174),
            ),
        },
        "paper_speedup": 3.6812620731980057,
        "layers": 24,
        "step_us": (2083331.8647328136, 1712305.906375907, 1634178.1018375652),
    },
    "h100": {
        "alltoall": {
            1048576: (
                30.560496588628762,
                19.71417899665552,
                19.71417899665552,
                51.86123833731486,
                (1, 19.71417899665552),
            ),
            4194304: (
                86.24198635451505,
                42.85671598662207,
                42.85671598662207,
                63.44495334925943,
                (1, 42.85671598662207),
            ),
            16777216: (
                308.9679454180602,
                135.42686394648828,
                135.42686394648828,
                109.77981339703776,
                (3, 102.07583464882941),
            ),
        },
        "paper_speedup": 3.026847113041004,
        "layers": 24,
        "step_us": (833300.0819845547, 660416.6692450544, 618719.2995320581),
    },
    "h800": {
        "alltoall": {
            1048576: (
                30.560496588628762,
                25.44857899665552,
                25.44857899665552,
                53.499638337314856,
                (1, 25.44857899665552),
            ),
            4194304: (
                86.24198635451505,
                65.79431598662208,
                65.79431598662208,
                69.99855334925944,
                (2, 59.54099799331104),
            ),
            16777216: (
                308.9679454180602,
                227.1772639464883,
                227.1772639464883,
                186.14101924510274,
                (4, 186.14101924510274),
            ),
        },
        "paper_speedup": 1.6598595337614654,
        "layers": 24,
        "step_us": (925210.0478975981, 839200.4385553581, 804481.1526588356),
    },
}


def _doc(name: str) -> dict:
    return yaml.safe_load((ROOT / "clusters" / f"{name}.yaml").read_text())


def _write(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _user_doc(name: str = "my-cluster") -> dict:
    """A user's file: the required keys only, no sources."""
    return {
        "schema": "monta.cluster/1",
        "name": name,
        "gpu": {"peak_tflops": 312, "mem_GB": 80, "hbm_GBps": 2039, "copy_GBps": 800},
        "gpus_per_node": 8,
        "nvlink": {"bandwidth_GBps": 200, "latency_us": 10},
        "nic": {"count": 2, "bandwidth_GBps": 20, "latency_us": 15},
    }


def _same_cluster(a: Cluster, b: Cluster) -> None:
    for f in fields(Cluster):
        if f.name != "source":
            assert getattr(a, f.name) == getattr(b, f.name), f.name


# -- the shipped files ----------------------------------------------------------------------------------
def test_every_shipped_file_loads_under_its_name_with_a_source_for_every_number():
    names = CF.cluster_names()
    assert {"a800-4nic", "a800-8nic", "a100", "h100", "h800", "p4de", "p3dn", "ndm-a100-v4"} <= set(names)
    assert CF.aliases() == {"a800": "a800-4nic", "dgx-a100": "a100"}
    for name in names:
        cf = CF.read(name)
        assert cf.cluster.name == name and cf.doc["schema"] == "monta.cluster/1"
        assert cf.unsourced == (), (name, cf.unsourced)
        assert "unsourced" not in cf.cluster.source and cf.doc["description"] in cf.cluster.source
        for key, text in cf.doc["sources"].items():
            assert len(text) > 20, (name, key)  # a source says where and what, not a placeholder
    assert get_cluster("a800").name == "a800-4nic" and get_cluster("dgx-a100").name == "a100"


def test_a_number_without_a_source_is_found():
    doc = _doc("p4de")
    del doc["sources"]["nic.bandwidth_GBps"]
    doc["sources"].pop("gpu")
    cf = CF.from_doc(doc, "p4de-copy.yaml")
    assert set(cf.unsourced) == {"nic.bandwidth_GBps", *(f"gpu.{k}" for k in doc["gpu"] if k != "model")}
    assert "unsourced: " in cf.cluster.source and "nic.bandwidth_GBps" in cf.cluster.source


def test_the_files_hold_the_old_literal_presets_numbers():
    for name, (nv, nv_us, nic, nic_us, nics, peak, copy, hbm) in OLD_LITERALS.items():
        c = get_cluster(name)
        assert c.intra == Link(nv, nv_us, CURVES["simai-alltoall-intra"]), name
        assert c.inter == Link(nic, nic_us, CURVES["simai-alltoall-inter"]), name
        assert c.collective_links == ((("allgather", "intra"), Link(nv, 0.0, CURVES["simai-nvlink"])),), name
        assert (c.nics_per_node, c.peak_tflops, c.copy_GBps, c.hbm_GBps) == (nics, peak, copy, hbm), name
        assert (c.gpus_per_node, c.nodes, c.mem_GB, c.gemm_eff, c.attn_eff) == (8, 1, 80.0, 0.6, 0.45), name
    _same_cluster(get_cluster("a800"), get_cluster("a800-4nic"))


@pytest.fixture
def conversion_only(tmp_path, monkeypatch):
    """The shipped files without what came after the conversion from the literals: the ``nccl`` block (the
    AllReduce algorithms beyond the ring, collectives.allreduce) and NCCL's protocol model (nccl_tuning),
    so the conversion itself stays checked."""
    for f in CF.clusters_dir().glob("*.yaml"):
        doc = yaml.safe_load(f.read_text())
        doc["nccl"] = {"protocols": False}
        doc["sources"] = {k: v for k, v in doc.get("sources", {}).items() if not k.startswith("nccl.")}
        (tmp_path / f.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setenv(CF.ENV_DIR, str(tmp_path))


@pytest.mark.parametrize("name", sorted(FIXED))
def test_predictions_are_the_literal_presets_outputs(name, conversion_only):
    from monta.perfmodel.reports.paper import alltoall_setup, step_setup

    exp = FIXED[name]
    rows = sweep(
        get_cluster(name, 2, 8),
        make_layout(2, 8, 8),
        [MiB, 4 * MiB, 16 * MiB],
        ["legacy", "deepspeed", "monta"],
        parse_chunks_list("1,4,auto"),
    )
    for size, (legacy, ds, m1, m4, (auto_n, auto_t)) in exp["alltoall"].items():
        got = [(r["chunks"], r["time_us"]) for r in rows if r["size_bytes"] == size]
        assert [t for _, t in got[:4]] == pytest.approx([legacy, ds, m1, m4], rel=1e-12), (name, size)
        assert got[4][0] == auto_n and got[4][1] == pytest.approx(auto_t, rel=1e-12), (name, size)
    assert alltoall_setup(name)["best"]["speedup"] == pytest.approx(exp["paper_speedup"], rel=1e-12)
    st = step_setup(name, None, "none")
    assert st["model"].num_layers == exp["layers"]
    steps = tuple(st["steps"][v].total_us for v in ("legacy", "deepspeed", "monta"))
    assert steps == pytest.approx(exp["step_us"], rel=1e-12)


def test_the_new_clusters_state_their_hardware():
    p4de, p3dn, ndm = (get_cluster(n) for n in ("p4de", "p3dn", "ndm-a100-v4"))
    # p4de: 4 x 100 Gb/s EFA shared by 8 GPUs, an effective rate under the line rate
    assert (p4de.nics_per_node, p4de.gpus_per_node, p4de.mem_GB) == (4, 8, 80.0)
    assert p4de.inter.bandwidth_GBps < 100 / 8 and p4de.intra.bandwidth_GBps == get_cluster("a100").intra.bandwidth_GBps
    # p3dn: one 100 Gb/s NIC, V100 (125 TFLOP/s, 32 GB); the cube mesh's AllToAll has its own, lower rate
    assert (p3dn.nics_per_node, p3dn.peak_tflops, p3dn.mem_GB) == (1, 125.0, 32.0)
    assert p3dn.link("intra", "alltoall").bandwidth_GBps < p3dn.intra.bandwidth_GBps / 4
    assert p3dn.link("intra", "allgather").bandwidth_GBps == p3dn.intra.bandwidth_GBps
    assert "not a switch" in _doc("p3dn")["nvlink"]["note"]
    # NDm A100 v4: one HDR NIC per GPU
    assert (ndm.nics_per_node, ndm.inter.bandwidth_GBps) == (8, 23.5)


# -- malformed files: one line, naming the file, the key and what is expected ---------------------------
def _mutate(doc: dict, dotted: str, value) -> dict:
    *parents, last = dotted.split(".")
    node = doc
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(
    "dotted,value,message",
    [
        ("nic.speed_gbps", 400, "nic.speed_gbps: unknown key (in nic allowed: model, count, rate_gbps"),
        ("nvlink.bandwidth_GBps", KeyError, "nvlink.bandwidth_GBps: missing (expected a number > 0)"),
        ("gpus_per_node", "eight", "gpus_per_node: expected an integer >= 1, got 'eight'"),
        ("nic.bandwidth_GBps", -5, "nic.bandwidth_GBps: expected a number > 0, got -5"),
        ("gpu.gemm_eff", 1.5, "gpu.gemm_eff: expected a number in (0, 1], got 1.5"),
        ("nvlink.efficiency", "simai-fast", "nvlink.efficiency: unknown efficiency curve 'simai-fast'; choose one of"),
        ("nic.efficiency", [[1048576]], "nic.efficiency[0]: expected a pair [size_bytes, eff], got a list [1048576]"),
        ("schema", "monta.cluster/2", "schema: expected 'monta.cluster/1', got 'monta.cluster/2'"),
        (
            "collectives",
            {"broadcast": {"intra": {}}},
            "collectives.broadcast: unknown collective (choose from alltoall",
        ),
        ("sources", {"nic.speed": "a data sheet"}, "sources.nic.speed: names no key of this file"),
    ],
)
def test_a_malformed_file_is_one_line_through_the_cli(tmp_path, capsys, dotted, value, message):
    from monta.cli import main

    path = _write(tmp_path / "bad.yaml", _mutate(_user_doc(), dotted, value))
    assert main(["predict", "alltoall", "--cluster", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"monta: error: cluster file {path}: {message}"), err


def test_bad_yaml_a_missing_file_and_an_unknown_name_are_one_line(tmp_path, capsys):
    from monta.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: monta.cluster/1\nname: [unclosed\n")
    for spec, expect in (
        (str(bad), f"cluster file {bad}: not valid YAML ("),
        (str(tmp_path / "none.yaml"), f"cluster file {tmp_path / 'none.yaml'} not found"),
        ("tpu-v9", "unknown cluster preset 'tpu-v9': choose one of a100, a800-4nic"),
    ):
        assert main(["predict", "alltoall", "--cluster", spec]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith(f"monta: error: {expect}"), err
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match=r"bad.yaml: expected a mapping with schema, name, gpu"):
        CF.load_cluster(bad)


# -- a user's own file ----------------------------------------------------------------------------------
def test_a_user_file_works_end_to_end(tmp_path, capsys):
    from monta.cli import main
    from monta.results import read_records

    path = _write(tmp_path / "my.yaml", _user_doc())
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "alltoall", "--cluster", str(path), "--sizes", "1M:4M:2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "on my-cluster (my-cluster [" in text and "unsourced: gpu.peak_tflops" in text
    recs = read_records(out)
    assert recs and {r["params"]["cluster"] for r in recs} == {"my-cluster"}
    # the per-GPU rates are the file's: 200 GB/s NVLink, 2 NICs x 20 GB/s over 8 GPUs
    assert get_cluster(path).per_gpu_GBps == (200.0, 5.0)


def test_a_copy_of_a_shipped_file_predicts_as_the_shipped_name(tmp_path):
    """Name or path, the same file gives the same predictions (sources are not part of a prediction)."""
    doc = _doc("a800-4nic")
    doc.pop("sources")
    doc.pop("aliases")
    path = _write(tmp_path / "copy.yaml", doc)
    layout = make_layout(2, 8, 8)
    chunks = parse_chunks_list("1,auto")
    by_name = sweep(get_cluster("a800-4nic", 2, 8), layout, [MiB, 8 * MiB], ["legacy", "monta"], chunks)
    by_path = sweep(get_cluster(str(path), 2, 8), layout, [MiB, 8 * MiB], ["legacy", "monta"], chunks)
    assert [r["time_us"] for r in by_name] == [r["time_us"] for r in by_path]


def test_clusters_dir_can_be_replaced(tmp_path, monkeypatch):
    _write(tmp_path / "lab.yaml", _user_doc("lab"))
    monkeypatch.setenv(CF.ENV_DIR, str(tmp_path))
    assert CF.cluster_names() == ("lab",) and get_cluster("lab").per_gpu_GBps == (200.0, 5.0)
    with pytest.raises(ValueError, match=r"unknown cluster preset 'a800-4nic': choose one of lab,"):
        get_cluster("a800-4nic")
    _write(tmp_path / "other.yaml", _user_doc("not-other"))
    with pytest.raises(ValueError, match=r"other.yaml: name: expected 'other' \(the file's name\), got 'not-other'"):
        get_cluster("other")
    monkeypatch.setenv(CF.ENV_DIR, str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="MONTA_CLUSTERS_DIR=.*nope: not a directory"):
        CF.cluster_names()


# -- writing a cluster (what `monta calibrate` uses) ----------------------------------------------------
def test_dump_writes_a_file_that_loads_as_the_same_cluster(tmp_path):
    for name in CF.cluster_names():
        c = get_cluster(name)
        path = CF.dump(c, tmp_path / f"{name}.yaml", base=name)
        back = CF.read(path)
        _same_cluster(back.cluster, c)
        assert back.unsourced == ()  # every number unchanged from the base keeps its source
        assert back.doc["base"] == name and back.doc["description"] == _doc(name)["description"]


def test_dump_of_a_fitted_cluster_keeps_unchanged_sources_and_asks_for_new_ones(tmp_path):
    h100 = get_cluster("h100")
    fitted = replace(
        h100,
        name="h100-fitted",
        nodes=2,
        collective_links=(
            *h100.collective_links,
            (("allreduce", "inter"), Link(44.0, 20.0, ((MiB, 0.5), (64 * MiB, 0.9), (2**30, 1.0)))),
        ),
    )
    path = CF.dump(fitted, tmp_path / "fit.yaml", base="h100")
    back = CF.read(path)
    _same_cluster(back.cluster, fitted)
    assert back.doc["collectives"]["allreduce"]["inter"]["efficiency"][1] == [64 * MiB, 0.9]
    assert set(back.unsourced) == {
        "nodes",
        *(f"collectives.allreduce.inter.{k}" for k in ("bandwidth_GBps", "latency_us", "efficiency")),
    }
    path = CF.dump(
        fitted,
        tmp_path / "fit2.yaml",
        base="h100",
        sources={"nodes": "the logs' two hosts", "collectives.allreduce": "fitted by monta calibrate from x.log"},
        extra={"calibration": {"logs": ["x.log"]}},
    )
    assert CF.read(path).unsourced == () and CF.read(path).doc["calibration"] == {"logs": ["x.log"]}
    with pytest.raises(ValueError, match="exists"):
        CF.dump(fitted, path)
    emulated = replace(h100, host_cores=2)
    with pytest.raises(ValueError, match="host_cores belong to an emulator link profile"):
        CF.to_doc(emulated)


# -- the emulator and the clock read the files ----------------------------------------------------------
def _rho(doc: dict) -> float:
    """Per-GPU NVLink over per-GPU NIC share, from the file's own numbers."""
    return doc["nvlink"]["bandwidth_GBps"] / (doc["nic"]["bandwidth_GBps"] * doc["nic"]["count"] / doc["gpus_per_node"])


def test_emulate_presets_prints_every_files_rho(capsys):
    from monta.cli import main

    assert main(["emulate", "presets"]) == 0
    text = capsys.readouterr().out
    for name in CF.cluster_names():
        assert f"{name}@0.125: inter 0.125 Gbit/s" in text
        assert f"(intra:inter {_rho(_doc(name)):.2f}, the per-GPU rho of {name})" in text, name
    assert "intra:inter 46.15, the per-GPU rho of p4de" in text  # 240 / (4 x 10.4 / 8)


def test_a_user_file_is_an_emulator_topology_and_a_clock(tmp_path):
    from monta.emulate.topology import Topology
    from monta.model.config import PRESETS as MODELS
    from monta.perfmodel.training.clock import Clock

    path = _write(tmp_path / "my.yaml", _user_doc())
    topo = Topology.preset(f"{path}@0.1")
    assert topo.name == "my-cluster@0.1" and topo.cluster == str(path.resolve())
    assert topo.ratio == pytest.approx(_rho(_user_doc()), rel=1e-3) and topo.inter_gbps == 0.1
    assert Topology.preset(str(path), inter_gbps=0.05).ratio == pytest.approx(topo.ratio, rel=1e-3)
    with pytest.raises(ValueError, match=r"unknown topology preset 'p5'; choose one of unshaped, a100,"):
        Topology.preset("p5")
    # the step clock of a run emulating the file = the clock of the shipped cluster with the same numbers
    doc = _doc("a800-4nic")
    doc.pop("aliases")
    copy = _write(tmp_path / "copy.yaml", doc)
    kw = dict(tp=4, ep=2, gpus_per_node=4, inter_gbps=0.1, intra_gbps=1.0)
    mini = MODELS["moe-2x70b-mini"]
    assert Clock(str(copy), mini, **kw).describe() | {"cluster": ""} == Clock("a800-4nic", mini, **kw).describe() | {
        "cluster": ""
    }
    with pytest.raises(ValueError, match=r"clock cluster 'p5': unknown cluster preset 'p5'"):
        Clock("p5", mini, **kw)


def test_the_pipeline_config_checks_its_clusters(tmp_path):
    sys.path.insert(0, str(ROOT / "workflows" / "lib"))
    from configcheck import ConfigError, check_config

    cfg = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    schema = ROOT / "config" / "schema.yaml"
    user = _write(tmp_path / "my.yaml", _user_doc())
    assert check_config({**cfg, "predict": {**cfg["predict"], "cluster": str(user)}}, schema)["predict"][
        "cluster"
    ] == str(user)
    with pytest.raises(ConfigError, match=r"^config key predict.cluster: unknown cluster preset 'a900'"):
        check_config({**cfg, "predict": {**cfg["predict"], "cluster": "a900"}}, schema)
    with pytest.raises(
        ConfigError, match=r"^config key network.topology: cluster file .*bad.yaml: nic.count: expected"
    ):
        bad = _write(tmp_path / "bad.yaml", _mutate(_user_doc(), "nic.count", 0))
        check_config({**cfg, "network": {**cfg["network"], "topology": str(bad)}}, schema)
