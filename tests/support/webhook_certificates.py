"""Self-managed webhook certificates against the test API server: the two webhook
configurations as deploy/ ships them, keepers with a clock of the test's own, a real
TLS listener on each keeper's switching context with an EndpointSlice of the webhook
Service pointing at it (as the EndpointSlice controller would), and the API server's
side of a webhook call: a client that dials each listener and verifies what it is
served against the caBundle stored at that moment.

Shared by tests/certificates/ and tests/http/.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from extender.certificates.authority import issued_by, read_bundle
from extender.certificates.keeper import CertificateOptions, WebhookCertificates
from extender.certificates.secret import TLS_CERT
from extender.certificates.serving import SwitchingContext
from extender.kube import connect as kube
from extender.leader.gate import LeaderGate
from extender.tasks import run_all
from extender.tasks import stop as stop_task
from tests.support.apiserver import (
    MUTATING_WEBHOOKS,
    SECRETS,
    VALIDATING_WEBHOOKS,
    FakeApiServer,
    ResourceType,
)
from tests.support.reflectors import fast_reflector
from tests.support.waiting import eventually

NAMESPACE = "runtimeclass-extender"
SERVICE = "runtimeclass-extender-webhook"
SECRET = "runtimeclass-extender-webhook-certificate"
CONFIGURATION = "runtimeclass-extender"
VALIDATING_HOOK = "runtimeclasses.runtimeclass-extender.dev"
MUTATING_HOOK = "pods.runtimeclass-extender.dev"
DNS_NAME = f"{SERVICE}.{NAMESPACE}.svc"
ENDPOINT_SLICES = ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", namespaced=True)
SERVICE_NAME_LABEL = "kubernetes.io/service-name"

OPTIONS = CertificateOptions(
    secret=SECRET,
    namespace=NAMESPACE,
    service=SERVICE,
    validating_configuration=CONFIGURATION,
    mutating_configuration=CONFIGURATION,
    check_interval=3600.0,
    # Generous: a timed-out read under a loaded machine would look like a lost race.
    request_timeout=10.0,
    rate=100.0,
    burst=10,
    retry_initial=0.02,
    retry_max=0.2,
    recheck_initial=0.05,
    recheck_max=0.2,
    probe_timeout=0.5,
    reflector=fast_reflector(),
)


def _hook(name: str, path: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": SERVICE, "namespace": NAMESPACE, "path": path, "port": 443}},
        **extra,
    }


def add_webhook_configurations(server: FakeApiServer) -> None:
    """Both configurations as deploy/components applies them: no caBundle."""
    server.add(
        VALIDATING_WEBHOOKS,
        {
            "metadata": {"name": CONFIGURATION},
            "webhooks": [_hook(VALIDATING_HOOK, "/admission/runtimeclasses", failurePolicy="Ignore")],
        },
    )
    server.add(
        MUTATING_WEBHOOKS,
        {
            "metadata": {"name": CONFIGURATION},
            "webhooks": [_hook(MUTATING_HOOK, "/admission/pods", failurePolicy="Fail")],
        },
    )


def ca_bundles(server: FakeApiServer) -> dict[str, bytes]:
    """The caBundle (PEM) of each webhook, by webhook name ("" where there is none)."""
    bundles = {}
    for kind in (VALIDATING_WEBHOOKS, MUTATING_WEBHOOKS):
        configuration = server.get(kind, CONFIGURATION)
        assert configuration is not None
        for hook in configuration["webhooks"]:
            bundles[hook["name"]] = base64.b64decode(hook["clientConfig"].get("caBundle", ""))
    return bundles


def bundle_cas(server: FakeApiServer) -> set[str]:
    """Fingerprints of every CA in either stored caBundle."""
    return {ca.fingerprint for pem in ca_bundles(server).values() for ca in read_bundle(pem)}


def secret_data(server: FakeApiServer) -> dict[str, bytes]:
    secret = server.get(SECRETS, SECRET, namespace=NAMESPACE)
    assert secret is not None
    return {key: base64.b64decode(value) for key, value in secret["data"].items()}


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def add_endpoint_slice(server: FakeApiServer, name: str, port: int, *, address: str = "127.0.0.1") -> str:
    """An EndpointSlice of the webhook Service with one endpoint (ready or not: the
    keeper probes every one) at ``address:port``, as the EndpointSlice controller
    writes it for a pod; returns its name."""
    slice_name = f"{SERVICE}-{name}"
    server.register(ENDPOINT_SLICES)
    server.put(
        ENDPOINT_SLICES,
        {
            "metadata": {
                "name": slice_name,
                "namespace": NAMESPACE,
                "labels": {SERVICE_NAME_LABEL: SERVICE},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": False}}],
            "ports": [{"name": "webhook", "port": port, "protocol": "TCP"}],
        },
    )
    return slice_name


@dataclass
class Keeper:
    """One replica's keeper, its API connection and a TLS listener on its context."""

    name: str
    api: Any
    keeper: WebhookCertificates
    runner: web.AppRunner
    port: int
    server: FakeApiServer
    # Its EndpointSlice ("" when the test made none).
    endpoint_slice: str = ""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def switching(self) -> SwitchingContext:
        return self.keeper.serving

    def observe(self) -> None:
        """What every replica runs: the keeper's informers and its observe."""
        jobs = (*(informer.run for informer in self.keeper.informers), self.keeper.observe)
        self.tasks.append(asyncio.create_task(run_all(*jobs), name=f"{self.name}-observe"))

    def lead(self, gate: LeaderGate | None = None) -> None:
        """The leader's side, through ``gate`` if given (as the runner runs it)."""
        job = self.keeper.lead if gate is None else (lambda: gate.while_leading(self.keeper.lead))
        self.tasks.append(asyncio.create_task(job(), name=f"{self.name}-lead"))

    async def stop_lead(self) -> None:
        """End the leader's side only (its term), the informers and observe running on."""
        for task in [t for t in self.tasks if t.get_name().endswith("-lead")]:
            await stop_task(task)
            self.tasks.remove(task)

    async def peer_certificate(self) -> bytes:
        """The DER certificate a client is served now (not verified: the test's clock
        may be years ahead of the real one)."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        _, writer = await asyncio.open_connection(
            "127.0.0.1", self.port, ssl=context, server_hostname=DNS_NAME
        )
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
        assert der is not None
        return bytes(der)

    async def verified_handshake(self, ca_bundle: bytes, server_name: str = DNS_NAME) -> bytes:
        """A handshake as the API server makes it: verify against the caBundle, for the
        Service's name; the DER certificate served. Raises ssl.SSLError (or
        ConnectionError) when refused."""
        context = ssl.create_default_context(cadata=ca_bundle.decode())
        _, writer = await asyncio.open_connection(
            "127.0.0.1", self.port, ssl=context, server_hostname=server_name
        )
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
        return bytes(der or b"")

    def check_every_choice(self, violations: list[str]) -> None:
        """At every handshake, the moment the listener picks the certificate to
        present, check that the caBundle of every webhook *as stored in the API
        server at that moment* holds a CA that signed it; note each one that does not."""
        front = self.switching.front
        choose = front.sni_callback
        assert choose is not None

        def checked(connection: Any, server_name: str | None, context: ssl.SSLContext) -> int | None:
            answer = choose(connection, server_name, context)
            pair = self.switching.pair
            if answer is None and pair is not None:
                for hook, bundle in ca_bundles(self.server).items():
                    if not any(issued_by(pair.cert_pem, ca.pem) for ca in read_bundle(bundle)):
                        violations.append(
                            f"{self.name} chose a certificate the caBundle of {hook} does not trust"
                        )
            return answer

        front.sni_callback = checked

    async def stop(self) -> None:
        for task in reversed(self.tasks):
            await stop_task(task)
        self.tasks.clear()
        await self.runner.cleanup()
        await self.api.close()
        if self.endpoint_slice and self.server.get(ENDPOINT_SLICES, self.endpoint_slice, namespace=NAMESPACE):
            self.server.delete(ENDPOINT_SLICES, self.endpoint_slice, namespace=NAMESPACE)


async def start_keeper(
    server: FakeApiServer,
    directory: Path,
    name: str,
    *,
    clock: Callable[[], datetime],
    options: CertificateOptions = OPTIONS,
    endpoint_slice: bool = True,
    user: str = "",
) -> Keeper:
    """A keeper (not yet running) with its own token (as ``user``, else a user named
    ``name``), a listener serving its context, and (``endpoint_slice``) an
    EndpointSlice of the webhook Service naming it."""
    conn = await kube.connect(
        kubeconfig=str(server.write_kubeconfig(directory / f"{name}.kubeconfig", user_name=user or name))
    )
    keeper = WebhookCertificates(conn.api, options, SwitchingContext(), clock=clock)
    app = web.Application()
    app.router.add_get("/", _ok)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=keeper.serving.front)
    await site.start()
    port = int(runner.addresses[0][1])
    slice_name = add_endpoint_slice(server, name, port) if endpoint_slice else ""
    return Keeper(name, conn.api, keeper, runner, port, server, slice_name)


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def writes_by(server: FakeApiServer) -> dict[str, list[str]]:
    """Who wrote what: user -> ["POST secrets", "PUT secrets", "PATCH ...", ...]."""
    result: dict[str, list[str]] = {}
    for request in server.requests:
        if request.verb in ("post", "put", "patch"):
            resource = request.path.rstrip("/").split("/")[-2 if request.verb != "post" else -1]
            result.setdefault(request.user, []).append(f"{request.verb.upper()} {resource}")
    return result


def der_of(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


async def settled(keeper: Keeper, server: FakeApiServer) -> None:
    """Until the listener serves the Secret's pair and the keeper calls it trusted."""

    async def serving_the_secret() -> bool:
        return (
            keeper.switching.pair is not None
            and await keeper.peer_certificate() == der_of(secret_data(server)[TLS_CERT])
            and keeper.keeper.trust().trusted
        )

    await eventually(serving_the_secret, what=f"{keeper.name} serving the Secret's trusted certificate")


async def kept(keeper: Keeper) -> None:
    """Until the leader has nothing left to write (no pass for a change nor a write
    queued, a fresh plan idle): what a test waits for after moving the clock."""

    async def idle() -> bool:
        return not keeper.keeper.busy and (await keeper.keeper.check()).idle

    keeper.keeper.wake()
    await eventually(idle, what=f"{keeper.name} with nothing left to write")


@dataclass
class Dialler:
    """The API server's side of webhook calls: new TLS connections, one after another,
    to every replica, each verified against the caBundle of a webhook as stored when
    it dials (alternating between the two webhooks), for ``<svc>.<ns>.svc``
    (staging/src/k8s.io/apiserver/pkg/util/webhook/client.go)."""

    server: FakeApiServer
    replicas: list[Keeper]
    handshakes: int = 0
    failures: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        hooks = (MUTATING_HOOK, VALIDATING_HOOK)
        while True:
            for replica in self.replicas:
                hook = hooks[self.handshakes % 2]
                bundle = ca_bundles(self.server)[hook]
                self.handshakes += 1
                try:
                    await replica.verified_handshake(bundle)
                except (ssl.SSLError, ConnectionError, ValueError) as exc:
                    self.failures.append(f"{replica.name} via the caBundle of {hook}: {exc}")

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="dialler")

    async def stop(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
            self._task = None
