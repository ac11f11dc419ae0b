"""Nothing a test starts outlives it: a pytest plugin that checks after every test.

A test that leaves a process, a listening port, a thread, an asyncio task or a file in
the temporary directory behind makes the next test's outcome depend on it (seen here:
an extender left by one test held the port another bound; a credential plugin's
subprocess, unreaped, raised in the test after). So after each test, once every
fixture of the test has been torn down, this plugin compares what exists with what
existed before the test began, and fails the test's teardown naming each thing the test
left:

- **processes**: descendants of this process (a zombie too: a child nobody reaped);
- **listening TCP sockets** of this process (``/proc/self/fd`` against ``/proc/net/tcp``);
- **threads** still running (but the idle workers of a thread pool, which end with
  the pool's owner);
- **asyncio tasks** of the test's loop, for a coroutine test (pytest-asyncio cancels
  what is left when it closes the loop, silently: a task a test forgot would hide);
- **files and directories** new in the temporary directory (``tmp_path`` lives under
  pytest's own directory there, which is left alone). The session gets a temporary
  directory of its own (``TMPDIR``, for the processes it starts too), so that what
  other programs on the machine write to the shared one is never taken for the
  test's; it is removed after a session that passed.

What a fixture of a wider scope (a module's control plane) starts exists before the test
begins and is not the test's. Something still ending when the test's fixtures are done
(a child being reaped, a thread returning, a task's cancellation) is given a moment to
end, by waiting for it to be gone, never by sleeping a fixed time. At the end of the
session no descendant process may be left at all.

Linux only (``/proc``); elsewhere it checks threads and tasks alone.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

__all__ = ["Snapshot"]

T = TypeVar("T")
PROC = Path("/proc")
# How long something still ending when the test is done may take to be gone.
GRACE_SECONDS = 10.0
TASK_FIXTURE = "_no_task_left_behind"


def _children(pid: int) -> list[int]:
    """``pid``'s children, from each of its threads' ``children`` list."""
    found: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line (``<zombie>`` for an unreaped child) of every descendant of ``root``."""
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        for pid in _children(frontier.pop()):
            if pid not in found:
                found[pid] = "<zombie>" if _state(pid) == "Z" else _command(pid)
                frontier.append(pid)
    return found


def _state(pid: int) -> str:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return "?"
    # "pid (comm) state ...": comm may hold spaces and parentheses.
    return stat[stat.rfind(")") + 2 :].split(maxsplit=1)[0]


def _command(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:160]


def _sockets() -> set[str]:
    """The inodes of this process's sockets (``/proc/self/fd``: cheap to read)."""
    found = set()
    try:
        names = os.listdir(PROC / "self" / "fd")
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(PROC / "self" / "fd" / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def _listening(inodes: set[str]) -> set[int]:
    """The TCP ports the sockets ``inodes`` listen on. Read only for sockets new since
    the test began: the kernel writes ``/proc/net/tcp`` out whole for every read (a few
    milliseconds, every socket of the machine), which after each of thousands of tests
    would add up to a good part of the suite's time."""
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is "ADDR:PORT" in hex; st 0A is LISTEN.
            if len(fields) > 9 and fields[3] == "0A" and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


# The idle workers of a thread pool (an event loop's default executor): they belong to
# the pool's owner, which a fixture of a wider scope may hold (a server's loop), and end
# with it.
_POOL_WORKER = re.compile(r"(asyncio|ThreadPoolExecutor-\d+)_\d+")


def _threads() -> dict[int, str]:
    return {
        t.ident: t.name
        for t in threading.enumerate()
        if t.ident is not None and t.is_alive() and not _POOL_WORKER.fullmatch(t.name)
    }


def _temporary() -> set[str]:
    """What the temporary directory holds, less pytest's own directory (``tmp_path``'s)."""
    try:
        return {name for name in os.listdir(tempfile.gettempdir()) if not name.startswith("pytest-of-")}
    except OSError:
        return set()


@dataclass(frozen=True)
class Snapshot:
    """What exists now, of what a test could leave behind."""

    processes: dict[int, str]
    sockets: set[str]
    threads: dict[int, str]
    files: set[str]

    @classmethod
    def take(cls) -> Snapshot:
        return cls(_descendants(os.getpid()), _sockets(), _threads(), _temporary())

    def left_since(self, before: Snapshot) -> list[str]:
        """What exists now and did not before, each said in one line."""
        left = [f"process {pid}: {command}" for pid, command in self.processes.items() if pid not in before.processes]
        new_sockets = self.sockets - before.sockets
        left += [f"listening port {port}" for port in sorted(_listening(new_sockets) if new_sockets else ())]
        left += [f"thread {name!r}" for ident, name in self.threads.items() if ident not in before.threads]
        left += [f"{tempfile.gettempdir()}/{name}" for name in sorted(self.files - before.files)]
        return left


def _until_empty(what: Callable[[], list[T]], grace: float = GRACE_SECONDS) -> list[T]:
    """``what()`` once it is empty, or as it is after ``grace`` seconds."""
    deadline = time.monotonic() + grace
    found = what()
    while found and time.monotonic() < deadline:
        time.sleep(0.02)
        found = what()
    return found


@pytest.fixture(autouse=True)
def _nothing_left_behind() -> Iterator[None]:
    """Set up before every other fixture of a test, so checked after all of them."""
    before = Snapshot.take()
    yield
    left = _until_empty(lambda: Snapshot.take().left_since(before))
    if left:
        pytest.fail("the test left behind:\n  " + "\n  ".join(left), pytrace=False)


@pytest.fixture
async def _no_task_left_behind() -> AsyncIterator[None]:
    """A coroutine test's loop holds no task of the test's once its fixtures are done."""
    before = asyncio.all_tasks()
    yield
    # pytest-asyncio runs each fixture's setup and teardown in a task of its own.
    this = asyncio.current_task()
    deadline = asyncio.get_running_loop().time() + GRACE_SECONDS
    while True:
        left = [task for task in asyncio.all_tasks() - before - {this} if not task.done()]
        if not left or asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(0.01)
    if left:
        names = "\n  ".join(f"task {task.get_name()}: {task.get_coro()!r}" for task in left)
        pytest.fail("the test left behind:\n  " + names, pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # First among the test's own fixtures (after _nothing_left_behind): torn down after
    # the others, in the test's loop.
    for item in items:
        if item.get_closest_marker("asyncio") is not None and isinstance(item, pytest.Function):
            names = item.fixturenames
            if TASK_FIXTURE not in names:
                names.insert(names.index("_nothing_left_behind") + 1 if "_nothing_left_behind" in names else 0, TASK_FIXTURE)


_PRIVATE_PREFIX = "runtimeclass-extender-tests-"
_PRIVATE = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    # The session's own temporary directory (see the module doc); those of sessions that
    # have ended (their process is gone) are removed.
    shared = Path(tempfile.gettempdir())
    for old in shared.glob(_PRIVATE_PREFIX + "*"):
        pid = old.name.removeprefix(_PRIVATE_PREFIX)
        if pid.isdigit() and not (PROC / pid).exists():
            shutil.rmtree(old, ignore_errors=True)
    private = shared / f"{_PRIVATE_PREFIX}{os.getpid()}"
    private.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(private)
    tempfile.tempdir = str(private)
    config.stash[_PRIVATE] = private


def pytest_sessionfinish(session: pytest.Session) -> None:
    left = _until_empty(lambda: list(_descendants(os.getpid()).items()))
    if left:
        lines = "\n  ".join(f"process {pid}: {command}" for pid, command in left)
        session.config.get_terminal_writer().line(f"\nthe test session left behind:\n  {lines}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif session.exitstatus == pytest.ExitCode.OK and (private := session.config.stash.get(_PRIVATE, None)):
        shutil.rmtree(private, ignore_errors=True)
