"""One grammar across `monta` subcommands: every --help shows its options' defaults, one default cluster
shape (2 x 4, TP a whole node) in bench, predict and emulate, one --out policy (an existing file is
refused unless --force; --append adds records), one name per thing (old spellings warn), every exchange
where exchanges are taken, and `monta --help` naming every predict command."""

from __future__ import annotations

import argparse
import json

import pytest

from monta.cli import PREDICT_HELP, build_parser, main
from monta.cli_args import DEFAULT_GPUS_PER_NODE, DEFAULT_NODES


def _parsers(p: argparse.ArgumentParser, name: str = "monta"):
    """Every parser under ``p`` with its command line, depth first."""
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                if child.add_help:  # a topic listed but not loaded has add_help=False
                    yield from _parsers(child, f"{name} {sub}")


ALL = dict(_parsers(build_parser()))


def _sub(command: str) -> argparse.ArgumentParser:
    return ALL[f"monta {command}"]


def test_every_command_is_walked():
    for command in ("bench alltoall", "bench step", "predict alltoall", "predict skew", "emulate probe", "regress"):
        assert f"monta {command}" in ALL


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_help_shows_every_default(name):
    """An option whose default is a value (not None/False) says it in --help."""
    p = ALL[name]
    formatter = p._get_formatter()
    missing = [
        a.option_strings[0]
        for a in p._actions
        if a.option_strings
        and a.help != argparse.SUPPRESS
        and a.default not in (None, False, argparse.SUPPRESS)
        and "default" not in formatter._expand_help(a)
    ]
    assert not missing, f"{name} --help hides the defaults of {missing}"


def test_monta_help_names_every_predict_command(capsys):
    predict = _sub("predict")
    names = set(next(a for a in predict._actions if isinstance(a, argparse._SubParsersAction)).choices)
    listed = {w.strip() for w in PREDICT_HELP.split(":", 1)[1].split(",")}
    assert listed == names
    with pytest.raises(SystemExit):
        main(["--help"])
    assert PREDICT_HELP in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    "command", ["bench alltoall", "bench step", "predict alltoall", "predict skew", "emulate run", "emulate probe"]
)
def test_one_default_shape_with_tp_a_whole_node(command):
    args = _sub(command).parse_args(["--", "true"] if command == "emulate run" else [])
    assert (args.nodes, args.gpus_per_node) == (DEFAULT_NODES, DEFAULT_GPUS_PER_NODE) == (2, 4)
    assert getattr(args, "tp", None) is None  # TP follows the node unless given


@pytest.mark.parametrize("command", ["emulate run", "emulate probe", "bench alltoall"])
def test_one_default_network(command):
    from monta.bench.common_args import network
    from monta.emulate.cli import _check_common

    args = _sub(command).parse_args(["--", "true"] if command == "emulate run" else [])
    topo = network(args) if command.startswith("bench") else _check_common(args)
    assert topo.cluster == "a800-4nic" and topo.name == "a800-4nic@0.125"


def test_predict_alltoall_takes_gpus_per_node_without_tp(capsys):
    assert main(["predict", "alltoall", "--gpus-per-node", "2", "--sizes", "4M", "--chunks", "1"]) == 0
    assert "2 nodes x 2 ranks: TP2" in capsys.readouterr().out


def test_predict_alltoall_prices_every_exchange_in_human_units(tmp_path, capsys):
    from monta import variants as registry

    out = tmp_path / "a.jsonl"
    assert (
        main(["predict", "alltoall", "--exchanges", "all", "--sizes", "16M", "--chunks", "1", "--out", str(out)]) == 0
    )
    text = capsys.readouterr().out
    assert {json.loads(x)["params"]["variant"] for x in out.read_text().splitlines()} == set(registry.exchanges())
    assert len(set(registry.exchanges()) & {"legacy", "deepspeed", "monta", "2dh", "allgather", "node-dedup"}) == 6
    assert " 16 MiB " in text and "16777216" not in text and " us " in text


OUT_COMMANDS = [
    ["predict", "alltoall", "--sizes", "1M", "--chunks", "1"],
    ["predict", "skew", "--routing", "W0", "--exchanges", "deepspeed"],
    ["predict", "paper"],
    ["predict", "contention", "--values", "0"],
]


@pytest.mark.parametrize("argv", OUT_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_out_refuses_an_existing_file_unless_force_and_append_adds(argv, tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main([*argv, "--out", str(out)]) == 0
    first = out.read_text()
    capsys.readouterr()
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"monta: error: --out {out}: exists already; add --force to replace it or --append to add to it, "
        "or give a new file"
    ]
    assert out.read_text() == first
    assert main([*argv, "--out", str(out), "--append"]) == 0
    assert len(out.read_text().splitlines()) == 2 * len(first.splitlines())
    assert main([*argv, "--out", str(out), "--force"]) == 0
    assert len(out.read_text().splitlines()) == len(first.splitlines())


def test_regress_out_is_refused_too(tmp_path, capsys):
    recs = tmp_path / "p.jsonl"
    assert main(["predict", "alltoall", "--sizes", "1M", "--chunks", "1", "--out", str(recs)]) == 0
    table = tmp_path / "t.md"
    table.write_text("keep")
    assert main(["regress", "--baseline", str(recs), "--current", str(recs), "--out", str(table)]) == 2
    assert "exists already; add --force to replace it, or give a new file" in capsys.readouterr().err
    assert table.read_text() == "keep"
    assert main(["regress", "--baseline", str(recs), "--current", str(recs), "--out", str(table), "--force"]) == 0
    assert table.read_text().startswith("regress:")


def test_force_replaces_whichever_of_several_outputs_a_command_was_given(tmp_path, capsys):
    """predict published writes --out and --md: --force goes with either; alone it names both."""
    md, out = tmp_path / "p.md", tmp_path / "r.jsonl"
    for flags in (["--md", str(md)], ["--out", str(out)]):
        assert main(["predict", "published", *flags]) == 0
        assert main(["predict", "published", *flags]) == 2
        assert main(["predict", "published", *flags, "--force"]) == 0
    capsys.readouterr()
    assert main(["predict", "published", "--force"]) == 2
    assert capsys.readouterr().err.strip() == "monta: error: --force needs --out or --md FILE (the file to replace)"


def test_old_spellings_work_with_one_warning(capsys):
    args = _sub("predict skew").parse_args(["--cf", "1.25", "--size", "2M"])
    assert (args.capacity_factor, args.sizes) == (1.25, "2M")
    assert capsys.readouterr().err.splitlines() == [
        "monta: warning: --cf is deprecated; use --capacity-factor",
        "monta: warning: --size is deprecated; use --sizes",
    ]


@pytest.mark.parametrize("command", ["predict alltoall", "predict skew"])
def test_predicts_take_exchanges_and_read_variants_with_one_warning(command, capsys):
    """A value that is an exchange is named --exchanges; the old --variants still reads, and says so."""
    new = _sub(command).parse_args(["--exchanges", "deepspeed,monta"])
    assert capsys.readouterr().err == ""
    old = _sub(command).parse_args(["--variants", "deepspeed,monta"])
    assert old == new and new.exchanges == "deepspeed,monta"
    assert capsys.readouterr().err == "monta: warning: --variants is deprecated; use --exchanges\n"


def test_predict_alltoall_names_the_flag_of_an_unknown_exchange(capsys):
    assert main(["predict", "alltoall", "--exchanges", "deepspeed,tutel", "--sizes", "1M", "--chunks", "1"]) == 2
    assert "--exchanges deepspeed,tutel: choose from" in capsys.readouterr().err
