"""Which pending pods to nudge after a RuntimeClass change: the pure half of requeueing.

Why nudge at all: kube-scheduler does not watch RuntimeClasses, so a pod this extender
rejected ("RuntimeClass not found", "didn't match RuntimeClass") waits in the
unschedulable queue until some unrelated cluster event or the periodic flush (minutes)
retries it (kubernetes/kubernetes#127371). Any update to the pod moves it back to the
active queue at once, so touching one annotation is enough.

**Level-triggered.** What a pod needs is derived from what is, never from a log of
events: each pending pod was last tried against some revision of its class (what
scheduling reads of it, ``scheduling_revision``), and it needs a nudge exactly when its
class is now at another one. The revision it was last tried against is, newest first:

- the one this process last nudged it for (``done``), until the pod shows it;
- the one its ``REVISION_ANNOTATION`` names (a nudge by any replica, with leader
  election);
- else the one its class had when this process first saw the pod: the class's
  *baseline* (its revision at the first LIST of RuntimeClasses) for a pod of the first
  LIST of pods (pending since before start, so tried against the classes as they
  were), and its current revision for a pod that arrives later (created after).

So a class edited and edited back is no change at all; a pod created after a change is
not nudged for it; a replica that takes the lead over nudges exactly the pods its
predecessor had not (their annotations say which); and a pod is never nudged twice for
one revision. This module keeps those revisions and answers who is due, with no I/O and
no clock of its own; the I/O half (informer, timers, PATCH requests) is
``extender.requeue.requeuer``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from extender.cluster.class_revisions import ABSENT, revision_digest
from extender.cluster.pending_pods import PendingPod


@dataclass(frozen=True, slots=True)
class Nudge:
    pod: PendingPod
    class_name: str
    revision: Hashable

    @property
    def digest(self) -> str:
        return revision_digest(self.revision)


@dataclass(frozen=True, slots=True)
class ClassChange:
    """One RuntimeClass's net change between two plans."""

    class_name: str
    before: Hashable
    after: Hashable

    @property
    def kind(self) -> str:
        """added, deleted or updated (for the log line); ``resumed`` for no change in
        this pass (nudges a new leader finds still owed)."""
        if self.before == self.after:
            return "resumed"
        if self.before == ABSENT:
            return "added"
        if self.after == ABSENT:
            return "deleted"
        return "updated"


@dataclass(frozen=True, slots=True)
class Plan:
    """What a pass decided: the net changes since the last pass, the nudges due, and the
    pods of a changed class already nudged for its revision (by another replica)."""

    changes: list[ClassChange] = field(default_factory=list)
    nudges: list[Nudge] = field(default_factory=list)
    already_nudged: list[Nudge] = field(default_factory=list)


class RequeuePlanner:
    """The class revisions this process has seen, what each pending pod was last tried
    against, and who is due; see the module doc."""

    def __init__(self, scheduler_names: Iterable[str]) -> None:
        self.scheduler_names = frozenset(scheduler_names)
        # Each class's revision now, and at the first LIST of RuntimeClasses.
        self._current: dict[str, Hashable] = {}
        self._baseline: dict[str, Hashable] | None = None
        # The revision of each class at the last pass (its net change is what is logged).
        self._planned: dict[str, Hashable] = {}
        # Pod uid -> the digest it was first tried against (None: the pod arrived with the
        # first LIST before the classes' baseline: filled in when it comes).
        self._first: dict[str, str | None] = {}
        # Pod uid -> the digest this process nudged it for, until the pod shows it.
        self._done: dict[str, str] = {}

    # ----- what is observed -------------------------------------------------------------

    def observe_class(self, class_name: str, revision: Hashable, *, initial: bool = False) -> bool:
        """Record a class's revision; True when it changed in a way that matters.
        ``initial`` marks the first LIST: the baseline, not a change."""
        previous = self._current.get(class_name, ABSENT)
        if revision == ABSENT:
            self._current.pop(class_name, None)
        else:
            self._current[class_name] = revision
        if initial:
            self._planned[class_name] = revision
            return False
        return previous != revision

    def baseline_listed(self) -> None:
        """The first LIST of RuntimeClasses is in: what the pods of the first LIST of
        pods were tried against."""
        if self._baseline is None:
            self._baseline = dict(self._current)

    def first_seen(self, pod: PendingPod, *, initial: bool) -> None:
        """A pod appears (``initial``: in the first LIST of pods, pending since before
        start; else created, or become pending, later)."""
        if pod.uid in self._first:
            return
        # A pod of the first LIST was tried against the classes' baseline, which may not
        # be listed yet: then it is read when needed (last_tried).
        self._first[pod.uid] = None if initial else self.digest(pod.runtime_class_name)

    def seen_annotation(self, pod: PendingPod) -> None:
        """The pod shows a nudge: this process's own record of it is no longer needed."""
        if self._done.get(pod.uid) == pod.requeued_for:
            del self._done[pod.uid]

    def forget_pod(self, uid: str) -> None:
        """The pod left the pending set (bound or deleted): drop its history."""
        self._first.pop(uid, None)
        self._done.pop(uid, None)

    def done(self, nudge: Nudge) -> None:
        """The nudge was applied: the pod was last tried against its revision."""
        self._done[nudge.pod.uid] = nudge.digest

    # ----- who is due ---------------------------------------------------------------------

    def ours(self, pod: PendingPod) -> bool:
        """A pod this requeuer nudges: it names a class, one of our schedulers, and
        kube-scheduler tries it (not being deleted, no scheduling gates)."""
        return bool(pod.runtime_class_name) and pod.scheduler_name in self.scheduler_names and pod.schedulable

    def last_tried(self, pod: PendingPod) -> str:
        """The digest of the revision the pod was last tried against (module doc)."""
        done = self._done.get(pod.uid)
        if done is not None:
            return done
        if pod.requeued_for:
            return pod.requeued_for
        first = self._first.get(pod.uid)
        if first is not None:
            return first
        if self._baseline is not None:
            return revision_digest(self._baseline.get(pod.runtime_class_name, ABSENT))
        return self.digest(pod.runtime_class_name)  # never due before the classes are listed

    def digest(self, class_name: str) -> str:
        return revision_digest(self._current.get(class_name, ABSENT))

    def due(self, pod: PendingPod) -> Nudge | None:
        """The nudge the pod needs now, or None."""
        if not self.ours(pod):
            return None
        revision = self._current.get(pod.runtime_class_name, ABSENT)
        if self.last_tried(pod) == revision_digest(revision):
            return None
        return Nudge(pod, pod.runtime_class_name, revision)

    def plan(self, pods: Iterable[PendingPod]) -> Plan:
        """A pass over the pending pods: every nudge due, and each class's net change
        since the last pass (with its pods already nudged for the new revision)."""
        plan = Plan()
        changed = {}
        for name in set(self._current) | set(self._planned):
            before = self._planned.get(name, ABSENT)
            after = self._current.get(name, ABSENT)
            if before != after:
                changed[name] = ClassChange(name, before, after)
            if after == ABSENT:
                self._planned.pop(name, None)
            else:
                self._planned[name] = after
        plan.changes.extend(changed[name] for name in sorted(changed))
        for pod in pods:
            nudge = self.due(pod)
            if nudge is not None:
                plan.nudges.append(nudge)
            elif pod.runtime_class_name in changed and self.ours(pod):
                # Not due although its class changed: nudged for this revision already
                # (by this process, or another replica before this one led).
                revision = self._current.get(pod.runtime_class_name, ABSENT)
                digest = revision_digest(revision)
                if self._done.get(pod.uid) == digest or pod.requeued_for == digest:
                    plan.already_nudged.append(Nudge(pod, pod.runtime_class_name, revision))
        return plan
