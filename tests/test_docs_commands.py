"""Every command the README and docs quote runs as written: its flags are the CLI's.

Each shell command in README.md and docs/**/*.md (fenced bash blocks, with `\\` continuations, and
inline code spans) that starts with `monta `, `python -m monta...` or `snakemake ` is checked without
running it: `monta` commands through the CLI's own argparse parser (every flag an exact option of its
subcommand, and nothing argparse calls unrecognized; an elided `monta bench ... --flag`: some
subcommand's flag), `python -m` modules against their `--help`,
Snakemake commands against `snakemake --help` and, where they name no report or lint, by a dry run
(`-n`) in a scratch directory. A renamed flag in the CLI fails here, not in a user's first hour.
"""

import argparse
import contextlib
import io
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from monta.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\s*$")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
_SHELL_STOPS = {">", "2>", ">>", "|", ";", "&&", "||", "2>&1", "&"}
_STARTS = ("monta ", "python -m monta", "snakemake ")


def _shell_lines(text: str):
    """(line number, command) for every line of a shell block and every inline code span."""
    block, lang, pending = False, "", ""
    for n, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line.strip())
        if fence:
            block, lang, pending = not block, fence.group(1), ""
            continue
        if block and lang in ("bash", "sh", "shell", "console"):
            s = (pending + " " + line.strip()).strip()
            if s.endswith("\\"):
                pending = s[:-1]
                continue
            pending = ""
            yield n, s.removeprefix("$ ")
        elif not block:
            for span in re.findall(r"`([^`\n]+)`", line):
                yield n, span


def _tokens(command: str) -> list[str] | None:
    """The command's words from its program on: env assignments, `.venv/bin/` and what follows a
    shell operator or a comment dropped; None when it is not one of ours or not shell syntax."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    while words and _ENV.match(words[0]):
        words = words[1:]
    if words:
        words[0] = words[0].removeprefix(".venv/bin/").removeprefix("$(VENV)/bin/")
    end = next((i for i, w in enumerate(words) if w in _SHELL_STOPS), len(words))
    words = words[:end]
    if not any(" ".join(words).startswith(s) for s in _STARTS) and words[:1] != ["snakemake"]:
        return None
    return words


def quoted_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOCS:
        for n, line in _shell_lines(path.read_text()):
            words = _tokens(line)
            if words:
                found.append((f"{path.relative_to(ROOT)}:{n}", words))
    return found


COMMANDS = quoted_commands()


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """The options --help shows: a hidden one (help=SUPPRESS, a deprecated alias) is not for the docs."""
    return {o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings}


def _all_options(parser: argparse.ArgumentParser) -> set[str]:
    """The options of ``parser`` and of every subcommand below it."""
    found = _options(parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _all_options(sub)
    return found


@cache
def _parser(command: str) -> argparse.ArgumentParser:
    return build_parser(command)  # argparse parsers can parse many times; building one imports its topic


def check_monta(words: list[str]) -> None:
    args = words[1 : words.index("--")] if "--" in words else words[1:]
    parser = _parser(args[0] if args else "")
    # Walk the subcommands the words name (monta bench alltoall ...), then check every flag exactly.
    for word in args:
        if word.startswith("-"):
            break
        sub = _subparser(parser, word)
        if sub is None:
            break
        parser = sub
    flags = [w.split("=")[0] for w in args if w.startswith("-") and not re.match(r"^-\d", w)]
    if "..." in args:
        # An elided command (`monta bench ... --launcher env`): its flags must be some subcommand's.
        unknown = [f for f in flags if f not in _all_options(parser)]
        assert not unknown, f"unknown flag(s) {unknown} under `{parser.prog}`"
        return
    unknown = [f for f in flags if f not in _options(parser)]
    assert not unknown, f"unknown flag(s) {unknown} for `{parser.prog}`"
    # Then argparse itself: placeholders such as N or my.yaml may fail a value's type, never a flag.
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        _parser(args[0] if args else "").parse_args(args)
    message = err.getvalue()
    assert "unrecognized arguments" not in message and "invalid choice" not in message, message


@cache
def help_text(*program: str) -> str:
    proc = subprocess.run([*program, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def check_module(words: list[str]) -> None:
    module = words[2]
    text = help_text(sys.executable, "-m", module)
    flags = [w.split("=")[0] for w in words[3:] if w.startswith("-")]
    assert all(re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text) for f in flags), (module, flags)


def check_snakemake(words: list[str], tmp_path: Path) -> None:
    text = help_text(str(BIN / "snakemake"))
    flags = [w.split("=")[0] for w in words[1:] if w.startswith("-")]
    unknown = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]
    assert not unknown, f"snakemake has no {unknown}"
    if {"--report", "--lint", "--unlock"} & set(flags):
        return  # not a run: its flags are all a dry run could check
    args = [w for w in words[1:] if w not in ("-n", "--dry-run")]
    args = [str(BIN / "snakemake"), "-n", "--directory", str(tmp_path), "-s", str(ROOT / "Snakefile"), *args]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def test_the_docs_quote_commands_of_every_kind():
    kinds = {w[0] if w[0] != "python" else "python -m" for _, w in COMMANDS}
    assert kinds == {"monta", "python -m", "snakemake"}, kinds
    assert len(COMMANDS) > 50


@pytest.mark.parametrize("where, words", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_quoted_command_parses(where, words, tmp_path):
    if words[0] == "monta":
        check_monta(words)
    elif words[0] == "python":
        check_module(words)
    else:
        check_snakemake(words, tmp_path)


def test_an_unknown_flag_is_caught():
    # The check itself fails on the command the docs once quoted (bench step has no --backend then).
    with pytest.raises(AssertionError, match="unknown flag"):
        check_monta(["monta", "bench", "alltoall", "--no-such-flag", "1"])
    with pytest.raises(AssertionError, match="unknown flag"):
        check_monta(["monta", "bench", "alltoall", "--max-iter", "4"])  # argparse would take the abbreviation
    with pytest.raises(AssertionError, match="snakemake has no"):
        check_snakemake(["snakemake", "--no-such-flag"], Path("/nonexistent"))
