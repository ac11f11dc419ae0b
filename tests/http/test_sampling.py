"""What an operator sees when kube-scheduler's node sampling hides a class's nodes.

Over HTTP, on the 2,000-node cluster of tests/support/sampling.py: the filter answer is
unchanged (constant reasons), the counter
``runtimeclass_extender_filter_fitting_nodes_not_offered_total{runtime_class}`` counts
such calls, one warning per class per interval names the class, the offer, the fitting
nodes not offered and the fix, and ``/readyz`` and explain show it.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pytest_aiohttp import AiohttpClient

from extender.filtering import HiddenNodes
from extender.http.app import create_app
from extender.http.sampling import HiddenNodeReports
from extender.policy_file import load_policy
from tests.support.apps import Client
from tests.support.sampling import CLUSTER, GVISOR, RUNC, SAMPLE, sampled_cluster

JSON = {"Content-Type": "application/json"}
COUNTER = "runtimeclass_extender_filter_fitting_nodes_not_offered_total"
MESSAGE = (
    'RuntimeClass "gvisor": kube-scheduler offered 680 of 2000 nodes and none fit, while 3 fitting '
    "node(s) were not offered (its node sampling hid them); set percentageOfNodesToScore: 100 on the "
    "kube-scheduler profile that uses the extender"
)


def _request(names: list[str], runtime_class: str = "gvisor") -> dict[str, Any]:
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"runtimeClassName": runtime_class}}
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


@pytest.fixture
async def client(aiohttp_client: AiohttpClient) -> Client:
    return await aiohttp_client(create_app(state=sampled_cluster(), policy=load_policy()))


async def _counter(client: Client, runtime_class: str) -> float:
    text = await (await client.get("/metrics")).text()
    prefix = f'{COUNTER}{{runtime_class="{runtime_class}"}} '
    values = [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]
    return float(values[0]) if values else 0.0


async def test_sampled_call_is_counted_warned_once_and_shown(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="extender.http")
    for _ in range(3):
        response = await client.post("/filter", json=_request(RUNC[:SAMPLE]), headers=JSON)
        assert response.status == 200
        body = await response.json()
        # The answer is what it always was: no node passes, the constant reason.
        assert body["NodeNames"] == []
        assert set(body["FailedAndUnresolvableNodes"].values()) == {"node(s) didn't match RuntimeClass"}
        assert len(body["FailedAndUnresolvableNodes"]) == SAMPLE
    assert await _counter(client, "gvisor") == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [MESSAGE]
    assert warnings[0].__dict__["fittingNotOffered"] == 3

    ready = await (await client.get("/readyz")).json()
    assert ready["warnings"] == [MESSAGE]

    explained = await (await client.get("/explain/runtimeclasses/gvisor")).json()
    assert explained["warnings"] == [MESSAGE]
    pod = {"spec": {"runtimeClassName": "gvisor"}}
    explained = await (await client.post("/explain", json=pod, headers=JSON)).json()
    assert explained["warnings"] == [MESSAGE]
    # Another class's explain stays quiet.
    assert (await (await client.get("/explain/runtimeclasses/kata")).json())["warnings"] == []


async def test_a_call_that_finds_the_pool_is_not_counted(client: Client) -> None:
    names = [*RUNC[: SAMPLE - 1], GVISOR[0]]
    body = await (await client.post("/filter", json=_request(names), headers=JSON)).json()
    assert body["NodeNames"] == [GVISOR[0]]
    assert await _counter(client, "gvisor") == 0
    assert (await (await client.get("/readyz")).json())["warnings"] == []


async def test_a_class_that_fits_nowhere_is_not_counted(client: Client) -> None:
    response = await client.post("/filter", json=_request(RUNC[:SAMPLE], "ghost"), headers=JSON)
    assert (await response.json())["NodeNames"] == []
    assert await _counter(client, "ghost") == 0


def test_warning_once_per_interval_then_again_with_the_count(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="extender.http")
    now = [1000.0]
    reports = HiddenNodeReports(warn_every=300, show_for=900, clock=lambda: now[0])
    hidden = HiddenNodes(SAMPLE, CLUSTER, 3)
    for step in range(5):  # five calls in four minutes: one warning
        now[0] = 1000.0 + 60 * step
        reports.record("gvisor", hidden)
    reports.record("kata", HiddenNodes(100, CLUSTER, 2))  # another class warns on its own
    now[0] = 1300.0
    reports.record("gvisor", hidden)  # five minutes after the first warning: warn again
    lines = [(r.__dict__["runtimeClass"], r.__dict__["calls"]) for r in caplog.records]
    assert lines == [("gvisor", 1), ("kata", 1), ("gvisor", 5)]
    assert len(reports.messages()) == 2
    now[0] = 1300.0 + 901  # quiet for longer than show_for: no longer shown
    assert reports.messages() == []
    assert reports.message_for("gvisor") is None
