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

Nothing else on the pod changes (an admission policy, deploy/components/
requeue-pending-pods, refuses anything else from the extender). ``metadata.uid`` is a
guard, as in the kubelet's status patches: if the pod was deleted and recreated under
the same name, the API server refuses the patch instead of touching the newcomer.

It is a leader actor (``extender.leader.actor``), level-triggered:

- every replica follows, from the shared informer of pending pods
  (``extender.cluster.pending_pods``) and the RuntimeClass store, what each pending pod
  was last tried against and what its class is now (``extender.requeue.planner``, pure);
- the leader, at the start of its term and after each RuntimeClass change (coalesced
  over ``window`` seconds), computes from that state which pods are due a nudge and
  queues them; nothing is queued from events, and followers queue nothing;
- one patch worker, the leader's ``WriteQueue`` (``extender.leader.writes``): nudges
  go out at most ``rate`` per second (token bucket with a small burst), one per pod
  waiting or in flight, and are tried again with backoff on 409, 429 (honouring
  Retry-After, which also pauses every other patch), 5xx, connection errors, timeouts
  and refusals (a 403 until the RBAC is granted); each is computed when sent, from the
  state at that moment.

Races and how they are closed:

- The first LIST of RuntimeClasses is the baseline, not a change: the pods pending at
  start were already tried against those classes. (A class created while the extender
  was down is therefore not noticed as new; such pods wait for the scheduler's own
  periodic retry, as without this feature.)
- A pod bound or deleted before its turn: before each attempt the worker looks the pod
  up in the informer; absent, it is skipped (``not_pending``). If the informer lags,
  the PATCH itself answers 404 (``deleted``) or, for a pod recreated under the same
  name, is refused by the uid guard; the 409 is retried, and the retry finds the new
  uid and gives up (``recreated``). A bound pod that the informer has not yet dropped
  may still get its annotation: harmless.
- Never twice for one class revision: a nudge is for the revision of the moment it is
  sent, and the planner remembers it until the pod shows it.
- Two nudges in one second must differ, or the second patch is a no-op the scheduler
  never sees: the timestamp carries microseconds.
- With leader election (``serve --leader-elect``) each nudge also writes
  ``REVISION_ANNOTATION`` (the digest of the class revision) and carries the pod's
  resourceVersion as a precondition: a replica that takes the lead over reads from the
  pods which nudges its predecessor sent, and a patch that reaches the API server late
  (sent by a leader just cut off, delivered after its successor nudged the pod) fails
  with 409 instead of nudging twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from extender.cluster.class_revisions import scheduling_revision
from extender.cluster.pending_pod_informer import PendingPodInformer
from extender.cluster.pending_pods import PendingPod
from extender.cluster.state import ClusterState
from extender.kube.api import send
from extender.kube.informer import Informer
from extender.kube.reflector import ReflectorOptions
from extender.kube.store import Named
from extender.leader.actor import LeaderActor, wait_while
from extender.leader.gate import LeaderGate
from extender.leader.writes import Sent, Sleep, WriteOptions, WriteQueue
from extender.requeue.metrics import RequeueMetrics
from extender.requeue.nudge import merge_patch, requeued_at
from extender.requeue.planner import ClassChange, Nudge, Plan, RequeuePlanner
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
    logged: bool = False

    @property
    def finished(self) -> bool:
        return self.sent + self.skipped + self.failed >= self.total


@dataclass
class _Item:
    uid: str
    pod_key: str
    batch: _Batch
    # Said failed (once): a later success no longer counts in the batch.
    failed: bool = False


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
        pending: PendingPodInformer | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        gate: LeaderGate | None = None,
    ) -> None:
        self._api = api
        # With leader election: patch only while this replica leads (see the module doc).
        self.gate = gate
        self.options = options = options or RequeueOptions()
        # The informer of pending pods the actors share (its own when built alone).
        self.pod_informer = pending or PendingPodInformer(api, options=options.reflector)
        self.pods = self.pod_informer.pods
        self.planner = RequeuePlanner(options.scheduler_names)
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
        # The pods the requeuer nudges (ours, schedulable), for the gauge.
        self._ours = 0
        # The nudge each pod's write carried, for the planner and the counters.
        self._sending: dict[str, Nudge] = {}
        self._classes = state.runtime_classes
        self._classes.add_listener(self._class_changed)
        self.pods.add_listener(self._pod_changed)
        if self._classes.synced:  # built late: what exists now is the baseline
            for runtime_class in self._classes.values():
                self.planner.observe_class(
                    runtime_class.name, scheduling_revision(runtime_class), initial=True
                )
            self.planner.baseline_listed()
        for pod in self.pods.values():
            self._pod_changed(self.pods.kind, None, pod)

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
        initial = not self._classes.synced
        if not initial:
            self.planner.baseline_listed()  # before this change: the first LIST as it was
        if (
            self.planner.observe_class(current.name, scheduling_revision(view), initial=initial)
            and self._leading
        ):
            self._changed.set()  # a follower plans nothing: its next term starts with a pass

    def _pod_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        if isinstance(old, PendingPod):
            self._ours -= self.planner.ours(old)
            if new is None or getattr(new, "uid", None) != old.uid:
                # Bound (it left the spec.nodeName= watch), deleted, or replaced.
                self.planner.forget_pod(old.uid)
        if isinstance(new, PendingPod):
            self._ours += self.planner.ours(new)
            # Store.replace sets synced after notifying: the first LIST's pods are
            # pending since before start.
            self.planner.first_seen(new, initial=not self.pods.synced)
            if new.requeued_for:
                self.planner.seen_annotation(new)

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
        self.metrics = RequeueMetrics(registry, pending=lambda: self._ours, queued=lambda: self.queued)

    async def observe(self) -> None:
        """Every replica follows the classes and pods through its listeners."""
        log.info(
            "requeueing pending pods on RuntimeClass changes",
            extra={
                "schedulerNames": ",".join(self.options.scheduler_names),
                "window": self.options.window,
                "rate": self.options.rate,
            },
        )

    async def lead(self) -> None:
        """A pass at the start of the term and after each change; the patch worker."""
        await self._classes.wait_synced()
        await self.pods.wait_synced()
        self.planner.baseline_listed()
        self._changed.set()
        try:
            await run_all(self.writes.run, self._plan_loop)
        finally:
            # The next term, here or elsewhere, recomputes what is owed from what is.
            self._changed.clear()
            self.writes.clear()

    async def drain(self) -> None:
        """On shutdown: give the nudges already planned or queued up to
        ``options.drain_timeout`` seconds to go out (a pod waiting on them would
        otherwise wait for the scheduler's own periodic retry)."""
        await wait_while(lambda: self.busy, self.options.drain_timeout)

    # ----- planning -----------------------------------------------------------------

    async def _plan_loop(self) -> None:
        while True:
            await self._changed.wait()
            # Coalesce: every change until the window closes joins this pass.
            await asyncio.sleep(self.options.window)
            self._changed.clear()
            self._enqueue(self.planner.plan(self.pods.values()))

    def _enqueue(self, plan: Plan) -> None:
        batches: dict[str, _Batch] = {change.class_name: _Batch(change, 0, 0) for change in plan.changes}
        fresh = [nudge for nudge in plan.nudges if not self.writes.has(nudge.pod.uid)]
        for nudge in fresh:
            batch = batches.get(nudge.class_name)
            if batch is None:  # owed from before this term: a new leader's leftovers
                current = nudge.revision
                batch = batches[nudge.class_name] = _Batch(
                    ClassChange(nudge.class_name, current, current), 0, 0
                )
            batch.total += 1
        for nudge in plan.already_nudged:
            batches[nudge.class_name].already_nudged += 1
        if self.metrics is not None and plan.already_nudged:
            self.metrics.skipped.labels("already_nudged").inc(len(plan.already_nudged))
        for batch in batches.values():
            if batch.total == 0 and batch.change.kind != "resumed":
                self._log_batch(batch)
        for nudge in fresh:
            pod = nudge.pod
            self.writes.put(_Item(pod.uid, pod.name, batches[nudge.class_name]))

    # ----- the writes (extender.leader.writes.WriteHandler) -------------------------

    def key(self, item: _Item) -> str:
        return item.uid

    def due(self, item: _Item) -> str | None:
        """None if the pod is still pending and due a nudge, else the skip reason."""
        current = self.pods.get(item.pod_key)
        if current is None:
            return "not_pending"
        if current.uid != item.uid:
            return "recreated"
        if self.planner.due(current) is None:
            return "already_nudged"  # by another replica, or its class changed back
        return None

    def content(self, item: _Item) -> Hashable:
        """The class revision the nudge names (a nudge undone is due the same one again)."""
        pod = self.pods.get(item.pod_key)
        nudge = self.planner.due(pod) if pod is not None and pod.uid == item.uid else None
        return None if nudge is None else nudge.digest

    async def send(self, item: _Item) -> Sent:
        """One PATCH, for the nudge the pod is due now."""
        pod = self.pods.get(item.pod_key)
        nudge = self.planner.due(pod) if pod is not None and pod.uid == item.uid else None
        if pod is None or nudge is None:
            return Sent(HTTPStatus.OK, "not due")  # settled by due() on the next look
        self._sending[item.uid] = nudge
        # Only with leader election: without it the patch stays one annotation, and the
        # pod's resourceVersion (the informer's, now) is not a precondition.
        revision = nudge.digest if self.gate is not None else None
        return await send(
            self._api,
            "PATCH",
            "/api/v1/namespaces/{namespace}/pods/{name}",
            path_params={"namespace": pod.namespace, "name": pod.pod_name},
            body=merge_patch(pod, requeued_at(), revision),
            content_type="application/merge-patch+json",
            timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
        )

    def settle(self, item: _Item, outcome: str, *, reason: str = "", sent: Sent | None = None) -> None:
        """Count one nudge's end: sent, skipped (reason) or failed (reason, once per
        streak: it is tried again while due, and its later end is counted too)."""
        if outcome == "failed":
            self._failed(item, reason, sent)
            return
        nudge = self._sending.pop(item.uid, None)
        if outcome == "sent" and nudge is None:
            outcome = "already_nudged"  # nothing was due when its turn came: no PATCH
        batch, metrics = item.batch, self.metrics
        if outcome == "sent" and nudge is not None:
            log.debug("requeued pod", extra={"pod": item.pod_key, "runtimeClass": nudge.class_name})
            self.planner.done(nudge)
            if metrics is not None:
                metrics.sent.inc()
            batch.sent += not item.failed
        else:
            batch.skipped += not item.failed
            if metrics is not None:
                metrics.skipped.labels(outcome).inc()
        if batch.finished:
            self._log_batch(batch)

    def _failed(self, item: _Item, reason: str, sent: Sent | None) -> None:
        status, message = (sent.status, sent.message) if sent is not None else (0, "")
        hint = ": grant the requeue ClusterRole (patch pods)" if status == 403 else ""
        what = (
            "requeueing pod keeps failing" if reason == "retries_exhausted" else "cannot requeue pod" + hint
        )
        log.warning(
            what + "; trying again with backoff",
            extra={"pod": item.pod_key, "status": status, "error": message},
        )
        item.failed = True
        item.batch.failed += 1
        if self.metrics is not None:
            self.metrics.failed.labels(reason).inc()
        if item.batch.finished:
            self._log_batch(item.batch)

    def retrying(self, item: _Item, sent: Sent, delay: float) -> None:
        if self.metrics is not None:
            self.metrics.retries.inc()
        log.info(
            "requeue patch will be retried",
            extra={
                "pod": item.pod_key,
                "status": sent.status,
                "error": sent.message,
                "retryIn": round(delay, 3),
            },
        )

    def _log_batch(self, batch: _Batch) -> None:
        change = batch.change
        if batch.logged:
            return
        batch.logged = True
        log.info(
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
