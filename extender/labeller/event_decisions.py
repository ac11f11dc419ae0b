"""What the pending-pod events say and on which pods: the decisions of ``events.py``, pure.

With ``serve --label-nodes`` a pod of a class requires the class's label, so when the
class's node rules fit no node (or the class is gone while a pod requires its label)
kube-scheduler's ``FailedScheduling`` cannot name the class. ``ClassEvents``
(``extender.labeller.events``) writes one Warning event per such pod; this module
decides, from the stores as they are, which pods are owed one and what it says:

- ``EventDecisions.due_events``: every event owed now, the pending schedulable pods
  grouped by class and each class checked once (its node rules fit no node, or it was
  deleted while the pod requires its label);
- ``EventDecisions.event_due``: the one event a pod is owed now for a class, or None;
- ``event_name``: one name per pod (by uid) and class revision (the digest of what
  decides the class's nodes, ``ClassLabels.rules_key``; ``ABSENT_VERSION`` for a
  deleted class), so a second write of the same event is answered 409 AlreadyExists.

Whether each class fits no node is kept per generation of the node and class stores: a
pass asks once per class and each event's reconcile asks again, so the nodes are looked
over once per class until something changes. No I/O: the events actor reads the stores
through it and writes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from extender.cluster.class_labels import ClassLabels
from extender.cluster.class_revisions import revision_digest
from extender.cluster.pending_pods import PendingPod
from extender.kube.store import Store
from policies.objects import NodeView, RuntimeClassView

__all__ = ["ABSENT_VERSION", "NOT_FOUND_REASON", "REASON", "Event", "EventDecisions", "event_name"]

# events.k8s.io/v1 Event (staging/src/k8s.io/api/events/v1/types.go) and its validation
# (pkg/apis/core/validation/events.go): reason at most 128 characters, note at most 1 kB.
REASON = "RuntimeClassFitsNoNode"
NOT_FOUND_REASON = "RuntimeClassNotFound"
ABSENT_VERSION = "absent"
MAX_NOTE = 1024
MAX_NAME = 253


def event_name(pod: PendingPod, class_name: str, class_version: str) -> str:
    """The event's name: one per pod (by uid) and class revision, a DNS subdomain."""
    digest = hashlib.sha256(f"{pod.uid}/{class_name}/{class_version}".encode()).hexdigest()[:16]
    suffix = f".runtimeclass-{digest}"
    # The pod's name (a DNS subdomain itself) cut short, without a dangling "-" or "."
    # before the suffix.
    head = pod.pod_name[: MAX_NAME - len(suffix)].rstrip("-.")
    return head + suffix


@dataclass(frozen=True)
class Event:
    """One event as decided from the state of that moment: on ``pod``, for
    ``class_name`` at ``class_version`` (the digest of what decides its nodes, or
    ``ABSENT_VERSION`` for a deleted class)."""

    pod: PendingPod
    class_name: str
    class_version: str
    note: str
    reason: str = REASON

    @property
    def name(self) -> str:
        return event_name(self.pod, self.class_name, self.class_version)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_NOTE else text[: MAX_NOTE - 1] + "…"


class EventDecisions:
    """Which pending pods are owed an event, and what it says (see the module doc)."""

    def __init__(
        self,
        labels: ClassLabels,
        nodes: Store[NodeView],
        classes: Store[RuntimeClassView],
        pods: Store[PendingPod],
    ) -> None:
        self.labels = labels
        self.nodes = nodes
        self.classes = classes
        self.pods = pods
        self._fits_for: tuple[int, int] | None = None
        self._fits_none: dict[str, bool] = {}

    def due_events(self) -> list[Event]:
        """Every event owed now (known to exist or not)."""
        by_class: dict[str, list[PendingPod]] = {}
        for pod in self.pods.values():
            if pod.schedulable:
                by_class.setdefault(pod.runtime_class_name, []).append(pod)
        due: list[Event] = []
        for class_name, pods in by_class.items():
            owed = self._owed(class_name)
            if owed is not None:
                due.extend(event for pod in pods if (event := self._event(pod, *owed)) is not None)
        return due

    def event_due(self, pod: PendingPod, class_name: str) -> Event | None:
        """The event ``pod`` is owed now for ``class_name`` (None: none)."""
        if not pod.schedulable or pod.runtime_class_name != class_name:
            return None
        owed = self._owed(class_name)
        return None if owed is None else self._event(pod, *owed)

    def version(self, runtime_class: RuntimeClassView | None) -> str:
        """The revision of what decides the class's nodes (``ABSENT_VERSION``: deleted)."""
        if runtime_class is None:
            return ABSENT_VERSION
        return revision_digest(self.labels.rules_key(runtime_class))

    def note(self, runtime_class: RuntimeClassView, nodes: int) -> str:
        return _cut(
            f'RuntimeClass "{runtime_class.name}": 0 of {nodes} nodes match {self.labels.describe(runtime_class)}'
        )

    @staticmethod
    def not_found_note(class_name: str, key: str) -> str:
        return _cut(
            f'RuntimeClass "{class_name}" not found (the pod requires its node label {key}, which the '
            "extender removed when the class was deleted; recreate the class, or delete the pod)"
        )

    def _owed(self, class_name: str) -> tuple[RuntimeClassView | None, str] | None:
        """What the pods of ``class_name`` are owed now: the class (None: deleted) and
        the note; None when the class fits some node."""
        runtime_class = self.classes.get(class_name)
        if runtime_class is None:
            return None, self.not_found_note(class_name, self.labels.key(class_name))
        if self._fits_no_node(runtime_class):
            return runtime_class, self.note(runtime_class, len(self.nodes))
        return None

    def _event(self, pod: PendingPod, runtime_class: RuntimeClassView | None, note: str) -> Event | None:
        class_name = pod.runtime_class_name
        if runtime_class is None:
            if self.labels.key(class_name) not in pod.required:
                return None  # the class is gone, and nothing of it holds the pod back
            return Event(pod, class_name, ABSENT_VERSION, note, NOT_FOUND_REASON)
        return Event(pod, class_name, self.version(runtime_class), note)

    def _fits_no_node(self, runtime_class: RuntimeClassView) -> bool:
        stamp = (self.nodes.generation, self.classes.generation)
        if stamp != self._fits_for:
            self._fits_for, self._fits_none = stamp, {}
        found = self._fits_none.get(runtime_class.name)
        if found is None:
            labels = self.labels
            found = labels.has_node_rules(runtime_class) and not labels.fits_any(
                runtime_class, self.nodes.values()
            )
            self._fits_none[runtime_class.name] = found
        return found
