"""Shared test fixtures: repository paths and an app factory for the HTTP tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.file_source import load_cluster_file
from extender.cluster.state import ClusterState
from extender.http.app import create_app
from extender.policy_file import load_policy
from extender.settings import DEFAULT_MAX_BODY_BYTES
from policies.registry import Policy

REPO = Path(__file__).resolve().parents[1]
TESTS_DATA = REPO / "tests" / "data"
EXAMPLES = REPO / "deploy" / "examples"
EXAMPLE_CLUSTER = EXAMPLES / "cluster.yaml"
# The six-node cluster the captured kube-scheduler requests came from.
CAPTURE_CLUSTER = TESTS_DATA / "capture-cluster.yaml"
# Requests captured from a real kube-scheduler, kept beside the repository.
KUBE_SCHEDULER_FIXTURES = REPO.parent / "shared" / "fixtures" / "kube-scheduler"

AppFactory = Callable[..., web.Application]


def _make_app(
    *,
    cluster_file: Path | None = CAPTURE_CLUSTER,
    state: ClusterState | None = None,
    policy: Policy | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> web.Application:
    """The production app over a cluster file (default: tests/data/capture-cluster.yaml).

    Pass ``state`` to serve a state built by hand (e.g. an empty, unsynced one).
    """
    if state is None:
        # As serve loads it: bad node-selector-term annotations are logged once.
        state = (
            load_cluster_file(cluster_file, selector_errors=SelectorErrorLog())
            if cluster_file is not None
            else ClusterState()
        )
    return create_app(state=state, policy=policy or load_policy(), max_body_bytes=max_body_bytes)


@pytest.fixture
def make_app() -> AppFactory:
    return _make_app


@pytest.fixture
def fixtures_dir() -> Path:
    if not KUBE_SCHEDULER_FIXTURES.is_dir():
        pytest.skip(f"captured kube-scheduler requests not found at {KUBE_SCHEDULER_FIXTURES}")
    return KUBE_SCHEDULER_FIXTURES
