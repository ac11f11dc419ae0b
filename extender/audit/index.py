"""The audit kept current: which running pods are misplaced, under a stream of changes.

``extender.audit.misplaced`` answers once for a set of pods; ``MisplacedIndex`` keeps that
answer exact as pods, nodes and RuntimeClasses change, re-checking only the pods a
change can affect, and reports each pod's transitions into and out of being misplaced
(``Transition``). Pure: the informer in ``extender.audit.auditor`` feeds it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from extender.audit.misplaced import Misplaced, by_namespace_and_name, misplaced_of
from extender.cluster.pod_views import ScheduledPod, is_audited
from extender.cluster.state import NODES, RUNTIME_CLASSES, ClusterState
from extender.kube.store import Named, Store
from policies.objects import NodeView, RuntimeClassView


@dataclass(frozen=True, slots=True)
class Transition:
    """A pod's change of status: ``before``/``after`` are None where it fits (or is gone).

    ``kind``: ``misplaced`` (it became misplaced; log it), ``changed`` (another problem
    label), ``resolved`` (it fits again), ``gone`` (it left the audit while misplaced:
    deleted, replaced by a new pod of the same name, or terminated).
    """

    key: str
    before: Misplaced | None
    after: Misplaced | None
    gone: bool = False

    @property
    def kind(self) -> str:
        if self.before is None:
            return "misplaced"
        if self.after is not None:
            return "changed"
        return "gone" if self.gone else "resolved"


def _node_inputs(node: NodeView) -> tuple[object, ...]:
    # All of a node that problems_of reads (its name is its identity).
    return node.labels, node.taints


def _class_inputs(runtime_class: RuntimeClassView) -> tuple[object, ...]:
    # All of a class that problems_of reads: the selector parts, the tolerations
    # for the NoExecute note, and the overhead pods must carry.
    return (
        runtime_class.node_selector,
        runtime_class.match_expressions,
        runtime_class.match_fields,
        runtime_class.selector_error,
        runtime_class.tolerations,
        runtime_class.overhead,
    )


class MisplacedIndex:
    """The misplaced pods among the running ones, kept exact as the cluster changes.

    Holds the audited pods (``is_audited``) by key, node and class, and the current
    Misplaced record of each misplaced one. A pod change re-checks that pod; a node or
    class change re-checks only the pods on that node or of that class. The update
    methods return the transitions they caused (a detail-only change of a misplaced
    pod's message updates its record without one). Hooked onto stores
    (``attach``/``on_event``), the transitions go to ``on_transition`` instead.

    Before the stores are synced, pods may be seen before their nodes: a caller that
    logs transitions should hold them until everything is synced, then log
    ``misplaced()`` once.
    """

    def __init__(
        self, state: ClusterState, *, on_transition: Callable[[Transition], None] | None = None
    ) -> None:
        self.state = state
        self.on_transition = on_transition
        self._pods: dict[str, ScheduledPod] = {}
        self._by_node: defaultdict[str, set[str]] = defaultdict(set)
        self._by_class: defaultdict[str, set[str]] = defaultdict(set)
        self._misplaced: dict[str, Misplaced] = {}
        self._counts: Counter[tuple[str, str]] = Counter()

    # ----- reading

    def __len__(self) -> int:
        """The number of audited pods held."""
        return len(self._pods)

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def get(self, key: str) -> Misplaced | None:
        return self._misplaced.get(key)

    def misplaced(self) -> list[Misplaced]:
        """The misplaced pods, by namespace and name (what ``audit`` would answer)."""
        return sorted(self._misplaced.values(), key=by_namespace_and_name)

    def counts(self) -> dict[tuple[str, str], int]:
        """Misplaced pods by (runtime_class, problem); pairs with none are absent, so a
        gauge series whose pair is missing should read 0 (or be removed)."""
        return dict(self._counts)

    # ----- updates, each returning the transitions it caused

    def upsert_pod(self, pod: ScheduledPod) -> list[Transition]:
        out: list[Transition] = []
        key = pod.name
        old = self._pods.get(key)
        if old is not None and (old.uid != pod.uid or not is_audited(pod)):
            # Another pod under the same name (a StatefulSet replica) starts afresh, and
            # a pod that terminated leaves the audit.
            self._drop(key, out)
            old = None
        if not is_audited(pod):
            return out
        if old is not None:
            self._unindex(key, old)
        self._pods[key] = pod
        self._by_node[pod.node_name].add(key)
        self._by_class[pod.runtime_class_name].add(key)
        self._evaluate(key, out)
        return out

    def delete_pod(self, key: str) -> list[Transition]:
        out: list[Transition] = []
        self._drop(key, out)
        return out

    def replace_pods(self, pods: Iterable[ScheduledPod]) -> list[Transition]:
        """Swap in a complete set of pods (a LIST)."""
        out: list[Transition] = []
        new = {pod.name: pod for pod in pods}
        for key in [k for k in self._pods if k not in new]:
            self._drop(key, out)
        for pod in new.values():
            out.extend(self.upsert_pod(pod))
        return out

    def node_changed(self, name: str) -> list[Transition]:
        """Re-check the pods bound to node ``name`` (added, changed or deleted)."""
        return self._reevaluate(self._by_node.get(name, ()))

    def class_changed(self, name: str) -> list[Transition]:
        """Re-check the pods of RuntimeClass ``name`` (added, changed or deleted)."""
        return self._reevaluate(self._by_class.get(name, ()))

    # ----- store hooks

    def on_event(self, kind: str, old: Named | None, new: Named | None) -> None:
        """A store listener (``Store.add_listener``) for nodes, RuntimeClasses and pods."""
        if kind == NODES:
            if (
                isinstance(old, NodeView)
                and isinstance(new, NodeView)
                and _node_inputs(old) == _node_inputs(new)
            ):
                return  # a heartbeat, an annotation: nothing the check reads
            current = new if new is not None else old
            transitions = self.node_changed(current.name) if current is not None else []
        elif kind == RUNTIME_CLASSES:
            if (
                isinstance(old, RuntimeClassView)
                and isinstance(new, RuntimeClassView)
                and _class_inputs(old) == _class_inputs(new)
            ):
                return
            current = new if new is not None else old
            transitions = self.class_changed(current.name) if current is not None else []
        elif isinstance(new, ScheduledPod):
            transitions = self.upsert_pod(new)
        elif isinstance(old, ScheduledPod):
            transitions = self.delete_pod(old.name)
        else:
            return
        if self.on_transition is not None:
            for transition in transitions:
                self.on_transition(transition)

    def attach(self, pods: Store[ScheduledPod] | None = None) -> list[Transition]:
        """Listen to the state's node and class stores and to ``pods``; take in the pods
        already there and return the transitions that caused (no callback for those)."""
        self.state.nodes.add_listener(self.on_event)
        self.state.runtime_classes.add_listener(self.on_event)
        if pods is None:
            return []
        pods.add_listener(self.on_event)
        return self.replace_pods(pods.values())

    # ----- internals

    def _unindex(self, key: str, pod: ScheduledPod) -> None:
        for index, name in ((self._by_node, pod.node_name), (self._by_class, pod.runtime_class_name)):
            keys = index.get(name)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[name]

    def _drop(self, key: str, out: list[Transition]) -> None:
        pod = self._pods.pop(key, None)
        if pod is None:
            return
        self._unindex(key, pod)
        before = self._misplaced.pop(key, None)
        if before is not None:
            self._count(before, -1)
            out.append(Transition(key, before, None, gone=True))

    def _reevaluate(self, keys: Iterable[str]) -> list[Transition]:
        out: list[Transition] = []
        for key in sorted(keys):
            self._evaluate(key, out)
        return out

    def _count(self, item: Misplaced, delta: int) -> None:
        pair = (item.runtime_class, item.problem)
        self._counts[pair] += delta
        if self._counts[pair] <= 0:
            del self._counts[pair]

    def _evaluate(self, key: str, out: list[Transition]) -> None:
        after = misplaced_of(self._pods[key], self.state)
        before = self._misplaced.get(key)
        if after == before:
            return
        if before is not None:
            self._count(before, -1)
        if after is None:
            del self._misplaced[key]
        else:
            self._misplaced[key] = after
            self._count(after, +1)
        if before is None or after is None or before.problem != after.problem:
            out.append(Transition(key, before, after))
