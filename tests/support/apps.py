"""The production app over a cluster file, and the client type aliases the HTTP tests share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient

from extender.admission import RoutingConfig
from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.file_source import load_cluster_file
from extender.cluster.state import ClusterState
from extender.http.app import create_app
from extender.policy_file import load_policy
from extender.settings import DEFAULT_MAX_BODY_BYTES
from policies.registry import Policy
from tests.support.paths import CAPTURE_CLUSTER

# The make_app fixture (tests/conftest.py).
AppFactory = Callable[..., web.Application]
Client = TestClient[web.Request, web.Application]
# pytest-aiohttp's aiohttp_client fixture, as the live tests call it with an app.
ClientFactory = Callable[..., Awaitable[Client]]


def make_app(
    *,
    cluster_file: Path | None = CAPTURE_CLUSTER,
    state: ClusterState | None = None,
    policy: Policy | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    routing: RoutingConfig | None = None,
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
    return create_app(
        state=state, policy=policy or load_policy(), max_body_bytes=max_body_bytes, routing=routing
    )

