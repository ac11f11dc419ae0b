"""docs/capture-replay.md's walk-through, run as written: every ``$ command`` of the
``console`` blocks under "Try it", in one shell (its variable and background job carry
from one command to the next), and what each prints (standard output and standard
error merged) against what the page shows.

The commands are read from the page itself. Only what cannot be the same on two runs is
mapped back to the page's values: the port (a free one, ``tests/support/ports.py``,
for the page's 8889), the temporary directory ``mktemp -d`` makes (under the test's own
``TMPDIR``), the capture files' names (their time) and the state's fingerprint (which
the page shows as ``...``). ``.venv/bin/`` is the directory of the Python running the
tests.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docs import fenced_blocks, page, section
from tests.support.paths import REPO
from tests.support.ports import free_port

BIN = Path(sys.executable).parent
PAGE_PORT = "8889"
CAPTURE_NAME = re.compile(r"capture-\d{8}T\d{6}\.\d{6}Z-(\d{8})\.json")
FINGERPRINT = re.compile(r"fingerprint sha256:[0-9a-f]{64}\)")
# Far above what the walk-through takes (two extenders starting, two requests, three
# replays): reached only when something hangs, and then the test fails.
TIMEOUT_SECONDS = 180


def transcript() -> list[tuple[str, list[str]]]:
    """(command, the lines shown after it) for every command of "Try it"."""
    steps: list[tuple[str, list[str]]] = []
    for block in fenced_blocks(section(page("capture-replay.md"), "## Try it"), "console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def script(steps: list[tuple[str, list[str]]], port: int) -> str:
    """The commands in one shell, each followed by a marker line (which keeps ``$?`` for
    the next command: the page's ``echo $?``)."""
    lines = []
    for index, (command, _) in enumerate(steps):
        lines.append(command.replace(".venv/bin/", f"{BIN}/").replace(PAGE_PORT, str(port)))
        lines.append(f"status=$?; printf '\\n@@step {index} %s\\n' \"${{dir:-}}\"; (exit $status)")
    return "\n".join(lines) + "\n"


def printed(output: str) -> tuple[list[list[str]], str]:
    """What each command printed, and the temporary directory the walk-through used."""
    chunks: list[list[str]] = []
    current: list[str] = []
    directory = ""
    for line in output.splitlines():
        if line.startswith("@@step "):
            # The marker starts on a line of its own: drop the line break it added.
            if current and current[-1] == "":
                current.pop()
            chunks.append(current)
            current = []
            directory = line.split(" ", 2)[2] or directory
        else:
            current.append(line)
    return chunks, directory


def test_the_walk_through_is_found() -> None:
    commands = [command for command, _ in transcript()]
    assert commands[0] == 'dir="$(mktemp -d)"' and commands[-1] == 'rm -r "$dir"'
    assert sum(command.startswith(".venv/bin/runtimeclass-extender replay ") for command in commands) == 3
    assert not any("/var/lib" in command or "sudo" in command for command in commands)


def test_every_command_prints_what_the_page_shows(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        if os.environ.get("CI"):
            pytest.fail("curl is not on PATH: the page's walk-through posts its requests with it")
        pytest.skip("curl is not on PATH: the page's walk-through posts its requests with it")
    steps = transcript()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTIMECLASS_EXTENDER_")}
    env["TMPDIR"] = str(tmp_path)  # mktemp -d makes the walk-through's directory here
    process = subprocess.Popen(
        ["bash", "-c", script(steps, port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT_SECONDS)
    finally:
        # A step that hung (an extender that never became ready) leaves its shell and
        # the extender it started: end them all, the session the shell leads.
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    chunks, directory = printed(output)
    assert len(chunks) == len(steps), output
    assert directory.startswith(str(tmp_path)), output
    # The page's directory, from the line that shows it.
    (shown_directory,) = {
        match for _, lines in steps for line in lines for match in re.findall(r"/tmp/tmp\.\w+", line)
    }
    shown_names = {
        match.group(1): match.group(0)
        for _, lines in steps
        for line in lines
        if (match := CAPTURE_NAME.search(line))
    }
    for (command, expected), got in zip(steps, chunks, strict=True):
        lines = []
        for line in got:
            line = line.replace(directory, shown_directory).replace(str(port), PAGE_PORT)
            line = CAPTURE_NAME.sub(lambda m: shown_names[m.group(1)], line)
            lines.append(FINGERPRINT.sub("fingerprint sha256:...)", line))
        assert lines == expected, command
    # The last command removed the directory: nothing is left behind.
    assert list(tmp_path.iterdir()) == []
