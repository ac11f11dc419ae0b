"""Asking every replica of the webhook Service what it serves: which endpoints of its
EndpointSlices are dialled on which port, and what makes the answer incomplete."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from extender.certificates.authority import new_ca, new_serving
from extender.certificates.replicas import Endpoint, endpoints_of, observe
from extender.kube import connect as kube
from tests.support.apiserver import FakeApiServer
from tests.support.webhook_certificates import (
    DNS_NAME,
    ENDPOINT_SLICES,
    NAMESPACE,
    SERVICE,
    Clock,
    add_endpoint_slice,
    start_keeper,
)


def _slice(name: str, ports: Any, *endpoints: list[str], **conditions: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "endpoints": [{"addresses": addresses, "conditions": conditions} for addresses in endpoints],
        "ports": ports,
    }


def test_every_address_of_every_endpoint_ready_or_not_on_the_webhook_port() -> None:
    slices = [
        _slice("a", [{"name": "webhook", "port": 8443}], ["10.0.0.1"], ["10.0.0.2", "10.0.0.3"], ready=False),
        _slice("b", [{"name": "metrics", "port": 9090}, {"name": "webhook", "port": 8443}], ["10.0.0.4"]),
        # One port, named otherwise (a Service port of another name): that one.
        _slice("c", [{"name": "", "port": 9443}], ["fd00::1"], terminating=True),
        _slice("empty", [{"name": "webhook", "port": 8443}]),
    ]
    endpoints, problems = endpoints_of(slices)
    assert problems == []
    assert endpoints == [
        Endpoint("10.0.0.1", 8443),
        Endpoint("10.0.0.2", 8443),
        Endpoint("10.0.0.3", 8443),
        Endpoint("10.0.0.4", 8443),
        Endpoint("fd00::1", 9443),
    ]
    assert [str(e) for e in endpoints[-2:]] == ["10.0.0.4:8443", "[fd00::1]:9443"]


@pytest.mark.parametrize(
    "ports",
    [None, [], [{"name": "a", "port": 1}, {"name": "b", "port": 2}], [{"name": "webhook"}]],
    ids=["all ports (null)", "none", "several, none named webhook", "no number"],
)
def test_a_slice_whose_port_cannot_be_told_is_a_problem(ports: Any) -> None:
    endpoints, problems = endpoints_of([_slice("s", ports, ["10.0.0.1"])])
    assert endpoints == []
    assert problems == ["EndpointSlice s: no port named webhook (nor a single port)"]


async def _observe(server: FakeApiServer, directory: Path) -> Any:
    conn = await kube.connect(kubeconfig=str(server.write_kubeconfig(directory / "probe.kubeconfig")))
    try:
        return await observe(
            conn.api, namespace=NAMESPACE, service=SERVICE, server_name=DNS_NAME, timeout=0.5
        )
    finally:
        await conn.api.close()


async def test_slices_that_cannot_be_listed_leave_it_unknown(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    # EndpointSlices not served at all (404), then refused (403): never "no replicas".
    fake_apiserver.fail_next(1, status=404, resource=ENDPOINT_SLICES, message="the server could not find it")
    observed = await _observe(fake_apiserver, tmp_path)
    assert observed.leaves == frozenset() and len(observed.unknown) == 1
    assert "EndpointSlices of Service" in observed.unknown[0]
    fake_apiserver.fail_next(1, status=403, resource=ENDPOINT_SLICES, message="endpointslices is forbidden")
    observed = await _observe(fake_apiserver, tmp_path)
    assert "forbidden" in observed.unknown[0]
    # Listed, and nothing there: known, and empty.
    observed = await _observe(fake_apiserver, tmp_path)
    assert observed.leaves == frozenset() and observed.unknown == ()


async def test_what_each_replica_presents_and_who_did_not_answer(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=Clock())
    try:
        # Its listener has no pair yet: it refuses the handshake.
        observed = await _observe(fake_apiserver, tmp_path)
        assert observed.leaves == frozenset()
        assert [reason.split(":")[:2] for reason in observed.unknown] == [["127.0.0.1", str(replica.port)]]
        # The slice's label is what finds it: another Service's slice is not asked.
        add_endpoint_slice(fake_apiserver, "other", 1)
        fake_apiserver.modify(
            ENDPOINT_SLICES,
            f"{SERVICE}-other",
            {"metadata": {"labels": {"kubernetes.io/service-name": "other"}}},
            namespace=NAMESPACE,
        )
        now = datetime.now(UTC)
        ca = new_ca(now, timedelta(days=1), common_name="test")
        leaf = new_serving(ca, [DNS_NAME], now, timedelta(days=1))
        replica.switching.serve(leaf)
        observed = await _observe(fake_apiserver, tmp_path)
        assert observed.unknown == ()
        assert observed.leaves == {leaf.cert_pem.decode()}
    finally:
        await replica.stop()
