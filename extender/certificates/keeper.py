"""Self-managed webhook certificates: the I/O around ``extender.certificates.plan``.

A leader actor (``extender.leader.actor``), run by ``extender.leader.runner``.

On every replica:

- its informers follow that one Secret and both webhook configurations
  (``fieldSelector=metadata.name=<name>``, which RBAC authorizes by ``resourceNames``
  for list and watch);
- ``observe()`` creates the Secret if it does not exist yet (the first replica to
  start wins the POST; another one gets ``409 AlreadyExists`` and reads the winner's);
- on every change of the Secret, loads its pair into a fresh ``SSLContext`` and
  switches the admission listener to it (``extender.certificates.serving``); a pair
  that does not load is logged and the previous one keeps serving;
- tells readiness (``trusted``) whether the pair it serves is trusted by the caBundle
  of every webhook of both configurations.

``lead()``, on the replica that leads (each term), or on the only replica without
leader election, is level-triggered: at the start of the term, on each change the
informers see, and every ``check_interval``, it reads the Secret and both
configurations afresh, asks ``plan`` what they should hold, and writes the
difference (at most a few writes, each with its own precondition, so they do not go
through the write queue): the
Secret by POST or by PUT carrying the resourceVersion it read (a concurrent writer
gets 409 and the keeper reads and plans again), and the caBundles by strategic merge
patch of the webhooks list, keyed by ``name`` (staging/src/k8s.io/api/admissionregistration/v1/types.go:
``Webhooks`` has ``+patchMergeKey=name``, ``+patchStrategy=merge`` and ``+listMapKey=name``),
so that only ``clientConfig.caBundle`` of the extender's own webhooks changes and a
``kubectl apply`` of manifests that leave caBundle out never takes it back.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from extender.certificates.authority import CertificateError, read_bundle, signers
from extender.certificates.plan import (
    Bundle,
    Cert,
    Plan,
    Policy,
    Trust,
    bundle_cas,
    plan,
    service_dns_names,
    trust,
)
from extender.certificates.secret import (
    Served,
    is_ours,
    next_data,
    read_secret,
    secret_body,
    secret_data,
    served_of,
)
from extender.certificates.serving import PairError, SwitchingContext
from extender.kube.api import ApiError, request_json
from extender.kube.backoff import Backoff
from extender.kube.informer import Informer
from extender.kube.reflector import ReflectorOptions, WatchedResource
from extender.kube.store import Named, ObjectError, Store
from extender.leader.actor import LeaderActor

log = logging.getLogger("extender.certificates")

SECRETS = "/api/v1/namespaces/{namespace}/secrets"
SECRET = SECRETS + "/{name}"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
VALIDATING = "validatingwebhookconfigurations"
MUTATING = "mutatingwebhookconfigurations"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
FIELD_MANAGER = "runtimeclass-extender"
# How often the leader checks, even when nothing changed (renewals are months ahead).
DEFAULT_CHECK_INTERVAL = 3600.0
# Plans carried out in one reconcile before the keeper waits (a rotation takes three).
MAX_STEPS = 8

EXPIRY_METRIC = "runtimeclass_extender_webhook_certificate_expiry_timestamp_seconds"
TRUSTED_METRIC = "runtimeclass_extender_webhook_certificate_trusted"

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class CertificateOptions:
    secret: str
    namespace: str
    service: str
    validating_configuration: str
    mutating_configuration: str
    check_interval: float = DEFAULT_CHECK_INTERVAL
    # Whole-request timeout of one read or write.
    request_timeout: float = 10.0
    # Backoff of the leader's reconcile after a failure.
    retry_initial: float = 1.0
    retry_max: float = 60.0
    reflector: ReflectorOptions = field(default_factory=ReflectorOptions)
    policy: Policy | None = None

    @property
    def dns_names(self) -> frozenset[str]:
        return service_dns_names(self.service, self.namespace)

    @property
    def configurations(self) -> tuple[tuple[str, str, str], ...]:
        """(label, collection, name) of both webhook configurations."""
        return (
            (
                f"ValidatingWebhookConfiguration/{self.validating_configuration}",
                VALIDATING,
                self.validating_configuration,
            ),
            (
                f"MutatingWebhookConfiguration/{self.mutating_configuration}",
                MUTATING,
                self.mutating_configuration,
            ),
        )


@dataclass(frozen=True)
class Watched:
    """One object followed by name: the raw JSON, for the keeper's own reading."""

    name: str
    resource_version: str
    obj: Mapping[str, Any]


def _watched(obj: Any) -> Named:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(metadata, dict):
        raise ObjectError("an object without metadata")
    return Watched(str(metadata.get("name") or ""), str(metadata.get("resourceVersion") or ""), obj)


def bundle_of(configuration: Mapping[str, Any] | None, *, service: str, namespace: str) -> Bundle:
    """The caBundles of ``configuration``'s webhooks that call ``namespace/service``."""
    if configuration is None:
        return Bundle(present=False)
    hooks: dict[str, frozenset[str]] = {}
    cas: dict[str, Cert] = {}
    for webhook in configuration.get("webhooks") or ():
        if not isinstance(webhook, dict) or not isinstance(webhook.get("name"), str):
            continue
        client = webhook.get("clientConfig") or {}
        reference = client.get("service") or {}
        if reference.get("name") != service or reference.get("namespace") != namespace:
            continue
        try:
            pem = base64.b64decode(str(client.get("caBundle") or ""), validate=True)
            held = {c.fingerprint: c for c in read_bundle(pem)}
        except (binascii.Error, ValueError, CertificateError):
            held = {}  # unreadable: trusts nothing, and gets rewritten
        hooks[webhook["name"]] = frozenset(held)
        cas.update(held)
    return Bundle(present=True, webhooks=hooks, cas=cas)


class _Metrics(Collector):
    """The served certificate's end, and whether the caBundles trust it (scrape time)."""

    def __init__(self, keeper: WebhookCertificates) -> None:
        self._keeper = keeper

    def collect(self) -> Any:
        served = self._keeper.served
        if served is not None:
            expiry = GaugeMetricFamily(
                EXPIRY_METRIC,
                "When the certificate the admission listener serves expires (Unix seconds); "
                "self-managed webhook certificates only.",
            )
            expiry.add_metric([], served.leaf.not_after.timestamp())
            yield expiry
        trusted = GaugeMetricFamily(
            TRUSTED_METRIC,
            "1 while both webhook configurations' caBundles trust the certificate the admission "
            "listener serves, else 0; self-managed webhook certificates only.",
        )
        trusted.add_metric([], 1.0 if self._keeper.trust().trusted else 0.0)
        yield trusted


class WebhookCertificates(LeaderActor):
    """See the module doc: ``observe`` on every replica, ``lead`` on the leader."""

    name = "webhook-certificates"

    def __init__(
        self,
        api: Any,
        options: CertificateOptions,
        serving: SwitchingContext,
        *,
        clock: Clock = utc_now,
        rng: random.Random | None = None,
    ) -> None:
        self._api = api
        self.options = options
        self.serving = serving
        self._clock = clock
        self.policy = options.policy or Policy(dns_names=options.dns_names)
        self.served: Served | None = None
        # The leader's last problem with the Secret (foreign, unusable CA), for /readyz.
        self.problem = ""
        self.writes = 0
        self._changed = asyncio.Event()
        self._timeout = aiohttp.ClientTimeout(total=options.request_timeout)
        self._backoff = Backoff(
            initial=options.retry_initial,
            maximum=options.retry_max,
            reset_after=options.retry_max * 2,
            jitter=0.5,
            rng=rng or random.Random(),
            clock=time.monotonic,
        )
        self._logged: set[tuple[str, str]] = set()
        self.secret_informer: Informer[Watched] = Informer(
            api,
            WatchedResource(
                "secrets",
                SECRETS.format(namespace=options.namespace),
                _watched,
                field_selector=f"metadata.name={options.secret}",
            ),
            Store("webhook-certificate-secret"),
            options=options.reflector,
        )
        self.secret_store = self.secret_informer.store
        self.secret_store.add_listener(lambda _kind, _old, _new: self._secret_changed())
        self.configuration_informers: dict[str, Informer[Watched]] = {}
        for label, collection, name in options.configurations:
            informer: Informer[Watched] = Informer(
                api,
                WatchedResource(
                    collection, f"{ADMISSION}/{collection}", _watched, field_selector=f"metadata.name={name}"
                ),
                Store(label),
                options=options.reflector,
            )
            informer.store.add_listener(lambda _kind, _old, _new: self._changed.set())
            self.configuration_informers[label] = informer

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self.secret_informer, *self.configuration_informers.values())

    @property
    def secret_name(self) -> str:
        return f"{self.options.namespace}/{self.options.secret}"

    # ----- every replica --------------------------------------------------------------

    async def observe(self) -> None:
        """Create the Secret if there is none (the informers, run beside this, follow it
        and both configurations, and each new pair is switched to as it arrives)."""
        try:
            await self._create_if_absent()
        except (ApiError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            # The leader creates it later; the informer reports the API server's state.
            log.warning(
                "cannot create the webhook certificate Secret yet",
                extra={"secret": self.secret_name, "error": _describe(exc)},
            )

    def _secret_changed(self) -> None:
        self._changed.set()
        watched = self.secret_store.get(self.options.secret)
        if watched is None:
            if self.secret_store.synced:
                log.warning(
                    "the webhook certificate Secret is gone; serving the certificate loaded before",
                    extra={"secret": self.secret_name},
                )
            return
        if not is_ours(watched.obj):
            # Someone else's Secret of that name: never served (nor written).
            self._once(
                watched.resource_version,
                "the webhook certificate Secret is not labelled as the extender's; not serving it",
            )
            return
        served = served_of(watched.obj)
        if served is None:
            self._once(
                watched.resource_version,
                "the webhook certificate Secret has no usable serving certificate and key; "
                "keeping the one served before",
            )
            return
        if self.served is not None and served.pair == self.served.pair:
            self.served = served  # the CAs around it may have changed
            return
        try:
            self.serving.serve(served.pair)
        except PairError as exc:
            log.error(
                "the webhook certificate does not load; keeping the one served before",
                extra={"secret": self.secret_name, "error": str(exc)},
            )
            return
        self.served = served
        log.info(
            "serving webhook certificate",
            extra={
                "secret": self.secret_name,
                "notAfter": served.leaf.not_after.isoformat(),
                "fingerprint": served.leaf.fingerprint[:16],
            },
        )

    def _once(self, key: str, message: str) -> None:
        if (key, message) not in self._logged:
            self._logged.add((key, message))
            log.error(message, extra={"secret": self.secret_name})

    def bundles(self) -> dict[str, Bundle]:
        """Both configurations as the reflectors last saw them ({} until both listed)."""
        if not all(informer.synced for informer in self.configuration_informers.values()):
            return {}
        result = {}
        for label, _, name in self.options.configurations:
            watched = self.configuration_informers[label].store.get(name)
            result[label] = bundle_of(
                watched.obj if watched else None,
                service=self.options.service,
                namespace=self.options.namespace,
            )
        return result

    def trust(self) -> Trust:
        served = self.served
        bundles = self.bundles()
        found = signers(served.leaf.pem, bundle_cas(bundles)) if served else frozenset()
        return trust(served.leaf if served else None, found, bundles, self._clock())

    def details(self) -> dict[str, Any]:
        """For /readyz: trusted or why not, and the served certificate's end."""
        verdict = self.trust()
        body: dict[str, Any] = {
            "secret": self.secret_name,
            "trusted": verdict.trusted,
            "reason": verdict.reason,
        }
        if self.served is not None:
            body["notAfter"] = self.served.leaf.not_after.isoformat()
        if self.problem:
            body["problem"] = self.problem
        return body

    def register_metrics(self, registry: CollectorRegistry) -> None:
        registry.register(_Metrics(self))

    def wake(self) -> None:
        """Have the leading side check now (as on a change of the Secret or a webhook
        configuration) instead of at the next periodic check."""
        self._changed.set()

    # ----- the leader -----------------------------------------------------------------

    async def lead(self) -> None:
        """Keep the Secret and both caBundles as ``plan`` wants them; until cancelled."""
        log.info("keeping the webhook certificates", extra={"secret": self.secret_name})
        while True:
            self._changed.clear()
            try:
                await self.reconcile()
                delay = self.options.check_interval
                self._backoff.reset()
            except (ApiError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                delay = self._backoff.next()
                log.warning(
                    "cannot keep the webhook certificates; retrying",
                    extra={"secret": self.secret_name, "error": _describe(exc), "retryIn": round(delay, 3)},
                )
            try:
                async with asyncio.timeout(delay):
                    await self._changed.wait()
            except TimeoutError:
                pass

    async def reconcile(self) -> Plan:
        """Read, plan and write until nothing is left to do (or a problem stops it)."""
        current = Plan()
        for _ in range(MAX_STEPS):
            secret = await self._get_secret()
            bundles, configurations = await self._read_configurations()
            now = self._clock()
            # No replica is asked what it serves yet: as before, a CA the Secret does not
            # name leaves the bundles at once.
            current = plan(
                read_secret(secret, name=self.secret_name), bundles, now, self.policy, served=frozenset()
            )
            if current.problem:
                if current.problem != self.problem:
                    log.error("cannot keep the webhook certificates", extra={"problem": current.problem})
                self.problem = current.problem
                return current
            self.problem = ""
            if current.idle:
                return current
            log.info(
                "updating the webhook certificates",
                extra={"secret": self.secret_name, "reasons": "; ".join(current.reasons)},
            )
            if current.write != "none":
                await self._write_secret(current, secret, now)
            else:
                for change in current.bundles:
                    await self._patch_bundle(
                        configurations[change.configuration], change.webhooks, change.cas
                    )
        log.warning("the webhook certificates did not settle", extra={"reasons": "; ".join(current.reasons)})
        return current

    async def _create_if_absent(self) -> None:
        if await self._get_secret() is not None:
            return
        now = self._clock()
        await self._write_secret(plan(read_secret(None), {}, now, self.policy, served=frozenset()), None, now)

    async def _get_secret(self) -> dict[str, Any] | None:
        try:
            secret = await self._send("GET", SECRET, name=self.options.secret)
        except ApiError as exc:
            if exc.status == HTTPStatus.NOT_FOUND:
                return None
            raise
        if not isinstance(secret, dict):
            raise ValueError("the Secret is not an object")
        return secret

    async def _read_configurations(self) -> tuple[dict[str, Bundle], dict[str, tuple[str, str]]]:
        bundles: dict[str, Bundle] = {}
        where: dict[str, tuple[str, str]] = {}
        for label, collection, name in self.options.configurations:
            where[label] = (collection, name)
            try:
                obj = await self._send("GET", f"{ADMISSION}/{collection}/{{name}}", name=name)
            except ApiError as exc:
                if exc.status != HTTPStatus.NOT_FOUND:
                    raise
                self._once(label, f"{label} not found: its caBundle cannot be set")
                obj = None
            bundles[label] = bundle_of(obj, service=self.options.service, namespace=self.options.namespace)
        return bundles, where

    async def _write_secret(self, step: Plan, secret: dict[str, Any] | None, now: datetime) -> None:
        data = next_data(step, secret_data(secret) if secret else {}, now, self.policy)
        rv = str((secret or {}).get("metadata", {}).get("resourceVersion") or "")
        body = secret_body(self.options.secret, self.options.namespace, data, resource_version=rv)
        try:
            if step.write == "create":
                await self._send("POST", SECRETS, body)
                log.info("created the webhook certificate Secret", extra={"secret": self.secret_name})
            else:
                await self._send("PUT", SECRET, body, name=self.options.secret)
        except ApiError as exc:
            if exc.status == HTTPStatus.CONFLICT:
                # Another replica wrote first (409 AlreadyExists or Conflict): read it.
                log.info("the webhook certificate Secret was written by another replica; reading it")
                return
            raise
        self.writes += 1

    async def _patch_bundle(
        self, where: tuple[str, str], webhooks: tuple[str, ...], cas: tuple[Any, ...]
    ) -> None:
        collection, name = where
        bundle = base64.b64encode("".join(ca.pem for ca in cas).encode()).decode()
        patch = {"webhooks": [{"name": hook, "clientConfig": {"caBundle": bundle}} for hook in webhooks]}
        await self._send(
            "PATCH",
            f"{ADMISSION}/{collection}/{{name}}",
            patch,
            name=name,
            content_type=STRATEGIC_MERGE_PATCH,
        )
        self.writes += 1
        log.info(
            "set caBundle", extra={"configuration": f"{collection}/{name}", "webhooks": ",".join(webhooks)}
        )

    async def _send(
        self, method: str, path: str, body: Any = None, *, name: str = "", content_type: str | None = None
    ) -> Any:
        params = {"namespace": self.options.namespace}
        if name:
            params["name"] = name
        # Writes name their field manager, so managedFields (and GitOps tools reading
        # them) say who set caBundle.
        query = [("fieldManager", FIELD_MANAGER)] if method != "GET" else []
        return await request_json(
            self._api,
            method,
            path,
            query=query,
            path_params=params,
            body=body,
            content_type=content_type or ("application/json" if body is not None else None),
            timeout=self._timeout,
        )


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, ApiError) else f"{type(exc).__name__}: {text}"
