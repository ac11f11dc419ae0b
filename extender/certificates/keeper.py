"""Self-managed webhook certificates: the leader actor, wiring the keeper's parts.

A ``Controller`` (``extender.leader.controller``), run by ``extender.leader.runner``.
Its parts, each in a module of its own:

- ``options``: ``CertificateOptions``, the API paths, the clock;
- ``bundles``: the informers' objects as the keeper reads them (``bundle_of``);
- ``follow``: on every replica, what it serves and whether the caBundles trust it;
- ``writer``: on the leader, the plan (``extender.certificates.plan``) and the writes;
- ``metrics``: the gauges.

On every replica, its informers follow that one Secret and the webhook configurations
(the RuntimeClass webhook's, and the pod webhook's where it is installed:
``mutating_configuration``) by name (``fieldSelector=metadata.name=<name>``, which
RBAC authorizes by ``resourceNames`` for list and watch). Once all three are listed
(``observe``), and on every change of any of them, the replica decides what to serve
(``Follower.follow``).

Only the leader writes, through its ``WorkQueue`` (a rate limit, one reconcile per
key at a time, backoff per key, a refusal said once and probed, and damping, so a
caBundle that a GitOps tool takes back right after each write is written again at most
once per ``retry_max`` instead of in a hot loop). Its pass (``resync``) plans from what
the informers show, and, when the bundles hold CAs the Secret does not name, from what
every replica serves (the ``probe`` of every endpoint of the Service,
``extender.certificates.replicas.observe`` unless another is given, and this replica's
own pair), and queues the key of each write the plan asks for. A pass runs at the
start of each term, on every change the informers see and on ``wake`` (owed: a drain
waits for it); every ``check_interval``; and, while CAs are kept in the bundles only
because a replica may still serve a leaf they signed, every few seconds with backoff
(``recheck_initial`` doubling to ``recheck_max``). The timed ones are not owed: a
drain does not wait for them.

Its keys, ``SECRET_KEY`` and each configuration's label: one write each, computed
from fresh reads at its turn and taken from the pass's plan while those reads find
what it was made from (``Writer.reconcile``: a pass plans once). The Secret comes
first: a configuration whose turn finds the Secret still to be written waits
(``SECRET_FIRST``) and queues the Secret; the Secret's write, once made, queues every
configuration again.

The queue owns the term: it starts with a pass and forgets every key, delay and
backoff when the term ends; the writer forgets its plan and what it keeps for a
replica's sake (``retention``) then too (``stopped``). The next term, here or on
another replica, starts from what it observes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Any

from prometheus_client import CollectorRegistry

from extender.certificates import replicas
from extender.certificates.bundles import InformerBundles
from extender.certificates.follow import Follower
from extender.certificates.metrics import CertificateMetrics
from extender.certificates.options import (
    ADMISSION,
    SECRETS,
    CertificateOptions,
    Clock,
    utc_now,
)
from extender.certificates.plan import Plan, Policy, Trust
from extender.certificates.replicas import Observed
from extender.certificates.secret import Served
from extender.certificates.serving import SwitchingContext
from extender.certificates.writer import SECRET_FIRST, SECRET_KEY, Probe, Retention, Writer
from extender.kube.backoff import Backoff
from extender.kube.informer import Informer
from extender.kube.reflector import WatchedResource
from extender.kube.store import Named, Store
from extender.kube.watched import Watched, watched
from extender.leader.controller import Controller, WriteLog
from extender.leader.limits import Sleep, WriteLimiter
from extender.leader.results import Done, Report, Result, Retry, Unchanged
from extender.leader.writes import Turn

__all__ = ["SECRET_KEY", "CertificateOptions", "WebhookCertificates", "utc_now"]

log = logging.getLogger("extender.certificates")


WRITE_LOG = WriteLog(
    log,
    subject="write",
    failing="cannot keep the webhook certificates",
    retrying="webhook certificate write to be made again from a new read",
    hints={
        403: ": grant the Role and ClusterRole of deploy/components/admission-webhook/rbac.yaml",
        422: ": refused by admission (deploy/components/admission-webhook/admission-policy.yaml)",
    },
    # A 409 (a race lost, or an object changed since it was read) is worth an INFO line.
    retry_levels={HTTPStatus.CONFLICT: logging.INFO},
)


class WebhookCertificates(Controller[str]):
    """See the module doc: the informers' listeners on every replica, the queue's
    passes and writes on the leader."""

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
        probe: Probe | None = None,
        limiter: WriteLimiter | None = None,
    ) -> None:
        self.options: CertificateOptions = options
        super().__init__(options, clock=monotonic, sleep=sleep, limiter=limiter)
        self._monotonic = monotonic
        self._api = api
        self.policy = options.policy or Policy(dns_names=options.dns_names)
        self._probe: Probe = probe or self._endpoints
        self.secret_informer: Informer[Watched] = Informer(
            api,
            WatchedResource(
                "secrets",
                SECRETS.format(namespace=options.namespace),
                watched,
                field_selector=f"metadata.name={options.secret}",
            ),
            Store("webhook-certificate-secret"),
            options=options.reflector,
        )
        self.secret_store = self.secret_informer.store
        self.configuration_informers: dict[str, Informer[Watched]] = {
            label: Informer(
                api,
                WatchedResource(
                    collection, f"{ADMISSION}/{collection}", watched, field_selector=f"metadata.name={name}"
                ),
                Store(label),
                options=options.reflector,
            )
            for label, collection, name in options.configurations
        }
        self.bundles = InformerBundles(options, self.configuration_informers)
        self.follower = Follower(options, serving, self.secret_store, self.bundles, clock=clock)
        self.writer = Writer(
            api,
            options,
            policy=self.policy,
            secret=self.secret_store,
            bundles=self.bundles,
            probe=self._replicas,
            clock=clock,
        )
        self._recheck = Backoff(
            initial=options.recheck_initial,
            maximum=options.recheck_max,
            reset_after=options.recheck_max * 2,
            jitter=0.2,
            rng=rng or random.Random(),
            clock=monotonic,
        )
        # When the next recheck of the replicas is due (monotonic; None: none is).
        self._recheck_at: float | None = None
        # The configurations' keys.
        self._labels = tuple(label for label, _, _ in options.configurations)
        self.secret_store.add_listener(self._secret_changed)
        for informer in self.configuration_informers.values():
            informer.store.add_listener(self._changed)

    # ----- what the rest of the extender reads -----------------------------------------

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self.secret_informer, *self.configuration_informers.values())

    @property
    def secret_name(self) -> str:
        return self.options.secret_name

    @property
    def serving(self) -> SwitchingContext:
        return self.follower.serving

    @property
    def served(self) -> Served | None:
        """The pair this replica serves (None: none yet)."""
        return self.follower.served

    @served.setter
    def served(self, served: Served | None) -> None:
        self.follower.served = served

    @property
    def problem(self) -> str:
        """The leader's last problem with the Secret (foreign, unusable CA)."""
        return self.writer.problem

    @property
    def retention(self) -> Retention:
        return self.writer.retention

    def trust(self) -> Trust:
        """Whether every caBundle trusts the pair this replica serves."""
        return self.follower.trust()

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
        registry.register(
            CertificateMetrics(
                served=lambda: self.served,
                trusted=lambda: self.trust().trusted,
                retained=lambda: len(self.retention.cas),
            )
        )

    def wake(self) -> None:
        """Have the leader pass now (as on a change of the Secret or a webhook
        configuration) instead of at the next periodic check."""
        self.queue.resync()

    async def check(self) -> Plan:
        """What the leader would write now, from fresh reads; writes nothing."""
        return await self.writer.check()

    # ----- every replica ----------------------------------------------------------------

    async def observe(self) -> None:
        """Decide what to serve once all three informers have listed: a store tells its
        listeners of its first LIST before it counts as listed, so the last of the three
        to list would otherwise be heard while the bundles still look unread."""
        for informer in self.informers:
            await informer.wait_synced()
        self.follower.follow()

    def _secret_changed(self, _kind: str, _old: Named | None, new: Named | None) -> None:
        if new is None and self.secret_store.synced:
            log.warning(
                "the webhook certificate Secret is gone; serving the certificate loaded before",
                extra={"secret": self.secret_name},
            )
        self._changed()

    def _changed(self, *_: Any) -> None:
        self.follower.follow()
        self.queue.resync()  # nothing on a follower

    async def _replicas(self) -> Observed:
        """What every replica serves: the probe's answer, and this one's own pair (which
        the leader serves whether or not the Service's endpoints name it)."""
        observed = await self._probe()
        served = self.served
        if served is None:
            return observed
        return dataclasses.replace(observed, leaves=observed.leaves | {served.leaf.pem})

    async def _endpoints(self) -> Observed:
        return await replicas.observe(
            self._api,
            namespace=self.options.namespace,
            service=self.options.service,
            server_name=self.options.server_name,
            timeout=self.options.probe_timeout,
        )

    # ----- the leader ---------------------------------------------------------------------

    def starting(self) -> None:
        log.info("keeping the webhook certificates", extra={"secret": self.secret_name})

    def stopped(self) -> None:
        self.writer.forget()
        self._recheck.reset()
        self._recheck_at = None

    async def resync(self) -> None:
        self.follower.follow()  # the clock alone may have made a pair trustworthy or not
        step = await self.writer.survey()
        if step.write != "none":
            self.queue.add(SECRET_KEY)
        for change in step.bundles:
            self.queue.add(change.configuration)
        self.queue.resync(self.options.check_interval, owed=False)
        now = self._monotonic()
        if not step.retained:
            self._recheck.reset()
            self._recheck_at = None
        elif self._recheck_at is None or now >= self._recheck_at:
            # This pass is the recheck, or none is due: the next one, backing off.
            self._recheck_at = now + min(self._recheck.next(), self.options.check_interval)
        if self._recheck_at is not None:
            self.queue.resync(max(0.0, self._recheck_at - now), owed=False)

    async def reconcile(self, key: str, turn: Turn) -> Result:
        result = await self.writer.reconcile(key, turn)
        if key == SECRET_KEY and isinstance(result, Done):
            # Every caBundle is planned again against the Secret as written.
            for label in self._labels:
                self.queue.add(label)
        elif isinstance(result, Unchanged) and result.reason == SECRET_FIRST:
            self.queue.add(SECRET_KEY)
        return result

    def report(self, key: str, report: Report) -> None:
        result = report.result
        if isinstance(result, Done):
            if result.write is not None:
                log.info(str(result.write.detail), extra={"secret": self.secret_name})
        elif isinstance(result, Unchanged):
            log.debug("webhook certificate write not made", extra={"write": key, "outcome": result.reason})
        elif isinstance(result, Retry):
            log.debug(
                "webhook certificate write held back",
                extra={"write": key, "outcome": result.reason, "retryIn": report.retry_in},
            )
        else:
            WRITE_LOG(key, report)
