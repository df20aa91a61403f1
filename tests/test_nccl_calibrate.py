"""``monta calibrate --nccl-tests``: the parser on the shipped public logs, the fit's reproduction of
each log (the issue's acceptance: busbw within 10% at every size >= 1 MiB), a leave-half-out check,
the per-collective curves in the cost model, and the command's refusals."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from monta.cli import main
from monta.hardware.links import Link
from monta.hardware.profile import get_cluster
from monta.parallel import GroupShape
from monta.perfmodel.network import collectives
from monta.perfmodel.network import nccl_fit as F
from monta.perfmodel.network import nccltests as N

LOGS = Path(__file__).resolve().parents[1] / "data" / "published" / "nccl-tests"
MiB = 2**20

# file: (collective, ranks, nodes, GPUs per node, GPU model, rows, first size, last size, extra CLI args).
# Row counts and sizes were read off the files by eye; the p4de table (AWS README) has no "# Rank" lines.
SHIPPED = {
    "a100-1x8-allreduce.log": ("all_reduce", 8, 1, 8, "NVIDIA A100-SXM4-40GB", 11, MiB, 2**30, []),
    "a100-2x8-allreduce-aws-p4de.log": (
        "all_reduce", 16, 2, 8, "", 29, 8, 2**31, ["--cluster", "a100", "--nodes", "2", "--gpus-per-node", "8"],
    ),
    "h100-1x8-allreduce-nvls.log": ("all_reduce", 8, 1, 8, "NVIDIA H100 80GB HBM3", 6, 128 * MiB, 2**32, []),
    "h100-2x8-allreduce-gcp-a3mega.log": ("all_reduce", 16, 2, 8, "NVIDIA H100 80GB HBM3", 31, 8, 2**33, []),
    "h100-2x8-allreduce-ib-slurm.log": ("all_reduce", 16, 2, 8, "NVIDIA H100 80GB HBM3", 11, 8 * MiB, 2**33, []),
    "h100-2x8-allreduce-ring-ib-slurm.log": (
        "all_reduce", 16, 2, 8, "NVIDIA H100 80GB HBM3", 11, 8 * MiB, 2**33, [],
    ),
}  # fmt: skip


def _log(name: str) -> N.NcclTestsLog:
    (log,) = N.parse_file(LOGS / name)
    if not log.devices:  # the AWS table: its README states 2 x p4de.24xlarge (8 GPUs each)
        log.nodes_hint, log.nranks_hint = 2, 16
    return log


def test_every_shipped_log_is_listed_in_sources():
    files = {p.name for p in LOGS.glob("*.log")}
    assert files == set(SHIPPED)
    sources = (LOGS / "SOURCES.md").read_text()
    assert all(name in sources for name in files)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_parse_shipped_log(name):
    coll, ranks, nodes, gpn, gpu, nrows, first, last, _ = SHIPPED[name]
    log = _log(name)
    assert (log.collective, log.ranks, log.nodes, log.gpus_per_node, log.gpu) == (coll, ranks, nodes, gpn, gpu)
    assert len(log.rows) == nrows and (log.rows[0].size, log.rows[-1].size) == (first, last)
    factor = (ranks - 1) / ranks * (2 if coll == "all_reduce" else 1)
    for r in log.rows:
        # The columns agree with each other as nccl-tests computes them (a transcription check too).
        algbw = r.size / r.time_us / 1e3
        assert r.algbw_GBps == pytest.approx(algbw, abs=0.006, rel=2e-3)
        assert r.busbw_GBps == pytest.approx(algbw * factor, abs=0.006, rel=2e-3)
        assert r.ip_busbw_GBps is not None and r.wrong in ("0", "N/A")
    if log.avg_busbw_GBps is not None:  # nccl-tests' trailer averages both busbw columns
        both = [r.busbw_GBps for r in log.rows] + [r.ip_busbw_GBps for r in log.rows]
        assert log.avg_busbw_GBps == pytest.approx(statistics.fmean(both), rel=0.01)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_calibrate_reproduces_each_log_within_10_percent(name, tmp_path, capsys):
    out = tmp_path / "mine.yaml"
    rc = main(["calibrate", "--nccl-tests", str(LOGS / name), "--out", str(out), *SHIPPED[name][-1]])
    printed = capsys.readouterr().out
    assert rc == 0 and out.exists() and name in printed
    doc = yaml.safe_load(out.read_text())
    assert doc["schema"] == "monta.cluster/1"
    log = _log(name)
    (per_link,) = doc["calibration"]["residuals"][log.op].values()
    fitted = {size: fit for size, _, fit in per_link["points"]}
    checked = 0
    for r in log.rows:
        if r.size >= MiB:  # against the busbw column as printed in the log
            assert fitted[r.size] == pytest.approx(r.busbw_GBps, rel=0.10), (name, r.size)
            checked += 1
    assert checked >= 6


def test_leave_half_out():
    """Fit on every other size, predict the sizes in between (>= 1 MiB). The fit is a curve with a
    knot per 4x, not a table: it must carry to unseen sizes (medians measured: 0.4-7.4%)."""
    medians = {}
    for name in SHIPPED:
        pts = F.points_from_log(_log(name))
        train = pts[::2]
        test = [p for p in pts[1::2] if p.size_bytes >= MiB]
        base = "a100" if name.startswith("a100") else "h100"
        cl = F.fit_cluster(get_cluster(base), train)
        times = [F.predict_us(cl, p.op, p.nodes, p.gpus_per_node, p.size_bytes) for p in test]
        errs = [
            abs(collectives.busbw_GBps(p.op, p.size_bytes, t, p.ranks) / p.busbw_GBps - 1) for p, t in zip(test, times)
        ]
        medians[name] = statistics.median(errs)
    assert all(m < 0.15 for m in medians.values()), medians


def test_single_and_multi_node_logs_together():
    """The single-node NVLS log prices the intra link, the 2-node log the NICs given it."""
    logs = [_log("h100-1x8-allreduce-nvls.log"), _log("h100-2x8-allreduce-gcp-a3mega.log")]
    cal = F.calibrate(get_cluster("h100"), logs)
    intra, inter = cal.fit("allreduce", "intra"), cal.fit("allreduce", "inter")
    assert intra.link.bandwidth_GBps == pytest.approx(474, rel=0.05)  # busbw plateau of the NVLS log
    assert max(abs(e) for e in intra.errors(MiB) + inter.errors(MiB)) < 0.10
    assert cal.cluster.link("intra", "allreduce") is intra.link
    assert (cal.cluster.nodes, cal.cluster.gpus_per_node) == (2, 8)


def test_points_from_busbw_only_give_the_same_fit():
    """Published rows carry a size and a busbw but no log: the fit takes plain points."""
    log = _log("h100-2x8-allreduce-gcp-a3mega.log")
    pts = [F.Point.of("all_reduce_perf", 2, 8, r.size, busbw_GBps=r.busbw_GBps) for r in log.rows if r.busbw_GBps > 0]
    cl = F.fit_cluster(get_cluster("h100"), pts)
    for p in pts:
        if p.size_bytes >= MiB:
            t = F.predict_us(cl, "allreduce", 2, 8, p.size_bytes)
            assert collectives.busbw_GBps("allreduce", p.size_bytes, t, 16) == pytest.approx(p.busbw_GBps, rel=0.10)
    with pytest.raises(ValueError, match="time_us or busbw_GBps"):
        F.Point.of("all_reduce", 2, 8, MiB)


def test_reducescatter_and_allreduce_use_their_own_curves_when_calibrated():
    # the curve lookup, not the algorithm pick nor NCCL's protocol model (a fitted curve is end to end)
    base = replace(get_cluster("a800"), allreduce_algorithms=("ring",), nccl_arch="")
    g = GroupShape(16, 8, 8)
    slow = Link(1.0, 0.0)
    # Without a calibration both ride AllGather's ring: unchanged predictions.
    assert collectives.reducescatter(64 * MiB, g, base).time_us == collectives.allgather(4 * MiB, g, base).time_us
    rs = F.with_link(base, "reducescatter", "inter", slow)
    assert (
        collectives.reducescatter(64 * MiB, g, rs).inter_us > 10 * collectives.reducescatter(64 * MiB, g, base).inter_us
    )
    assert collectives.allgather(4 * MiB, g, rs).time_us == collectives.allgather(4 * MiB, g, base).time_us
    # AllReduce prefers its own curve, then ReduceScatter's.
    assert collectives.allreduce(64 * MiB, g, rs).time_us == 2 * collectives.reducescatter(64 * MiB, g, rs).time_us
    ar = F.with_link(rs, "allreduce", "inter", base.inter)
    assert collectives.allreduce(64 * MiB, g, ar).time_us == collectives.allreduce(64 * MiB, g, base).time_us


def test_written_links_rebuild_the_fitted_cluster(tmp_path):
    out = tmp_path / "c.yaml"
    name = "h100-2x8-allreduce-gcp-a3mega.log"
    assert main(["calibrate", "--nccl-tests", str(LOGS / name), "--out", str(out)]) == 0
    rebuilt = get_cluster(str(out))  # the written file, read by the model's own loader
    assert rebuilt.nodes == 2 and yaml.safe_load(out.read_text())["base"] == "h100"
    cal = F.calibrate(get_cluster("h100"), [_log(name)])
    for size in (MiB, 64 * MiB, 2**30):
        assert F.predict_us(rebuilt, "allreduce", 2, 8, size) == pytest.approx(
            F.predict_us(cal.cluster, "allreduce", 2, 8, size), rel=1e-9
        )


def test_parser_tolerates_prefixes_concatenation_and_old_layouts():
    text = (LOGS / "h100-1x8-allreduce-nvls.log").read_text()
    tagged = "\n".join(f"[1,0]<stdout>:{line}" for line in text.splitlines())
    (log,) = N.parse(tagged, "tagged", collective="all_reduce")
    assert (log.ranks, len(log.rows)) == (8, 6)
    ar = (LOGS / "h100-2x8-allreduce-gcp-a3mega.log").read_text()
    # A parser fixture, not data: the same run relabelled as an alltoall_perf run (binary name and redop).
    a2a = "# Collective test starting: alltoall_perf\n" + ar.replace("all_reduce_perf", "alltoall_perf").replace(
        " sum ", " none "
    )
    # Two runs in one file; the second is named by the command echoed before it, not by the first's binary.
    both = N.parse(a2a + ar, "both.log")
    assert [(r.collective, len(r.rows), r.ranks) for r in both] == [("alltoall", 31, 16), ("all_reduce", 31, 16)]
    with pytest.raises(ValueError, match="cannot tell which collective"):
        N.parse(text + text, "both.log")  # the NVLS runs name no binary, the file name neither
    # A v2.9-era row (no root column, error instead of #wrong) and a blank alltoall redop.
    old = "#  Rank  0 Pid 1 on a device  0 [0x00] GPU\n#  Rank  1 Pid 1 on a device  1 [0x00] GPU\n"
    old += "268435456  67108864  float  sum  122131  2.20  4.33  2e-06  122165  2.20  4.33  2e-06\n"
    old += "268435456   1048576  float       520935  0.52  0.51  0e+00  519562  0.52  0.51  1e+00\n"
    (run,) = N.parse(old, "x_allreduce.txt")
    assert run.collective == "all_reduce" and [r.time_us for r in run.rows] == [122131.0, 520935.0]
    with pytest.raises(ValueError, match="says alltoall_perf but --collective says all_reduce"):
        N.parse(a2a, "a.log", collective="all_reduce")
    with pytest.raises(ValueError, match="cannot tell which collective"):
        N.parse(text, "mystery.log")


def test_corrupt_log_is_one_line(tmp_path, capsys):
    bad = tmp_path / "cut.log"
    lines = (LOGS / "h100-1x8-allreduce-nvls.log").read_text().splitlines()
    bad.write_text("\n".join(lines[:15]) + "\n   134217728      33554432     flo")  # cut inside the first row
    assert main(["calibrate", "--nccl-tests", str(bad), "--cluster", "h100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("monta: error: ") and "no nccl-tests table" in err


def test_out_is_never_overwritten_silently(tmp_path, capsys):
    out = tmp_path / "mine.yaml"
    out.write_text("keep me\n")
    log = str(LOGS / "a100-1x8-allreduce.log")
    assert main(["calibrate", "--nccl-tests", log, "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "keep me\n"
    assert main(["calibrate", "--nccl-tests", log, "--out", str(out), "--force"]) == 0
    assert yaml.safe_load(out.read_text())["base"] == "a100"
    assert not list(tmp_path.glob(".*.tmp"))
