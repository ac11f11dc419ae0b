"""Self-managed webhook certificates: the I/O around ``extender.certificates.plan``.

A leader actor (``extender.leader.actor``), run by ``extender.leader.runner``.

On every replica (``observe``, and the informers' listeners):

- its informers follow that one Secret and the webhook configurations (the RuntimeClass
  webhook's, and the pod webhook's where it is installed: ``mutating_configuration``)
  (``fieldSelector=metadata.name=<name>``, which RBAC authorizes by ``resourceNames``
  for list and watch);
- once all three are listed, and on every change of any of them, it decides what to
  serve: the Secret's pair, once the caBundle of every webhook of those configurations
  that calls the extender's Service, as its informers show them, holds a CA that
  signed it (``plan.trust``, judged on the CAs the bundles hold: after the Secret was
  recreated the old CA lives only there); until then the pair it served before, or,
  with none yet, nothing (the listener refuses handshakes). So a new CA, however it
  came (a rotation, the Secret deleted, a hand edit), is served only once the API
  server can verify it. Each pair is loaded into a fresh ``SSLContext``
  (``extender.certificates.serving``); one that does not load is logged and the
  previous one keeps serving;
- tells readiness (``trust``) whether the pair it serves is trusted by every caBundle.

Only the leader writes. ``lead()``, each term (or for the whole run without leader
election), is level-triggered: at the start of the term, on each change the
informers see, every ``check_interval``, and while CAs are kept in the bundles only
because a replica may still serve a leaf they signed, every few seconds with backoff
(``recheck_initial`` doubling to ``recheck_max``), it plans from what the informers
show, and, when the bundles hold CAs the Secret does not name, from what every
endpoint of the Service serves (``extender.certificates.replicas``). It queues one
write per object the plan would change (the Secret; each configuration) on a
``WriteQueue`` (``extender.leader.writes``): a rate limit, one write per object waiting
or in flight, backoff per object that also retries refusals, and damping, so a
caBundle that a GitOps tool takes back right after each write is written again at
most once per ``retry_max`` instead of in a hot loop.

Each write is computed when it is sent, from fresh GETs of the Secret and the
configurations and the plan: the Secret by POST (``409 AlreadyExists``: another
writer won; the queue reads again), or by PUT carrying the resourceVersion it read;
the caBundles by strategic merge patch of the webhooks list, keyed by ``name``
(staging/src/k8s.io/api/admissionregistration/v1/types.go: ``Webhooks`` has
``+patchMergeKey=name``, ``+patchStrategy=merge`` and ``+listMapKey=name``), so that
only ``clientConfig.caBundle`` of the extender's own webhooks changes and a
``kubectl apply`` of manifests that leave caBundle out never takes it back. The patch
carries ``metadata.resourceVersion`` of the object read: the patched object keeps it,
and the registry's ``Update`` answers 409 Conflict when it is not the stored one
(staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go), so a write
planned from a configuration someone changed meanwhile is made again from a new read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import random
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from extender.certificates import replicas
from extender.certificates.authority import CertificateError, read_bundle, signers
from extender.certificates.plan import (
    Bundle,
    BundleChange,
    Cert,
    Plan,
    Policy,
    SecretState,
    Trust,
    bundle_cas,
    plan,
    removal_candidates,
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
from extender.kube.api import ApiError, request_json, send
from extender.kube.backoff import Backoff
from extender.kube.informer import Informer
from extender.kube.reflector import ReflectorOptions, WatchedResource
from extender.kube.store import Named, ObjectError, Store
from extender.leader.actor import LeaderActor, wait_while
from extender.leader.writes import Sent, Sleep, WriteOptions, WriteQueue

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
# The write queue's key of the Secret (each configuration's is its label).
SECRET_KEY = "secret"

EXPIRY_METRIC = "runtimeclass_extender_webhook_certificate_expiry_timestamp_seconds"
TRUSTED_METRIC = "runtimeclass_extender_webhook_certificate_trusted"
RETAINED_METRIC = "runtimeclass_extender_webhook_certificate_retained_cas"

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class CertificateOptions:
    secret: str
    namespace: str
    service: str
    validating_configuration: str
    # None: no pod webhook (the API server's admission policies do its job).
    mutating_configuration: str | None
    check_interval: float = DEFAULT_CHECK_INTERVAL
    # Whole-request timeout of one read or write.
    request_timeout: float = 10.0
    # The write queue: writes per second and bursts (a first start or a rotation is
    # three writes), and the backoff per object after a failure, which is also how
    # long a success is remembered: a write undone within retry_max is damped.
    write_rate: float = 1.0
    write_burst: int = 4
    retry_initial: float = 1.0
    retry_max: float = 60.0
    # While CAs are kept only because a replica may still serve a leaf they signed:
    # how soon the leader asks the replicas again (doubling up to recheck_max).
    recheck_initial: float = 2.0
    recheck_max: float = 60.0
    # One TLS handshake to a replica, connection included.
    probe_timeout: float = 3.0
    # Longest wait on shutdown for queued writes to go out.
    drain_timeout: float = 5.0
    reflector: ReflectorOptions = field(default_factory=ReflectorOptions)
    policy: Policy | None = None

    @property
    def dns_names(self) -> frozenset[str]:
        return service_dns_names(self.service, self.namespace)

    @property
    def server_name(self) -> str:
        """The name the API server dials and verifies: ``<svc>.<ns>.svc``
        (staging/src/k8s.io/apiserver/pkg/util/webhook/client.go)."""
        return f"{self.service}.{self.namespace}.svc"

    @property
    def configurations(self) -> tuple[tuple[str, str, str], ...]:
        """(label, collection, name) of the webhook configurations whose caBundles it keeps."""
        validating = (
            f"ValidatingWebhookConfiguration/{self.validating_configuration}",
            VALIDATING,
            self.validating_configuration,
        )
        if self.mutating_configuration is None:
            return (validating,)
        mutating = (
            f"MutatingWebhookConfiguration/{self.mutating_configuration}",
            MUTATING,
            self.mutating_configuration,
        )
        return (validating, mutating)


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


@dataclass(frozen=True)
class Fresh:
    """The Secret and the configurations as one round of GETs found them."""

    secret: dict[str, Any] | None
    state: SecretState
    bundles: dict[str, Bundle]
    configurations: dict[str, dict[str, Any] | None]


@dataclass(frozen=True)
class Retention:
    """What the leader keeps in the caBundles beyond the Secret's CAs, and why."""

    cas: tuple[str, ...] = ()
    reason: str = ""


class _Metrics(Collector):
    """The served certificate's end, whether the caBundles trust it, and the CAs the
    leader keeps in them for a replica's sake (scrape time)."""

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
            "1 while the webhook configurations' caBundles trust the certificate the admission "
            "listener serves, else 0; self-managed webhook certificates only.",
        )
        trusted.add_metric([], 1.0 if self._keeper.trust().trusted else 0.0)
        yield trusted
        retained = GaugeMetricFamily(
            RETAINED_METRIC,
            "On the leader: CAs kept in the caBundles although the Secret no longer names them, "
            "because a replica serves, or may serve, a certificate they signed (0 elsewhere); "
            "self-managed webhook certificates only.",
        )
        retained.add_metric([], float(len(self._keeper.retention.cas)))
        yield retained


class WebhookCertificates(LeaderActor):
    """See the module doc: the informers' listeners on every replica, ``lead`` on the
    leader, and the writes (``extender.leader.writes.WriteHandler``)."""

    name = "webhook-certificates"

    def __init__(
        self,
        api: Any,
        options: CertificateOptions,
        serving: SwitchingContext,
        *,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
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
        self.retention = Retention()
        self.writes: WriteQueue[str] = WriteQueue(
            self,
            WriteOptions(
                rate=options.write_rate,
                burst=options.write_burst,
                retry_initial=options.retry_initial,
                retry_max=options.retry_max,
            ),
            clock=monotonic,
            sleep=sleep,
        )
        self._changed = asyncio.Event()
        self._timeout = aiohttp.ClientTimeout(total=options.request_timeout)
        self._recheck = Backoff(
            initial=options.recheck_initial,
            maximum=options.recheck_max,
            reset_after=options.recheck_max * 2,
            jitter=0.2,
            rng=rng or random.Random(),
            clock=monotonic,
        )
        # What the replicas serve, as last asked (the plan's ``served``), for ``due``.
        self._served_cas: frozenset[str] | None = frozenset()
        self._logged: set[tuple[str, str]] = set()
        # Why the replicas could not all be asked, the last time (each logged once).
        self._unknown: frozenset[str] = frozenset()
        # What each write in flight does, for its log line.
        self._sending: dict[str, str] = {}
        # Parsing and signature checks, redone only when what they read changed.
        self._state_memo: tuple[str | None, SecretState] | None = None
        self._bundles_memo: tuple[tuple[str | None, ...], dict[str, Bundle]] | None = None
        self._signers_memo: dict[tuple[str, frozenset[str]], frozenset[str]] = {}
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
        self.secret_store.add_listener(self._secret_changed)
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
            informer.store.add_listener(self._configuration_changed)
            self.configuration_informers[label] = informer

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self.secret_informer, *self.configuration_informers.values())

    @property
    def secret_name(self) -> str:
        return f"{self.options.namespace}/{self.options.secret}"

    # ----- every replica --------------------------------------------------------------

    async def observe(self) -> None:
        """Decide what to serve once all three informers have listed: a store tells its
        listeners of its first LIST before it counts as listed, so the last of the three
        to list would otherwise be heard while the bundles still look unread."""
        for informer in self.informers:
            await informer.wait_synced()
        self._follow()

    def _secret_changed(self, _kind: str, _old: Named | None, new: Named | None) -> None:
        if new is None and self.secret_store.synced:
            log.warning(
                "the webhook certificate Secret is gone; serving the certificate loaded before",
                extra={"secret": self.secret_name},
            )
        self._configuration_changed()

    def _configuration_changed(self, *_: Any) -> None:
        self._changed.set()  # the leader plans again
        self._follow()

    def _follow(self) -> None:
        """Serve the Secret's pair once every caBundle trusts it (see the module doc)."""
        candidate = self._candidate()
        if candidate is None:
            return
        if self.served is not None and candidate.pair == self.served.pair:
            self.served = candidate  # the CAs around it may have changed
            return
        verdict = self._trust_of(candidate.leaf)
        if not verdict.trusted:
            self._once(
                candidate.leaf.fingerprint,
                "not serving the new webhook certificate yet: " + verdict.reason,
                level=logging.INFO,
            )
            return
        try:
            self.serving.serve(candidate.pair)
        except PairError as exc:
            log.error(
                "the webhook certificate does not load; keeping the one served before",
                extra={"secret": self.secret_name, "error": str(exc)},
            )
            return
        self.served = candidate
        log.info(
            "serving webhook certificate",
            extra={
                "secret": self.secret_name,
                "notAfter": candidate.leaf.not_after.isoformat(),
                "fingerprint": candidate.leaf.fingerprint[:16],
            },
        )

    def _candidate(self) -> Served | None:
        """The pair the Secret holds, if it is one this replica may serve."""
        watched = self.secret_store.get(self.options.secret)
        if watched is None:
            return None
        if not is_ours(watched.obj):
            # Someone else's Secret of that name: never served (nor written).
            self._once(
                watched.resource_version,
                "the webhook certificate Secret is not labelled as the extender's; not serving it",
            )
            return None
        candidate = served_of(watched.obj)
        if candidate is None:
            self._once(
                watched.resource_version,
                "the webhook certificate Secret has no usable serving certificate and key; "
                "keeping the one served before",
            )
        return candidate

    def _once(self, key: str, message: str, *, level: int = logging.ERROR) -> None:
        if (key, message) not in self._logged:
            self._logged.add((key, message))
            log.log(level, message, extra={"secret": self.secret_name})

    def bundles(self) -> dict[str, Bundle]:
        """The configurations as the reflectors last saw them ({} until all are listed)."""
        informers = self.configuration_informers
        if not all(informer.synced for informer in informers.values()):
            return {}
        seen = {label: informers[label].store.get(name) for label, _, name in self.options.configurations}
        versions = tuple(w.resource_version if w else None for w in seen.values())
        if self._bundles_memo is None or self._bundles_memo[0] != versions:
            result = {
                label: bundle_of(
                    watched.obj if watched else None,
                    service=self.options.service,
                    namespace=self.options.namespace,
                )
                for label, watched in seen.items()
            }
            self._bundles_memo = (versions, result)
        return self._bundles_memo[1]

    def _signers(self, leaf_pem: str, leaf_fingerprint: str, bundles: Mapping[str, Bundle]) -> frozenset[str]:
        """The bundles' CAs that signed the leaf (signature checks, kept while the
        leaf and the bundles' CAs stay the same)."""
        cas = bundle_cas(bundles)
        key = (leaf_fingerprint, frozenset(cas))
        if key not in self._signers_memo:
            if len(self._signers_memo) >= 8:
                self._signers_memo.clear()
            self._signers_memo[key] = signers(leaf_pem, cas)
        return self._signers_memo[key]

    def _trust_of(self, leaf: Cert | None) -> Trust:
        bundles = self.bundles()
        found = self._signers(leaf.pem, leaf.fingerprint, bundles) if leaf is not None else frozenset()
        return trust(leaf, found, bundles, self._clock())

    def trust(self) -> Trust:
        """Whether every caBundle trusts the pair this replica serves."""
        return self._trust_of(self.served.leaf if self.served else None)

    def details(self) -> dict[str, Any]:
        """For /readyz: trusted or why not, the served certificate's end, and on the
        leader the CAs kept in the bundles for a replica's sake."""
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
        if self.retention.cas:
            body["retained"] = {"cas": len(self.retention.cas), "reason": self.retention.reason}
        return body

    def register_metrics(self, registry: CollectorRegistry) -> None:
        registry.register(_Metrics(self))

    def wake(self) -> None:
        """Have the leading side check now (as on a change of the Secret or a webhook
        configuration) instead of at the next periodic check."""
        self._changed.set()

    # ----- the leader -----------------------------------------------------------------

    async def lead(self) -> None:
        """Keep the Secret and the caBundles as ``plan`` wants them; until cancelled."""
        # Never plan from a cold cache: an unlisted Secret would look absent.
        for informer in self.informers:
            await informer.wait_synced()
        log.info("keeping the webhook certificates", extra={"secret": self.secret_name})
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.writes.run())
                group.create_task(self._keep())
        finally:
            self.retention = Retention()

    async def drain(self) -> None:
        await wait_while(lambda: self.writes.busy, self.options.drain_timeout)

    async def _keep(self) -> None:
        while True:
            self._changed.clear()
            delay = await self._plan_and_queue()
            try:
                async with asyncio.timeout(delay):
                    await self._changed.wait()
            except TimeoutError:
                pass

    async def _plan_and_queue(self) -> float:
        """One pass: plan from the informers (and the replicas), queue what differs;
        the seconds until the next pass if nothing changes before."""
        self._follow()  # the clock alone may have made a pair trustworthy or not
        now = self._clock()
        state, bundles = self._informer_state(), self.bundles()
        self._served_cas = await self._served_by_replicas(state, bundles, now)
        step = plan(state, bundles, now, self.policy, served=self._served_cas)
        self._report(step)
        if step.write != "none":
            self.writes.put(SECRET_KEY)
        for change in step.bundles:
            self.writes.put(change.configuration)
        if not step.retained:
            self._recheck.reset()
            return self.options.check_interval
        return min(self._recheck.next(), self.options.check_interval)

    def _report(self, step: Plan) -> None:
        if step.problem and step.problem != self.problem:
            log.error("cannot keep the webhook certificates", extra={"problem": step.problem})
        self.problem = step.problem
        if step.retained:
            reason = (
                "not known what every replica serves: " + "; ".join(sorted(self._unknown))
                if self._served_cas is None
                else "a replica serves a certificate one of them signed"
            )
            self.retention = Retention(step.retained, reason)
        elif self.retention.cas:
            log.info("no CA is kept in the caBundles for a replica's sake any more")
            self.retention = Retention()

    def _informer_state(self) -> SecretState:
        watched = self.secret_store.get(self.options.secret)
        version = watched.resource_version if watched else None
        if self._state_memo is None or self._state_memo[0] != version:
            self._state_memo = (version, read_secret(watched.obj if watched else None, name=self.secret_name))
        return self._state_memo[1]

    async def _served_by_replicas(
        self, state: SecretState, bundles: Mapping[str, Bundle], now: datetime
    ) -> frozenset[str] | None:
        """Of the CAs the plan would take out of the bundles, those that signed a leaf
        some replica serves (this one's own included); None when not every replica
        could be asked. Asks nothing when the plan would take nothing out."""
        candidates = removal_candidates(state, bundles, now)
        if not candidates:
            return frozenset()
        observed = await replicas.observe(
            self._api,
            namespace=self.options.namespace,
            service=self.options.service,
            server_name=self.options.server_name,
            timeout=self.options.probe_timeout,
        )
        self._note_unknown(observed.unknown)
        if observed.unknown:
            return None
        cas = {fp: ca for fp, ca in bundle_cas(bundles).items() if fp in candidates}
        leaves = set(observed.leaves)
        if self.served is not None:
            leaves.add(self.served.leaf.pem)
        return frozenset(fp for leaf in leaves for fp in signers(leaf, cas))

    def _note_unknown(self, unknown: tuple[str, ...]) -> None:
        """Log each reason the replicas could not all be asked once, while it lasts."""
        for reason in sorted(set(unknown) - self._unknown):
            log.warning(
                "cannot tell what every webhook replica serves; keeping every CA in the caBundles",
                extra={"secret": self.secret_name, "reason": reason},
            )
        self._unknown = frozenset(unknown)

    async def check(self) -> Plan:
        """What the leader would write now, from fresh reads; writes nothing."""
        now = self._clock()
        fresh = await self._read()
        served = await self._served_by_replicas(fresh.state, fresh.bundles, now)
        return plan(fresh.state, fresh.bundles, now, self.policy, served=served)

    async def _read(self) -> Fresh:
        """The Secret and the configurations, afresh; raises ApiError (but for 404),
        aiohttp.ClientError, TimeoutError, OSError or ValueError."""
        secret = await self._get(SECRET, self.options.secret)
        bundles: dict[str, Bundle] = {}
        configurations: dict[str, dict[str, Any] | None] = {}
        for label, collection, name in self.options.configurations:
            obj = await self._get(f"{ADMISSION}/{collection}/{{name}}", name)
            if obj is None:
                self._once(label, f"{label} not found: its caBundle cannot be set")
            configurations[label] = obj
            bundles[label] = bundle_of(obj, service=self.options.service, namespace=self.options.namespace)
        return Fresh(secret, read_secret(secret, name=self.secret_name), bundles, configurations)

    async def _get(self, path: str, name: str) -> dict[str, Any] | None:
        try:
            obj = await request_json(
                self._api,
                "GET",
                path,
                path_params={"namespace": self.options.namespace, "name": name},
                timeout=self._timeout,
            )
        except ApiError as exc:
            if exc.status == HTTPStatus.NOT_FOUND:
                return None
            raise
        if not isinstance(obj, dict):
            raise ValueError(f"{name}: not an object")
        return obj

    # ----- the writes (extender.leader.writes.WriteHandler) --------------------------

    def key(self, item: str) -> str:
        return item

    def _informer_plan(self) -> Plan:
        return plan(
            self._informer_state(), self.bundles(), self._clock(), self.policy, served=self._served_cas
        )

    def due(self, item: str) -> str | None:
        """Still to write, as the informers show things (the write itself reads afresh)."""
        step = self._informer_plan()
        if item == SECRET_KEY:
            return None if step.write != "none" else "in_sync"
        if step.write != "none":
            return "secret_first"
        return None if any(c.configuration == item for c in step.bundles) else "in_sync"

    def content(self, item: str) -> Hashable:
        """What the write would set, as the informers show things: the kind of Secret
        write, or the CAs of each webhook's caBundle."""
        step = self._informer_plan()
        if item == SECRET_KEY:
            return (step.write, step.new_ca, step.new_leaf, step.previous_ca)
        return tuple(
            (change.webhooks, tuple(ca.fingerprint for ca in change.cas))
            for change in step.bundles
            if change.configuration == item
        )

    async def send(self, item: str) -> Sent:
        """The write ``item`` needs, computed now from fresh reads and the plan."""
        now = self._clock()
        try:
            fresh = await self._read()
        except ApiError as exc:
            return Sent(exc.status, exc.message, exc.retry_after)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            return Sent(0, _describe(exc))
        served = await self._served_by_replicas(fresh.state, fresh.bundles, now)
        step = plan(fresh.state, fresh.bundles, now, self.policy, served=served)
        if item == SECRET_KEY:
            if step.write == "none":
                return _moved_on("the Secret")
            return await self._write_secret(step, fresh.secret, now)
        changes = [c for c in step.bundles if c.configuration == item]
        if step.write != "none" or not changes:
            return _moved_on(item)
        return await self._patch_bundle(item, fresh.configurations[item], changes)

    def settle(self, item: str, outcome: str, *, reason: str = "", sent: Sent | None = None) -> None:
        what = self._sending.pop(item, item)
        if outcome == "sent":
            log.info(what, extra={"secret": self.secret_name})
        elif outcome == "failed":
            status, message = (sent.status, sent.message) if sent is not None else (0, "")
            hint = {
                403: ": grant the Role and ClusterRole of deploy/components/admission-webhook/rbac.yaml",
                422: ": refused by admission (deploy/components/admission-webhook/admission-policy.yaml)",
            }.get(status, "")
            log.warning(
                "cannot keep the webhook certificates" + hint,
                extra={"write": item, "status": status, "error": message, "reason": reason},
            )
        else:
            log.debug("webhook certificate write not made", extra={"write": item, "outcome": outcome})

    def retrying(self, item: str, sent: Sent, delay: float) -> None:
        self._sending.pop(item, None)
        level = logging.INFO if sent.status == HTTPStatus.CONFLICT else logging.DEBUG
        log.log(
            level,
            "webhook certificate write to be made again from a new read",
            extra={"write": item, "status": sent.status, "error": sent.message, "retryIn": round(delay, 3)},
        )

    async def _write_secret(self, step: Plan, secret: dict[str, Any] | None, now: datetime) -> Sent:
        data = next_data(step, secret_data(secret) if secret else {}, now, self.policy)
        rv = str((secret or {}).get("metadata", {}).get("resourceVersion") or "")
        body = secret_body(self.options.secret, self.options.namespace, data, resource_version=rv)
        reasons = "; ".join(step.reasons)
        if step.write == "create":
            self._sending[SECRET_KEY] = f"created the webhook certificate Secret ({reasons})"
            return await self._write("POST", SECRETS, body)
        self._sending[SECRET_KEY] = f"updated the webhook certificate Secret ({reasons})"
        return await self._write("PUT", SECRET, body, name=self.options.secret)

    async def _patch_bundle(
        self, label: str, configuration: Mapping[str, Any] | None, changes: list[BundleChange]
    ) -> Sent:
        collection, name = next((c, n) for known, c, n in self.options.configurations if known == label)
        rv = str(((configuration or {}).get("metadata") or {}).get("resourceVersion") or "")
        bundles = {hook: _pem_bundle(change.cas) for change in changes for hook in change.webhooks}
        patch = {
            "metadata": {"resourceVersion": rv},
            "webhooks": [{"name": hook, "clientConfig": {"caBundle": pem}} for hook, pem in bundles.items()],
        }
        self._sending[label] = f"set caBundle of {', '.join(bundles)} in {label}"
        return await self._write(
            "PATCH",
            f"{ADMISSION}/{collection}/{{name}}",
            patch,
            name=name,
            content_type=STRATEGIC_MERGE_PATCH,
        )

    async def _write(
        self, method: str, path: str, body: Any, *, name: str = "", content_type: str = "application/json"
    ) -> Sent:
        params = {"namespace": self.options.namespace}
        if name:
            params["name"] = name
        # Writes name their field manager, so managedFields (and GitOps tools reading
        # them) say who set caBundle.
        return await send(
            self._api,
            method,
            path,
            query=[("fieldManager", FIELD_MANAGER)],
            path_params=params,
            body=body,
            content_type=content_type,
            timeout=self._timeout,
        )


def _pem_bundle(cas: Sequence[Cert]) -> str:
    return base64.b64encode("".join(ca.pem for ca in cas).encode()).decode()


def _moved_on(what: str) -> Sent:
    """A fresh read found ``what`` no longer needing the write queued from the
    informers' view (someone else wrote, or the Secret comes first): answered as a
    precondition would (409), so the queue asks ``due`` again after its backoff."""
    return Sent(HTTPStatus.CONFLICT, f"{what}: a fresh read needs no such write now")


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, ApiError) else f"{type(exc).__name__}: {text}"
