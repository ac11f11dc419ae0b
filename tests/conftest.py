"""Fixtures every test can use. Helpers live in tests/support/ and are imported from there."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.apps import AppFactory
from tests.support.apps import make_app as _make_app
from tests.support.paths import KUBE_SCHEDULER_FIXTURES

# The test API server's fixtures (fake_apiserver, fake_kubeconfig), and the check that
# no test leaves a process, port, thread, task or temporary file behind.
pytest_plugins = ["tests.support.apiserver.fixtures", "tests.support.leaks"]


@pytest.fixture
def make_app() -> AppFactory:
    return _make_app


@pytest.fixture
def fixtures_dir() -> Path:
    """The requests captured from a real kube-scheduler (tests/data/fixtures/kube-scheduler)."""
    return KUBE_SCHEDULER_FIXTURES


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """The CLI's main() configures the root logger (and aiohttp's access logger) for the
    process; tests that run it in-process leave logging as they found it."""
    root, access = logging.getLogger(), logging.getLogger("aiohttp.access")
    handlers, level, access_level = root.handlers[:], root.level, access.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    access.setLevel(access_level)
