"""Asking every replica of the webhook Service what it serves: which endpoints of its
EndpointSlices are dialled on which port, and what makes the answer incomplete."""

from __future__ import annotations

from typing import Any

import pytest

from extender.certificates.replicas import Endpoint, endpoints_of


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
