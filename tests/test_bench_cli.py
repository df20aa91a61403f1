"""One grammar for `monta bench alltoall` and `monta bench step`: the shared flags and their defaults, the
network they run by default, `--out` never replaced silently, `--help` with every default, human units,
progress lines. Single-process: nothing here starts a rank (the end-to-end runs are in test_bench_cli_runs.py)."""

from __future__ import annotations

import argparse

import pytest

from monta.bench import common_args
from monta.cli import build_parser, main

SHARED = ("--nodes", "--gpus-per-node", "--launcher", "--backend", "--topology", "--out", "--force", "--append")


def parser(bench: str) -> argparse.ArgumentParser:
    sub = build_parser("bench")._subparsers._group_actions[0].choices["bench"]
    return sub._subparsers._group_actions[0].choices[bench]


def parse(bench: str, *argv: str) -> argparse.Namespace:
    return parser(bench).parse_args(list(argv))


def test_both_benchmarks_share_the_same_flags_with_the_same_defaults():
    a, s = parse("alltoall"), parse("step")
    for flag in SHARED:
        dest = flag[2:].replace("-", "_")
        assert getattr(a, dest) == getattr(s, dest), flag
    assert (a.nodes, a.gpus_per_node, a.launcher, a.backend, a.out) == (2, 4, "emulate", "auto", None)
    opts = lambda b: {o for act in parser(b)._actions for o in act.option_strings}  # noqa: E731
    assert set(SHARED) <= opts("alltoall") & opts("step")


@pytest.mark.parametrize("bench", ["alltoall", "step"])
def test_no_network_flag_emulates_the_4nic_a800_and_unshaped_only_when_asked(bench):
    t = common_args.network(parse(bench))
    assert t.name == "a800-4nic@0.125" and t.cluster == "a800-4nic" and t.ratio == pytest.approx(13.617, abs=1e-3)
    assert common_args.network(parse(bench, "--topology", "unshaped")).name == "unshaped"
    assert common_args.network(parse(bench, "--inter-gbps", "2")).intra_gbps is None  # hand-set: what it says
    # ranks the emulator does not start have whatever network they are on: no profile is claimed for them
    assert common_args.network(parse(bench, "--launcher", "env")).name == "unshaped"
    line = common_args.network_line(bench, parse(bench), t.describe())
    assert line.startswith(f"# monta bench {bench}: 2 nodes x 4 ranks, emulated, network a800-4nic@0.125")
    assert "the default profile" in line


@pytest.mark.parametrize("bench", ["alltoall", "step"])
def test_help_shows_every_default_and_a_one_line_description(bench, capsys):
    p = parser(bench)
    text = p.format_help()
    assert common_args.HelpFormatter is type(p._get_formatter())
    for act in p._actions:
        if not act.option_strings or act.help == argparse.SUPPRESS or act.nargs == 0:
            continue  # flags (store_true/const) have no value to default
        shown = p._get_formatter()._expand_help(act) if act.help else ""
        assert "default" in shown, f"{bench} {act.option_strings[0]}: no default in its help: {shown!r}"
    flat = " ".join(text.split())
    assert ("(default: 1M:16M:2)" if bench == "alltoall" else "(default: 10)") in flat
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    listing = " ".join(capsys.readouterr().out.split())
    from monta.bench.cli import ALLTOALL, STEP

    for line in (ALLTOALL, STEP):  # one line each, listed by `monta bench --help`, not a developer docstring
        assert len(line) < 110 and "\n" not in line and line in listing


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("monta: error: "), err
    return err


@pytest.mark.parametrize("bench", ["alltoall", "step"])
def test_an_existing_out_is_refused_unless_force_or_append(bench, capsys, tmp_path, monkeypatch):
    import monta.emulate
    import monta.emulate.launcher

    def boom(*a, **k):
        raise AssertionError("ranks were started")

    monkeypatch.setattr(monta.emulate, "launch", boom)
    monkeypatch.setattr(monta.emulate.launcher, "launch", boom)
    out = tmp_path / "r.jsonl"
    out.write_text("kept\n")
    small = ["--sizes", "64K", "--hidden", "256"] if bench == "alltoall" else []
    err = _one_line_error(capsys, ["bench", bench, "--no-wandb", *small, "--out", str(out)])
    assert f"--out {out}: exists already; add --force to replace it or --append" in err
    assert out.read_text() == "kept\n"
    assert common_args.check_out(parse(bench, "--out", str(out), "--force")) == out
    with pytest.raises(SystemExit) as e:  # one mode or the other, never both
        parse(bench, "--out", str(out), "--force", "--append")
    assert e.value.code == 2 and "not allowed with argument --force" in capsys.readouterr().err
    err = _one_line_error(capsys, ["bench", bench, "--no-wandb", *small, "--force"])
    assert "--force needs --out FILE" in err


def test_cluster_means_the_models_cluster_everywhere():
    """`--cluster` in the benchmarks takes what `monta predict` takes: a cluster name, a cluster file, an
    emulator profile."""
    want = "cluster name (clusters/), a cluster file PATH.yaml, or emulator:PROFILE.json"
    for bench in ("alltoall", "step"):
        (act,) = [a for a in parser(bench)._actions if "--cluster" in a.option_strings]
        assert want in act.help, (bench, act.help)
    predict = build_parser("predict")._subparsers._group_actions[0].choices["predict"]
    alltoall = predict._subparsers._group_actions[0].choices["alltoall"]
    (act,) = [a for a in alltoall._actions if "--cluster" in a.option_strings]
    assert "cluster name (clusters/)" in act.help and "emulator:PROFILE.json" in act.help


def test_human_units():
    from monta.units import format_bytes, format_duration

    assert [format_bytes(b) for b in (0, 512, 1536, 16 * 2**20, 10**6, 2**40)] == [
        "0 B",
        "512 B",
        "1.5 KiB",
        "16 MiB",
        "977 KiB",
        "1 TiB",
    ]
    assert [format_duration(s) for s in (9.2, 1.234e-3, 4.2e-5, 125, 3725, 0.9999, 59.99)] == [
        "9.2 s",
        "1.23 ms",
        "42 us",
        "2 min 5 s",
        "1 h 02 min",
        "1 s",
        "1 min 0 s",
    ]


def test_progress_line_counts_elapsed_and_estimates_the_rest():
    from monta.progress import Eta

    now = [100.0]
    eta = Eta(4, clock=lambda: now[0])
    now[0] = 105.0
    assert eta.advance("step 1/2 of variant deepspeed") == (
        "# step 1/2 of variant deepspeed (1/4): elapsed 5 s, about 15 s left"
    )
    now[0] = 112.0
    assert eta.advance("step 1/2 of variant monta").endswith("(2/4): elapsed 12 s, about 12 s left")


def test_step_table_prints_times_in_human_units(capsys):
    from monta.bench.step.records import BREAKDOWN
    from monta.bench.step.report import print_table

    m = {
        "step_ms": 9200.0,
        "step_ms_p10": 812.0,
        "step_ms_p90": 12.5,
        "speedup_vs_deepspeed": 1.0,
        "tokens_per_s": 1234.0,
        "loss": 6.25,
        "breakdown_ms": {**{k: 1.5 for k in BREAKDOWN}, "exchange": 61000.0},
    }
    print_table([("deepspeed", m)])
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:2] == ["variant", "step"]
    assert row.split()[:7] == ["deepspeed", "9.2", "s", "812", "ms", "12.5", "ms"]
    assert row.rstrip().endswith("1 min 1 s")
