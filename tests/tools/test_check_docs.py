"""docs/check.md, run as written: every ``$ command`` of its ``console`` blocks, with the
output shown after it (standard output and standard error merged, in order), and
``$ echo $?`` for the exit status of the command before it.

The commands are read from the page itself, so the test fails when the page and the
program drift apart. ``.venv/bin/`` is replaced by the directory of the Python running
the tests (the same virtual environment, wherever it is).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docs import fenced_blocks
from tests.support.paths import DOCS, REPO

PAGE = DOCS / "check.md"
BIN = Path(sys.executable).parent


def transcript() -> list[tuple[str, list[str]]]:
    """(command, the lines shown after it) for every command of the page."""
    steps: list[tuple[str, list[str]]] = []
    for block in fenced_blocks(PAGE.read_text(encoding="utf-8"), "console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def test_the_page_has_a_transcript() -> None:
    commands = [command for command, _ in transcript()]
    assert len(commands) == 9
    assert all(c == "echo $?" or c.startswith(".venv/bin/runtimeclass-extender check ") for c in commands)


def test_every_command_prints_what_the_page_shows() -> None:
    last_status: int | None = None
    for command, expected in transcript():
        if command == "echo $?":
            assert expected == [str(last_status)], f"exit status of the command before {command!r}"
            continue
        words = shlex.split(command)
        words[0] = str(BIN / Path(words[0]).name)
        done = subprocess.run(
            words,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.stdout.splitlines() == expected, command
        last_status = done.returncode


@pytest.mark.parametrize("name", ["runtimeclasses-with-mistakes.yaml", "runtimeclasses-to-review.yaml"])
def test_the_example_files_are_in_the_repository(name: str) -> None:
    assert (REPO / "docs" / "examples" / name).is_file()
