"""The README quick start, run as written: ``serve`` in a subprocess, the ``curl`` request,
and the answer the README shows.

The commands are read from README.md itself, so the test fails when the README and the
program drift apart. Only the port is changed (to a free one) and the listen address
pinned to loopback.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.docs import fenced_blocks, section
from tests.support.paths import README, REPO
from tests.support.ports import free_port
from tests.support.reference_model import normalise

# Generous: only reached if the server never comes up (the test then fails).
STARTUP_DEADLINE_SECONDS = 60.0


@dataclass(frozen=True)
class QuickStart:
    serve_args: list[str]  # after "runtimeclass-extender"
    curl_args: list[str]
    expected_answer: Any


def parse_quick_start(readme: str) -> QuickStart:
    quick_start = section(readme, "## Quick start")
    shell = fenced_blocks(quick_start, "sh")
    json_blocks = fenced_blocks(quick_start, "json")
    assert shell and json_blocks, "quick start lost its command or example answer blocks"
    # Command 1 installs and then serves: the serve invocation is its last step.
    serve_step = shell[0].strip().split("&&")[-1]
    words = shlex.split(serve_step)
    assert words[0].endswith("runtimeclass-extender") and words[1] == "serve", serve_step
    curl_block = next(block for block in shell if block.lstrip().startswith("curl "))
    return QuickStart(words[1:], shlex.split(curl_block.strip())[1:], json.loads(json_blocks[0]))


def _with_port(args: list[str], port: int) -> list[str]:
    args = list(args)
    assert "--port" in args, "the README serve command should show --port"
    args[args.index("--port") + 1] = str(port)
    if "--host" not in args:
        args += ["--host", "127.0.0.1"]
    return args


def _curl_request(curl_args: list[str], port: int) -> urllib.request.Request:
    """The request the README's curl command makes (-H, --data @file, URL)."""
    headers: dict[str, str] = {}
    data: bytes | None = None
    url = ""
    args = iter(curl_args)
    for arg in args:
        if arg == "-s":
            continue
        if arg in ("-H", "--header"):
            name, _, value = next(args).partition(":")
            headers[name.strip()] = value.strip()
        elif arg in ("-d", "--data", "--data-binary"):
            value = next(args)
            assert value.startswith("@"), "the README posts a request file"
            data = (REPO / value[1:]).read_bytes()
        elif arg.startswith("http"):
            url = re.sub(r":\d+/", f":{port}/", arg, count=1)
        else:
            raise AssertionError(f"unexpected curl argument in README: {arg}")
    assert url and data is not None
    return urllib.request.Request(url, data=data, headers=headers, method="POST")


@pytest.fixture
def quick_start() -> QuickStart:
    return parse_quick_start(README.read_text(encoding="utf-8"))


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def server(quick_start: QuickStart, port: int) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "extender", *_with_port(quick_start.serve_args, port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def _wait_ready(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"serve exited with {process.returncode}: {err.decode(errors='replace')}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    raise AssertionError("serve did not become ready")


def test_readme_quick_start_is_parsed(quick_start: QuickStart) -> None:
    assert quick_start.serve_args[:1] == ["serve"]
    assert "--cluster-file" in quick_start.serve_args
    assert any(a.startswith("@") for a in quick_start.curl_args)


def test_quick_start_serves_the_readme_answer(
    quick_start: QuickStart, server: subprocess.Popen[bytes], port: int
) -> None:
    _wait_ready(server, port)
    with urllib.request.urlopen(_curl_request(quick_start.curl_args, port), timeout=10) as response:
        assert response.status == 200
        assert response.headers.get_content_type() == "application/json"
        answer = json.loads(response.read())
    # The README's answer, its passing names in any order (docs/reference.md, POST
    # /filter): compared sorted, so a name listed twice would still differ.
    assert normalise(answer) == normalise(quick_start.expected_answer)
    # The failure maps come in the request's order, whatever the server process's string
    # hashes: the README's answer exactly, but for the passing names' order.
    for key in ("FailedNodes", "FailedAndUnresolvableNodes"):
        assert list(answer[key].items()) == list(quick_start.expected_answer[key].items()), key
    # The example shows a FailedAndUnresolvableNodes reason, as the quick start promises.
    assert answer["FailedAndUnresolvableNodes"]

    # SIGTERM stops it cleanly.
    server.terminate()
    _, err = server.communicate(timeout=15)
    assert server.returncode == 0, err.decode(errors="replace")
    assert b"Traceback" not in err
