"""Auditing running pods in ``serve --audit-running-pods``: the I/O half.

The check itself is pure (``extender.audit.misplaced``). This module feeds it:

- a pod informer: a ``Reflector`` on ``/api/v1/pods`` with the field selector
  ``RUNNING_POD_SELECTOR`` (``spec.nodeName!=``, phase neither ``Succeeded`` nor
  ``Failed``), so only pods that are bound and not terminated are listed and watched (a pod that terminates leaves
  the watch as DELETED). Each is cut down to a ``ScheduledPod`` (namespace, name, uid,
  runtimeClassName, nodeName, its own tolerations shared through a
  ``TolerationInterner``, resourceVersion), and the store keeps only the pods the audit
  judges: those naming a RuntimeClass (``is_audited``). No field selector can ask for
  "has a runtimeClassName", so every bound pod is read once, but pods without a class
  are never held;
- a ``MisplacedIndex`` listening to that store and to the Node and RuntimeClass stores
  of the shared ``ClusterState`` (fed by the live cluster's watch), so the set of
  misplaced pods stays exact as pods, nodes and classes change; ``/metrics`` reads its
  counts at scrape time (``extender.audit.metrics``);
- the log: one WARNING line per pod when it becomes misplaced.

Races and how they are closed:

- Until every store has been listed, pods can arrive before their nodes or classes
  (they would read as ``node-not-found`` or ``runtimeclass-deleted`` for a moment).
  Transitions are therefore not logged until the pods, Nodes and RuntimeClasses are
  all listed (``Store.synced`` is set only after a LIST's notifications, so the
  transitions of the last first LIST are still held back). Then one INFO line sums up
  what was found; the pods misplaced at that point are not logged one by one, so a
  restart (a rolling update) does not repeat a warning for every pod already reported.
  The gauge is exported only from then on too.
- A re-LIST after ``410 Gone`` replaces a store with notifications for the difference
  only, so the index sees exactly the changes it missed and logs them as changes.
- Pods and nodes come from two watches. A pod bound to a node this process has not
  seen yet would read ``node-not-found`` until the node's event arrives; kube-scheduler
  only binds to nodes it has seen, after they turned Ready, so in practice the node's
  event is long in by then.

It is a leader actor (``extender.leader.actor``), the one that writes nothing and so
is no ``Controller``: its term is the time its ``lead`` runs (started once the pods,
Nodes and RuntimeClasses are listed, until the term ends; without an election, the
whole run). With leader election (``serve --leader-elect``) every replica keeps its
informer and index current, but only during a term does it act: it logs the per-pod
lines and exports the gauges; a follower does neither (two replicas would log every
warning twice, and alert rules summing the gauge would count every pod twice). A
replica whose term starts logs the one summary line, as at start, and the per-pod
lines from then on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from prometheus_client import CollectorRegistry

from extender.audit.index import MisplacedIndex, Transition
from extender.audit.metrics import AuditCollector
from extender.audit.misplaced import Misplaced
from extender.cluster.pod_views import (
    RUNNING_POD_SELECTOR,
    ScheduledPod,
    TolerationInterner,
    is_audited,
    pod_key,
    scheduled_pod_from_api,
)
from extender.cluster.state import ClusterState
from extender.kube.informer import Informer
from extender.kube.reflector import ReflectorOptions, WatchedResource
from extender.kube.store import Store
from extender.leader.actor import LeaderActor

log = logging.getLogger("extender.audit")

SCHEDULED_PODS = "scheduled-pods"


def scheduled_pod_resource(intern: TolerationInterner | None = None) -> WatchedResource:
    """The informer's resource: bound, non-terminated pods as ``ScheduledPod``."""
    return WatchedResource(
        SCHEDULED_PODS,
        "/api/v1/pods",
        partial(scheduled_pod_from_api, intern=intern),
        field_selector=RUNNING_POD_SELECTOR,
        key=pod_key,
    )


class AuditedPods(Store[ScheduledPod]):
    """The informer's store: only the pods the audit judges are kept.

    A pod without a RuntimeClass never gets one (the field is immutable), so dropping it
    on arrival loses nothing; its later events find no entry and change nothing.
    """

    def __init__(self) -> None:
        super().__init__(SCHEDULED_PODS)

    def upsert(self, item: ScheduledPod) -> None:
        if is_audited(item):
            super().upsert(item)
        else:
            self.delete(item.name)

    def replace(self, items: Iterable[ScheduledPod]) -> None:
        super().replace(pod for pod in items if is_audited(pod))


@dataclass(frozen=True)
class AuditOptions:
    reflector: ReflectorOptions = field(default_factory=ReflectorOptions)


class Auditor(LeaderActor):
    """Keeps the misplaced running pods current and logs each that becomes misplaced.

    Build it before the cluster watch starts (its index hears every Node and
    RuntimeClass event from the first LIST on), then run it with
    ``extender.leader.runner.LeaderRunner``.
    """

    name = "audit"

    def __init__(
        self,
        api: Any,
        state: ClusterState,
        *,
        options: AuditOptions | None = None,
    ) -> None:
        self.options = options or AuditOptions()
        # A term runs (``lead``): the logs and gauges are this replica's.
        self._in_term = False
        self.state = state
        self.interner = TolerationInterner()
        self.pod_informer: Informer[ScheduledPod] = Informer(
            api, scheduled_pod_resource(self.interner), AuditedPods(), options=self.options.reflector
        )
        self.pods = self.pod_informer.store
        self.index = MisplacedIndex(state, on_transition=self._on_transition)
        self.index.attach(self.pods)

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self.pod_informer,)

    def waiting(self) -> list[str]:
        # Pods are judged against the cluster state: all of it must be listed.
        return [*(f"{kind}: not listed yet" for kind in self.state.unsynced_kinds()), *super().waiting()]

    @property
    def acting(self) -> bool:
        """A term runs here (it starts once everything is listed): the logs and gauges
        are this replica's."""
        return self._in_term

    @property
    def synced(self) -> bool:
        """Pods, Nodes and RuntimeClasses have all been listed: the answer is complete."""
        return self.pods.synced and self.state.synced

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """Export the misplaced-pod gauge on ``registry`` (the app's, in ``serve``)."""
        registry.register(
            AuditCollector(
                counts=self.index.counts,
                audited=lambda: len(self.index),
                runtime_classes=lambda: self.state.runtime_classes.keys(),
                ready=lambda: self.acting,
            )
        )

    async def observe(self) -> None:
        log.info("auditing running pods", extra={"fieldSelector": RUNNING_POD_SELECTOR})

    async def lead(self) -> None:
        """A term: once everything is listed, one line summing up what is found, then a
        line per transition until the term ends (cancelled)."""
        await self.pods.wait_synced()
        await self.state.nodes.wait_synced()
        await self.state.runtime_classes.wait_synced()
        self._in_term = True
        try:
            self._announce_sync()
            await asyncio.Event().wait()
        finally:
            self._in_term = False

    # ----- logging ------------------------------------------------------------------

    def _announce_sync(self) -> None:
        misplaced = self.index.misplaced()
        problems = sorted({m.problem for m in misplaced})
        log.info(
            "audited running pods: %d of %d misplaced",
            len(misplaced),
            len(self.index),
            extra={
                "audited": len(self.index),
                "misplaced": len(misplaced),
                "problems": ",".join(problems),
            },
        )

    def _on_transition(self, transition: Transition) -> None:
        if not self.acting:
            return  # the first LISTs are still coming in, or another replica leads
        kind = transition.kind
        if kind == "misplaced":
            assert transition.after is not None
            item = transition.after
            log.warning("running pod is misplaced", extra=_fields(item))
        elif kind == "changed":
            assert transition.after is not None and transition.before is not None
            item = transition.after
            log.info(
                "misplaced pod has another problem now",
                extra={**_fields(item), "previousProblem": transition.before.problem},
            )
        elif kind == "resolved":
            assert transition.before is not None
            log.info("misplaced pod fits its node again", extra=_fields(transition.before))
        else:
            assert transition.before is not None
            # Deleted (the taint manager's eviction, the pod garbage collector) or
            # terminated: the normal end of a misplaced pod, not a fix.
            log.info("misplaced pod is gone", extra=_fields(transition.before))


def _fields(item: Misplaced) -> dict[str, str]:
    # The detail is an extra, not part of the message: it quotes node labels and taints,
    # and the text format quotes an extra that could break the line.
    return {
        "pod": item.key,
        "runtimeClass": item.runtime_class,
        "node": item.node,
        "problem": item.problem,
        "detail": item.detail,
    }
