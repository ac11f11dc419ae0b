"""Explain: which nodes can run a pod's RuntimeClass, and why not the others.

KEP-585 suggests "a special request or tool ... that would list all the nodes that
match a RuntimeClass's scheduling rules". This module builds that answer from the
cluster state and the policy, with no I/O: the HTTP handlers (``extender.http.explain``)
and the CLI (``extender.tools.explain``) only fetch inputs and print.

For every node it runs *every* predicate (``Policy.explain``), so a node that misses a
label and also has an untolerated taint shows both, each with its detail. The node's
``reason`` is the first failing predicate's, which is what the filter would answer, and
the summary counts each node once by that reason in the words kube-scheduler uses for
its aggregated ``FailedScheduling`` message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.cluster.state import ClusterState
from extender.view_json import pod_to_json, runtime_class_to_json
from policies.objects import NodeView, PodView, RuntimeClassView
from policies.registry import Policy

# pkg/scheduler/schedule_one.go: ErrNoNodesAvailable, when the cluster has no nodes.
NO_NODES_MESSAGE = "no nodes available to schedule pods"


@dataclass(frozen=True, slots=True)
class Failure:
    """One failing predicate on one node."""

    predicate: str
    reason: str
    detail: str
    unresolvable: bool


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    node: str
    # Every failing predicate, in policy order; empty when the node fits.
    failures: tuple[Failure, ...]

    @property
    def fits(self) -> bool:
        return not self.failures

    @property
    def reason(self) -> str:
        """The filter's reason for this node: the first failing predicate's."""
        return self.failures[0].reason if self.failures else ""

    @property
    def unresolvable(self) -> bool:
        return bool(self.failures) and self.failures[0].unresolvable


@dataclass(frozen=True, slots=True)
class Explanation:
    pod: PodView
    runtime_class: RuntimeClassView | None
    predicates: tuple[str, ...]
    nodes: tuple[NodeExplanation, ...]

    @property
    def fitting(self) -> int:
        return sum(1 for n in self.nodes if n.fits)

    def reason_counts(self) -> dict[str, int]:
        """Rejected nodes by their filter reason, each node counted once."""
        return dict(Counter(n.reason for n in self.nodes if not n.fits))

    @property
    def summary(self) -> str:
        return availability_message(len(self.nodes), self.fitting, self.reason_counts())


def availability_message(total: int, available: int, reasons: Mapping[str, int]) -> str:
    """kube-scheduler's aggregated message for a filter outcome.

    Mirrors ``FitError.Error`` in pkg/scheduler/framework/types.go: "0/%v nodes are
    available:", then each reason as "<count> <reason>", sorted as strings (Go's
    ``sort.Strings``, byte order, so "10 ..." sorts before "2 ..."), joined by ", " and
    ended with ".". kube-scheduler only prints it when no node is available; when some
    are, the same shape with their count says how many of the rest were rejected why.
    """
    if total == 0:
        return NO_NODES_MESSAGE
    message = f"{available}/{total} nodes are available:"
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    if histogram:
        message += f" {', '.join(histogram)}."
    else:
        message = message[:-1] + "."
    return message


def explain_nodes(
    pod: PodView,
    runtime_class: RuntimeClassView | None,
    nodes: Iterable[NodeView],
    policy: Policy,
) -> Explanation:
    """Every predicate's verdict for ``pod`` on each node, nodes sorted by name."""
    explained = []
    for node in sorted(nodes, key=lambda n: n.name):
        failures = tuple(
            Failure(name, verdict.reason, verdict.detail, verdict.unresolvable)
            for name, verdict in policy.explain(pod, runtime_class, node)
            if not verdict.fits
        )
        explained.append(NodeExplanation(node.name, failures))
    return Explanation(pod, runtime_class, policy.names, tuple(explained))


def explain(pod: PodView, state: ClusterState, policy: Policy) -> Explanation:
    """Explain ``pod`` against every node in ``state`` (its RuntimeClass looked up there)."""
    name = pod.runtime_class_name
    runtime_class = state.runtime_classes.get(name) if name else None
    return explain_nodes(pod, runtime_class, state.nodes.values(), policy)


def runtime_class_pod(name: str) -> PodView:
    """A pod with no tolerations of its own that names RuntimeClass ``name``."""
    return PodView(runtime_class_name=name)


def explanation_to_json(explanation: Explanation, *, warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON form served by ``/explain`` and printed by ``explain -o json|yaml``.

    ``warnings`` are what the serving extender knows beyond the nodes (the filter saw
    kube-scheduler's sampling hide this class's nodes); offline there are none.
    """
    return {
        "pod": pod_to_json(explanation.pod),
        "runtimeClass": runtime_class_to_json(explanation.runtime_class)
        if explanation.runtime_class
        else None,
        "predicates": list(explanation.predicates),
        "summary": explanation.summary,
        "warnings": list(warnings),
        "nodeCount": len(explanation.nodes),
        "fitting": explanation.fitting,
        "reasons": [
            {"reason": reason, "count": count}
            for reason, count in sorted(explanation.reason_counts().items(), key=lambda rc: (-rc[1], rc[0]))
        ],
        "nodes": [
            {
                "name": n.node,
                "fits": n.fits,
                "reason": n.reason,
                "unresolvable": n.unresolvable,
                "failures": [
                    {
                        "predicate": f.predicate,
                        "reason": f.reason,
                        "detail": f.detail,
                        "unresolvable": f.unresolvable,
                    }
                    for f in n.failures
                ],
            }
            for n in explanation.nodes
        ],
    }
