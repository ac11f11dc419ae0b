"""The leader actors of one replica, built in one place.

Every part that acts on the cluster is a ``LeaderActor`` (``extender.leader.actor``):
the requeuer (``requeue-pending-pods``), the running-pod audit
(``audit-running-pods``), the node labeller and, with it, the events that say why a
pod of a class that fits no node pends (``label-nodes``: kube-scheduler's own message
cannot name the class once the label has ruled the nodes out), and the keeper of the
self-managed webhook certificates (``webhook-certificate-secret``), and the keeper of
the pod admission table the API server's policies read (``pod-admission-table``). ``serve`` turns its
settings into ``ActorOptions`` and the tests' replicas pass theirs, and both build the
actors here, so there is one way an actor is wired: a new one is one more field and
one more line below. How to write one (a ``Controller``: keys, a queue,
``reconcile(key)``) is docs/development.md, "Leader work, and how to add a leader
actor", the one recipe ``extender.leader.actor`` points to.

The actors that read pending pods (the requeuer, the labeller, the events) share one
informer of them (``extender.cluster.pending_pods``): each pod event is received and
decoded once however many of them are on. The actors that write over one API client
share its ``WriteLimiter`` (``extender.leader.limits``): a 429's ``Retry-After``
pauses all of them, each keeping its own rate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from extender.audit.auditor import AuditOptions, Auditor
from extender.cluster.class_labels import ClassLabels
from extender.cluster.pending_pod_informer import PendingPodInformer
from extender.cluster.state import ClusterState
from extender.kube.reflector import ReflectorOptions
from extender.labeller.events import ClassEvents, EventOptions
from extender.labeller.labeller import LabelOptions, NodeLabeller
from extender.leader.actor import LeaderActor
from extender.leader.gate import LeaderGate
from extender.leader.limits import WriteLimiter
from extender.podtable.keeper import PodAdmissionTable, TableOptions
from extender.requeue.requeuer import RequeueOptions, Requeuer
from extender.settings import DEFAULT_NODE_LABEL_PREFIX
from policies.registry import Policy


@dataclass(frozen=True)
class ActorOptions:
    """Which actors a replica runs (None: off), each with its options."""

    requeue: RequeueOptions | None = None
    audit: AuditOptions | None = None
    label: LabelOptions | None = None
    events: EventOptions | None = None
    table: TableOptions | None = None
    # The shared pending-pod informer's reflector (None: the defaults).
    pending_reflector: ReflectorOptions | None = None

    @property
    def label_prefix(self) -> str:
        return self.label.prefix if self.label is not None else DEFAULT_NODE_LABEL_PREFIX


def leader_actors(
    api: Any,
    state: ClusterState,
    policy: Policy,
    options: ActorOptions,
    *,
    gate: LeaderGate | None,
    limiter: WriteLimiter | None = None,
    others: Sequence[LeaderActor] = (),
    plugin: Callable[[], bool | None] = lambda: None,
) -> list[LeaderActor]:
    """The actors ``options`` asks for, then ``others`` (built where their I/O lives: the
    certificate keeper needs the admission listener's context), writing through
    ``limiter``, the API client's (one made here when not given: pass the one the
    ``others`` write through). ``plugin``: whether the API server runs the RuntimeClass
    admission plugin (``extender.podtable.plugin_finder``; None: not known). Build them
    before the cluster watch starts: they hear its first LISTs."""
    limiter = limiter or WriteLimiter()
    pending = None
    if options.requeue is not None or options.label is not None or options.events is not None:
        pending = PendingPodInformer(
            api, label_prefix=options.label_prefix, options=options.pending_reflector
        )
    actors: list[LeaderActor] = []
    if options.requeue is not None:
        actors.append(
            Requeuer(
                api,
                state,
                options=options.requeue,
                pending=pending,
                election=gate is not None,
                limiter=limiter,
            )
        )
    if options.audit is not None:
        actors.append(Auditor(api, state, options=options.audit))
    if options.label is not None:
        actors.append(
            NodeLabeller(api, state, policy, options=options.label, pending=pending, limiter=limiter)
        )
    if options.events is not None:
        actors.append(
            ClassEvents(
                api,
                state,
                policy,
                prefix=options.label_prefix,
                pending=pending,
                options=options.events,
                # The Lease identity names the replica that wrote an event.
                instance=gate.identity if gate is not None else "",
                limiter=limiter,
            )
        )
    if options.table is not None:
        # The table names each class's label as the labeller keeps it, whether or not
        # this replica's leader keeps them (labelNodes says so).
        rules = ClassLabels(options.label_prefix, policy)
        actors.append(
            PodAdmissionTable(api, state, options=options.table, rules=rules, plugin=plugin, limiter=limiter)
        )
    actors.extend(others)
    return actors
