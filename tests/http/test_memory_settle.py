"""serve's one settling of memory after the first LISTs (extender/http/memory.py)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from extender.cluster.state import ClusterState
from extender.http.app import create_app
from extender.http.keys import INFORMERS
from extender.http.memory import release_freed_memory, settle_memory_once_listed
from extender.kube.health import SourceStats
from extender.policy_file import load_policy


async def test_memory_is_settled_once_every_store_is_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    state = ClusterState()
    app = create_app(state=state, policy=load_policy())
    pods = SourceStats("pods")
    app[INFORMERS] = lambda: [pods]
    released: list[bool] = []
    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))

    def release() -> bool:
        released.append(True)
        return True

    task = asyncio.create_task(settle_memory_once_listed(app, poll=0.01, release=release))
    state.nodes.replace([])
    state.runtime_classes.replace([])
    await asyncio.sleep(0.05)
    assert released == [] and not task.done()  # the pending pods are not listed yet
    pods.synced = True
    await asyncio.wait_for(task, 1.0)
    assert released == [True] and frozen == [True]


def test_releasing_freed_memory_works_where_glibc_is() -> None:
    # This machine runs glibc; elsewhere (musl) it answers False and does nothing.
    assert release_freed_memory() is True
