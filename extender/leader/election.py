"""Leader election for the parts that act on the cluster: one ``coordination.k8s.io/v1`` Lease.

Several replicas of the extender answer ``/filter`` side by side (each from its own
watch cache), but the requeuer's pod patches and the audit's per-pod warnings must come
from one of them. They compete for a Lease with kubernetes-asyncio's own election
(``kubernetes_asyncio.leaderelection``): its ``LeaderElection.acquire`` and
``try_acquire_or_renew`` hold the record logic (a follower takes the Lease over once it
has seen no change of the record for the lease duration; the holder renews). Around
them this module adds what the library lacks against client-go's
``tools/leaderelection/leaderelection.go``, each thinly:

- ``LeaseLock``, on ``extender.kube.api`` (the one way this project talks to the API
  server), instead of the library's lock, which crashes on a fractional lease duration
  (``int("1.5")``), writes local time labelled as UTC, logs an expected 409 with a stack
  trace, does not keep ``leaseTransitions``, and sends its requests without a timeout.
  Updates are PUTs carrying the read ``metadata.resourceVersion``: two candidates that
  race get one success and one 409 Conflict from the API server.
- The renew deadline bounds a renewal *including requests that hang* (client-go runs
  each renewal under ``context.WithTimeout(ctx, RenewDeadline)``); the library checks
  its deadline only between attempts, so a leader cut off from the API server would
  keep acting for as long as its request hangs. Every single attempt is bounded too.
- Stopping to act: when the renewal fails the leader's jobs are cancelled *and awaited*
  before anything else happens. The library cancels its task without awaiting it, and
  leaks it if the election itself is cancelled.
- Release on shutdown (client-go's ``ReleaseOnCancel``, which kube-scheduler sets): a
  leader stopped gracefully (SIGTERM, a rolling update) first stops acting, then writes
  an empty holder, so a follower takes over at its next retry instead of after the
  lease duration.
- After losing the Lease the process campaigns again. kube-scheduler exits instead
  (``klog.FlushAndExit``); here the replica keeps answering ``/filter`` and keeps its
  caches warm, so a restart would only cost a cold cache.
- The durations are checked as client-go checks them (``lease > renew > 1.2 x retry``,
  each positive) and, beyond that, as the timing argument below needs them
  (``retry + renew < lease``) by the settings; the library's ``Config`` also insists on at least one
  second each, a unit slip of client-go's ``< 1`` (nanoseconds), which would forbid the
  sub-second durations of tests, so ``Config`` is built without its checks.

Not adopted from client-go: the acquire loop's jitter (``wait.JitterUntil`` with 1.2):
with two or three replicas nothing contends enough to need it.

Campaigning starts only once ``waiting()`` is empty (the caches the acting parts read
are listed), as kube-scheduler waits for its informers before it runs the election
(cmd/kube-scheduler/app/server.go), so a new leader never acts on a cold cache. Until
then the gate's ``waiting_for`` (``/readyz``) and a log line say what it waits for.

A term that ends by anything else than a failed renewal or shutdown (an unexpected
error in the election) still closes the gate and waits for the acting jobs before the
error propagates: the election never fails open.

The identity is the pod name (downward API ``POD_NAME``) or the hostname, plus ``_`` and
a UUID per process, as kube-scheduler builds it (``id + "_" + string(uuid.NewUUID())``):
two processes never share one, even on one host.

Safety: a follower's clock starts when it sees the record change, so a leader that
last renewed at ``t`` is taken over no earlier than ``t + lease``; that leader stops
acting by ``t + retry + renew`` at the latest, which the settings keep below ``t + lease``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime
from http import HTTPStatus
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection.electionconfig import Config
from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes_asyncio.leaderelection.resourcelock.baselock import BaseLock

from extender.kube.api import ApiError, request_json
from extender.kube.defaults import LEADER_JITTER_FACTOR
from extender.kube.times import format_micro_time
from extender.leader.gate import ElectionOptions, LeaderGate

log = logging.getLogger("extender.leader")

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
LEASE = LEASES + "/{name}"


def micro_time(text: str) -> str:
    """A record time as the API's MicroTime (RFC 3339, UTC, microseconds).

    The library stamps records with ``str(datetime.fromtimestamp(...))``: local time
    without a zone (and without a fraction when it is zero); a record read back from
    the server carries the server's own RFC 3339 text.
    """
    # A naive time is the library's local time, which format_micro_time assumes.
    return format_micro_time(datetime.fromisoformat(text))


def _library_error(status: int, reason: str) -> ApiException:
    # LeaderElection.try_acquire_or_renew reads the Status code from the body.
    error = ApiException(status=status, reason=reason)
    error.body = orjson.dumps({"code": status})
    return error


class LeaseLock(BaseLock):
    """The library's lock interface on a Lease, through ``extender.kube.api``."""

    def __init__(self, api: Any, name: str, namespace: str, identity: str, *, timeout: float) -> None:
        super().__init__(name, namespace, identity)
        self._api = api
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        # The Lease as last read or written: its resourceVersion is the update's precondition.
        self.lease: dict[str, Any] | None = None

    async def _send(self, method: str, path: str, body: Any = None, **params: str) -> Any:
        return await request_json(
            self._api,
            method,
            path,
            path_params={"namespace": self.namespace, **params},
            body=body,
            content_type="application/json" if body is not None else None,
            timeout=self._timeout,
        )

    async def get(
        self, name: str, namespace: str
    ) -> tuple[bool, LeaderElectionRecord] | tuple[bool, Exception] | tuple[bool, None]:
        try:
            lease = await self._send("GET", LEASE, name=name)
        except ApiError as exc:
            return False, _library_error(exc.status, exc.message)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            return False, _library_error(0, f"{type(exc).__name__}: {exc}")
        if not isinstance(lease, dict):
            return False, _library_error(0, "the Lease is not an object")
        self.lease = lease
        return True, record_of(lease)

    async def create(self, name: str, namespace: str, election_record: LeaderElectionRecord) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": lease_spec(election_record, transitions=0),
        }
        return await self._write("POST", LEASES, body)

    async def update(self, name: str, namespace: str, updated_record: LeaderElectionRecord) -> bool:
        if self.lease is None:
            return False
        spec = self.lease.get("spec") or {}
        transitions = int(spec.get("leaseTransitions") or 0)
        if spec.get("holderIdentity") != updated_record.holder_identity:
            transitions += 1  # client-go counts every change of holder
        body = {**self.lease, "spec": lease_spec(updated_record, transitions=transitions)}
        return await self._write("PUT", LEASE, body, name=name)

    async def release(self) -> bool:
        """Give the Lease up: no holder, so the next candidate takes it at once.

        client-go's ``release``: holder "", leaseDurationSeconds 1, both times now."""
        if self.lease is None:
            return False
        spec = dict(self.lease.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return False
        now = format_micro_time()
        spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=now, renewTime=now)
        return await self._write("PUT", LEASE, {**self.lease, "spec": spec}, name=self.name)

    async def _write(self, method: str, path: str, body: dict[str, Any], **params: str) -> bool:
        try:
            written = await self._send(method, path, body, **params)
        except ApiError as exc:
            # 409 (someone else wrote first) is the normal losing side of a race.
            level = logging.DEBUG if exc.status == HTTPStatus.CONFLICT else logging.WARNING
            log.log(level, "cannot write the Lease", extra={"status": exc.status, "error": exc.message})
            return False
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.debug("cannot write the Lease", extra={"error": f"{type(exc).__name__}: {exc}"})
            return False
        if isinstance(written, dict):
            self.lease = written
        return True


def record_of(lease: Mapping[str, Any]) -> LeaderElectionRecord:
    """The library's record of a Lease; a missing or empty field is None (the library
    then treats the Lease as free, as client-go does with an empty holder)."""
    spec = lease.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    return LeaderElectionRecord(
        spec.get("holderIdentity") or None,
        str(duration) if duration else None,
        spec.get("acquireTime") or None,
        spec.get("renewTime") or None,
    )


def lease_spec(record: LeaderElectionRecord, *, transitions: int) -> dict[str, Any]:
    """A Lease spec from the library's record (whole seconds, rounded up, at least 1)."""
    spec: dict[str, Any] = {
        "holderIdentity": record.holder_identity or "",
        "leaseDurationSeconds": max(1, math.ceil(float(record.lease_duration or 1))),
        "leaseTransitions": transitions,
    }
    if record.acquire_time:
        spec["acquireTime"] = micro_time(record.acquire_time)
    if record.renew_time:
        spec["renewTime"] = micro_time(record.renew_time)
    return spec


class _UncheckedConfig(Config):
    """The library's Config without its one-second minimums (see the module doc); the
    settings check the durations as client-go does."""

    def __init__(self, lock: BaseLock, options: ElectionOptions) -> None:
        self.jitter_factor = LEADER_JITTER_FACTOR
        self.lock = lock
        self.lease_duration = options.lease_duration
        self.renew_deadline = options.renew_deadline
        self.retry_period = options.retry_period
        self.onstarted_leading = _unused
        self.onstopped_leading = _unused


async def _unused() -> None:  # pragma: no cover - run() is replaced, never calls back
    return None


class _Election(LeaderElection):
    """One candidacy: the library's acquire and record logic, client-go's renew bound.

    Deadlines are kept by waiting on the attempt, not by cancelling into it: aiohttp
    turns a cancellation that meets its own timer into ``TimeoutError``, which the lock
    reports as a failed attempt, and a deadline enforced by cancellation alone would
    then be lost. An attempt past its deadline is cancelled and left to finish.
    """

    def __init__(self, config: Config, *, observe: Callable[[str], None]) -> None:
        super().__init__(config)
        self._observe = observe
        self._abandoned: set[asyncio.Future[bool]] = set()

    async def try_acquire_or_renew(self) -> bool:
        return await self._attempt(self.election_config.renew_deadline)

    async def _attempt(self, timeout: float) -> bool:
        attempt = asyncio.ensure_future(super().try_acquire_or_renew())
        try:
            done, _ = await asyncio.wait({attempt}, timeout=timeout)
        finally:
            if not attempt.done():
                attempt.cancel()
                self._abandoned.add(attempt)
                attempt.add_done_callback(self._abandoned.discard)
        succeeded = False
        if done and not attempt.cancelled():
            error = attempt.exception()
            if error is not None:
                log.warning(
                    "leader election attempt failed", extra={"error": f"{type(error).__name__}: {error}"}
                )
            else:
                succeeded = attempt.result()
        if self.observed_record is not None:
            self._observe(self.observed_record.holder_identity or "")
        return succeeded

    async def renew_loop(self) -> None:
        """Renew every retry period; return when no renewal has succeeded within the
        renew deadline, counting requests that hang (client-go ``renew``)."""
        config = self.election_config
        loop = asyncio.get_running_loop()
        while True:
            deadline = loop.time() + config.renew_deadline
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return
                if await self._attempt(remaining):
                    break
                if loop.time() + config.retry_period >= deadline:
                    return
                await asyncio.sleep(config.retry_period)
            await asyncio.sleep(config.retry_period)


class LeaderElector:
    """Campaigns for the Lease while the process runs; see the module doc."""

    def __init__(
        self,
        api: Any,
        gate: LeaderGate,
        *,
        waiting: Callable[[], list[str]] = list,
    ) -> None:
        options = gate.options
        self.gate = gate
        # What must be listed before the campaign starts (empty: campaign).
        self._waiting = waiting
        # Requests time out at the renew deadline, as kube-scheduler's lock client does
        # (resourcelock.NewFromKubeconfig with RenewDeadline, cmd/kube-scheduler/app/options).
        self.lock = LeaseLock(
            api, options.lease_name, options.namespace, gate.identity, timeout=options.renew_deadline
        )

    def _observe(self, holder: str) -> None:
        gate = self.gate
        if holder != gate.holder:
            gate.holder = holder
            if holder and holder != gate.identity:
                log.info("leader elected", extra={"holder": holder, "lease": self._lease_name})

    @property
    def _lease_name(self) -> str:
        options = self.gate.options
        return f"{options.namespace}/{options.lease_name}"

    async def run(self) -> None:
        """Campaign, lead, and campaign again after a lost term, until cancelled."""
        options = self.gate.options
        await self._wait_for_caches()
        log.info(
            "campaigning for leadership", extra={"identity": self.gate.identity, "lease": self._lease_name}
        )
        self.gate.campaigning = True
        while True:
            election = _Election(_UncheckedConfig(self.lock, options), observe=self._observe)
            await election.acquire()
            async with self._term():
                await election.renew_loop()

    async def _wait_for_caches(self) -> None:
        """Until nothing is awaited; each change of what is awaited is logged, as a
        warning when an informer reports an error (a 403 on a LIST would otherwise keep
        every replica from campaigning without a word)."""
        gate = self.gate
        poll = min(gate.options.retry_period, 0.05)
        while waiting := self._waiting():
            if waiting != gate.waiting_for:
                gate.waiting_for = waiting
                failing = any(": not listed yet: " in reason for reason in waiting)
                log.log(
                    logging.WARNING if failing else logging.INFO,
                    "not campaigning for leadership yet: waiting for caches",
                    extra={"identity": gate.identity, "waitingFor": "; ".join(waiting)},
                )
            await asyncio.sleep(poll)
        gate.waiting_for = []

    @contextlib.asynccontextmanager
    async def _term(self) -> AsyncIterator[None]:
        gate = self.gate
        log.info("started leading", extra={"identity": gate.identity, "lease": self._lease_name})
        await self._announce(True)
        try:
            yield
        except asyncio.CancelledError:
            # Shut down while leading: stop acting first, then hand the Lease on.
            await self._announce(False)
            released = await self._release()
            log.info(
                "stopped leading: shutting down", extra={"identity": gate.identity, "released": released}
            )
            raise
        except BaseException as exc:
            # Never fail open: whatever ended the term, the acting jobs stop first.
            await self._announce(False)
            log.error(
                "stopped leading: the election failed",
                extra={"identity": gate.identity, "error": f"{type(exc).__name__}: {exc}"},
            )
            raise
        await self._announce(False)
        log.warning(
            "stopped leading: the Lease could not be renewed within the renew deadline",
            extra={"identity": gate.identity, "renewDeadline": gate.options.renew_deadline},
        )

    async def _announce(self, leading: bool) -> None:
        await self.gate.set_leading(leading)
        if not leading:
            await self.gate.quiet()  # the acting jobs have ended

    async def _release(self) -> bool:
        try:
            async with asyncio.timeout(self.gate.options.retry_period):
                return await self.lock.release()
        except TimeoutError:
            return False
