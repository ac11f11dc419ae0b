"""Turning one filter request into one filter answer.

The rules are kube-scheduler's (pkg/scheduler/extender.go, ``Filter``): answer in the
form asked (names for names, node objects for node objects), always send the passing
list even when empty, put every rejected node in exactly one failure map, and never
name a node that was not asked about. Duplicated names are answered once.

Which node fails and why is the policy's business (``policies``); this module only
looks nodes up and sorts verdicts into the two maps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.cluster.objects import nodes_from_api
from extender.cluster.state import ClusterState
from extender.protocol import ExtenderArgs, ExtenderFilterResult
from policies.objects import NodeView, PodView, RuntimeClassView
from policies.registry import Policy
from policies.verdict import REASON_NODE_UNKNOWN, Verdict

ERROR_NOT_SYNCED = "cluster state not synced"


@dataclass
class Decision:
    """A filter answer plus what the logs and explain want to know about it."""

    result: ExtenderFilterResult
    pod: PodView
    runtime_class: RuntimeClassView | None = None
    # Per rejected node: the predicate's detail (which label, which taint).
    details: dict[str, str] = field(default_factory=dict)


class _Sorter:
    """Collects verdicts into the two failure maps."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}
        self.unresolvable: dict[str, str] = {}
        self.details: dict[str, str] = {}

    def reject(self, name: str, verdict: Verdict) -> None:
        (self.unresolvable if verdict.unresolvable else self.failed)[name] = verdict.reason
        self.details[name] = verdict.detail


def not_synced_result() -> ExtenderFilterResult:
    return ExtenderFilterResult.model_construct(
        Nodes=None, NodeNames=None, FailedNodes={}, FailedAndUnresolvableNodes={}, Error=ERROR_NOT_SYNCED
    )


def missing_node_names(args: ExtenderArgs, state: ClusterState) -> list[str]:
    """Names-mode node names the state does not hold (candidates for a direct lookup)."""
    if args.NodeNames is None:
        return []
    nodes = state.nodes
    return [name for name in args.NodeNames if name not in nodes]


def decide(
    args: ExtenderArgs,
    state: ClusterState,
    policy: Policy,
    *,
    extra_nodes: Mapping[str, NodeView] | None = None,
    unknown_reason: Mapping[str, str] | None = None,
) -> Decision:
    """Answer one filter request from ``state``.

    ``extra_nodes`` are nodes fetched directly because the state had not seen them
    yet; ``unknown_reason`` can override the reason (and detail) for names that could
    not be found at all. Raises ``ObjectError`` for malformed node objects in a
    full-nodes request.
    """
    pod = args.Pod.view()
    if not state.runtime_classes.synced or (args.names_mode and not state.nodes.synced):
        return Decision(not_synced_result(), pod)
    runtime_class = state.runtime_classes.get(pod.runtime_class_name) if pod.runtime_class_name else None
    sorter = _Sorter()

    if args.NodeNames is not None:
        passing: list[str] = []
        seen: set[str] = set()
        known = state.nodes.items()
        extra = extra_nodes or {}
        for name in args.NodeNames:
            if name in seen:
                continue
            seen.add(name)
            node = known.get(name) or extra.get(name)
            if node is None:
                detail = (unknown_reason or {}).get(name, f"node {name!r} is not in the extender's cache")
                sorter.reject(name, Verdict(False, REASON_NODE_UNKNOWN, unresolvable=False, detail=detail))
                continue
            verdict = policy.evaluate(pod, runtime_class, node)
            if verdict.fits:
                passing.append(name)
            else:
                sorter.reject(name, verdict)
        result = ExtenderFilterResult.model_construct(
            Nodes=None,
            NodeNames=passing,
            FailedNodes=sorter.failed,
            FailedAndUnresolvableNodes=sorter.unresolvable,
            Error="",
        )
    else:
        assert args.Nodes is not None
        items = args.Nodes.items or []
        views = nodes_from_api(items)
        kept: list[dict[str, Any]] = []
        seen = set()
        for raw, node in zip(items, views, strict=True):
            if node.name in seen:
                continue
            seen.add(node.name)
            verdict = policy.evaluate(pod, runtime_class, node)
            if verdict.fits:
                kept.append(raw)
            else:
                sorter.reject(node.name, verdict)
        result = ExtenderFilterResult.model_construct(
            Nodes={"metadata": {}, "items": kept},
            NodeNames=None,
            FailedNodes=sorter.failed,
            FailedAndUnresolvableNodes=sorter.unresolvable,
            Error="",
        )
    return Decision(result, pod, runtime_class, sorter.details)
