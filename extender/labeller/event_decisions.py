"""What the pending-pod events say and on which pods: the decisions of ``events.py``, pure.

With ``serve --label-nodes`` a pod of a class requires the class's label, so
kube-scheduler's NodeAffinity filter rules out every node without it, and
``FailedScheduling`` counts them as "node(s) didn't match Pod's node affinity/selector":
it never names the class. ``ClassEvents`` (``extender.labeller.events``) writes one
Warning event per pending pod of a class that says why, naming the class; this module
decides, from the stores as they are, which pods are owed one and what it says:

- ``RuntimeClassFitsNoNode``: the class's node rules fit no node at all (written as
  soon as the pod pends);
- ``RuntimeClassNotFound``: the class was deleted while the pod requires its label;
- ``RuntimeClassNodesUnavailable``: nodes can run the class, and kube-scheduler found
  none of them can take the pod (its PodScheduled condition says Unschedulable): how
  many nodes can run the class, kube-scheduler's own reasons, and what of the pod
  keeps it off them that pod admission would have given it (the class's label
  requirement, its tolerations: a pod admitted before its class was in the table,
  before the mode, or opted out).

- ``EventDecisions.due_events``: every event owed now, the pending schedulable pods
  grouped by class and what depends on the class alone decided once per class (its
  revision's digest kept until the class store changes); an event's note is made when
  first read, so a pass, which reads each event's ``key`` alone, makes none;
- ``EventDecisions.event_due``: the one event a pod is owed now for a class, or None;
- ``event_name``: one name per pod (by uid), class revision (the digest of what
  decides the class's nodes, ``ClassLabels.rules_key``; ``ABSENT_VERSION`` for a
  deleted class) and reason, so a second write of the same event is answered 409
  AlreadyExists: at most one event of each reason per pod and class revision, however
  kube-scheduler's reasons change meanwhile. ``Event.key``, what of the name is not the
  pod's, tells a pod's events apart without hashing.

How many nodes pass each class's node rules is kept up under changes
(``FittingNodes``): counted over every node once per class, when first asked and after
the class changes, then moved by each node event (that node re-judged for each class
counted). A pass asks once per class and each event's reconcile asks again; node
events come by the hundred a second on a large cluster, and a recount of every node
for every class at each pass after one of them cost 0.2 to 0.4 s at 15,000 nodes and
10 classes, all of it on the loop that serves ``/filter`` and the webhooks
(bench/events_pass_bench.py). The rest of a pass is per pod, and kept small: at 10,000
pending pods owed a RuntimeClassNodesUnavailable event, building each one's note and
digesting its class's revision for each pod made a pass 131 ms (the same bench). No
I/O: the events actor reads the stores through it and writes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property, partial

from extender.admission.pod_review import covers
from extender.admission.pod_table import pod_tolerations
from extender.cluster.class_labels import ClassLabels
from extender.cluster.class_revisions import revision_digest
from extender.cluster.pending_pods import PendingPod
from extender.kube.store import Named, Store
from policies.objects import NodeView, RuntimeClassView, Toleration

__all__ = [
    "ABSENT_VERSION",
    "NOT_FOUND_REASON",
    "REASON",
    "UNAVAILABLE_REASON",
    "Event",
    "EventDecisions",
    "FittingNodes",
    "event_name",
]

# events.k8s.io/v1 Event (staging/src/k8s.io/api/events/v1/types.go) and its validation
# (pkg/apis/core/validation/events.go): reason at most 128 characters, note at most 1 kB.
REASON = "RuntimeClassFitsNoNode"
NOT_FOUND_REASON = "RuntimeClassNotFound"
UNAVAILABLE_REASON = "RuntimeClassNodesUnavailable"
ABSENT_VERSION = "absent"
MAX_NOTE = 1024
MAX_NAME = 253


def event_name(pod: PendingPod, class_name: str, class_version: str, reason: str = REASON) -> str:
    """The event's name: one per pod (by uid), class revision and reason, a DNS subdomain
    (the first two reasons' names are as they always were)."""
    which = "" if reason in (REASON, NOT_FOUND_REASON) else f"/{reason}"
    digest = hashlib.sha256(f"{pod.uid}/{class_name}/{class_version}{which}".encode()).hexdigest()[:16]
    suffix = f".runtimeclass-{digest}"
    # The pod's name (a DNS subdomain itself) cut short, without a dangling "-" or "."
    # before the suffix.
    head = pod.pod_name[: MAX_NAME - len(suffix)].rstrip("-.")
    return head + suffix


@dataclass(eq=False)
class Event:
    """One event as decided from the state of that moment: on ``pod``, for
    ``class_name`` at ``class_version`` (the digest of what decides its nodes, or
    ``ABSENT_VERSION`` for a deleted class). ``says`` is its note, or what makes it
    from the pod when first read (``note``, from the stores as they are then, and
    kept): a pass decides every pending pod's event and reads the note of none. Equal
    to an event on the same pod, for the same class revision and reason, that says the
    same.

    Never changed once made, but not a frozen dataclass: its ``__init__`` (an
    ``object.__setattr__`` per field) cost 1.3 µs an event, most of a pass at 10,000
    pending pods (bench/events_pass_bench.py)."""

    pod: PendingPod
    class_name: str
    class_version: str
    says: str | Callable[[PendingPod], str]
    reason: str = REASON

    @cached_property
    def note(self) -> str:
        return self.says if isinstance(self.says, str) else self.says(self.pod)

    @cached_property
    def name(self) -> str:
        return event_name(self.pod, self.class_name, self.class_version, self.reason)

    @property
    def key(self) -> tuple[str, str, str]:
        """What the name holds besides the pod: with the pod's uid, the name."""
        return self.class_name, self.class_version, self.reason

    def _value(self) -> tuple[PendingPod, str, str, str, str]:
        return self.pod, self.class_name, self.class_version, self.reason, self.note

    def __eq__(self, other: object) -> bool:
        return self._value() == other._value() if isinstance(other, Event) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._value())


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
        self.fitting = FittingNodes(labels, nodes, classes)
        # By class name: the class object digested (the store's, as asked) and its
        # revision's digest; forgotten at every change of the class store.
        self._versions: dict[str, tuple[RuntimeClassView, str]] = {}
        self._versions_at = classes.generation

    def due_events(self) -> list[Event]:
        """Every event owed now (known to exist or not)."""
        by_class: dict[str, list[PendingPod]] = {}
        for pod in self.pods.values():
            if pod.schedulable:
                by_class.setdefault(pod.runtime_class_name, []).append(pod)
        due: list[Event] = []
        for class_name, pods in by_class.items():
            due.extend(self._due(class_name, pods))
        return due

    def event_due(self, pod: PendingPod, class_name: str) -> Event | None:
        """The event ``pod`` is owed now for ``class_name`` (None: none)."""
        if not pod.schedulable or pod.runtime_class_name != class_name:
            return None
        return next(iter(self._due(class_name, (pod,))), None)

    def _due(self, class_name: str, pods: Iterable[PendingPod]) -> list[Event]:
        """The events owed to ``pods``, all of ``class_name``: what depends on the class
        alone is decided once, and each unavailable note is left to be made when read."""
        runtime_class = self.classes.get(class_name)
        if runtime_class is None:
            key = self.labels.key(class_name)
            gone = self.not_found_note(class_name, key)
            # A pod that does not require the label: nothing of the gone class holds it back.
            return [
                Event(pod, class_name, ABSENT_VERSION, gone, NOT_FOUND_REASON)
                for pod in pods
                if key in pod.required
            ]
        version = self.version(runtime_class)
        if self._fits_no_node(runtime_class):
            fits_none = self.note(runtime_class, len(self.nodes))
            return [Event(pod, class_name, version, fits_none) for pod in pods]
        unavailable = partial(self.unavailable_note, runtime_class)
        return [
            Event(pod, class_name, version, unavailable, UNAVAILABLE_REASON)
            for pod in pods
            if pod.unschedulable
        ]

    def unavailable_note(self, runtime_class: RuntimeClassView, pod: PendingPod) -> str:
        """Nodes run the class, and kube-scheduler found none of them can take ``pod``:
        how many run it, kube-scheduler's reasons, and what pod admission would have
        given the pod that it lacks."""
        total = len(self.nodes)
        fitting = self.fitting.count(runtime_class)
        labels = self.labels
        lacks = []
        visible = labels.visible_selector(runtime_class)
        shows = visible is not None and all(item in pod.node_selector for item in visible.items())
        if labels.has_node_rules(runtime_class) and labels.key(runtime_class.name) not in pod.required and not shows:
            lacks.append(f"its node label requirement ({labels.key(runtime_class.name)})")
        own = [_as_api(t) for t in pod.tolerations]
        missing = [t for t in pod_tolerations(runtime_class) if not any(covers(o, t) for o in own)]
        if missing:
            lacks.append("its tolerations (" + ", ".join(str(_as_view(t)) for t in missing) + ")")
        note = (
            f'RuntimeClass "{runtime_class.name}": {fitting} of {total} nodes can run it, and kube-scheduler '
            f"found none of them can take the pod ({_reasons(pod.unschedulable)}; the {total - fitting} "
            "nodes that cannot run the class are among those that didn't match the pod's node affinity/selector)"
        )
        if lacks:
            note += (
                "; the pod lacks what pod admission gives a pod of the class: " + " and ".join(lacks) + ": it was "
                "admitted before its class was in the pod admission table, before the mode was on, or opted "
                "out (recreate it)"
            )
        return _cut(note)

    def version(self, runtime_class: RuntimeClassView | None) -> str:
        """The revision of what decides the class's nodes (``ABSENT_VERSION``: deleted),
        digested once per class object until the class store changes."""
        if runtime_class is None:
            return ABSENT_VERSION
        if self._versions_at != self.classes.generation:
            self._versions.clear()
            self._versions_at = self.classes.generation
        held = self._versions.get(runtime_class.name)
        # The very object digested: one that is not the store's (asked about by another
        # listener of the class store, or made elsewhere) is digested for itself.
        if held is not None and held[0] is runtime_class:
            return held[1]
        digest = revision_digest(self.labels.rules_key(runtime_class))
        self._versions[runtime_class.name] = (runtime_class, digest)
        return digest

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

    def _fits_no_node(self, runtime_class: RuntimeClassView) -> bool:
        return self.labels.has_node_rules(runtime_class) and self.fitting.count(runtime_class) == 0


class FittingNodes:
    """How many nodes pass each class's node rules (``ClassLabels.passes``), kept up
    under node and class changes rather than recounted.

    A class is counted over every node when first asked about, and again once it has
    changed; from then on each node event re-judges that one node for it (its old view
    and its new), so a node event costs two rule checks per class counted. Only the
    classes asked about are counted: a replica that never leads counts none.

    Asked outside the node store's listeners (the events actor asks in its pass and
    its writes): a first count made while the store is still telling its listeners of
    a change would already hold that change when the index hears of it."""

    def __init__(self, labels: ClassLabels, nodes: Store[NodeView], classes: Store[RuntimeClassView]) -> None:
        self.labels = labels
        self.nodes = nodes
        # By class name: the class object counted (the store's, as asked), and its count.
        self._counts: dict[str, tuple[RuntimeClassView, int]] = {}
        nodes.add_listener(self._node_changed)
        classes.add_listener(self._class_changed)

    def count(self, runtime_class: RuntimeClassView) -> int:
        """The nodes that pass ``runtime_class``'s node rules now."""
        held = self._counts.get(runtime_class.name)
        # Counted for this very object, or counted again: a class object asked about
        # before the class store's listeners have run (another listener asking) is not
        # the one counted, and the count must not be the old class's.
        if held is not None and held[0] is runtime_class:
            return held[1]
        passes = self.labels.passes
        found = sum(1 for node in self.nodes.values() if passes(runtime_class, node))
        self._counts[runtime_class.name] = (runtime_class, found)
        return found

    def _node_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        passes = self.labels.passes
        try:
            for name, (runtime_class, found) in self._counts.items():
                now = isinstance(new, NodeView) and passes(runtime_class, new)
                was = isinstance(old, NodeView) and passes(runtime_class, old)
                if now != was:
                    self._counts[name] = (runtime_class, found + now - was)
        except Exception:
            # A rule that raised leaves a count half moved: every class is counted
            # again when next asked (and a rule that still raises raises there).
            self._counts.clear()
            raise

    def _class_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        # Counted again when next asked (a deleted class, never): the class's own
        # fields decide which nodes pass.
        for changed in (old, new):
            if changed is not None:
                self._counts.pop(changed.name, None)


def _reasons(message: str) -> str:
    """kube-scheduler's reasons, as its FitError words them (pkg/scheduler/framework/
    types.go, FitError.Error): "0/N nodes are available: <count> <reason>, ...", then
    what preemption found; its first sentence, the reasons."""
    head, found, reasons = message.partition(" nodes are available: ")
    if not found:
        return f"kube-scheduler: {message}"
    return f"kube-scheduler: {head} nodes are available: {reasons.split('. ', 1)[0].rstrip('.')}"


def _as_api(toleration: Toleration) -> dict[str, str]:
    """A toleration view as the API writes it (empty fields left out)."""
    fields = (("key", toleration.key), ("operator", toleration.operator), ("value", toleration.value))
    return {name: value for name, value in (*fields, ("effect", toleration.effect)) if value}


def _as_view(toleration: dict[str, str]) -> Toleration:
    return Toleration(
        toleration.get("key", ""),
        toleration.get("operator", ""),
        toleration.get("value", ""),
        toleration.get("effect", ""),
    )
