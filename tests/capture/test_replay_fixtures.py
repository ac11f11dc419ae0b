"""Replay requests captured from a real kube-scheduler v1.36.2 against ``POST /filter``.

The request bodies live in tests/data/fixtures/kube-scheduler/ (README.md there says how
they were captured). They are posted byte for byte, with the headers kube-scheduler
sent, to the app serving tests/data/capture-cluster.yaml, the cluster they came from
(environment.json): gvisor-{1,fail-1,unres-1} labelled runtime/gvisor=true and tainted
sandbox=true:NoSchedule; plain-{1,fail-1,unres-1} untainted; RuntimeClass gvisor
(nodeSelector runtime/gvisor=true, toleration sandbox=true:NoSchedule) and runc (none).

Each expected answer below is derived by hand from the rules (not from running the
code): which nodes pass, which failure map each rejected node lands in, and its reason.
In the captures with RuntimeClass admission on, the in-tree filters already applied the
merged selector and toleration, so every candidate passes our predicates too. Where
admission was off, the gvisor pod reached nodes its class cannot use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pytest_aiohttp import AiohttpClient

from tests.support.apps import AppFactory, Client

MISMATCH = "node(s) didn't match RuntimeClass"
GVISOR = ["gvisor-1", "gvisor-fail-1", "gvisor-unres-1"]
PLAIN = ["plain-1", "plain-fail-1", "plain-unres-1"]


@dataclass(frozen=True)
class Expected:
    request: str
    names_mode: bool
    passing: list[str]
    unresolvable: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    why: str = ""


EXPECTED = [
    Expected(
        "filter-nodenames-runc.json",
        True,
        PLAIN,
        why="runc has no scheduling; plain nodes are untainted",
    ),
    Expected(
        "filter-nodenames-gvisor-admitted.json",
        True,
        GVISOR,
        why="gvisor nodes carry runtime/gvisor=true; the sandbox taint is tolerated (pod and class)",
    ),
    Expected(
        "filter-nodenames-no-runtimeclass.json",
        True,
        PLAIN,
        why="no RuntimeClass: selector passes; untainted nodes",
    ),
    Expected(
        "filter-nodenames-runc-nowhere.json",
        True,
        ["plain-fail-1", "plain-unres-1"],
        why="the pod's own nodeSelector e2e/bad is the in-tree scheduler's business; runc fits both",
    ),
    Expected(
        "filter-nodenames-gvisor-noadmission.json",
        True,
        [],
        unresolvable=dict.fromkeys(PLAIN, MISMATCH),
        why="admission off: only untainted plain nodes reached us; none has runtime/gvisor=true",
    ),
    Expected(
        "filter-nodenames-gvisor-tolerating-noadmission.json",
        True,
        GVISOR,
        unresolvable=dict.fromkeys(PLAIN, MISMATCH),
        why="admission off, the pod tolerates the sandbox itself: gvisor nodes fit, plain nodes lack the label",
    ),
    Expected(
        "filter-nodes-runc.json",
        False,
        PLAIN,
        why="full nodes; runc fits the untainted plain nodes",
    ),
    Expected(
        "filter-nodes-gvisor-admitted.json",
        False,
        GVISOR,
        why="full nodes; labelled and the taint tolerated",
    ),
    Expected(
        "filter-nodes-gvisor-nowhere.json",
        False,
        ["gvisor-fail-1", "gvisor-unres-1"],
        why="the pod's own nodeSelector e2e/bad is the in-tree scheduler's; both fit the class",
    ),
    Expected(
        "filter-nodes-gvisor-noadmission.json",
        False,
        [],
        unresolvable=dict.fromkeys(PLAIN, MISMATCH),
        why="full nodes, admission off: plain nodes lack runtime/gvisor=true",
    ),
]

NOT_REQUESTS = {"filter-request-headers.json"}


def _headers(fixtures: Path, names_mode: bool) -> dict[str, str]:
    """The headers kube-scheduler sent (Host and Content-Length are the client's)."""
    recorded = json.loads((fixtures / "filter-request-headers.json").read_text())
    headers = recorded["nodeCacheCapableTrue" if names_mode else "nodeCacheCapableFalse"]["headers"]
    return {k: v for k, v in headers.items() if k not in ("Host", "Content-Length")}


@pytest.fixture
async def client(aiohttp_client: AiohttpClient, make_app: AppFactory) -> Client:
    test_client: Client = await aiohttp_client(make_app())
    return test_client


def test_every_captured_request_has_an_expected_answer(fixtures_dir: Path) -> None:
    captured = {p.name for p in fixtures_dir.glob("filter-*.json")} - NOT_REQUESTS
    assert captured == {e.request for e in EXPECTED}


@pytest.mark.parametrize("expected", [pytest.param(e, id=e.request.removesuffix(".json")) for e in EXPECTED])
async def test_replay(client: Client, fixtures_dir: Path, expected: Expected) -> None:
    raw = (fixtures_dir / expected.request).read_bytes()
    request: dict[str, Any] = json.loads(raw)
    asked = (
        request["NodeNames"]
        if expected.names_mode
        else [n["metadata"]["name"] for n in request["Nodes"]["items"]]
    )

    response = await client.post("/filter", data=raw, headers=_headers(fixtures_dir, expected.names_mode))
    assert response.status == 200, await response.text()
    answer = await response.json()

    assert set(answer) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert answer["Error"] == ""
    if expected.names_mode:
        # Asked with names: answer with names, Nodes null.
        assert answer["Nodes"] is None
        passing = answer["NodeNames"]
    else:
        # Asked with node objects: answer with the very objects that were sent.
        assert answer["NodeNames"] is None
        assert answer["Nodes"]["metadata"] == {}
        items = answer["Nodes"]["items"]
        passing = [n["metadata"]["name"] for n in items]
        by_name = {n["metadata"]["name"]: n for n in request["Nodes"]["items"]}
        assert items == [by_name[name] for name in passing]

    assert isinstance(passing, list)
    assert sorted(passing) == sorted(expected.passing), expected.why
    assert answer["FailedAndUnresolvableNodes"] == expected.unresolvable, expected.why
    assert answer["FailedNodes"] == expected.failed, expected.why

    # Every asked node exactly once across the three; nothing that was not asked.
    named = passing + list(answer["FailedNodes"]) + list(answer["FailedAndUnresolvableNodes"])
    assert sorted(named) == sorted(asked)


async def test_predicate_mode_gvisor_pod_reaches_sandbox_nodes_through_its_class(
    client: Client, fixtures_dir: Path
) -> None:
    # The admission-off gvisor pod does not tolerate the sandbox taint itself. With the
    # in-tree TaintToleration filter disabled (predicate mode, docs/concepts.md) all six
    # nodes would reach the extender: the class's toleration admits the gvisor nodes.
    request = json.loads((fixtures_dir / "filter-nodenames-gvisor-noadmission.json").read_bytes())
    own = [t.get("key") for t in request["Pod"]["spec"].get("tolerations", [])]
    assert "sandbox" not in own
    request["NodeNames"] = GVISOR + PLAIN
    response = await client.post("/filter", json=request)
    assert response.status == 200
    answer = await response.json()
    assert sorted(answer["NodeNames"]) == GVISOR
    assert answer["FailedAndUnresolvableNodes"] == dict.fromkeys(PLAIN, MISMATCH)
    assert answer["FailedNodes"] == {}
