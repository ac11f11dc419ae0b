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
- one patch worker, the leader's ``WriteQueue`` (``extender.leader.writes``): nudges
  wait in a queue (one entry per pod uid: a newer nudge replaces an older one still
  waiting), go out at most ``rate`` per second (token bucket with a small burst), and
  are retried with capped exponential backoff on 409, 429 (honouring Retry-After,
  which also pauses every other patch), 5xx, connection errors and timeouts.

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

It is a leader actor (``extender.leader.actor``). With leader election (``serve
--leader-elect``) every replica runs the informer, the planner and the queue
(``observe``), so its cache and its plan are warm; only the leader runs the patch
worker (``lead``). A follower's queue is what the leader
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from extender.cluster.state import ClusterState
from extender.kube.api import send
from extender.kube.informer import Informer
from extender.kube.reflector import ReflectorOptions
from extender.kube.store import Named
from extender.leader.actor import LeaderActor, wait_while
from extender.leader.gate import LeaderGate
from extender.leader.writes import Sent, Sleep, WriteOptions, WriteQueue
from extender.requeue.metrics import RequeueMetrics
from extender.requeue.nudge import POD_RESOURCE, merge_patch, requeued_at
from extender.requeue.planner import (
    ClassChange,
    Nudge,
    PendingPod,
    PendingPods,
    Plan,
    RequeuePlanner,
    class_revision,
    nudged_for,
    revision_digest,
)
from extender.settings import DEFAULT_REQUEUE_RATE, DEFAULT_REQUEUE_WINDOW, DEFAULT_SCHEDULER_NAMES
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
    # Attempts per nudge before it counts as failed; backoff between them (the write
    # queue's defaults).
    max_attempts: int = WriteOptions.max_attempts
    retry_initial: float = WriteOptions.retry_initial
    retry_max: float = WriteOptions.retry_max
    # Whole-request timeout of one PATCH.
    request_timeout: float = 10.0
    # Longest wait on shutdown for planned nudges to go out (the kubelet's default
    # grace period is 30 s; the rest of shutdown needs far less).
    drain_timeout: float = 5.0
    reflector: ReflectorOptions = field(default_factory=ReflectorOptions)


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


class Requeuer(LeaderActor):
    """Nudges the unscheduled pods naming a RuntimeClass that changed. See the module doc.

    Build it before the cluster watch starts (so it hears the RuntimeClasses' first
    LIST) and run it with ``extender.leader.runner.LeaderRunner``.
    """

    name = "requeuer"

    def __init__(
        self,
        api: Any,
        state: ClusterState,
        *,
        options: RequeueOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        gate: LeaderGate | None = None,
    ) -> None:
        self._api = api
        # With leader election: patch only while this replica leads (see the module doc).
        self.gate = gate
        self.options = options = options or RequeueOptions()
        self.pod_informer: Informer[PendingPod] = Informer(api, POD_RESOURCE, options=options.reflector)
        self.pods = self.pod_informer.store
        self.pending = PendingPods(options.scheduler_names)
        self.planner = RequeuePlanner()
        self.metrics: RequeueMetrics | None = None
        self.writes: WriteQueue[_Item] = WriteQueue(
            self,
            WriteOptions(
                rate=options.rate,
                burst=options.burst,
                max_attempts=options.max_attempts,
                retry_initial=options.retry_initial,
                retry_max=options.retry_max,
            ),
            clock=clock,
            sleep=sleep,
        )
        self._changed = asyncio.Event()
        self._classes = state.runtime_classes
        self._classes.add_listener(self._class_changed)
        self.pods.add_listener(self._pod_changed)
        if self._classes.synced:  # built late: what exists now is the baseline
            for runtime_class in self._classes.values():
                self.planner.observe(runtime_class.name, class_revision(runtime_class), initial=True)

    # ----- state --------------------------------------------------------------------

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self.pod_informer,)

    def waiting(self) -> list[str]:
        # The RuntimeClasses' first LIST is the planner's baseline.
        classes = [] if self._classes.synced else [f"{self._classes.kind}: not listed yet"]
        return [*classes, *super().waiting()]

    @property
    def queued(self) -> int:
        """Nudges waiting for their turn or for a retry."""
        return len(self.writes)

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
        if not self._leading and isinstance(old, PendingPod):
            self._drop_if_done(old.uid)

    def _drop_if_done(self, uid: str) -> None:
        """A follower: drop a queued nudge the leader has sent, or whose pod is gone."""
        item = self.writes.get(uid)
        if item is None:
            return
        skip = self.due(item)
        if skip is not None:
            self.writes.discard(uid)
            self.settle(item, skip)

    @property
    def _leading(self) -> bool:
        return self.gate is None or self.gate.leading

    @property
    def busy(self) -> bool:
        """True while a change is being coalesced or a nudge is queued or in flight."""
        return self._changed.is_set() or self.writes.busy

    # ----- the actor ----------------------------------------------------------------

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """Count nudges on ``registry`` (the app's, in ``serve``)."""
        self.metrics = RequeueMetrics(registry, pending=lambda: len(self.pending), queued=lambda: self.queued)

    async def observe(self) -> None:
        """The planner, on every replica, until cancelled."""
        log.info(
            "requeueing pending pods on RuntimeClass changes",
            extra={
                "schedulerNames": ",".join(self.options.scheduler_names),
                "window": self.options.window,
                "rate": self.options.rate,
            },
        )
        try:
            await self._plan_loop()
        finally:
            self.writes.close()

    async def lead(self) -> None:
        """The patch worker, while this replica leads."""
        await self.writes.run()

    async def drain(self) -> None:
        """On shutdown: give the nudges already planned or queued up to
        ``options.drain_timeout`` seconds to go out (a pod waiting on them would
        otherwise wait for the scheduler's own periodic retry)."""
        await wait_while(lambda: self.busy, self.options.drain_timeout)

    # ----- planning -----------------------------------------------------------------

    async def _plan_loop(self) -> None:
        while True:
            await self._changed.wait()
            # Coalesce: every change until the window closes joins this plan.
            await asyncio.sleep(self.options.window)
            await self.pods.wait_synced()
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
            self.writes.put(_Item(nudge, batches[nudge.class_name]))

    # ----- the writes (extender.leader.writes.WriteHandler) -------------------------

    def key(self, item: _Item) -> str:
        return item.nudge.pod.uid

    def settle(self, item: _Item, outcome: str, *, reason: str = "", sent: Sent | None = None) -> None:
        """Count one nudge's end: sent, skipped (reason) or failed (reason)."""
        batch, metrics, pod = item.batch, self.metrics, item.nudge.pod
        if outcome == "sent":
            log.debug("requeued pod", extra={"pod": pod.name, "runtimeClass": item.nudge.class_name})
            batch.sent += 1
            self.planner.done(item.nudge)
            if metrics is not None:
                metrics.sent.inc()
        elif outcome == "failed":
            status, message = (sent.status, sent.message) if sent is not None else (0, "")
            if reason == "retries_exhausted":
                log.warning(
                    "giving up requeueing pod", extra={"pod": pod.name, "status": status, "error": message}
                )
            elif sent is not None:
                log.warning(
                    "cannot requeue pod"
                    + (": grant the requeue ClusterRole (patch pods)" if status == 403 else ""),
                    extra={"pod": pod.name, "status": status, "error": message},
                )
            batch.failed += 1
            if metrics is not None:
                metrics.failed.labels(reason).inc()
        else:
            batch.skipped += 1
            if metrics is not None:
                metrics.skipped.labels(outcome).inc()
        if batch.finished:
            self._log_batch(batch)

    def retrying(self, item: _Item, sent: Sent, delay: float) -> None:
        if self.metrics is not None:
            self.metrics.retries.inc()
        log.info(
            "requeue patch will be retried",
            extra={
                "pod": item.nudge.pod.name,
                "status": sent.status,
                "error": sent.message,
                "retryIn": round(delay, 3),
            },
        )

    def _log_batch(self, batch: _Batch) -> None:
        change = batch.change
        # A follower's batch ends as the leader's patches arrive: the leader's line says it.
        log.log(
            logging.INFO if self._leading else logging.DEBUG,
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

    def due(self, item: _Item) -> str | None:
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

    async def send(self, item: _Item) -> Sent:
        """One PATCH."""
        pod = item.nudge.pod
        # Only with leader election: without it the patch stays one annotation.
        revision = None
        if self.gate is not None:
            revision = revision_digest(item.nudge.revision)
            # The pod as the informer has it now: its resourceVersion is the precondition.
            pod = self.pending.get(pod.name) or pod
        return await send(
            self._api,
            "PATCH",
            "/api/v1/namespaces/{namespace}/pods/{name}",
            path_params={"namespace": pod.namespace, "name": pod.pod_name},
            body=merge_patch(pod, requeued_at(), revision),
            content_type="application/merge-patch+json",
            timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
        )
