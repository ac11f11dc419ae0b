"""What every replica of the webhook serves, asked of each one: the leader's check
before a CA leaves the caBundles (``plan``'s ``served``).

The replicas are the endpoints of the webhook Service's EndpointSlices
(``discovery.k8s.io/v1``, label ``kubernetes.io/service-name=<service>``, which the
EndpointSlice controller sets), in the extender's namespace: every endpoint, ready or
not (a replica that is not ready, or is terminating, may still be called on a
connection made before, and one that turns ready does so with the pair it has), and
every address of each, on the slice's port named ``webhook`` (a slice's ports carry
the Service port's name) or, failing that, its only port.

Each is asked by a TLS handshake as the API server makes it (SNI
``<service>.<namespace>.svc``), verifying nothing: the certificate presented is read
(``getpeercert(binary_form=True)``) and the connection closed. All at once, each
within ``timeout``.

Whatever keeps the answer from being complete (the slices cannot be listed, a slice
without that port, an endpoint that refuses, stays silent or presents nothing) is
named in ``Observed.unknown``; then the caller must remove nothing.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from extender.kube.api import ApiError, request_json

ENDPOINT_SLICES = "/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
# Set by the EndpointSlice controller on every slice it manages for a Service
# (discovery.k8s.io/v1 LabelServiceName).
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# The Service's port for the webhook (deploy/components/admission-webhook/service.yaml).
WEBHOOK_PORT_NAME = "webhook"
# Handshakes in flight at once: a Service's replicas are few, but never a burst of hundreds.
MAX_AT_ONCE = 16


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Observed:
    """The certificates the replicas serve (PEM), and why that may not be all of them."""

    leaves: frozenset[str]
    unknown: tuple[str, ...] = ()


def endpoints_of(
    slices: Iterable[Any], port_name: str = WEBHOOK_PORT_NAME
) -> tuple[list[Endpoint], list[str]]:
    """Every address of every endpoint of ``slices`` (EndpointSlice objects) on the
    webhook's port; and, for each slice whose port cannot be told, why."""
    endpoints: list[Endpoint] = []
    problems: list[str] = []
    for item in slices:
        if not isinstance(item, Mapping):
            problems.append("an EndpointSlice that is not an object")
            continue
        name = str((item.get("metadata") or {}).get("name") or "?")
        endpoint_list = item.get("endpoints") or []
        if not endpoint_list:
            continue
        port = _port_of(item.get("ports"), port_name)
        if port is None:
            problems.append(f"EndpointSlice {name}: no port named {port_name} (nor a single port)")
            continue
        for endpoint in endpoint_list:
            addresses = endpoint.get("addresses") if isinstance(endpoint, Mapping) else None
            endpoints.extend(Endpoint(str(address), port) for address in addresses or ())
    return endpoints, problems


def _port_of(ports: Any, port_name: str) -> int | None:
    if not isinstance(ports, list):
        return None  # null ports means "all ports": nothing to dial
    numbered = [p for p in ports if isinstance(p, Mapping) and isinstance(p.get("port"), int)]
    named = [p for p in numbered if p.get("name") == port_name]
    chosen = named or (numbered if len(numbered) == 1 else [])
    return int(chosen[0]["port"]) if chosen else None


async def list_slices(api: Any, namespace: str, service: str, timeout: float) -> list[Any]:
    """The Service's EndpointSlices; raises ApiError, aiohttp.ClientError, TimeoutError,
    OSError or ValueError."""
    body = await request_json(
        api,
        "GET",
        ENDPOINT_SLICES,
        query=[("labelSelector", f"{SERVICE_NAME_LABEL}={service}")],
        path_params={"namespace": namespace},
        timeout=aiohttp.ClientTimeout(total=timeout),
    )
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise ValueError("the EndpointSlice list has no items")
    return items


def _probe_context() -> ssl.SSLContext:
    # Only what is presented matters, not whether this process would trust it.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def presented(endpoint: Endpoint, server_name: str, context: ssl.SSLContext, timeout: float) -> str:
    """The certificate (PEM) ``endpoint`` presents to a client asking for
    ``server_name``; raises OSError, ssl.SSLError or TimeoutError (or ValueError when
    it presents none)."""
    async with asyncio.timeout(timeout):
        _, writer = await asyncio.open_connection(
            endpoint.host, endpoint.port, ssl=context, server_hostname=server_name
        )
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    finally:
        writer.close()
    if not der:
        raise ValueError("no certificate presented")
    return ssl.DER_cert_to_PEM_cert(der)


async def observe(api: Any, *, namespace: str, service: str, server_name: str, timeout: float) -> Observed:
    """What every endpoint of ``service`` serves; never raises (see the module doc)."""
    try:
        slices = await list_slices(api, namespace, service, timeout)
    except (ApiError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        return Observed(
            frozenset(), (f"the EndpointSlices of Service {namespace}/{service}: {_describe(exc)}",)
        )
    endpoints, unknown = endpoints_of(slices)
    context = _probe_context()
    at_once = asyncio.Semaphore(MAX_AT_ONCE)

    async def ask(endpoint: Endpoint) -> str | BaseException:
        async with at_once:
            try:
                return await presented(endpoint, server_name, context, timeout)
            except (OSError, ssl.SSLError, TimeoutError, ValueError) as exc:
                return exc

    distinct = sorted(set(endpoints), key=str)
    answers = await asyncio.gather(*(ask(endpoint) for endpoint in distinct))
    leaves: set[str] = set()
    for endpoint, answer in zip(distinct, answers, strict=True):
        if isinstance(answer, BaseException):
            unknown.append(f"{endpoint}: {_describe(answer)}")
        else:
            leaves.add(answer)
    return Observed(frozenset(leaves), tuple(unknown))


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, ApiError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
