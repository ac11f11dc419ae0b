"""Saying why a pod pends when its RuntimeClass fits no node (``serve --label-nodes``).

With the mode on, a pod of a class requires the class's label, so kube-scheduler's
NodeAffinity filter rules out every node without it before the extender is asked:
``FailedScheduling`` then reads "node(s) didn't match Pod's node affinity/selector"
and never names the class. When a class's node rules fit no node at all, this leader
actor writes one Warning event (``events.k8s.io/v1``) on each pending pod of the
class, naming it and saying why::

    RuntimeClass "gvisor": 0 of 2000 nodes match scheduling.nodeSelector runtime/pool=b

and when a pod requires the label of a class that was deleted (no node carries it any
more), one saying so, as the extender itself says it for a pod it is asked about::

    RuntimeClass "gvisor" not found (the pod requires its node label ...)

**At most one write per pod and class revision.** The event's name is derived from the
pod's uid and the revision of what decides the class's nodes
(``ClassLabels.rules_key``: an edit of the class's labels or annotations is no new
revision, and writes nothing), and it is created with POST: a second write for the
same pair (a new leader, a re-list) gets ``409 AlreadyExists`` and counts as done.
client-go's recorder dedupes on (type, action, reason, controller, instance, regarding,
related); this never writes a series at all, so a thousand pending pods are a thousand
events, each once, at the write queue's rate. A write refused (403, 422) is tried
again with backoff per event, never once per pass.

**Level-triggered**, like every leader actor: at the start of a term and after changes
(pods, classes, nodes; coalesced to one pass per ``interval``), the pods that should
carry an event are recomputed from the caches and each one not yet written is queued.
The pending pods come from the informer every actor that reads them shares
(``extender.cluster.pending_pods``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from extender import METRIC_PREFIX
from extender.cluster.class_labels import ClassLabels
from extender.cluster.class_revisions import revision_digest
from extender.cluster.pending_pod_informer import PendingPodInformer
from extender.cluster.pending_pods import PendingPod
from extender.cluster.state import ClusterState
from extender.kube.api import send
from extender.kube.informer import Informer
from extender.kube.store import Named
from extender.kube.times import format_micro_time
from extender.leader.actor import LeaderActor
from extender.leader.gate import LeaderGate
from extender.leader.writes import Sent, Sleep, WriteOptions, WriteQueue
from extender.tasks import run_all
from policies.objects import RuntimeClassView
from policies.registry import Policy

log = logging.getLogger("extender.labeller")

EVENTS = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
# events.k8s.io/v1 Event (staging/src/k8s.io/api/events/v1/types.go) and its validation
# (pkg/apis/core/validation/events.go): reportingController a qualified name, action,
# reason and reportingInstance at most 128 characters, note at most 1 kB.
REPORTING_CONTROLLER = "runtimeclass-extender.dev/node-labeller"
ACTION = "Scheduling"
REASON = "RuntimeClassFitsNoNode"
NOT_FOUND_REASON = "RuntimeClassNotFound"
ABSENT_VERSION = "absent"
MAX_NOTE = 1024
MAX_SHORT = 128
MAX_NAME = 253
EVENT_RESULTS = ("written", "existing", "failed")


@dataclass(frozen=True, slots=True)
class Due:
    """One event to write: on ``pod``, for ``class_name`` at ``class_version`` (the
    digest of what decides its nodes, or ``ABSENT_VERSION`` for a deleted class)."""

    pod: PendingPod
    class_name: str
    class_version: str
    note: str
    reason: str = REASON

    @property
    def event_name(self) -> str:
        digest = hashlib.sha256(
            f"{self.pod.uid}/{self.class_name}/{self.class_version}".encode()
        ).hexdigest()[:16]
        suffix = f".runtimeclass-{digest}"
        # A DNS subdomain: the pod's name (one itself) cut short, without a dangling
        # "-" or "." before the suffix.
        head = self.pod.pod_name[: MAX_NAME - len(suffix)].rstrip("-.")
        return head + suffix


@dataclass(frozen=True)
class EventOptions:
    # Events per second and bursts (a thousand pending pods: a thousand events, paced).
    rate: float = 10.0
    burst: int = 20
    # Longest wait between a change and the pass that looks at it.
    interval: float = 1.0
    request_timeout: float = 10.0
    # Longest backoff of one event's write after a failure or a refusal (403 until the
    # RBAC is granted): an event is worth less than the API server's quiet.
    retry_max: float = 300.0


class ClassEvents(LeaderActor):
    """Writes one Warning event per pending pod of a class that fits no node."""

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
        gate: LeaderGate | None = None,
        instance: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._api = api
        self.state = state
        self.gate = gate
        self.options = options = options or EventOptions()
        self.labels = ClassLabels(prefix, policy)
        self.instance = (instance or REPORTING_CONTROLLER)[:MAX_SHORT]
        # The informer of pending pods the actors share (its own when built alone).
        self.pod_informer = pending or PendingPodInformer(api, label_prefix=prefix)
        self.pods = self.pod_informer.pods
        self.writes: WriteQueue[Due] = WriteQueue(
            self,
            WriteOptions(rate=options.rate, burst=options.burst, retry_max=options.retry_max),
            clock=clock,
            sleep=sleep,
        )
        # Event names known to exist (written, or found existing), by pod uid: never
        # written again; forgotten when the pod leaves the pending set, so the map stays
        # as large as the pending pods.
        self.written: dict[str, set[str]] = {}
        self.counter: Counter | None = None
        self._wake = asyncio.Event()
        for store in (self.pods, state.nodes, state.runtime_classes):
            store.add_listener(self._changed)
        self.pods.add_listener(self._forget_gone)

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self.pod_informer,)

    def waiting(self) -> list[str]:
        return [*(f"{kind}: not listed yet" for kind in self.state.unsynced_kinds()), *super().waiting()]

    def register_metrics(self, registry: CollectorRegistry) -> None:
        self.counter = Counter(
            METRIC_PREFIX + "runtimeclass_events",
            "Warning events on pending pods whose RuntimeClass fits no node, or was deleted while "
            "they require its label (label-nodes), by "
            "result: written, existing (written before, by this replica or another), failed.",
            ["result"],
            registry=registry,
        )
        for result in EVENT_RESULTS:
            self.counter.labels(result)

    def _changed(self, _kind: str, _old: Named | None, _new: Named | None) -> None:
        self._wake.set()

    def _forget_gone(self, _kind: str, old: Named | None, new: Named | None) -> None:
        if isinstance(old, PendingPod) and (new is None or getattr(new, "uid", None) != old.uid):
            self.written.pop(old.uid, None)  # bound, deleted or replaced

    async def lead(self) -> None:
        await self.pods.wait_synced()
        await self.state.nodes.wait_synced()
        await self.state.runtime_classes.wait_synced()
        self._wake.set()
        try:
            await run_all(self.writes.run, self._pass_loop)
        finally:
            # The next term, here or elsewhere, recomputes the events owed.
            self.writes.clear()

    async def _pass_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            for due in self.due_events():
                if due.event_name not in self.written.get(due.pod.uid, ()):
                    self.writes.put(due)
            # Node events can arrive by the hundred a second: one pass per interval.
            await asyncio.sleep(self.options.interval)

    def due_events(self) -> list[Due]:
        """Every pending, schedulable pod of a class with node rules that fit no node,
        and every one requiring the label of a class that no longer exists."""
        by_class: dict[str, list[PendingPod]] = {}
        for pod in self.pods.values():
            if pod.schedulable:
                by_class.setdefault(pod.runtime_class_name, []).append(pod)
        nodes = self.state.nodes
        due: list[Due] = []
        for class_name, pods in by_class.items():
            runtime_class = self.state.runtime_classes.get(class_name)
            if runtime_class is None:
                key = self.labels.key(class_name)
                note = self._not_found_note(class_name, key)
                due.extend(
                    Due(pod, class_name, ABSENT_VERSION, note, NOT_FOUND_REASON)
                    for pod in pods
                    if key in pod.required
                )
                continue
            if not self._fits_no_node(runtime_class):
                continue
            note = self.note(runtime_class, len(nodes))
            version = self.version(runtime_class)
            due.extend(Due(pod, class_name, version, note) for pod in pods)
        return due

    def version(self, runtime_class: RuntimeClassView | None) -> str:
        """The revision of what decides the class's nodes (``ABSENT_VERSION``: deleted)."""
        if runtime_class is None:
            return ABSENT_VERSION
        return revision_digest(self.labels.rules_key(runtime_class))

    def _fits_no_node(self, runtime_class: RuntimeClassView) -> bool:
        labels = self.labels
        return labels.has_node_rules(runtime_class) and not labels.fits_any(
            runtime_class, self.state.nodes.values()
        )

    @staticmethod
    def _not_found_note(class_name: str, key: str) -> str:
        text = (
            f'RuntimeClass "{class_name}" not found (the pod requires its node label {key}, which the '
            "extender removed when the class was deleted; recreate the class, or delete the pod)"
        )
        return text if len(text) <= MAX_NOTE else text[: MAX_NOTE - 1] + "…"

    def note(self, runtime_class: RuntimeClassView, nodes: int) -> str:
        text = f'RuntimeClass "{runtime_class.name}": 0 of {nodes} nodes match {self.labels.describe(runtime_class)}'
        return text if len(text) <= MAX_NOTE else text[: MAX_NOTE - 1] + "…"

    # ----- the writes (extender.leader.writes.WriteHandler) -------------------------

    def key(self, item: Due) -> str:
        return item.event_name

    def due(self, item: Due) -> str | None:
        current = self.pods.get(item.pod.name)
        if current is None or current.uid != item.pod.uid or not current.schedulable:
            return "not_pending"
        runtime_class = self.state.runtime_classes.get(item.class_name)
        if self.version(runtime_class) != item.class_version:
            return "class_changed"  # the next pass says what holds now
        if runtime_class is not None and not self._fits_no_node(runtime_class):
            return "fits_now"
        return None

    def content(self, item: Due) -> Hashable:
        return (item.event_name, item.reason, item.note)

    async def send(self, item: Due) -> Sent:
        pod = item.pod
        event = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": item.event_name, "namespace": pod.namespace},
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
        sent = await send(
            self._api,
            "POST",
            EVENTS,
            path_params={"namespace": pod.namespace},
            body=event,
            content_type="application/json",
            timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
        )
        if sent.status == HTTPStatus.CONFLICT:
            # AlreadyExists: the same pod and class revision, written before (by this
            # replica or a predecessor). Done, not a conflict to retry.
            return Sent(HTTPStatus.OK, "already exists")
        return sent

    def settle(self, item: Due, outcome: str, *, reason: str = "", sent: Sent | None = None) -> None:
        if outcome == "sent":
            current = self.pods.get(item.pod.name)
            if current is not None and current.uid == item.pod.uid:  # else forgotten already
                self.written.setdefault(item.pod.uid, set()).add(item.event_name)
            existing = sent is not None and sent.message == "already exists"
            if self.counter is not None:
                self.counter.labels("existing" if existing else "written").inc()
            if not existing:
                log.info(
                    "pending pod's RuntimeClass fits no node",
                    extra={"pod": item.pod.name, "runtimeClass": item.class_name, "note": item.note},
                )
        elif outcome == "failed":
            status, message = (sent.status, sent.message) if sent is not None else (0, "")
            log.warning(
                "cannot write the event"
                + (": grant create on events.k8s.io events" if status == 403 else ""),
                extra={"pod": item.pod.name, "status": status, "error": message, "reason": reason},
            )
            if self.counter is not None:
                self.counter.labels("failed").inc()

    def retrying(self, item: Due, sent: Sent, delay: float) -> None:
        # Debug: a refusal was logged once, as a warning, when its streak began.
        log.debug(
            "event write will be retried",
            extra={
                "pod": item.pod.name,
                "status": sent.status,
                "error": sent.message,
                "retryIn": round(delay, 3),
            },
        )
