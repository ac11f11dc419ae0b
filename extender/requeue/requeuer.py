"""Requeueing pending pods when their RuntimeClass changes: the I/O half.

kube-scheduler does not watch RuntimeClasses (kubernetes/kubernetes#127371). A pod this
extender rejected because its RuntimeClass was missing or did not fit any node sits in
the scheduler's unschedulable queue until an unrelated cluster event or the periodic
flush (up to 5 minutes) retries it. Any update of the pod moves it back to the active
queue at once, so when a RuntimeClass is added, deleted, or changed in a way that
scheduling reads, this module patches one annotation onto each unscheduled pod naming
it::

    PATCH /api/v1/namespaces/<ns>/pods/<name>
    Content-Type: application/merge-patch+json
    {"metadata": {"uid": "<uid>", "annotations": {"runtimeclass-extender.dev/requeued-at": "<RFC 3339>"}}}

Nothing else on the pod changes. ``metadata.uid`` is a guard, as in the kubelet's
status patches: if the pod was deleted and recreated under the same name, the API
server refuses the patch instead of touching the newcomer.

The parts (decisions are pure, in ``extender.requeue.planner``):

- a pod informer: a ``Reflector`` on ``/api/v1/pods?fieldSelector=spec.nodeName=``,
  so only unscheduled pods are listed and watched (a pod that gets bound leaves the
  watch as DELETED), keeping namespace, name, uid, runtimeClassName, schedulerName and
  resourceVersion of each (``PendingPod``), indexed by class in ``PendingPods``;
- a listener on the RuntimeClass store (fed by the live cluster's reflector) that tells
  the ``RequeuePlanner`` each class's scheduling-relevant revision;
- a coalescing timer: the first change opens a window of ``window`` seconds; when it
  closes, the planner turns every change seen meanwhile into at most one nudge per pod;
- one patch worker: nudges wait in a queue (one entry per pod uid: a newer nudge
  replaces an older one still waiting), go out at most ``rate`` per second (token
  bucket with a small burst), and are retried with capped exponential backoff on 409,
  429 (honouring Retry-After, which also pauses every other patch), 5xx, connection
  errors and timeouts.

Races and how they are closed:

- The first LIST of RuntimeClasses is the baseline, not a change: the pods pending at
  start were already tried against those classes. (A class created while the extender
  was down is therefore not noticed as new; such pods wait for the scheduler's own
  periodic retry, as without this feature.)
- A class change seen before the pod informer's first LIST completes is kept until it
  has: the window closes only once the informer has synced.
- A pod bound or deleted after it was planned: before each attempt the worker looks the
  pod up in the informer's index; absent, it is skipped (``not_pending``). If the
  informer lags, the PATCH itself answers 404 (``deleted``) or, for a pod recreated
  under the same name, is refused by the uid guard; the 409 is retried, and the retry
  finds the new uid in the index and gives up (``recreated``). A bound pod that the
  informer has not yet dropped may still get its annotation: harmless.
- Never twice for one class revision: the planner records each pod's last nudged
  revision, so a re-LIST after a reconnect, or an edit and its undo, patches nothing.
- Two nudges in one second must differ, or the second patch is a no-op the scheduler
  never sees: the timestamp carries microseconds.

With leader election (``serve --leader-elect``, ``extender.cluster.leader``) every
replica runs the informer, the planner and the queue, so its cache and its plan are
warm; only the leader runs the patch worker. A follower's queue is what the leader
owes: each nudge also writes ``REVISION_ANNOTATION`` (the digest of the class revision),
and when a follower's informer shows a pod carrying the digest of its queued nudge, or
a pod that left the pending set, the follower drops that nudge. A replica that takes
the lead over therefore patches exactly the pods its predecessor had not, and the same
check at plan time and before each attempt keeps it from patching a pod twice for one
revision. A patch cut short by the end of a term goes back to the front of the queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from extender.cluster.api import error_of, request
from extender.cluster.health import SourceStats
from extender.cluster.leadership import Leadership
from extender.cluster.reflector import Reflector, ReflectorOptions
from extender.cluster.state import ClusterState, Named, Store
from extender.requeue.metrics import RequeueMetrics
from extender.requeue.planner import (
    ClassChange,
    Nudge,
    Outcome,
    PendingPod,
    PendingPods,
    Plan,
    RequeuePlanner,
    TokenBucket,
    class_revision,
    nudged_for,
    patch_outcome,
    retry_delay,
    revision_digest,
)
from extender.requeue.pods import POD_RESOURCE, PODS, merge_patch, requeued_at
from extender.settings import DEFAULT_REQUEUE_RATE, DEFAULT_REQUEUE_WINDOW, DEFAULT_SCHEDULER_NAMES
from extender.tasks import run_all
from policies.objects import RuntimeClassView

log = logging.getLogger("extender.requeue")


@dataclass(frozen=True)
class RequeueOptions:
    scheduler_names: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES
    # Seconds from the first RuntimeClass change until the nudges are planned.
    window: float = DEFAULT_REQUEUE_WINDOW
    # Patches per second, with bursts of up to ``burst``.
    rate: float = DEFAULT_REQUEUE_RATE
    burst: int = 5
    # Attempts per nudge before it counts as failed; backoff between them.
    max_attempts: int = 8
    retry_initial: float = 0.5
    retry_max: float = 30.0
    # Whole-request timeout of one PATCH.
    request_timeout: float = 10.0
    # Longest wait on shutdown for planned nudges to go out (the kubelet's default
    # grace period is 30 s; the rest of shutdown needs far less).
    drain_timeout: float = 5.0
    reflector: ReflectorOptions = field(default_factory=ReflectorOptions)


class _PodStore(Store[PendingPod]):
    """The informer's store, with an event for "the first LIST is in"."""

    def __init__(self) -> None:
        super().__init__(PODS)
        self.listed = asyncio.Event()

    def replace(self, items: Iterable[PendingPod]) -> None:
        super().replace(items)
        self.listed.set()


@dataclass
class _Batch:
    """The nudges planned for one RuntimeClass change, for its summary log line."""

    change: ClassChange
    total: int
    already_nudged: int
    sent: int = 0
    skipped: int = 0
    failed: int = 0

    @property
    def finished(self) -> bool:
        return self.sent + self.skipped + self.failed >= self.total


@dataclass
class _Item:
    nudge: Nudge
    batch: _Batch
    attempts: int = 0


Sleep = Callable[[float], Awaitable[None]]


class Requeuer:
    """Nudges the unscheduled pods naming a RuntimeClass that changed. See the module doc.

    Build it before the app starts (so it hears the RuntimeClasses' first LIST) and
    ``attach`` it to the app; or drive it with ``start``/``stop``.
    """

    def __init__(
        self,
        api: Any,
        state: ClusterState,
        *,
        options: RequeueOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        leadership: Leadership | None = None,
    ) -> None:
        self._api = api
        # With leader election: patch only while this replica leads (see the module doc).
        self.leadership = leadership
        self.options = options or RequeueOptions()
        # The rate limit's clock and sleep (tests substitute both).
        self._clock = clock
        self._sleep = sleep
        self.pods = _PodStore()
        self.pending = PendingPods(self.options.scheduler_names)
        self.planner = RequeuePlanner()
        self.stats = SourceStats(kind=PODS)
        self.reflector = Reflector(api, POD_RESOURCE, self.pods, self.stats, options=self.options.reflector)
        self.metrics: RequeueMetrics | None = None
        self._bucket = TokenBucket(self.options.rate, self.options.burst, now=clock())
        self._not_before = 0.0  # clock time before which no patch goes out (429)
        self._queue: OrderedDict[str, _Item] = OrderedDict()  # by pod uid
        self._queue_ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._retries: set[asyncio.TimerHandle] = set()
        self._in_flight = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._classes = state.runtime_classes
        self._classes.add_listener(self._class_changed)
        self.pods.add_listener(self._pod_changed)
        if self._classes.synced:  # built late: what exists now is the baseline
            for runtime_class in self._classes.values():
                self.planner.observe(runtime_class.name, class_revision(runtime_class), initial=True)

    # ----- state --------------------------------------------------------------------

    @property
    def queued(self) -> int:
        """Nudges waiting for their turn or for a retry."""
        return len(self._queue) + len(self._retries)

    def _class_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        current = new if new is not None else old
        if current is None:
            return
        view = new if isinstance(new, RuntimeClassView) else None
        # Store.replace sets synced after notifying: during the first LIST it is False.
        if self.planner.observe(current.name, class_revision(view), initial=not self._classes.synced):
            self._changed.set()

    def _pod_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        if isinstance(old, PendingPod) and (new is None or getattr(new, "uid", None) != old.uid):
            # Bound (it left the spec.nodeName= watch), deleted, or replaced.
            self.pending.delete(old.name)
            self.planner.forget_pod(old.uid)
        if isinstance(new, PendingPod):
            self.pending.upsert(new)
        if not self._may_patch and isinstance(old, PendingPod):
            self._drop_if_done(old.uid)

    def _drop_if_done(self, uid: str) -> None:
        """A follower: drop a queued nudge the leader has sent, or whose pod is gone."""
        item = self._queue.get(uid)
        if item is None:
            return
        skip = self._still_due(item)
        if skip is not None:
            del self._queue[uid]
            self._settle(item, skip)

    @property
    def _may_patch(self) -> bool:
        return self.leadership is None or self.leadership.leading

    @property
    def busy(self) -> bool:
        """True while a change is being coalesced or a nudge is queued or in flight."""
        return self._changed.is_set() or self.queued > 0 or self._in_flight > 0

    # ----- lifecycle ----------------------------------------------------------------

    def register_metrics(self, registry: CollectorRegistry) -> RequeueMetrics:
        """Count nudges on ``registry`` (the app's, in ``serve``)."""
        self.metrics = RequeueMetrics(registry, pending=lambda: len(self.pending), queued=lambda: self.queued)
        return self.metrics

    async def drain(self) -> None:
        """On shutdown: give the nudges already planned or queued up to
        ``options.drain_timeout`` seconds to go out (a pod waiting on them would
        otherwise wait for the scheduler's own periodic retry)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.drain_timeout
        # A follower's queue is the leader's to send: nothing to wait for.
        while self.busy and self._may_patch and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def run(self) -> None:
        """The pod informer, the planner and the patch worker, until cancelled."""
        log.info(
            "requeueing pending pods on RuntimeClass changes",
            extra={
                "schedulerNames": ",".join(self.options.scheduler_names),
                "window": self.options.window,
                "rate": self.options.rate,
            },
        )
        leadership = self.leadership
        patch_loop: Callable[[], Awaitable[None]] = self._patch_loop
        if leadership is not None:

            async def patch_loop() -> None:
                await leadership.while_leading(self._patch_loop)

        try:
            await run_all(self.reflector.run, self._plan_loop, patch_loop)
        finally:
            for handle in self._retries:
                handle.cancel()
            self._retries.clear()

    # ----- planning -----------------------------------------------------------------

    async def _plan_loop(self) -> None:
        while True:
            await self._changed.wait()
            # Coalesce: every change until the window closes joins this plan.
            await asyncio.sleep(self.options.window)
            await self.pods.listed.wait()
            self._changed.clear()
            try:
                self._enqueue(self.planner.plan(self.pending))
            except Exception:
                log.exception("requeue planning failed")

    def _enqueue(self, plan: Plan) -> None:
        batches: dict[str, _Batch] = {}
        for change in plan.changes:
            nudges = sum(1 for n in plan.nudges if n.class_name == change.class_name)
            already = sum(1 for n in plan.already_nudged if n.class_name == change.class_name)
            batches[change.class_name] = _Batch(change, nudges, already)
        if self.metrics is not None and plan.already_nudged:
            self.metrics.skipped.labels("already_nudged").inc(len(plan.already_nudged))
        for batch in batches.values():
            if batch.total == 0:
                self._log_batch(batch)
        for nudge in plan.nudges:
            item = _Item(nudge, batches[nudge.class_name])
            older = self._queue.get(nudge.pod.uid)
            if older is not None:
                self._settle(older, "superseded")
            self._queue[nudge.pod.uid] = item  # an older entry keeps its place in line
        if self._queue:
            self._queue_ready.set()

    def _settle(self, item: _Item, outcome: str, *, reason: str = "") -> None:
        """Count one nudge's end: sent, skipped (reason) or failed (reason)."""
        batch, metrics = item.batch, self.metrics
        if outcome == "sent":
            batch.sent += 1
            self.planner.done(item.nudge)
            if metrics is not None:
                metrics.sent.inc()
        elif outcome == "failed":
            batch.failed += 1
            if metrics is not None:
                metrics.failed.labels(reason).inc()
        else:
            batch.skipped += 1
            if metrics is not None:
                metrics.skipped.labels(outcome).inc()
        if batch.finished:
            self._log_batch(batch)

    def _log_batch(self, batch: _Batch) -> None:
        change = batch.change
        # A follower's batch ends as the leader's patches arrive: the leader's line says it.
        log.log(
            logging.INFO if self._may_patch else logging.DEBUG,
            "RuntimeClass %s: requeued %d pending pod(s)",
            change.kind,
            batch.sent,
            extra={
                "runtimeClass": change.class_name,
                "change": change.kind,
                "pendingPods": batch.total + batch.already_nudged,
                "requeued": batch.sent,
                "skipped": batch.skipped + batch.already_nudged,
                "failed": batch.failed,
            },
        )

    # ----- patching -----------------------------------------------------------------

    async def _patch_loop(self) -> None:
        while True:
            await self._queue_ready.wait()
            if not self._queue:
                self._queue_ready.clear()
                continue
            _, item = self._queue.popitem(last=False)
            self._in_flight += 1
            try:
                await self._attempt(item)
            except asyncio.CancelledError:
                if self.leadership is not None:
                    self._put_back(item)
                raise
            except Exception:
                log.exception("requeue patch failed", extra={"pod": item.nudge.pod.name})
                self._settle(item, "failed", reason="rejected")
            finally:
                self._in_flight -= 1

    def _put_back(self, item: _Item) -> None:
        """A term ended during this nudge's attempt: first in line for the next leader
        (unless a newer nudge for the pod is waiting, or the pod shows it was sent)."""
        uid = item.nudge.pod.uid
        if uid in self._queue:
            self._settle(item, "superseded")
            return
        self._queue[uid] = item
        self._queue.move_to_end(uid, last=False)
        self._queue_ready.set()

    def _still_due(self, item: _Item) -> str | None:
        """None if the pod is still pending as planned, else the skip reason."""
        pod = item.nudge.pod
        current = self.pending.get(pod.name)
        if current is None:
            return "not_pending"
        if current.uid != pod.uid:
            return "recreated"
        if nudged_for(current, item.nudge.revision):
            return "already_nudged"  # by another replica, before this one led
        return None

    async def _wait_for_turn(self) -> None:
        while True:
            now = self._clock()
            if now < self._not_before:
                await self._sleep(self._not_before - now)
                continue
            delay = self._bucket.take(now)
            if delay <= 0:
                return
            await self._sleep(delay)

    async def _attempt(self, item: _Item) -> None:
        skip = self._still_due(item)
        if skip is None:
            await self._wait_for_turn()
            skip = self._still_due(item)  # the wait may have been long
        if skip is not None:
            self._settle(item, skip)
            return
        pod = item.nudge.pod
        item.attempts += 1
        status, message, retry_after = await self._patch(item)
        outcome = patch_outcome(status) if status else Outcome.RETRY
        if outcome is Outcome.DONE:
            log.debug("requeued pod", extra={"pod": pod.name, "runtimeClass": item.nudge.class_name})
            self._settle(item, "sent")
        elif outcome is Outcome.GONE:
            self._settle(item, "deleted")
        elif outcome is Outcome.FAIL and (skip := self._still_due(item)) is not None:
            # Refused because the pod changed identity meanwhile (a uid guard answered
            # with 422 rather than 409 counts here too): nothing is wrong.
            self._settle(item, skip)
        elif outcome is Outcome.FAIL:
            reason = "forbidden" if status == 403 else "rejected"
            log.warning(
                "cannot requeue pod"
                + (": grant the requeue ClusterRole (patch pods)" if status == 403 else ""),
                extra={"pod": pod.name, "status": status, "error": message},
            )
            self._settle(item, "failed", reason=reason)
        elif item.attempts >= self.options.max_attempts:
            log.warning(
                "giving up requeueing pod",
                extra={"pod": pod.name, "attempts": item.attempts, "status": status, "error": message},
            )
            self._settle(item, "failed", reason="retries_exhausted")
        else:
            delay = retry_delay(
                item.attempts,
                initial=self.options.retry_initial,
                maximum=self.options.retry_max,
                retry_after=retry_after,
            )
            if status == 429 and retry_after is not None:
                # The API server asks every client to slow down, not just this request.
                self._not_before = max(
                    self._not_before, self._clock() + min(retry_after, self.options.retry_max)
                )
            if self.metrics is not None:
                self.metrics.retries.inc()
            log.info(
                "requeue patch will be retried",
                extra={"pod": pod.name, "status": status, "error": message, "retryIn": round(delay, 3)},
            )
            self._retry_later(item, delay)

    def _retry_later(self, item: _Item, delay: float) -> None:
        loop = asyncio.get_running_loop()

        def requeue() -> None:
            self._retries.discard(handle)
            uid = item.nudge.pod.uid
            if uid in self._queue:
                self._settle(item, "superseded")  # a newer nudge for this pod is waiting
                return
            self._queue[uid] = item
            self._queue_ready.set()

        handle = loop.call_later(delay, requeue)
        self._retries.add(handle)

    async def _patch(self, item: _Item) -> tuple[int, str, float | None]:
        """One PATCH: (status, message, Retry-After); status 0 for a connection error."""
        pod = item.nudge.pod
        # Only with leader election: without it the patch stays one annotation.
        revision = None
        if self.leadership is not None:
            revision = revision_digest(item.nudge.revision)
            # The pod as the informer has it now: its resourceVersion is the precondition.
            pod = self.pending.get(pod.name) or pod
        try:
            async with await request(
                self._api,
                "PATCH",
                "/api/v1/namespaces/{namespace}/pods/{name}",
                path_params={"namespace": pod.namespace, "name": pod.pod_name},
                body=merge_patch(pod, requeued_at(), revision),
                content_type="application/merge-patch+json",
                timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
            ) as response:
                if response.status < 300:
                    return response.status, "", None
                error = await error_of(response)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return 0, f"{type(exc).__name__}: {exc}", None
        return error.status, error.message, error.retry_after
