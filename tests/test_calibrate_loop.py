"""``monta calibrate`` on a user's cluster end to end: every nccl-tests row checked (a corrupt one named by
file and line, exit 2), logs of several collectives fitted back to the rates that made them, collectives the
model does not price set aside and said, a fit past 25% error refused (exit 1), the exchange records of
the emulated "mystery" cluster (docs/calibrate.md) fitted to its shaped rates, and ``monta predict accuracy
--cluster`` scoring records against the calibrated cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from monta.cli import main
from monta.hardware.links import Link
from monta.hardware.profile import get_cluster
from monta.perfmodel.network import collectives
from monta.perfmodel.network import nccl_fit as F
from monta.perfmodel.reports import ncclrows

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "data" / "published" / "nccl-tests"
MYSTERY = ROOT / "tests" / "data" / "mystery-2x4-alltoall.jsonl"
MiB = 2**20
SIZES = [MiB * 2**k for k in range(10)]  # 1 MiB .. 512 MiB


def _truth():
    """An H100 node whose collectives run at rates no preset has (flat curves, known latencies)."""
    cl = get_cluster("h100")
    known = {
        ("allgather", "intra"): Link(300.0, 6.0),
        ("reducescatter", "intra"): Link(250.0, 8.0),
        ("alltoall", "intra"): Link(200.0, 10.0),
        ("allgather", "inter"): Link(30.0, 12.0),
        ("reducescatter", "inter"): Link(28.0, 14.0),
        ("alltoall", "inter"): Link(21.0, 18.0),
    }
    for (op, cls), link in known.items():
        cl = F.with_link(cl, op, cls, link)
    return cl, known


def _log_text(cluster, binary: str, nodes: int, gpn: int, times=None, sizes=SIZES) -> str:
    """nccl-tests output as it prints it: the marker, '# Rank' lines, then rows of time, algbw, busbw."""
    n = nodes * gpn
    lines = [f"# Collective test starting: {binary}_perf", "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 536870912"]
    gpu = "NVIDIA H100 80GB HBM3"
    for r in range(n):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {100 + r} on node{r // gpn} device  {r % gpn} [0x{r:02x}] {gpu}")
    lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong")
    op = F._model_op(binary) if binary != "broadcast" else "allreduce"
    for i, size in enumerate(sizes):
        t = times[i] if times else F.predict_us(cluster, op, nodes, gpn, size)
        count = size // 4 // (n if binary in ("all_gather", "reduce_scatter", "alltoall") else 1)
        algbw = size / t / 1e3
        busbw = algbw if binary == "broadcast" else collectives.busbw_GBps(op, size, t, n)
        row = f"{size:12d}  {count:12d}  float  none  -1  {t:9.1f}  {algbw:7.2f}  {busbw:7.2f}  0"
        lines.append(row + f"  {t:9.1f}  {algbw:7.2f}  {busbw:7.2f}  0")
    lines += ["# Avg bus bandwidth    : 1.0", f"# Collective test concluded: {binary}_perf", ""]
    return "\n".join(lines)


def _write_logs(tmp_path, cluster) -> list[str]:
    paths = []
    for binary in ("all_gather", "reduce_scatter", "alltoall"):
        for nodes in (1, 2):
            p = tmp_path / f"{nodes}node-{binary}.log"
            p.write_text(_log_text(cluster, binary, nodes, 8))
            paths.append(str(p))
    return paths


def test_fit_recovers_the_rates_of_several_collectives(tmp_path, capsys):
    truth, known = _truth()
    paths = _write_logs(tmp_path, truth)
    bcast = tmp_path / "2node-broadcast.log"  # a collective the model does not price: checked, set aside
    bcast.write_text(_log_text(truth, "broadcast", 2, 8))
    out = tmp_path / "mine.yaml"
    rc = main(["calibrate", "--nccl-tests", *paths, str(bcast), "--cluster", "h100", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0 and out.exists()
    fitted = get_cluster(str(out))
    for (op, cls), link in known.items():
        got = fitted.link(cls, op)
        assert got.bandwidth_GBps * got.eff(SIZES[-1]) == pytest.approx(link.bandwidth_GBps, rel=0.03), (op, cls)
        for size in SIZES:  # the whole curve, not just its top: the times the logs hold
            nodes = 1 if cls == "intra" else 2
            want = F.predict_us(truth, op, nodes, 8, size)
            assert F.predict_us(fitted, op, nodes, 8, size) == pytest.approx(want, rel=0.05), (op, cls, size)
    # The closing table: every fitted pair names its logs; allreduce keeps the base's figure; broadcast is said.
    table = printed[printed.index("what was fitted") :]
    assert "alltoall inter" in table and "fitted to 10 sizes of 2node-alltoall.log" in table
    assert "allreduce intra" in table and "kept: no log measures it" in table
    assert "broadcast" in table and "10 rows read and checked; the model prices no broadcast" in table


def _corrupt(tmp_path, lineno: int, old: str, new: str) -> Path:
    lines = (LOGS / "a100-1x8-allreduce.log").read_text().splitlines()
    lines[lineno - 1], hits = re.subn(rf"(?<!\S){re.escape(old)}(?!\S)", new, lines[lineno - 1], count=1)
    assert hits == 1
    p = tmp_path / "corrupt-allreduce.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def _row_tokens(lineno: int) -> list[str]:
    return ncclrows.N._strip((LOGS / "a100-1x8-allreduce.log").read_text().splitlines()[lineno - 1]).split()


def _first_row_line() -> int:
    for n, line in enumerate((LOGS / "a100-1x8-allreduce.log").read_text().splitlines(), 1):
        if ncclrows._is_row(ncclrows.N._strip(line)):
            return n
    raise AssertionError("no row")


@pytest.mark.parametrize(
    "what, edit, said",
    [
        ("a size with a letter", lambda t: (t[0], t[0][:-2] + "a" + t[0][-1]), "size"),
        ("a time 10x off", lambda t: (t[5], f"{float(t[5]) * 10:.1f}"), "size / time"),
        ("a bandwidth that is not a number", lambda t: (t[6], t[6] + "x"), "algbw"),
        ("a count that is not count x type size", lambda t: (t[1], str(int(t[1]) * 2)), "is not count"),
    ],
)
def test_a_corrupt_row_is_named_by_file_and_line(tmp_path, capsys, what, edit, said):
    lineno = _first_row_line() + 3  # a row in the middle of the table
    old, new = edit(_row_tokens(lineno))
    path = _corrupt(tmp_path, lineno, old, new)
    out = tmp_path / "never.yaml"
    rc = main(["calibrate", "--nccl-tests", str(path), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, what
    assert f"{path}:{lineno}:" in err and said in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_every_shipped_row_passes_the_check(name):
    checked = ncclrows.check_file(str(LOGS / name))
    assert checked.rows >= 6 and not checked.unpriced


def test_a_fit_past_25_percent_exits_1_and_writes_nothing(tmp_path, capsys):
    truth, _ = _truth()
    times = [F.predict_us(truth, "alltoall", 2, 8, s) for s in SIZES]
    times[-1] *= 3  # a collapse at the top the non-decreasing curve cannot follow (columns still agree)
    log = tmp_path / "2node-alltoall.log"
    log.write_text(_log_text(truth, "alltoall", 2, 8, times=times))
    out = tmp_path / "mine.yaml"
    rc = main(["calibrate", "--nccl-tests", str(log), "--cluster", "h100", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 1 and not out.exists()
    assert "the alltoall inter fit misses 2node-alltoall.log" in printed and "(limit 25%)" in printed


def _mystery_rates() -> tuple[float, float]:
    """The emulated cluster's shaped rates, Gbit/s (read here to judge the fit; the fit never reads them)."""
    rec = json.loads(MYSTERY.read_text().splitlines()[0])
    return rec["params"]["inter_gbps"], rec["params"]["intra_gbps"]


def test_records_alone_recover_the_emulated_rates(tmp_path, capsys):
    out = tmp_path / "mystery.yaml"
    rc = main(["calibrate", "--records", str(MYSTERY), "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    fitted = get_cluster(str(out))
    inter_gbps, intra_gbps = _mystery_rates()
    # A node's NIC and its loopback (the ranks' per-GPU intra links together), within 5% of the shaping.
    assert fitted.inter.bandwidth_GBps * fitted.nics_per_node * 8 == pytest.approx(inter_gbps, rel=0.05)
    assert fitted.intra.bandwidth_GBps * fitted.gpus_per_node * 8 == pytest.approx(intra_gbps, rel=0.05)
    doc = yaml.safe_load(out.read_text())
    assert doc["sources"]["gpu.peak_tflops"].startswith("not measured")  # the file says what it does not know
    notes = doc["calibration"]["records"]
    assert notes["mape"] < 0.05 and len(notes["points"]) == 14
    assert "no log measures it; rate x" in printed


def test_predict_accuracy_on_a_cluster_scores_the_records(tmp_path, capsys):
    cal = tmp_path / "mystery.yaml"
    assert main(["calibrate", "--records", str(MYSTERY), "--out", str(cal)]) == 0
    out = tmp_path / "accuracy.jsonl"
    rc = main(["predict", "accuracy", "--measured", str(MYSTERY), "--cluster", str(cal), "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0 and "MAPE" in printed
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    exchanges = [r for r in recs if r["params"]["variant"] in ("legacy", "deepspeed", "monta")]
    assert len(exchanges) == 10 and all(r["source"] == "predicted" for r in recs)
    assert sum(abs(r["metrics"]["error"]) for r in exchanges) / len(exchanges) < 0.05
    # A preset prices the same records too (it knows nothing of these rates: far off, but priced).
    assert main(["predict", "accuracy", "--measured", str(MYSTERY), "--cluster", "a800"]) == 0


def test_predict_accuracy_takes_a_profile_or_a_cluster_not_both(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["predict", "accuracy", "--measured", str(MYSTERY), "--cluster", "a800", "--profile", "x.json"])
    assert e.value.code == 2


def test_measured_records_need_a_base_cluster(tmp_path, capsys):
    recs = [json.loads(x) for x in MYSTERY.read_text().splitlines()]
    for r in recs:
        r["source"] = "measured"
    p = tmp_path / "real.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["calibrate", "--records", str(p)]) == 2
    assert "pass --cluster" in capsys.readouterr().err
    assert main(["calibrate", "--records", str(p), "--cluster", "a800"]) == 0


def test_logs_of_only_unpriced_collectives_say_so_and_write_nothing(tmp_path, capsys):
    truth, _ = _truth()
    bcast = tmp_path / "2node-broadcast.log"
    bcast.write_text(_log_text(truth, "broadcast", 2, 8))
    out = tmp_path / "f.yaml"
    assert main(["calibrate", "--nccl-tests", str(bcast), "--cluster", "h100", "--out", str(out)]) == 2
    assert "the logs hold 10 broadcast rows: give nccl-tests logs of all_reduce" in capsys.readouterr().err
    assert not out.exists()
    # Without --cluster: the same line, not "the records name no GPU" (no records were given).
    assert main(["calibrate", "--nccl-tests", str(bcast)]) == 2
    assert "the logs hold 10 broadcast rows" in capsys.readouterr().err


def test_a_fit_that_sets_no_link_writes_nothing(tmp_path, capsys):
    """Times far below what the base's intra links take alone: the inter link sets none of them, nothing is
    fitted, and the base must not be written out labelled as calibrated."""
    truth, _ = _truth()
    sizes = SIZES[3:]
    times = [F.predict_us(truth, "alltoall", 2, 8, s) * 0.05 for s in sizes]
    log = tmp_path / "2node-alltoall.log"
    log.write_text(_log_text(truth, "alltoall", 2, 8, times=times, sizes=sizes))
    out = tmp_path / "f.yaml"
    assert main(["calibrate", "--nccl-tests", str(log), "--cluster", "h100", "--out", str(out)]) == 2
    assert "nothing was fitted: no link of h100 sets the logs' times" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("base", ["h100", str(ROOT / "clusters" / "h100.yaml")])
def test_the_calibrated_cluster_is_named_after_its_base(tmp_path, base):
    truth, _ = _truth()
    log = tmp_path / "2node-alltoall.log"
    log.write_text(_log_text(truth, "alltoall", 2, 8))
    out = tmp_path / "f.yaml"
    assert main(["calibrate", "--nccl-tests", str(log), "--cluster", base, "--out", str(out)]) == 0
    assert get_cluster(str(out)).name == "h100-calibrated"  # a file's name without its .yaml


@pytest.mark.parametrize("spec", ["emulator:prof.json", "prof.json"])
def test_predict_accuracy_refuses_a_link_profile_as_a_cluster(tmp_path, capsys, spec):
    """A cluster prices at one rate: emulated records at a dilated clock would be off by the dilation."""
    assert main(["predict", "accuracy", "--measured", str(MYSTERY), "--cluster", spec]) == 2
    assert "a link profile prices emulated records at their clock: use --profile prof.json" in capsys.readouterr().err
