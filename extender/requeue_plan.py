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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from policies.objects import RuntimeClassView

# The annotation patched onto a pending pod; its value is an RFC 3339 timestamp.
REQUEUE_ANNOTATION = "runtimeclass-extender.dev/requeued-at"

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
        if not pod.runtime_class_name or pod.scheduler_name not in self.scheduler_names:
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


class RequeuePlanner:
    """Coalesces RuntimeClass changes and decides which pods to patch at a flush."""

    def __init__(self) -> None:
        # class name -> revision seen at its latest change, since the last flush.
        self._changed: dict[str, Hashable] = {}
        # The revision each class had when last observed (to drop no-op updates).
        self._known: dict[str, Hashable] = {}
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
        if initial or previous == revision:
            return False
        self._changed[class_name] = revision
        return True

    @property
    def has_changes(self) -> bool:
        return bool(self._changed)

    def flush(self, pods: PendingPods) -> list[Nudge]:
        """The nudges due for the changes seen since the last flush (one per pod)."""
        changed, self._changed = self._changed, {}
        nudges: dict[str, Nudge] = {}
        for class_name, revision in changed.items():
            for pod in pods.naming(class_name):
                if self._nudged.get(pod.uid, {}).get(class_name) == revision:
                    continue
                nudges[pod.uid] = Nudge(pod, class_name, revision)
        return list(nudges.values())

    def done(self, nudge: Nudge) -> None:
        """The nudge was applied (or is moot): never repeat it for this revision."""
        self._nudged.setdefault(nudge.pod.uid, {})[nudge.class_name] = nudge.revision

    def forget_pod(self, uid: str) -> None:
        """The pod left the pending set (bound or deleted): drop its history."""
        self._nudged.pop(uid, None)
