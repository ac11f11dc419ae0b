"""Saying why a pod of a RuntimeClass pends, naming the class (``serve --label-nodes``).

With the mode on, a pod of a class requires the class's label, so kube-scheduler's
NodeAffinity filter rules out every node without it before the extender is asked, and
with the default-scheduler placement no extender is asked at all: ``FailedScheduling``
then reads "node(s) didn't match Pod's node affinity/selector" and never names the
class. This leader actor writes one Warning event (``events.k8s.io/v1``) on each
pending pod of a class that says why, naming the class (what is owed is
``extender.labeller.event_decisions``): when the class's node rules fit no node::

    RuntimeClass "gvisor": 0 of 2000 nodes match scheduling.nodeSelector runtime/pool=b

when nodes run the class and kube-scheduler found none of them can take the pod::

    RuntimeClass "gvisor": 3 of 2000 nodes can run it, and kube-scheduler found none of them can take the pod (kube-scheduler: 0/2000 nodes are available: 3 Insufficient cpu, 1997 node(s) didn't match ...)

and when a pod requires the label of a class that was deleted (no node carries it any
more), one saying so, as the extender itself says it for a pod it is asked about::

    RuntimeClass "gvisor" not found (the pod requires its node label ...)

**A controller** (``extender.leader.controller``), level-triggered. Which pods are
owed an event and what it says is decided in ``extender.labeller.event_decisions``
(pure); this module holds the keys, the listeners and the writes:

- its pass (``resync``) over every pending pod: the pass a term starts with, and the
  one every change of a pod, a node or a class asks for, ``resync(after=interval)``
  (one pass per ``interval`` however many changes; node events come by the hundred a
  second). It adds the key of each event owed that is not known to exist.
- its keys, ``PodEvent(pod, runtime_class)``: one pod's event for its class. A key
  carries no state: its reconcile reads the pod and the class as they are *now*,
  decides whether an event is due and what it says, and writes it through the queue
  (``Turn.write``, which asks again after a wait for the rate limit). A pod bound,
  deleted or held back meanwhile, or a class that fits a node now, writes nothing.

**At most one write per pod and class revision.** The event's name is derived from the
pod's uid and the revision of what decides the class's nodes
(``ClassLabels.rules_key``: an edit of the class's labels or annotations is no new
revision, and writes nothing), and it is created with POST: a second write for the
same pair (a new leader, a re-list) is answered ``409 AlreadyExists``, which the
reconcile reads as done (counted ``existing``). The events known to exist (written, or
found existing) are kept per pod uid while the pod pends, each by what its name holds
besides the pod (``Event.key``: class, revision, reason), so a pass queues nothing for
them and hashes no name to know it. client-go's recorder dedupes on (type, action,
reason, controller, instance, regarding, related); this never writes a series at all,
so a thousand pending pods are a thousand events, each once, at the queue's rate. A
write refused (403, 422) is tried again with the key's backoff, never once per pass; a
refusal is said once for the actor, one event probing while the others wait
(``extender.leader.refusal``). The queue owns the term: a new term starts from the
caches, a follower queues nothing, and on shutdown while leading the events queued get
``drain_timeout``. The pending pods come from the informer every actor that reads them
shares (``extender.cluster.pending_pods``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from extender import METRIC_PREFIX
from extender.cluster.class_labels import ClassLabels
from extender.cluster.pending_pod_informer import PendingPodInformer
from extender.cluster.pending_pods import PendingPod
from extender.cluster.state import ClusterState
from extender.kube.api import send
from extender.kube.informer import Informer
from extender.kube.store import Named, Store
from extender.kube.times import format_micro_time
from extender.labeller.event_decisions import REASON, Event, EventDecisions, event_name
from extender.leader.controller import Controller, WriteLog
from extender.leader.limits import Sleep, WriteLimiter
from extender.leader.results import Done, Failed, Report, Result, Sent, Unchanged, Write
from extender.leader.workqueue import WriteOptions
from extender.leader.writes import Turn
from policies.registry import Policy

__all__ = ["REASON", "REPORTING_CONTROLLER", "ClassEvents", "EventOptions", "PodEvent", "event_name"]

log = logging.getLogger("extender.labeller")

EVENTS = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
# events.k8s.io/v1 Event (pkg/apis/core/validation/events.go): reportingController a
# qualified name, action and reportingInstance at most 128 characters.
REPORTING_CONTROLLER = "runtimeclass-extender.dev/node-labeller"
ACTION = "Scheduling"
MAX_SHORT = 128
EVENT_RESULTS = ("written", "existing", "failed")


@dataclass(frozen=True)
class PodEvent:
    """The key of one pod's event for its class: ``pod`` its store key
    (namespace/name). Everything the event says is read when its turn comes."""

    pod: str
    runtime_class: str


def _event_of(write: Write) -> Event:
    """The event a ``Write`` of this actor made (its ``detail``)."""
    event = write.detail
    assert isinstance(event, Event)
    return event


@dataclass(frozen=True, kw_only=True)
class EventOptions(WriteOptions):
    # Events per second and bursts (a thousand pending pods: a thousand events, paced).
    rate: float = 10.0
    burst: int = 20
    # Longest wait between a change and the pass that looks at it.
    interval: float = 1.0
    request_timeout: float = 10.0
    # Longest backoff of one event's write after a failure: an event is worth less than
    # the API server's quiet.
    retry_max: float = 300.0


WRITE_LOG = WriteLog(
    log,
    subject="pod",
    failing="cannot write the event",
    retrying="event write will be retried",
    hints={403: ": grant create on events.k8s.io events"},
)


class ClassEvents(Controller[PodEvent]):
    """Writes one Warning event per pending pod of a class, and class revision, saying why it pends."""

    name = "runtimeclass-events"

    def __init__(
        self,
        api: Any,
        state: ClusterState,
        policy: Policy,
        *,
        prefix: str,
        pending: PendingPodInformer | None = None,
        options: EventOptions | None = None,
        instance: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        limiter: WriteLimiter | None = None,
    ) -> None:
        self.options: EventOptions = options or EventOptions()
        super().__init__(self.options, clock=clock, sleep=sleep, limiter=limiter)
        self._api = api
        self.state = state
        self.labels = ClassLabels(prefix, policy)
        self.instance = (instance or REPORTING_CONTROLLER)[:MAX_SHORT]
        # The informer of pending pods the actors share (its own when built alone).
        self.pod_informer = pending or PendingPodInformer(api, label_prefix=prefix)
        self.pods = self.pod_informer.pods
        # Events known to exist (written, or found existing), by pod uid, each by its
        # ``Event.key`` (with the uid, its name): never written again; forgotten when the
        # pod leaves the pending set, so the map stays as large as the pending pods.
        self.written: dict[str, set[tuple[str, str, str]]] = {}
        self.counter: Counter | None = None
        self.decisions = EventDecisions(self.labels, state.nodes, state.runtime_classes, self.pods)
        state.nodes.add_listener(self._changed)
        state.runtime_classes.add_listener(self._changed)
        self.pods.add_listener(self._pod_changed)

    # ----- the actor ----------------------------------------------------------------

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self.pod_informer,)

    @property
    def reads(self) -> Sequence[Store[Any]]:
        return (self.state.nodes, self.state.runtime_classes, *super().reads)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        self.counter = Counter(
            METRIC_PREFIX + "runtimeclass_events",
            "Warning events on pending pods of a RuntimeClass, saying why they pend (label-nodes): its "
            "class fits no node, no node of its class can take it, or its class was deleted while it "
            "requires its label; by "
            "result: written, existing (written before, by this replica or another), failed.",
            ["result"],
            registry=registry,
        )
        for result in EVENT_RESULTS:
            self.counter.labels(result)

    # ----- listeners: every change is a pass, coalesced -------------------------------

    def _changed(self, _kind: str, _old: Named | None, _new: Named | None) -> None:
        self.queue.resync(self.options.interval)

    def _pod_changed(self, kind: str, old: Named | None, new: Named | None) -> None:
        if isinstance(old, PendingPod) and (new is None or getattr(new, "uid", None) != old.uid):
            self.written.pop(old.uid, None)  # bound, deleted or replaced
        self._changed(kind, old, new)

    def _known(self, event: Event) -> bool:
        return event.key in self.written.get(event.pod.uid, ())

    # ----- reconciling --------------------------------------------------------------

    async def resync(self) -> None:
        for due in self.decisions.due_events():
            if not self._known(due):
                self.queue.add(PodEvent(due.pod.name, due.class_name))

    async def reconcile(self, key: PodEvent, turn: Turn) -> Result:
        result = await turn.write(partial(self._write, key))
        if (
            isinstance(result, Failed)
            and result.write is not None
            and result.sent.status == HTTPStatus.CONFLICT
        ):
            # AlreadyExists: the name is the pod's and the class revision's, so it was
            # written before (by this replica or a predecessor). Done, nothing to retry.
            result = Done(result.write, result.sent, note="existing")
        if isinstance(result, Done) and result.write is not None:
            event = _event_of(result.write)
            current = self.pods.get(event.pod.name)
            if current is not None and current.uid == event.pod.uid:  # else forgotten already
                self.written.setdefault(event.pod.uid, set()).add(event.key)
        return result

    def _write(self, key: PodEvent) -> Write | Unchanged:
        """The pod's event as things are now (the ``detail``), or why there is none."""
        pod = self.pods.get(key.pod)
        if pod is None:
            return Unchanged("not_pending")
        event = self.decisions.event_due(pod, key.runtime_class)
        if event is None:
            return Unchanged("not_due")
        if self._known(event):
            return Unchanged("exists")
        return Write((event.name, event.reason, event.note), partial(self._send, event), detail=event)

    async def _send(self, item: Event) -> Sent:
        pod = item.pod
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": item.name, "namespace": pod.namespace},
            "eventTime": format_micro_time(),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": ACTION,
            "reason": item.reason,
            "type": "Warning",
            "note": item.note,
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.pod_name,
                "uid": pod.uid,
            },
        }
        return await send(
            self._api,
            "POST",
            EVENTS,
            path_params={"namespace": pod.namespace},
            body=body,
            content_type="application/json",
            timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
        )

    def report(self, key: PodEvent, report: Report) -> None:
        result, counter = report.result, self.counter
        if isinstance(result, Done) and result.write is not None:
            existing = result.note == "existing"
            if counter is not None:
                counter.labels("existing" if existing else "written").inc()
            if not existing:
                event = _event_of(result.write)
                log.info(
                    "pending pod of a RuntimeClass told why",
                    extra={"pod": key.pod, "runtimeClass": event.class_name, "note": event.note},
                )
        elif isinstance(result, Failed):
            WRITE_LOG(key.pod, report, runtimeClass=key.runtime_class)
            if counter is not None and report.failure:
                counter.labels("failed").inc()
