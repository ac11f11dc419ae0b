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

It is a controller (``extender.leader.controller``), level-triggered:

- every replica follows, from the shared informer of pending pods
  (``extender.cluster.pending_pods``) and the RuntimeClass store, what each pending pod
  was last tried against and what its class is now (``extender.requeue.planner``, pure);
- its keys are pods' (the pending-pod store's, ``namespace/name``). Its pass
  (``resync``) runs at the start of every term, and a RuntimeClass change asks for one
  within ``window`` seconds (``resync(after=window)``: every change until then joins
  that one pass, which never waits behind the nudges already queued); it asks the
  planner which pods are due a nudge and adds their keys. A pod's reconcile
  reads the pod as it is at its turn and asks the planner for the nudge it is due
  then, which it writes, or says why there is none (``not_pending``,
  ``already_nudged``, ``recreated``). Followers add nothing (the queue runs only in a
  term), and a pod's own event adds nothing: an update of the pod is itself what moves
  it to the scheduler's active queue, and the passes find every pod due;
- the controller's ``WorkQueue`` makes the patches: at most ``rate`` per second (token
  bucket with a small burst), one reconcile per pod at a time, tried again with
  backoff on 409, 429 (honouring Retry-After, which also pauses every other patch),
  5xx, connection errors and timeouts; a refusal (a 403 until the RBAC is granted) is
  said once, one pod probing while the others wait (``extender.leader.refusal``).

One line per RuntimeClass change says how many of its pending pods were requeued
("RuntimeClass updated: requeued 3 pending pod(s)"), once each nudge the pass queued
has ended; counters say how each ended (``extender.requeue.metrics``).

Races and how they are closed:

- The first LIST of RuntimeClasses is the baseline, not a change: the pods pending at
  start were already tried against those classes. (A class created while the extender
  was down is therefore not noticed as new; such pods wait for the scheduler's own
  periodic retry, as without this feature.)
- A pod bound or deleted before its turn: its reconcile finds it gone from the
  informer and writes nothing (``not_pending``); the same after the wait for the rate
  limit, which may be long. If the informer lags, the PATCH itself answers 404
  (``deleted``) or, for a pod recreated under the same name, is refused by the uid
  guard; the 409 is retried, and the retry finds the pod now under the name: nudged
  if it is due itself, else skipped (``recreated``). A bound pod that the informer has not yet dropped may still get its
  annotation: harmless.
- Never twice for one class revision: a nudge is for the revision of the moment it is
  sent, and the planner remembers it until the pod shows it.
- Two nudges in one second must differ, or the second patch is a no-op the scheduler
  never sees: the timestamp carries microseconds.
- With leader election (``serve --leader-elect``; ``election``) each nudge also writes
  ``REVISION_ANNOTATION`` (the digest of the class revision) and carries the pod's
  resourceVersion as a precondition: a replica that takes the lead over reads from the
  pods which nudges its predecessor sent, and a patch that reaches the API server late
  (sent by a leader just cut off, delivered after its successor nudged the pod) fails
  with 409 instead of nudging twice (its retry finds the pod nudged:
  ``already_nudged``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
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
from extender.kube.store import Named, Store
from extender.leader.controller import Controller, WriteLog
from extender.leader.limits import Sleep, WriteLimiter
from extender.leader.results import Done, Failed, Report, Result, Retry, Sent, Unchanged, Write
from extender.leader.workqueue import WriteOptions
from extender.leader.writes import Turn
from extender.requeue.metrics import RequeueMetrics
from extender.requeue.nudge import merge_patch, requeued_at
from extender.requeue.planner import ClassChange, Nudge, RequeuePlanner
from extender.settings import DEFAULT_REQUEUE_RATE, DEFAULT_REQUEUE_WINDOW, DEFAULT_SCHEDULER_NAMES
from policies.objects import RuntimeClassView

log = logging.getLogger("extender.requeue")


@dataclass(frozen=True, kw_only=True)
class RequeueOptions(WriteOptions):
    scheduler_names: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES
    # Seconds from the first RuntimeClass change until the nudges are planned.
    window: float = DEFAULT_REQUEUE_WINDOW
    # Patches per second, with bursts of up to ``burst`` (the attempts before a failure
    # is said, and the backoff between them, are the queue's defaults).
    rate: float = DEFAULT_REQUEUE_RATE
    burst: int = 5
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
class _Planned:
    """A pod key a pass queued, until its nudge ends (reporting only: what is written
    is decided from the state when the key's turn comes)."""

    batch: _Batch
    # The pod the pass found under the key: another one there later, not due, is a
    # pod recreated under the same name (the skip reason).
    uid: str
    # Said failed (once): a later end no longer counts in the batch.
    failed: bool = False


WRITE_LOG = WriteLog(
    log,
    subject="pod",
    failing="cannot requeue pod",
    exhausted="requeueing pod keeps failing",
    suffix="; trying again with backoff",
    retrying="requeue patch will be retried",
    hints={403: ": grant the requeue ClusterRole (patch pods)"},
    retry_level=logging.INFO,
)


class Requeuer(Controller[str]):
    """Nudges the unscheduled pods naming a RuntimeClass that changed. See the module doc.

    Build it before the cluster watch starts (so it hears the RuntimeClasses' first
    LIST) and run it with ``extender.leader.runner.LeaderRunner``. ``election``: the
    replicas elect a leader (``serve --leader-elect``), so each nudge also names its
    class revision and is guarded by the pod's resourceVersion (see the module doc).
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
        election: bool = False,
        limiter: WriteLimiter | None = None,
    ) -> None:
        self.options: RequeueOptions = options or RequeueOptions()
        super().__init__(self.options, clock=clock, sleep=sleep, limiter=limiter)
        self._api = api
        self.election = election
        # The informer of pending pods the actors share (its own when built alone).
        self.pod_informer = pending or PendingPodInformer(api, options=self.options.reflector)
        self.pods = self.pod_informer.pods
        self.planner = RequeuePlanner(self.options.scheduler_names)
        self.metrics: RequeueMetrics | None = None
        # The pods the requeuer nudges (ours, schedulable), for the gauge.
        self._ours = 0
        # The pod keys this term's passes queued whose nudge has not ended yet, for the
        # summary lines (reporting only; nothing sent is kept).
        self._planned: dict[str, _Planned] = {}
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

    # ----- the actor ----------------------------------------------------------------

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self.pod_informer,)

    @property
    def reads(self) -> Sequence[Store[Any]]:
        # The RuntimeClasses' first LIST is the planner's baseline.
        return (self._classes, *super().reads)

    @property
    def queued(self) -> int:
        """Nudges waiting for their turn, for a retry, or held by a refusal."""
        return len(self.queue)

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

    def starting(self) -> None:
        # Both stores are listed: the classes' baseline is what they hold now, unless a
        # change fixed it already.
        self.planner.baseline_listed()

    def stopped(self) -> None:
        # The queue forgets its keys with the term; their summary lines go with them.
        self._planned.clear()

    # ----- listeners: what every replica observes -----------------------------------

    def _class_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        current = new if new is not None else old
        if current is None:
            return
        view = new if isinstance(new, RuntimeClassView) else None
        # Store.replace sets synced after notifying: during the first LIST it is False.
        initial = not self._classes.synced
        if not initial:
            self.planner.baseline_listed()  # before this change: the first LIST as it was
        if self.planner.observe_class(current.name, scheduling_revision(view), initial=initial):
            # Coalesce: every change until the window closes joins one pass. (Nothing
            # while following: the next term starts with a pass.)
            self.queue.resync(self.options.window)

    def _pod_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        # What the planner knows of the pod. No key: an update of the pod is itself what
        # moves it to the scheduler's active queue, and the passes find every pod due.
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

    # ----- reconciling --------------------------------------------------------------

    async def resync(self) -> None:
        self._pass()

    async def reconcile(self, key: str, turn: Turn) -> Result:
        result = await turn.write(partial(self._nudge, key))
        if isinstance(result, Done) and result.write is not None:
            nudge: Nudge = result.write.detail  # type: ignore[assignment]
            self.planner.done(nudge)  # the pod was last tried against its revision
        return result

    def _pass(self) -> None:
        """Queue every pod due a nudge; count each class change's pods for its line."""
        plan = self.planner.plan(self.pods.values())
        batches = {change.class_name: _Batch(change, 0, 0) for change in plan.changes}
        for nudge in plan.nudges:
            key = nudge.pod.name
            if key in self._planned:
                continue  # still queued from an earlier pass, and counted in its batch
            batch = batches.get(nudge.class_name)
            if batch is None:  # owed from before this term: a new leader's leftovers
                current = nudge.revision
                batch = batches[nudge.class_name] = _Batch(
                    ClassChange(nudge.class_name, current, current), 0, 0
                )
            batch.total += 1
            self._planned[key] = _Planned(batch, nudge.pod.uid)
        for nudge in plan.already_nudged:
            batches[nudge.class_name].already_nudged += 1
        if self.metrics is not None and plan.already_nudged:
            self.metrics.skipped.labels("already_nudged").inc(len(plan.already_nudged))
        for batch in batches.values():
            if batch.total == 0 and batch.change.kind != "resumed":
                self._log_batch(batch)
        for nudge in plan.nudges:
            self.queue.add(nudge.pod.name)

    def _nudge(self, key: str) -> Write | Unchanged:
        """The nudge the pod under ``key`` is due now (the ``detail``), or why none."""
        pod: PendingPod | None = self.pods.get(key)
        if pod is None:
            return Unchanged("not_pending")  # bound or deleted
        nudge = self.planner.due(pod)
        if nudge is None:
            planned = self._planned.get(key)
            if planned is not None and planned.uid != pod.uid:
                # Another pod under the name (the uid guard refused the old one's
                # patch; this one is not due).
                return Unchanged("recreated")
            return Unchanged("already_nudged")  # by another replica, or changed back
        # The class revision the nudge names (a nudge undone is due the same one again).
        return Write(nudge.digest, partial(self._send, nudge), detail=nudge)

    async def _send(self, nudge: Nudge) -> Sent:
        """One PATCH (module doc)."""
        pod = nudge.pod
        # Only with leader election: without it the patch stays one annotation, and the
        # pod's resourceVersion (the informer's, now) is not a precondition.
        revision = nudge.digest if self.election else None
        return await send(
            self._api,
            "PATCH",
            "/api/v1/namespaces/{namespace}/pods/{name}",
            path_params={"namespace": pod.namespace, "name": pod.pod_name},
            body=merge_patch(pod, requeued_at(), revision),
            content_type="application/merge-patch+json",
            timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
        )

    # ----- reporting ----------------------------------------------------------------

    def report(self, key: str, report: Report) -> None:
        """Count a nudge's end: sent, skipped (the reason) or failed (once per streak,
        once for a refusal: it is tried again while due, and its later end is counted
        too)."""
        result, metrics = report.result, self.metrics
        planned = self._planned.get(key)
        if isinstance(result, Failed):
            WRITE_LOG(key, report)
            if metrics is not None:
                metrics.retries.inc()
                if report.failure:
                    metrics.failed.labels(report.failure).inc()
            if report.failure and planned is not None and not planned.failed:
                planned.failed = True
                planned.batch.failed += 1
                self._log_batch_if_finished(planned.batch)
            return
        if isinstance(result, Retry):
            return  # damped: the pod's turn comes again
        self._planned.pop(key, None)
        if isinstance(result, Done) and result.write is not None:
            nudge: Nudge = result.write.detail  # type: ignore[assignment]
            log.debug("requeued pod", extra={"pod": key, "runtimeClass": nudge.class_name})
            if metrics is not None:
                metrics.sent.inc()
            if planned is not None:
                planned.batch.sent += not planned.failed
        elif isinstance(result, Unchanged) and planned is not None:
            # Only a planned nudge is skipped: a key reconciled again after its nudge
            # ended (added while in flight) finds it done.
            if metrics is not None:
                metrics.skipped.labels(result.reason).inc()
            planned.batch.skipped += not planned.failed
        if planned is not None:
            self._log_batch_if_finished(planned.batch)

    def _log_batch_if_finished(self, batch: _Batch) -> None:
        if batch.finished:
            self._log_batch(batch)

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
