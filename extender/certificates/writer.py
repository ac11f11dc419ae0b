"""The leader's side of the webhook certificates: the plan, and the writes it asks for.

Only the leader runs this, from its queue's turns (``extender.certificates.keeper``
owns the queue and its keys). Two things:

- **A pass** (``survey``) plans (``extender.certificates.plan``) from what the
  informers show, and, when the bundles hold CAs the Secret does not say to trust, from
  what every replica serves (``probe``, given by the keeper: every endpoint of the
  Service, ``extender.certificates.replicas``, and this replica's own pair). It keeps
  the plan, with the resourceVersions of the Secret and the configurations it was made
  from, and says on ``problem`` and ``retention`` what ``/readyz`` shows. The keeper
  queues one key per write the plan asks for: ``SECRET_KEY``, or a configuration's
  label.
- **A write's turn** (``reconcile``) reads the Secret and every configuration afresh
  (GETs: the informers may lag) and takes the write from the plan kept when the read
  finds the resourceVersions it was made from: a pass plans once, and its writes
  neither plan nor ask the replicas again. A read that finds anything else changed is
  planned again (and the replicas asked again if need be), and that plan is kept in
  turn. It ends as the queue's results say: the write went out (``Done``), the read
  shows it is not needed (``Unchanged("in_sync")``; ``"deleted"`` on a 404), a
  configuration waits while the Secret is to be written first
  (``Unchanged(SECRET_FIRST)``: the plan changes the Secret before any caBundle, and
  plans again after it; the keeper's reconcile queues the Secret), or it failed or was
  refused (``Failed``; a read that fails too, with the API server's answer).

A kept plan stays right while nothing it was made from changed: with the Secret the
same, a replica can only switch to the Secret's pair, signed by a CA the Secret says
to trust, so of the CAs the plan takes out of the bundles none can have come to sign
a served leaf since the replicas were asked (an older answer keeps more CAs, never
fewer); and a plan made a moment earlier only does later what the clock asks (a CA
that expired in between leaves at the next pass).

How each write is made: the Secret by POST (``409 AlreadyExists``: another writer
won; the key is reconciled again and reads it), or by PUT carrying the
resourceVersion it read; the caBundles by strategic merge patch of the webhooks list,
keyed by ``name`` (staging/src/k8s.io/api/admissionregistration/v1/types.go:
``Webhooks`` has ``+patchMergeKey=name``, ``+patchStrategy=merge`` and
``+listMapKey=name``), so that only ``clientConfig.caBundle`` of the extender's own
webhooks changes and a ``kubectl apply`` of manifests that leave caBundle out never
takes it back. The patch carries ``metadata.resourceVersion`` of the object read: the
patched object keeps it, and the registry's ``Update`` answers 409 Conflict when it is
not the stored one (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go),
so a write computed from a configuration someone changed since the read (while the
write waited for the rate limit, say) is made again from a new read. Writes name
their field manager, so managedFields (and GitOps tools reading them) say who set
caBundle.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from http import HTTPStatus
from typing import Any

import aiohttp

from extender.certificates.authority import signers
from extender.certificates.bundles import InformerBundles, bundle_of, version_of
from extender.certificates.options import ADMISSION, SECRET, SECRETS, CertificateOptions, Clock
from extender.certificates.plan import (
    Bundle,
    BundleChange,
    Cert,
    Plan,
    Policy,
    SecretState,
    bundle_cas,
    plan,
    removal_candidates,
)
from extender.certificates.replicas import Observed
from extender.certificates.secret import next_data, read_secret, secret_body, secret_data
from extender.kube.api import ApiError, request_json, send
from extender.kube.store import Store
from extender.kube.watched import Watched
from extender.leader.results import Failed, Result, Sent, Unchanged, Write
from extender.leader.writes import Turn

log = logging.getLogger("extender.certificates")

# The queue's key of the Secret's write (each configuration's is its label).
SECRET_KEY = "secret"
# Why a configuration's turn writes nothing yet: the Secret is to be written first.
SECRET_FIRST = "secret_first"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
FIELD_MANAGER = "runtimeclass-extender"

# What every replica serves (every endpoint of the Service, this one included).
Probe = Callable[[], Awaitable[Observed]]


@dataclass(frozen=True)
class Retention:
    """What the leader keeps in the caBundles beyond the Secret's CAs, and why."""

    cas: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class Seen:
    """The Secret and the configurations as one reading found them (the informers',
    or one round of GETs), with their resourceVersions (None: absent)."""

    secret: Mapping[str, Any] | None
    state: SecretState
    bundles: Mapping[str, Bundle]
    configurations: Mapping[str, Mapping[str, Any] | None]
    versions: tuple[str | None, ...]


@dataclass(frozen=True)
class _Kept:
    """The last plan, and the resourceVersions it was made from."""

    versions: tuple[str | None, ...]
    plan: Plan


class Writer:
    """The plan and the writes; see the module doc."""

    def __init__(
        self,
        api: Any,
        options: CertificateOptions,
        *,
        policy: Policy,
        secret: Store[Watched],
        bundles: InformerBundles,
        probe: Probe,
        clock: Clock,
    ) -> None:
        self._api = api
        self.options = options
        self.policy = policy
        self._secret = secret
        self._bundles = bundles
        self._probe = probe
        self._clock = clock
        self._timeout = aiohttp.ClientTimeout(total=options.request_timeout)
        # The leader's last problem with the Secret (foreign, unusable CA), for /readyz.
        self.problem = ""
        self.retention = Retention()
        self._kept: _Kept | None = None
        # Why the replicas could not all be asked, the last time (each logged once).
        self._unknown: frozenset[str] = frozenset()
        self._logged: set[tuple[str, str]] = set()
        # The informers' Secret, parsed again only when it changed.
        self._state_memo: tuple[str | None, SecretState] | None = None

    def forget(self) -> None:
        """At a term's end: the next term plans from what it finds, and keeps no CA
        for a replica's sake until it has asked them."""
        self._kept = None
        self.retention = Retention()

    # ----- planning ---------------------------------------------------------------------

    async def survey(self) -> Plan:
        """A pass: plan from the informers (and the replicas), and keep the plan."""
        return await self._plan(self._informers_seen())

    async def check(self) -> Plan:
        """What the leader would write now, from fresh reads; writes and keeps nothing."""
        step, _ = await self._decide(await self.read())
        return step

    async def _plan(self, seen: Seen) -> Plan:
        step, served = await self._decide(seen)
        self._kept = _Kept(seen.versions, step)
        self._report(step, served)
        return step

    async def _decide(self, seen: Seen) -> tuple[Plan, frozenset[str] | None]:
        now = self._clock()
        served = await self._served(seen.state, seen.bundles, now)
        return plan(seen.state, seen.bundles, now, self.policy, served=served), served

    def _report(self, step: Plan, served: frozenset[str] | None) -> None:
        if step.problem and step.problem != self.problem:
            log.error("cannot keep the webhook certificates", extra={"problem": step.problem})
        self.problem = step.problem
        if step.retained:
            reason = (
                "not known what every replica serves: " + "; ".join(sorted(self._unknown))
                if served is None
                else "a replica serves a certificate one of them signed"
            )
            self.retention = Retention(step.retained, reason)
        elif self.retention.cas:
            log.info("no CA is kept in the caBundles for a replica's sake any more")
            self.retention = Retention()

    def _informers_seen(self) -> Seen:
        watched = self._secret.get(self.options.secret)
        version = watched.resource_version if watched else None
        if self._state_memo is None or self._state_memo[0] != version:
            secret_state = read_secret(watched.obj if watched else None, name=self.options.secret_name)
            self._state_memo = (version, secret_state)
        configurations = self._bundles.seen()
        return Seen(
            secret=watched.obj if watched else None,
            state=self._state_memo[1],
            bundles=self._bundles(),
            configurations={label: w.obj if w else None for label, w in configurations.items()},
            versions=(version, *(w.resource_version if w else None for w in configurations.values())),
        )

    async def _served(
        self, state: SecretState, bundles: Mapping[str, Bundle], now: datetime
    ) -> frozenset[str] | None:
        """Of the CAs the plan would take out of the bundles, those that signed a leaf
        some replica serves; None when not every replica could be asked. Asks nothing
        when the plan would take nothing out."""
        candidates = removal_candidates(state, bundles, now)
        if not candidates:
            return frozenset()
        observed = await self._probe()
        self._note_unknown(observed.unknown)
        if observed.unknown:
            return None
        cas = {fp: ca for fp, ca in bundle_cas(bundles).items() if fp in candidates}
        return frozenset(fp for leaf in observed.leaves for fp in signers(leaf, cas))

    def _note_unknown(self, unknown: tuple[str, ...]) -> None:
        """Log each reason the replicas could not all be asked once, while it lasts."""
        for reason in sorted(set(unknown) - self._unknown):
            log.warning(
                "cannot tell what every webhook replica serves; keeping every CA in the caBundles",
                extra={"secret": self.options.secret_name, "reason": reason},
            )
        self._unknown = frozenset(unknown)

    # ----- a write's turn -----------------------------------------------------------------

    async def reconcile(self, key: str, turn: Turn) -> Result:
        """Bring ``key`` (``SECRET_KEY`` or a configuration's label) to what the plan
        asks for, read afresh; see the module doc."""
        try:
            fresh = await self.read()
        except ApiError as exc:
            return Failed(None, Sent(exc.status, exc.message, exc.retry_after))
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            return Failed(None, Sent(0, _describe(exc)))
        kept = self._kept
        step = kept.plan if kept is not None and kept.versions == fresh.versions else await self._plan(fresh)
        wanted = self._write(key, step, fresh)
        # Computed once from the read: a wait for the rate limit leaves it as it is (the
        # resourceVersion it carries refuses it if the object changed meanwhile).
        return await turn.write(lambda: wanted)

    def _write(self, key: str, step: Plan, fresh: Seen) -> Write | Unchanged:
        if key == SECRET_KEY:
            if step.write == "none":
                return Unchanged("in_sync")
            return self._secret_write(step, fresh.secret)
        if step.write != "none":
            return Unchanged(SECRET_FIRST)
        changes = [change for change in step.bundles if change.configuration == key]
        if not changes:
            return Unchanged("in_sync")
        return self._bundle_write(key, fresh.configurations.get(key), changes)

    async def read(self) -> Seen:
        """The Secret and the configurations, afresh; raises ApiError (but for 404),
        aiohttp.ClientError, TimeoutError, OSError or ValueError."""
        secret = await self._get(SECRET, self.options.secret)
        bundles: dict[str, Bundle] = {}
        configurations: dict[str, Mapping[str, Any] | None] = {}
        for label, collection, name in self.options.configurations:
            obj = await self._get(f"{ADMISSION}/{collection}/{{name}}", name)
            if obj is None:
                self._once(label, f"{label} not found: its caBundle cannot be set")
            configurations[label] = obj
            bundles[label] = bundle_of(obj, service=self.options.service, namespace=self.options.namespace)
        return Seen(
            secret=secret,
            state=read_secret(secret, name=self.options.secret_name),
            bundles=bundles,
            configurations=configurations,
            versions=(version_of(secret), *(version_of(obj) for obj in configurations.values())),
        )

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

    def _once(self, key: str, message: str) -> None:
        if (key, message) not in self._logged:
            self._logged.add((key, message))
            log.error(message, extra={"secret": self.options.secret_name})

    # ----- the writes -------------------------------------------------------------------

    def _secret_write(self, step: Plan, secret: Mapping[str, Any] | None) -> Write:
        """The Secret's write: its ``content`` the kind of write, its ``detail`` the log line."""
        made = "created" if step.write == "create" else "updated"
        return Write(
            (step.write, step.new_ca, step.new_leaf, step.previous_ca),
            partial(self._send_secret, step, secret),
            detail=f"{made} the webhook certificate Secret ({'; '.join(step.reasons)})",
        )

    async def _send_secret(self, step: Plan, secret: Mapping[str, Any] | None) -> Sent:
        # Minted when sent (a damped write mints nothing), valid from the clock then.
        data = next_data(step, secret_data(secret) if secret else {}, self._clock(), self.policy)
        body = secret_body(
            self.options.secret, self.options.namespace, data, resource_version=version_of(secret) or ""
        )
        if step.write == "create":
            return await self._send("POST", SECRETS, body)
        return await self._send("PUT", SECRET, body, name=self.options.secret)

    def _bundle_write(
        self, label: str, configuration: Mapping[str, Any] | None, changes: list[BundleChange]
    ) -> Write:
        """One configuration's patch: its ``content`` the CAs of each webhook's caBundle."""
        collection, name = next((c, n) for known, c, n in self.options.configurations if known == label)
        bundles = {hook: _pem_bundle(change.cas) for change in changes for hook in change.webhooks}
        patch = {
            "metadata": {"resourceVersion": version_of(configuration) or ""},
            "webhooks": [{"name": hook, "clientConfig": {"caBundle": pem}} for hook, pem in bundles.items()],
        }
        return Write(
            tuple((change.webhooks, tuple(ca.fingerprint for ca in change.cas)) for change in changes),
            partial(
                self._send,
                "PATCH",
                f"{ADMISSION}/{collection}/{{name}}",
                patch,
                name=name,
                content_type=STRATEGIC_MERGE_PATCH,
            ),
            detail=f"set caBundle of {', '.join(bundles)} in {label}",
        )

    async def _send(
        self, method: str, path: str, body: Any, *, name: str = "", content_type: str = "application/json"
    ) -> Sent:
        params = {"namespace": self.options.namespace}
        if name:
            params["name"] = name
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


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, ApiError) else f"{type(exc).__name__}: {text}"
