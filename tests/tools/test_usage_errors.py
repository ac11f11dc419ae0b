"""A command line a command does not take: two lines, the command's usage (short: serve's
whole usage was 45 lines, which buried the error) and the error, with the flag a
misspelt one most likely means; for every command, and the kubectl plugin's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from extender.cli import build_parser, main
from extender.tools.commands import build_kubectl_parser, kubectl_main
from tests.support.docs import page, section

PROG = "runtimeclass-extender"
BIN = Path(sys.executable).parent


def usage_error(
    capsys: pytest.CaptureFixture[str], run: Callable[[list[str]], int], argv: list[str]
) -> list[str]:
    """The stderr lines of a command line argparse refuses (it exits 2)."""
    with pytest.raises(SystemExit) as exited:
        run(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


# For each command: what it needs besides the flag (its required arguments), a misspelt
# flag (none a prefix of a real one, which argparse would take), and the flag meant.
MISSPELT = {
    "serve": ([], "--prot", "--port"),
    "filter": (["request.json", "--cluster-file", "c.yaml"], "--policy-flie", "--policy-file"),
    "explain": (["gvisor"], "--clustr-file", "--cluster-file"),
    "classes": ([], "--no-haeders", "--no-headers"),
    "replay": (["captures"], "--polcy-file", "--policy-file"),
    "audit": ([], "--namspace", "--namespace"),
    "check": (["x.yaml"], "--warning-as-errors", "--warnings-as-errors"),
    "check-pod-admission": ([], "--runtimclass", "--runtimeclass"),
    "node-template": ([], "--provder", "--provider"),
}


def test_every_command_is_tried_with_a_misspelt_flag() -> None:
    assert set(MISSPELT) == set(commands(build_parser()))


@pytest.mark.parametrize("command", list(MISSPELT))
def test_a_misspelt_flag_prints_one_usage_line_and_what_it_likely_means(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """serve's whole usage is 45 lines, check's 9: they buried the one line that says what
    is wrong. Now: the command's usage in one line, and the error with the flag meant."""
    needed, typo, meant = MISSPELT[command]
    lines = usage_error(capsys, main, [command, *needed, typo])
    parser = commands(build_parser())[command]
    positionals = " ".join(
        a.metavar if isinstance(a.metavar, str) else a.dest
        for a in parser._actions
        if not a.option_strings and a.nargs in (None, "?")
    )
    assert len(lines) == 2, lines
    usage, error = lines
    assert usage.startswith(f"usage: {PROG} {command} [options]")
    assert usage.endswith(" (--help lists the options)")
    assert positionals.replace("RUNTIMECLASS", "[RUNTIMECLASS]") in usage
    assert error == f"{PROG} {command}: error: unrecognized arguments: {typo} (did you mean {meant}?)"


def test_the_operators_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert usage_error(capsys, main, ["check", "--warning-as-errors", "deploy/"]) == [
        f"usage: {PROG} check [options] FILE|DIR|- [FILE|DIR|- ...] (--help lists the options)",
        f"{PROG} check: error: unrecognized arguments: --warning-as-errors (did you mean --warnings-as-errors?)",
    ]


def test_the_reference_shows_what_a_misspelt_flag_prints(capsys: pytest.CaptureFixture[str]) -> None:
    shown = [
        line.strip()
        for line in section(page("reference.md"), "## Commands").splitlines()
        if line.startswith(f"    usage: {PROG} check") or line.startswith(f"    {PROG} check: error:")
    ]
    assert shown == usage_error(capsys, main, ["check", "--warning-as-errors", "x.yaml"])


@pytest.mark.parametrize("command", ["explain", "classes", "replay", "audit", "check", "node-template"])
def test_the_kubectl_plugin_says_it_alike(capsys: pytest.CaptureFixture[str], command: str) -> None:
    assert set(commands(build_kubectl_parser())) == set(MISSPELT) - {"serve", "filter"}
    needed, typo, meant = MISSPELT[command]
    usage, error = usage_error(capsys, kubectl_main, [command, *needed, typo])
    assert usage.startswith(f"usage: kubectl runtimeclass {command} [options]")
    assert (
        error
        == f"kubectl runtimeclass {command}: error: unrecognized arguments: {typo} (did you mean {meant}?)"
    )


def test_a_flag_with_its_value_and_a_word_like_no_flag(capsys: pytest.CaptureFixture[str]) -> None:
    *_, error = usage_error(capsys, main, ["classes", "--clustr-file=c.yaml", "--bogus", "extra"])
    assert error == (
        f"{PROG} classes: error: unrecognized arguments: --clustr-file=c.yaml (did you mean --cluster-file?) "
        "--bogus extra"
    )


def test_every_usage_error_is_two_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert usage_error(capsys, main, ["check"]) == [
        f"usage: {PROG} check [options] FILE|DIR|- [FILE|DIR|- ...] (--help lists the options)",
        f"{PROG} check: error: the following arguments are required: FILE|DIR|-",
    ]
    usage, error = usage_error(capsys, main, ["explain", "gvisor", "-o", "csv"])
    assert usage == f"usage: {PROG} explain [options] [RUNTIMECLASS] (--help lists the options)"
    assert error.startswith(f"{PROG} explain: error: argument -o/--output: invalid choice: 'csv'")
    assert usage_error(capsys, main, []) == [
        f"usage: {PROG} [options] COMMAND ... (--help lists the options)",
        f"{PROG}: error: the following arguments are required: COMMAND",
    ]


def test_a_misspelt_command_or_choice_is_followed_by_what_it_likely_means(
    capsys: pytest.CaptureFixture[str],
) -> None:
    *_, error = usage_error(capsys, main, ["chek", "x.yaml"])
    assert error.startswith(
        f"{PROG}: error: argument COMMAND: invalid choice: 'chek' (did you mean 'check'?) (choose from 'serve',"
    )
    *_, error = usage_error(capsys, main, ["explain", "gvisor", "-o", "jsn"])
    assert error == (
        f"{PROG} explain: error: argument -o/--output: invalid choice: 'jsn' (did you mean 'json'?) "
        "(choose from 'table', 'wide', 'json', 'yaml', 'name')"
    )
    *_, error = usage_error(capsys, main, ["zzz"])
    assert "did you mean" not in error
    assert error.startswith(f"{PROG}: error: argument COMMAND: invalid choice: 'zzz' (choose from 'serve',")


def test_help_still_lists_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {PROG} check [-h] [--cluster-file PATH]")
    assert "--warnings-as-errors" in out


def test_serve_from_the_console() -> None:
    done = subprocess.run(
        [str(BIN / PROG), "serve", "--prot", "8888"], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"usage: {PROG} serve [options] (--help lists the options)",
        f"{PROG} serve: error: unrecognized arguments: --prot (did you mean --port?) 8888",
    ]
