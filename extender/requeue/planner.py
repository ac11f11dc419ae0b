"""Which pending pods to nudge after a RuntimeClass change: the pure half of requeueing.

Why nudge at all: kube-scheduler does not watch RuntimeClasses, so a pod this extender
rejected ("RuntimeClass not found", "didn't match RuntimeClass") waits in the
unschedulable queue until some unrelated cluster event or the periodic flush (minutes)
retries it (kubernetes/kubernetes#127371). Any update to the pod moves it back to the
active queue at once, so touching one annotation is enough.

This module decides *who* and *when*, with no I/O and no clock of its own:
- ``PendingPods`` indexes the unscheduled pods the informer reports, by RuntimeClass.
- ``class_revision`` reduces a RuntimeClass to what scheduling reads; only a change of
  that (add, delete, selector, tolerations, annotation selector, handler) matters.
- ``RequeuePlanner`` coalesces changes until flushed, and remembers per pod the last
  class revision it was nudged for, so a pod is never patched twice for one revision.
  A class that ends a window as it began (added and deleted again, edited and edited
  back) is no change at all.

The I/O half (informer, timers, PATCH requests) is ``extender.requeue.requeuer``.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from policies.objects import RuntimeClassView

# The annotation patched onto a pending pod; its value is an RFC 3339 timestamp.
REQUEUE_ANNOTATION = "runtimeclass-extender.dev/requeued-at"

# With leader election, the nudge also names the class revision it was for (a digest
# of ``class_revision``): a replica that takes the lead over reads from the pods which
# nudges its predecessor already sent, and never sends them again.
REVISION_ANNOTATION = "runtimeclass-extender.dev/requeued-for"

# The revision of a class that does not exist (never created, or deleted).
ABSENT: Hashable = ("absent",)


@dataclass(frozen=True, slots=True)
class PendingPod:
    """What the requeuer keeps of an unscheduled pod: identity and routing, nothing else."""

    namespace: str
    pod_name: str
    uid: str
    runtime_class_name: str
    scheduler_name: str
    resource_version: str = ""
    # False for a pod being deleted or held by scheduling gates: kube-scheduler does not
    # try it, so a nudge would change nothing.
    schedulable: bool = True
    # The value of REVISION_ANNOTATION: the class revision it was last nudged for.
    requeued_for: str = ""

    @property
    def name(self) -> str:
        # Stores key objects by ``name``; pods are unique per namespace.
        return f"{self.namespace}/{self.pod_name}"


def class_revision(runtime_class: RuntimeClassView | None) -> Hashable:
    """The part of a RuntimeClass that can change a scheduling decision."""
    if runtime_class is None:
        return ABSENT
    return (
        runtime_class.handler,
        tuple(sorted(runtime_class.node_selector.items())),
        runtime_class.tolerations,
        runtime_class.match_expressions,
        runtime_class.match_fields,
        runtime_class.selector_error,
    )


def revision_digest(revision: Hashable) -> str:
    """A short, stable name of a class revision, the same in every process (``hash``
    is salted per process; the revision's parts are strings, tuples and frozen
    dataclasses, whose ``repr`` is stable)."""
    return hashlib.sha256(repr(revision).encode()).hexdigest()[:16]


def nudged_for(pod: PendingPod, revision: Hashable) -> bool:
    """The pod carries the annotation of a nudge for ``revision`` (by any replica)."""
    return bool(pod.requeued_for) and pod.requeued_for == revision_digest(revision)


class PendingPods:
    """Unscheduled pods by RuntimeClass name, for the schedulers this extender serves."""

    def __init__(self, scheduler_names: Iterable[str]) -> None:
        self.scheduler_names = frozenset(scheduler_names)
        self._by_key: dict[str, PendingPod] = {}
        self._by_class: dict[str, set[str]] = defaultdict(set)

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: str) -> PendingPod | None:
        return self._by_key.get(key)

    def upsert(self, pod: PendingPod) -> None:
        self.delete(pod.name)
        if (
            not pod.runtime_class_name
            or pod.scheduler_name not in self.scheduler_names
            or not pod.schedulable
        ):
            return  # not ours to nudge
        self._by_key[pod.name] = pod
        self._by_class[pod.runtime_class_name].add(pod.name)

    def delete(self, key: str) -> None:
        old = self._by_key.pop(key, None)
        if old is not None:
            keys = self._by_class[old.runtime_class_name]
            keys.discard(key)
            if not keys:
                del self._by_class[old.runtime_class_name]

    def naming(self, class_name: str) -> list[PendingPod]:
        return [self._by_key[key] for key in sorted(self._by_class.get(class_name, ()))]


@dataclass(frozen=True, slots=True)
class Nudge:
    pod: PendingPod
    class_name: str
    revision: Hashable


@dataclass(frozen=True, slots=True)
class ClassChange:
    """One RuntimeClass's net change over a coalescing window."""

    class_name: str
    before: Hashable
    after: Hashable

    @property
    def kind(self) -> str:
        """added, deleted or updated (for the log line)."""
        if self.before == ABSENT:
            return "added"
        if self.after == ABSENT:
            return "deleted"
        return "updated"


@dataclass(frozen=True, slots=True)
class Plan:
    """What a flush decided: the net changes, the nudges due, and those already done."""

    changes: list[ClassChange] = field(default_factory=list)
    nudges: list[Nudge] = field(default_factory=list)
    # Pods that name a changed class but were already nudged for its new revision.
    already_nudged: list[Nudge] = field(default_factory=list)


class RequeuePlanner:
    """Coalesces RuntimeClass changes and decides which pods to patch at a flush."""

    def __init__(self) -> None:
        # class name -> revision seen at its latest change, since the last flush.
        self._changed: dict[str, Hashable] = {}
        # The revision each class had when last observed (to drop no-op updates).
        self._known: dict[str, Hashable] = {}
        # The revision each class had at the last flush (or in the baseline LIST).
        self._flushed: dict[str, Hashable] = {}
        # pod uid -> {class name: revision it was last nudged for}.
        self._nudged: dict[str, dict[str, Hashable]] = {}

    def observe(self, class_name: str, revision: Hashable, *, initial: bool = False) -> bool:
        """Record a class's current revision; True when it changed in a way that matters.

        ``initial`` marks the first LIST: the classes that exist at start are the
        baseline, not changes (pods pending since before start were already tried
        against them).
        """
        previous = self._known.get(class_name, ABSENT)
        self._known[class_name] = revision
        if initial:
            self._flushed[class_name] = revision
            self._changed.pop(class_name, None)
            return False
        if previous == revision:
            return False
        self._changed[class_name] = revision
        return True

    def plan(self, pods: PendingPods) -> Plan:
        """Close the window: the net changes since the last plan and the nudges due."""
        changed, self._changed = self._changed, {}
        plan = Plan()
        nudges: dict[str, Nudge] = {}
        for class_name, revision in changed.items():
            before = self._flushed.get(class_name, ABSENT)
            self._flushed[class_name] = revision
            if before == revision:
                continue  # changed and changed back within the window
            plan.changes.append(ClassChange(class_name, before, revision))
            for pod in pods.naming(class_name):
                nudge = Nudge(pod, class_name, revision)
                if self._nudged.get(pod.uid, {}).get(class_name) == revision or nudged_for(pod, revision):
                    plan.already_nudged.append(nudge)
                else:
                    nudges[pod.uid] = nudge
        plan.nudges.extend(nudges.values())
        return plan

    def done(self, nudge: Nudge) -> None:
        """The nudge was applied (or is moot): never repeat it for this revision."""
        self._nudged.setdefault(nudge.pod.uid, {})[nudge.class_name] = nudge.revision

    def forget_pod(self, uid: str) -> None:
        """The pod left the pending set (bound or deleted): drop its history."""
        self._nudged.pop(uid, None)
