"""pytest fixtures for the fake API server.

Registered for every test by tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.apiserver.server import FakeApiServer


@pytest.fixture
async def fake_apiserver() -> AsyncIterator[FakeApiServer]:
    """A started FakeApiServer on an ephemeral port, stopped at teardown."""
    server = FakeApiServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def fake_kubeconfig(fake_apiserver: FakeApiServer, tmp_path: Path) -> Path:
    """A kubeconfig file (context ``fake``) pointing at ``fake_apiserver``."""
    return fake_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
