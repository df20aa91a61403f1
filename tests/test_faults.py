"""Bad input and faults (docs/reliability.md): a clear one-line error or a correct result, never a traceback,
a hang or lost records. Single-process tests: nothing here starts a rank or an emulated network
(the launcher is replaced by one that fails the test if anything reaches it)."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest
import yaml

from monta.cli import main
from monta.results import RecordError, make_record, read_records, write_records

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflows" / "lib"))
ENV = {"python": "3.11"}


@pytest.fixture
def no_launch(monkeypatch):
    """Any attempt to start ranks or the emulated cluster fails the test."""
    import monta.emulate
    import monta.emulate.launcher

    def boom(*a, **k):
        raise AssertionError("a rank or the emulated cluster was started before the bad flag was refused")

    monkeypatch.setattr(monta.emulate, "launch", boom)
    monkeypatch.setattr(monta.emulate.launcher, "launch", boom)
    import monta.bench.alltoall.worker as w  # the env launcher's path into a rank

    monkeypatch.setattr(w, "main", boom)


def one_line_error(capsys, argv, code=2):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == code, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def rec(time_us=100.0, size=1 << 20, variant="monta", **metrics):
    return make_record(
        kind="alltoall",
        source="emulated",
        experiment="t",
        env=ENV,
        params={"size_bytes": size, "variant": variant, "chunks": 2, "nodes": 2, "gpus_per_node": 4, "tp": 4, "ep": 2},
        metrics={"time_us": time_us, **metrics},
    )


# -- class 1: every flag checked before anything starts ----------------------------------------
A2A = ["bench", "alltoall", "--nodes", "2", "--gpus-per-node", "2", "--no-wandb"]


@pytest.mark.parametrize(
    "args,named",
    [
        (["--hidden", "0"], "--hidden 0: must be an integer from 1 to"),
        (["--hidden", "-1"], "--hidden -1: must be an integer from 1 to"),
        (["--experts", "-2"], "--experts -2: must be an integer from 1 to"),
        (["--experts", "0"], "--experts 0: must be an integer from 1 to"),
        (["--experts", "3"], "--experts 3: must be a multiple of EP=2"),
        (["--nodes", "0"], "--nodes 0: must be an integer from 1 to 250"),
        (["--gpus-per-node", "-4"], "--gpus-per-node -4: must be an integer"),
        (["--tp", "3"], "--tp 3: must be an integer from 1 to gpus_per_node=2"),
        (["--sizes", "0"], "--sizes 0: size 0 B is outside 1 B .. 1T"),
        (["--sizes", "128K:64K:2"], "--sizes 128K:64K:2: min 128K is above max 64K"),
        (["--sizes", "1M:16M:1"], "--sizes 1M:16M:1: the factor must be a number above 1"),
        (["--sizes", "1M:16M:nan"], "--sizes 1M:16M:nan: the factor must be a number above 1"),
        (["--sizes", "4Q"], "--sizes 4Q: size '4Q': expected a byte count"),
        (["--sizes", ",".join(["1M"] * 65)], "65 sizes; at most 64"),
        (["--exchanges", "legacy,tutel"], "--exchanges legacy,tutel: unknown 'tutel'"),
        (["--exchanges", ","], "--exchanges ,: empty; choose from legacy, deepspeed, monta"),
        (["--chunks", "0"], "--chunks 0: expected 1 to 64 integers, each from 1 to 4096"),
        (["--chunks", "two"], "--chunks two: expected a comma list of integers"),
        (
            ["--sizes", "64K", "--hidden", "256", "--chunks", "64"],
            "--chunks 64: 64 chunks exceed the capacity slice 16",
        ),
        (["--iters", "0"], "--iters 0: must be an integer from 1"),
        (["--warmup", "-1"], "--warmup -1: must be an integer from 0"),
        (["--target-ci", "inf"], "--target-ci inf: must be a finite number at least 0 and at most 10"),
        (["--budget-s", "nan"], "--budget-s nan: must be a finite number"),
        (["--timeout", "0"], "--timeout 0.0: must be a finite number at least 1"),
        (["--timeout", "nan"], "--timeout nan: must be a finite number"),
        (["--append"], "--append needs --out FILE"),
        (["--sizes", "1T"], "more than this machine's"),
    ],
)
def test_a_bad_flag_is_named_before_any_rank_starts(no_launch, capsys, args, named):
    err = one_line_error(capsys, A2A + args)
    assert named in err, err


def test_a_huge_size_range_is_refused_at_once_not_enumerated(no_launch, capsys):
    t0 = time.perf_counter()
    err = one_line_error(capsys, A2A + ["--sizes", "1M:1T:1.0000001"])
    assert time.perf_counter() - t0 < 2.0
    assert "--sizes 1M:1T:1.0000001: that range has 138629" in err and "at most 64" in err


def test_out_being_a_directory_is_refused_before_any_rank_starts(no_launch, capsys, tmp_path):
    err = one_line_error(capsys, A2A + ["--sizes", "64K", "--hidden", "256", "--out", str(tmp_path)])
    assert f"--out {tmp_path}: is a directory" in err


def test_out_under_a_file_or_a_read_only_directory_is_refused(no_launch, capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    err = one_line_error(capsys, A2A + ["--sizes", "64K", "--hidden", "256", "--out", str(tmp_path / "f" / "r.jsonl")])
    assert "is a file, not a directory" in err
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        err = one_line_error(capsys, A2A + ["--sizes", "64K", "--hidden", "256", "--out", str(ro / "r.jsonl")])
        assert f"cannot write in {ro} (its permissions forbid it: mode 555)" in err
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize(
    "args,named",
    [
        (["emulate", "run", "--nodes", "0", "--", "true"], "--nodes 0: must be an integer from 1 to 250"),
        (["emulate", "run", "--timeout", "-1", "--", "true"], "--timeout -1.0: must be a finite number above 0"),
        (["emulate", "run", "--inter-gbps", "nan", "--", "true"], "--inter-gbps nan: must be a number of Gbit/s"),
        (["emulate", "calibrate", "--out", "/"], "--out /: is a directory"),
        (
            ["emulate", "calibrate", "--out", "p.json", "--min-bytes", "16M", "--max-bytes", "1K"],
            "--min-bytes 16M --max-bytes 1K: need 1 <= min <= max",
        ),
        (["emulate", "probe", "--gpus-per-node", "0"], "--gpus-per-node 0: must be an integer from 1"),
        (["bench", "alltoall", "--topology", "a900"], "--topology a900: unknown topology preset 'a900'"),
        (
            ["bench", "alltoall", "--gpus-per-node", "2", "--sizes", "64K", "--hidden", "256", "--latency-us", "inf"],
            "--latency-us inf: must be a number of microseconds",
        ),
    ],
)
def test_a_bad_emulate_or_network_flag_is_named_before_anything_starts(no_launch, capsys, args, named):
    err = one_line_error(capsys, args + (["--no-wandb"] if args[0] == "bench" else []))
    assert named in err, err


@pytest.mark.parametrize(
    "args,named",
    [
        (["--steps", "0"], "--steps 0: must be an integer from 1"),
        (["--nodes", "0"], "--nodes 0: must be an integer from 1"),
        (["--seed", "-1"], "--seed -1: must be an integer from 0"),
        (["--capacity-factor", "nan"], "--capacity-factor nan: must be a finite number above 0"),
        (["--layers", "0"], "--layers 0: must be an integer from 1"),
        (["--variants", "monta,nope"], "--variants: unknown variant 'nope'; choose from deepspeed,"),
        (["--timeout", "-5"], "--timeout -5.0: must be a finite number"),
        (["--chunks", "four"], "--chunks='four': give an integer >= 1 or 'auto'"),
        (["--lancet-partitions", "0"], "--lancet-partitions 0: must be an integer from 1"),
    ],
)
def test_a_bad_step_flag_is_named_before_any_rank_starts(no_launch, capsys, args, named):
    pytest.importorskip("deepspeed")
    err = one_line_error(capsys, ["bench", "step", "--no-wandb"] + args)
    assert named in err, err


def test_step_out_being_a_directory_is_refused(no_launch, capsys, tmp_path):
    pytest.importorskip("deepspeed")
    err = one_line_error(capsys, ["bench", "step", "--no-wandb", "--out", str(tmp_path)])
    assert "--out" in err and "is a directory" in err


@pytest.mark.parametrize(
    "args,named",
    [
        (["predict", "alltoall", "--sizes", "0"], "--sizes 0: size 0 B is outside 1 B .. 1T"),
        (["predict", "alltoall", "--sizes", "128K:64K:2"], "min 128K is above max 64K"),
        (["predict", "alltoall", "--sizes", "1M:1T:1.0000001"], "at most 64"),
        (["predict", "alltoall", "--nodes", "0"], "--nodes 0: must be an integer from 1"),
        (["predict", "alltoall", "--tp", "16"], "--tp 16: must be an integer from 1 to 4"),
        (["predict", "alltoall", "--chunks", "0"], "--chunks 0: chunks 0: must be >= 1"),
        (["plan", "--nodes", "2", "--seq", "0"], "--seq 0: must be an integer from 1"),
        (["plan", "--nodes", "2", "--top", "0"], "--top 0: must be an integer from 1"),
        (["plan", "--nodes", "-1"], "--nodes -1: must be an integer from 1"),
    ],
)
def test_a_bad_predict_or_plan_flag_is_named(capsys, args, named):
    err = one_line_error(capsys, args)
    assert named in err, err


@pytest.mark.parametrize(
    "flag,value,named",
    [
        ("--threshold", "nan", "--threshold nan"),
        ("--threshold", "inf", "--threshold inf"),
        ("--threshold", "-0.1", "--threshold -0.1"),
        ("--threshold", "0", "--threshold 0.0"),
        ("--bootstrap", "0", "--bootstrap 0"),
        ("--bootstrap", "-5", "--bootstrap -5"),
        ("--confidence", "nan", "--confidence nan"),
        ("--confidence", "1", "--confidence 1.0"),
        ("--seed", "-1", "--seed -1"),
    ],
)
def test_a_bad_regress_flag_is_named(capsys, tmp_path, flag, value, named):
    f = write_records(tmp_path / "r.jsonl", [rec()])
    err = one_line_error(capsys, ["regress", "--baseline", str(f), "--current", str(f), flag, value])
    assert named in err, err


# -- class 2: one validating record loader, used by every reader ----------------------------------
def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = json.dumps(rec()) + "\n"
    out = {}

    def put(name, data: bytes, expect):
        p = tmp_path / f"{name}.jsonl"
        p.write_bytes(data)
        out[name] = (p, expect)

    put("latin1", good.encode() + "caf\xe9\n".encode("latin-1"), ":2: not UTF-8 text (byte 0xe9 at column 4)")
    put("list", good.encode() + b"[1, 2]\n", ":2: a JSON list, not a record")
    put("number", b"42\n", ":1: a JSON int, not a record")
    put("partial", good.encode() + b'{"schema": "monta.record/1"}\n', ":2: record is missing kind")
    r = rec()
    r["metrics"] = None
    put("metrics_null", (json.dumps(r) + "\n").encode(), ":1: metrics is null, not an object")
    put(
        "nan",
        good.encode() + (json.dumps(rec(float("nan"))) + "\n").encode(),
        ":2: metrics.time_us is NaN: a time must be a finite number above zero",
    )
    put("zero", (json.dumps(rec(0.0)) + "\n").encode(), ":1: metrics.time_us is 0.0")
    put("negative", (json.dumps(rec(-3.0)) + "\n").encode(), ":1: metrics.time_us is -3.0")
    put(
        "samples_nan",
        (json.dumps(rec(samples_us=[1.0, float("nan")])) + "\n").encode(),
        ":1: metrics.samples_us holds NaN",
    )
    put("truncated", good.encode() + good.encode()[:57], ":2: not a JSON record")
    put("empty", b"", "holds no records (empty file)")
    d = tmp_path / "adir"
    d.mkdir()
    out["directory"] = (d, "is a directory, not a records file")
    out["missing"] = (tmp_path / "nope.jsonl", "no such records file")
    return out


def test_the_record_loader_names_file_line_and_what_is_wrong(tmp_path):
    for name, (path, expect) in _bad_files(tmp_path).items():
        with pytest.raises(RecordError) as e:
            read_records(path)
        assert str(path) in str(e.value) and expect in str(e.value), (name, str(e.value))
        assert "\n" not in str(e.value)


def test_a_cut_off_last_line_is_called_cut_off(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(rec()) + "\n" + json.dumps(rec())[:40])
    with pytest.raises(RecordError, match=r"t.jsonl:2: .*the line is cut off"):
        read_records(p)


def test_regress_names_the_bad_input_file_and_line(capsys, tmp_path):
    base = write_records(tmp_path / "base.jsonl", [rec()])
    for name, (path, expect) in _bad_files(tmp_path).items():
        err = one_line_error(capsys, ["regress", "--baseline", str(base), "--current", str(path)])
        assert f"{path}" in err and expect in err, (name, err)


def test_all_nan_times_are_an_error_not_zero_regressed(capsys, tmp_path):
    base = write_records(tmp_path / "base.jsonl", [rec()])
    cur = tmp_path / "cur.jsonl"
    cur.write_text("".join(json.dumps(rec(float("nan"), samples_us=[float("nan")] * 3)) + "\n" for _ in range(2)))
    err = one_line_error(capsys, ["regress", "--baseline", str(base), "--current", str(cur)])
    assert f"{cur}:1: metrics.time_us is NaN" in err


def test_predict_accuracy_refuses_nan_measurements(capsys, tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text("{}")  # never read: the records are checked first
    cur = tmp_path / "m.jsonl"
    cur.write_text(json.dumps(rec(float("nan"))) + "\n")
    from monta.perfmodel.reports import cli as pcli

    err = one_line_error(capsys, ["predict", "accuracy", "--measured", str(cur), "--profile", str(prof)])
    assert f"{cur}:1: metrics.time_us is NaN" in err
    assert pcli  # the command's module imported fine


def test_the_analysis_reads_records_through_the_same_loader(tmp_path):
    from monta_analysis import frames

    bad = tmp_path / "a.jsonl"
    bad.write_text(json.dumps(rec(-1.0)) + "\n")
    with pytest.raises(RecordError, match=r"a.jsonl:1: metrics.time_us is -1.0"):
        frames.load([bad])


def test_records_written_by_the_project_load_back(tmp_path):
    """The loader accepts what the writers produce (NaN in a CI is data; in a time it is not)."""
    r = rec(120.0, samples_us=[110.0, 130.0], speedup_vs_legacy_ci=[float("nan"), float("nan")])
    p = write_records(tmp_path / "ok.jsonl", [r])
    assert read_records(p)[0]["metrics"]["samples_us"] == [110.0, 130.0]
    for f in (ROOT / "analysis" / "baselines").glob("*.jsonl"):
        assert read_records(f)


def test_a_killed_writers_temporary_file_goes_with_the_next_write_a_live_ones_stays(tmp_path):
    """A SIGKILL between mkstemp and the rename leaves `.NAME.PID.XXXX` beside the records: the next write of
    that file removes it once its writer is gone, and leaves a live writer's (and other files') alone."""
    import os
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    p = tmp_path / "r.jsonl"
    dead = tmp_path / f".r.jsonl.{gone.pid}.abc123"
    live = tmp_path / f".r.jsonl.{os.getppid()}.def456"
    other = tmp_path / f".s.jsonl.{gone.pid}.ghi789"
    for f in (dead, live, other):
        f.write_text("partial")
    write_records(p, [rec(1.0)])
    assert not dead.exists() and live.exists() and other.exists()
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".r.jsonl.")] == [live.name]


# -- class 3: --append never makes a file worse ---------------------------------------------------
def test_appending_after_a_cut_off_line_starts_a_new_line_and_says_so(tmp_path, capsys):
    p = tmp_path / "r.jsonl"
    whole = json.dumps(rec(1.0)) + "\n"
    p.write_text(whole + json.dumps(rec(2.0))[:50])
    write_records(p, [rec(3.0)], append=True)
    lines = p.read_text().splitlines()
    assert lines[0] == whole.strip() and lines[1] == json.dumps(rec(2.0))[:50]  # kept as it was
    assert json.loads(lines[2])["metrics"]["time_us"] == 3.0  # the new record is whole, on its own line
    err = capsys.readouterr().err
    assert f"{p}:2: the last line is cut off" in err and "start on line 3" in err


def test_appending_after_a_whole_last_line_without_newline_adds_only_the_newline(tmp_path, capsys):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(rec(1.0)))
    write_records(p, [rec(2.0)], append=True)
    assert [r["metrics"]["time_us"] for r in read_records(p)] == [1.0, 2.0]
    assert "warning" not in capsys.readouterr().err


def test_append_onto_a_damaged_file_is_refused_before_any_rank_starts(no_launch, capsys, tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(rec(1.0)) + "\n" + json.dumps(rec(2.0))[:50])
    before = p.read_bytes()
    err = one_line_error(capsys, A2A + ["--sizes", "64K", "--hidden", "256", "--out", str(p), "--append"])
    assert f"--append {p}: refusing to append to a file that is already damaged: {p}:2: not a JSON record" in err
    assert p.read_bytes() == before


# -- class 4: the pipeline's config validation runs the same checks --------------------------------
def _check(cfg):
    from configcheck import check_config

    return check_config(cfg, ROOT / "config" / "schema.yaml")


def _default():
    return yaml.safe_load((ROOT / "config" / "default.yaml").read_text())


@pytest.mark.parametrize(
    "section,change,named",
    [
        ("alltoall", {"sizes": "128K:64K:2"}, "config key alltoall.sizes = '128K:64K:2': min 128K is above max 64K"),
        ("alltoall", {"chunks": [128]}, "config key alltoall.chunks = '128': 128 chunks exceed the capacity slice 64"),
        (
            "alltoall",
            {"sizes": "1M:1G:1"},
            "config key alltoall.sizes = '1M:1G:1': the factor must be a number above 1",
        ),
        (
            "ablation",
            {"buffer_sizes": "32M:256K:2"},
            "config key ablation.buffer_sizes = '32M:256K:2': min 32M is above",
        ),
        (
            "ablation",
            {"chunks": [1, 4096]},
            "config key ablation.chunks = '1,4096': 4096 chunks exceed the capacity slice",
        ),
        ("predict", {"sizes": "1G:1M:2"}, "config key predict.sizes = '1G:1M:2': min 1G is above max 1M"),
    ],
)
def test_a_config_that_cannot_run_is_refused_at_validation(section, change, named):
    from configcheck import ConfigError

    cfg = _default()
    cfg[section].update(change)
    with pytest.raises(ConfigError) as e:
        _check(cfg)
    assert named in str(e.value), str(e.value)


def test_a_per_cluster_size_override_is_named_by_its_key():
    from configcheck import ConfigError

    cfg = _default()
    cfg["alltoall"]["clusters"][1]["sizes"] = "16M:2M:2"
    with pytest.raises(ConfigError, match=r"alltoall.clusters\[1\].sizes = '16M:2M:2'"):
        _check(cfg)


def test_nested_config_overrides_as_snakemake_users_type_them_are_accepted():
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    cfg = _default()
    update_config(cfg, parse_config(["alltoall={iters: 3, check: false, chunks: [1, 2], target_ci: 0.5}"]))
    assert cfg["alltoall"]["iters"] == "3"  # what Snakemake hands over: strings
    a = _check(cfg)["alltoall"]
    assert (a["iters"], a["check"], a["chunks"], a["target_ci"]) == (3, False, [1, 2], 0.5)
    assert a["sizes"] == _default()["alltoall"]["sizes"]  # the rest of the section is kept


def test_a_nested_override_that_is_not_a_number_is_still_named():
    from configcheck import ConfigError
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    cfg = _default()
    update_config(cfg, parse_config(["alltoall={iters: three}"]))
    with pytest.raises(ConfigError, match=r"config key alltoall.iters: 'three' is not of type 'integer'"):
        _check(cfg)


def test_every_shipped_config_still_validates():
    for name in ("default", "test", "a800", "slurm-local"):
        _check(yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text()))


def test_nan_is_not_a_finite_size_factor():
    from monta.validate import UsageError, sizes

    with pytest.raises(UsageError):
        sizes("1M:2M:inf")
    assert sizes("1M:16M:2") == [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20]
    assert math.isclose(len(sizes("1K:1G:2")), 21)


# -- class 7: stale work directories of killed runs are cleaned at the next start -----------------
def test_stale_work_dirs_whose_owner_is_gone_are_removed_and_only_those(tmp_path, monkeypatch):
    import subprocess

    from monta import tmpdirs

    monkeypatch.setattr(tmpdirs.tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmpdirs.make("monta-emulate-")
    (stale / tmpdirs.OWNER).write_text(
        json.dumps({**json.loads((stale / tmpdirs.OWNER).read_text()), "pid": dead.pid, "start": "1"})
    )
    (stale / "rank0.log").write_text("x")
    live = tmpdirs.make("monta-emulate-")  # owned by this (running) process
    kept = tmpdirs.make("monta-emulate-")
    tmpdirs.keep(kept)  # a failed run's logs, named in its error
    foreign = tmp_path / "monta-emulate-nowner"
    foreign.mkdir()  # no owner file: never touched
    other = tmp_path / "something-else"
    other.mkdir()
    removed = tmpdirs.clean_stale()
    assert removed == [stale] and not stale.exists()
    assert live.exists() and kept.exists() and foreign.exists() and other.exists()


def test_a_reused_pid_does_not_keep_a_stale_dir(tmp_path, monkeypatch):
    import os

    from monta import tmpdirs

    monkeypatch.setattr(tmpdirs.tempfile, "tempdir", str(tmp_path))
    d = tmpdirs.make("monta-a2a-")
    owner = json.loads((d / tmpdirs.OWNER).read_text())
    assert owner["pid"] == os.getpid() and tmpdirs.owner_alive(d) is True
    (d / tmpdirs.OWNER).write_text(json.dumps({**owner, "start": "0"}))  # same pid, another process
    assert tmpdirs.owner_alive(d) is False and tmpdirs.clean_stale() == [d]


# -- class 5: a stalled rank is named long before the collective timeout ---------------------------
def _supervisor(tmp_path, **spec):
    from monta.emulate.launch_spec import LaunchSpec
    from monta.emulate.supervisor import Supervisor
    from monta.emulate.topology import Topology

    s = Supervisor(
        LaunchSpec(
            mode="plain",
            nodes=1,
            gpus_per_node=2,
            topology=Topology(name="unshaped"),
            log_dir=str(tmp_path),
            result_path=str(tmp_path / "result.json"),
            argv=("true",),
            master_port=0,
            **spec,
        )
    )
    s.progress_dir.mkdir(exist_ok=True)
    return s


def test_a_rank_stopped_by_sigstop_is_named_with_where_it_was(tmp_path, monkeypatch):
    import signal
    import subprocess

    from monta import progress
    from monta.emulate import supervisor as sup
    from monta.emulate.ranks import layout

    monkeypatch.setattr(sup, "STOPPED_S", 0.0)
    s = _supervisor(tmp_path)
    ranks = layout(1, 2, ["127.0.0.1"], ["node0"], "lo")
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        s.procs = dict(enumerate(procs))
        monkeypatch.setenv("MONTA_PROGRESS_DIR", str(s.progress_dir))
        for r in (0, 1):
            monkeypatch.setenv("RANK", str(r))
            progress.beat("timing size 4M (2/3), iteration 7")
        assert s._stalled(ranks) is None
        procs[1].send_signal(signal.SIGSTOP)
        time.sleep(0.2)
        failure = s._stalled(ranks)
        assert failure["kind"] == "stalled" and failure["rank"] == 1
        assert "rank 1 (node 0) stalled: stopped by a signal (process state T" in failure["message"]
        assert "timing size 4M (2/3), iteration 7" in failure["message"]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_no_progress_from_any_rank_names_the_one_behind(tmp_path, monkeypatch):
    import subprocess

    from monta.emulate.ranks import layout

    s = _supervisor(tmp_path, stall_s=30)
    # An empty extensions root of its own: another run on this machine loading DeepSpeed's op holds a build
    # lock in the shared one, which the supervisor rightly reads as "waiting on a build", not a stall.
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "torch-extensions"))
    ranks = layout(1, 2, ["127.0.0.1"], ["node0"], "lo")
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        s.procs = dict(enumerate(procs))
        now = time.time()
        (s.progress_dir / "rank0").write_text(f"12 {now - 5:.3f} timing size 1M (1/1), iteration 12\n")
        (s.progress_dir / "rank1").write_text(f"11 {now - 6:.3f} timing size 1M (1/1), iteration 11\n")
        assert s._stalled(ranks) is None  # 5 s without progress: within the limit
        (s.progress_dir / "rank0").write_text(f"12 {now - 40:.3f} timing size 1M (1/1), iteration 12\n")
        (s.progress_dir / "rank1").write_text(f"11 {now - 41:.3f} timing size 1M (1/1), iteration 11\n")
        assert s._stalled(ranks) is None  # not watched for 30 s yet
        s.cpu_samples = [(time.monotonic() - 40, {0: -20.0, 1: -20.0})]  # ...and the ranks used 20 s of CPU each
        assert s._stalled(ranks) is None  # busy, not stalled (a slow start-up on a loaded machine)
        s.cpu_samples = [(time.monotonic() - 40, {0: 0.0, 1: 0.0})]  # sleeping ranks: next to no CPU in 40 s
        failure = s._stalled(ranks)
        assert failure["rank"] == 1 and "no rank made progress or used CPU for 30 s" in failure["message"]
        assert "iteration 11" in failure["message"]
        (s.progress_dir / "rank1").unlink()  # a rank that never reported: the limit is not armed
        assert s._stalled(ranks) is None
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_the_default_timeout_scales_with_the_expected_run_time():
    import argparse

    from monta.bench.alltoall import build_config, default_timeout
    from monta.bench.cli import register

    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    small = build_config(p.parse_args(["bench", "alltoall", "--sizes", "64K", "--hidden", "256", "--iters", "1"]))
    big = build_config(
        p.parse_args(
            [
                "bench",
                "alltoall",
                "--nodes",
                "2",
                "--gpus-per-node",
                "8",
                "--sizes",
                "2M:16M:2",
                "--topology",
                "a800-4nic@0.0625",
                "--adaptive",
                "--max-iters",
                "40",
                "--budget-s",
                "60",
            ]
        )
    )
    assert default_timeout(small) < 600 < default_timeout(big)


def test_an_unparsable_flag_is_one_line_too(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "alltoall", "--hidden", "x"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "monta bench alltoall: error: argument --hidden: invalid int value: 'x'" in err


def test_the_validation_knows_the_same_exchanges_as_the_library():
    """The flags' and the config's check asks the registry: the core's exchanges and the plugins'."""
    from monta import variants as registry
    from monta.validate import alltoall_sweep

    assert set(registry.CORE) < set(registry.exchanges())
    ok = alltoall_sweep(
        nodes=2,
        gpus_per_node=2,
        tp=2,
        ep=None,
        sizes_spec="64K",
        variants="monta,toy-exchange",
        chunks="2",
        dtype="float32",
        experts=None,
        hidden=256,
        warmup=0,
        iters=1,
        max_iters=1,
        target_ci=0,
        budget_s=0,
    )
    assert ok["variants"] == ["monta", "toy-exchange"]
