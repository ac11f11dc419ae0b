"""A plain reference for the filter answer, written for the tests and independent of ``policies``.

It is deliberately the most direct reading of the rules (docs/concepts.md, "How it
decides", with the default policy), with no caches, no precomputation and nothing imported from the
production predicates, so that a disagreement between the two points at a bug in one
of them:

- RuntimeClassExists: a pod naming a class that does not exist fits nowhere.
- RuntimeClassNodeSelector: every ``scheduling.nodeSelector`` key is a node label with
  exactly that value.
- TaintToleration: every ``NoSchedule``/``NoExecute`` taint is tolerated, ``NoSchedule``
  by the pod or its class, ``NoExecute`` by the pod alone; Kubernetes'
  ``Toleration.ToleratesTaint`` (k8s.io/api core/v1 toleration.go) with ``Lt``/``Gt``
  comparing canonical decimal int64 values.

The reference reads plain data: a node is ``{"name", "labels", "taints"}`` and a class
``{"name", "nodeSelector", "tolerations"}``; ``node_from_api`` and ``class_from_api`` cut
them out of API JSON. RuntimeClass annotations (the node-selector term) and the
runtime-handler check are outside this reference: the generators never produce them.

``ObservedStates`` records every state a cluster store passes through, so an answer
given while the state was changing can be checked against the states that were
actually visible during the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

REASON_MISMATCH = "node(s) didn't match RuntimeClass"
REASON_TAINT = "node(s) had untolerated taint(s)"
REASON_UNKNOWN = "node(s) unknown to the RuntimeClass extender"
ERROR_NOT_SYNCED = "cluster state not synced"

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

RefNode = dict[str, Any]
RefClass = dict[str, Any]


def not_found(name: str) -> str:
    return f'RuntimeClass "{name}" not found'


# ----------------------------------------------------------------------------- data


def node_from_api(obj: Mapping[str, Any]) -> RefNode:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    taints = [
        {"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]}
        for t in spec.get("taints") or []
    ]
    return {"name": meta["name"], "labels": dict(meta.get("labels") or {}), "taints": taints}


def class_from_api(obj: Mapping[str, Any]) -> RefClass:
    scheduling = obj.get("scheduling") or {}
    return {
        "name": obj["metadata"]["name"],
        "nodeSelector": dict(scheduling.get("nodeSelector") or {}),
        "tolerations": [
            {k: t.get(k) or "" for k in ("key", "operator", "value", "effect")}
            for t in scheduling.get("tolerations") or []
        ],
    }


# ----------------------------------------------------------------------------- rules


def go_int64(text: str) -> int | None:
    """A toleration/taint value as Kubernetes reads it for Lt/Gt, or None.

    Canonical decimal only: "0", or an optional "-" then digits not starting with 0
    (no "+", no "-0", no leading zeros), and the value must fit in int64.
    """
    if text == "0":
        return 0
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    if not digits or digits[0] == "0":
        return None
    for char in digits:
        if char not in "0123456789":
            return None
    value = -int(digits) if negative else int(digits)
    if value < INT64_MIN or value > INT64_MAX:
        return None
    return value


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    key = toleration.get("key") or ""
    if effect != "" and effect != taint["effect"]:
        return False
    if key != "" and key != taint["key"]:
        return False
    operator = toleration.get("operator") or ""
    value = toleration.get("value") or ""
    if operator == "" or operator == "Equal":
        return bool(value == taint["value"])
    if operator == "Exists":
        return True
    if operator == "Lt" or operator == "Gt":
        limit = go_int64(value)
        actual = go_int64(taint["value"])
        if limit is None or actual is None:
            return False
        if operator == "Lt":
            return actual < limit
        return actual > limit
    return False


def reject_reason(pod: Mapping[str, Any], runtime_class: RefClass | None, node: RefNode) -> str | None:
    """The reason the default policy gives ``node`` for ``pod``, or None when it fits."""
    spec = pod.get("spec") or {}
    class_name = spec.get("runtimeClassName") or ""
    pod_tolerations = spec.get("tolerations") or []
    if class_name != "" and runtime_class is None:
        return not_found(class_name)
    if runtime_class is not None:
        for key, wanted in runtime_class["nodeSelector"].items():
            if node["labels"].get(key) != wanted:
                return REASON_MISMATCH
    class_tolerations = runtime_class["tolerations"] if runtime_class is not None else []
    for taint in node["taints"]:
        if taint["effect"] != "NoSchedule" and taint["effect"] != "NoExecute":
            continue
        ok = any(tolerates(t, taint) for t in pod_tolerations)
        if not ok and taint["effect"] == "NoSchedule":
            ok = any(tolerates(t, taint) for t in class_tolerations)
        if not ok:
            return REASON_TAINT
    return None


# ----------------------------------------------------------------------------- answers


def answer_names(
    pod: Mapping[str, Any],
    names: Sequence[str],
    nodes: Mapping[str, RefNode],
    classes: Mapping[str, RefClass],
    *,
    synced: bool = True,
) -> dict[str, Any]:
    """The ExtenderFilterResult for a names-mode request (as parsed JSON)."""
    if not synced:
        return {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": ERROR_NOT_SYNCED,
        }
    class_name = (pod.get("spec") or {}).get("runtimeClassName") or ""
    runtime_class = classes.get(class_name) if class_name else None
    passing: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for name in names:
        if name in passing or name in failed or name in unresolvable:
            continue
        node = nodes.get(name)
        if node is None:
            failed[name] = REASON_UNKNOWN
            continue
        reason = reject_reason(pod, runtime_class, node)
        if reason is None:
            passing.append(name)
        else:
            unresolvable[name] = reason
    return {
        "Nodes": None,
        "NodeNames": passing,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }


def answer_full_nodes(
    pod: Mapping[str, Any],
    items: Sequence[Mapping[str, Any]],
    classes: Mapping[str, RefClass],
    *,
    synced: bool = True,
) -> dict[str, Any]:
    """The ExtenderFilterResult for a full-nodes request: passing items echoed as sent."""
    if not synced:
        return answer_names(pod, [], {}, classes, synced=False)
    class_name = (pod.get("spec") or {}).get("runtimeClassName") or ""
    runtime_class = classes.get(class_name) if class_name else None
    kept: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    unresolvable: dict[str, str] = {}
    for item in items:
        node = node_from_api(item)
        if node["name"] in seen:
            continue
        seen.add(node["name"])
        reason = reject_reason(pod, runtime_class, node)
        if reason is None:
            kept.append(item)
        else:
            unresolvable[node["name"]] = reason
    return {
        "Nodes": {"metadata": {}, "items": kept},
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }


# ----------------------------------------------------------------------------- observed states


@dataclass(frozen=True)
class Snapshot:
    """What a cluster store held at one moment, in the reference's plain form."""

    nodes: Mapping[str, RefNode]
    classes: Mapping[str, RefClass]
    nodes_synced: bool
    classes_synced: bool


@dataclass
class ObservedStates:
    """Every state a store pair passed through, appended by change listeners.

    ``take`` is given a function that returns the current Snapshot (it reads the
    production store); ``mark()`` is the index of the newest state. An answer given
    between ``mark()`` before and after a call must equal the reference on one of the
    states ``states[before:after + 1]``: nothing else was visible to the call.
    """

    take: Callable[[], Snapshot]
    states: list[Snapshot] = field(default_factory=list)

    def record(self, *_args: object) -> None:
        self.states.append(self.take())

    def mark(self) -> int:
        # Always a fresh snapshot: not every change notifies (a store flips ``synced``
        # after its listeners ran), and nothing can change while this runs.
        self.record()
        return len(self.states) - 1

    def window(self, before: int, after: int) -> Sequence[Snapshot]:
        return self.states[before : after + 1]

    def trim(self) -> None:
        """Forget all but the newest state (only when no call is in flight)."""
        if self.states:
            self.states = self.states[-1:]


def snapshot_of(state: Any) -> Snapshot:
    """The reference's view of a production ``ClusterState`` (read by attribute only).

    Classes with the node-selector-term annotation are outside the reference; they
    are marked so a comparison fails loudly rather than silently disagreeing.
    """
    nodes = {
        name: {
            "name": view.name,
            "labels": dict(view.labels),
            "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in view.taints],
        }
        for name, view in state.nodes.items()
    }
    classes = {}
    for name, view in state.runtime_classes.items():
        if view.match_expressions is not None or view.selector_error is not None:
            raise AssertionError(
                f"RuntimeClass {name} uses the annotation, which the reference does not model"
            )
        classes[name] = {
            "name": view.name,
            "nodeSelector": dict(view.node_selector),
            "tolerations": [
                {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
                for t in view.tolerations
            ],
        }
    return Snapshot(nodes, classes, state.nodes.synced, state.runtime_classes.synced)


def server_snapshot(nodes: Iterable[Mapping[str, Any]], classes: Iterable[Mapping[str, Any]]) -> Snapshot:
    """The reference's view of API objects (e.g. the fake API server's true state)."""
    node_map = {n["name"]: n for n in map(node_from_api, nodes)}
    class_map = {c["name"]: c for c in map(class_from_api, classes)}
    return Snapshot(node_map, class_map, True, True)


def matches_some_state(
    answer: Mapping[str, Any],
    request: Mapping[str, Any],
    states: Iterable[Snapshot],
) -> bool:
    """Whether ``answer`` equals the reference's answer on at least one of ``states``."""
    return any(normalise(answer) == normalise(expected_answer(request, state)) for state in states)


def expected_answer(request: Mapping[str, Any], state: Snapshot) -> dict[str, Any]:
    """The reference's answer to a parsed request, on one state."""
    pod = request.get("Pod") or {}
    if request.get("NodeNames") is not None:
        return answer_names(
            pod,
            request["NodeNames"],
            state.nodes,
            state.classes,
            synced=state.nodes_synced and state.classes_synced,
        )
    items = (request.get("Nodes") or {}).get("items") or []
    return answer_full_nodes(pod, items, state.classes, synced=state.classes_synced)


def difference(answer: Mapping[str, Any], expected: Mapping[str, Any]) -> str:
    """A short description of how two answers differ (for failure messages)."""
    got, want = normalise(answer), normalise(expected)
    parts = []
    for key in want:
        if got[key] != want[key]:
            if isinstance(want[key], dict) and isinstance(got[key], dict):
                keys = set(got[key]) | set(want[key])
                diff = {
                    k: (got[key].get(k), want[key].get(k))
                    for k in keys
                    if got[key].get(k) != want[key].get(k)
                }
                parts.append(f"{key} (got, expected): {diff}")
            else:
                parts.append(f"{key}: got {got[key]!r}, expected {want[key]!r}")
    return "; ".join(parts)


def normalise(answer: Mapping[str, Any]) -> Mapping[str, Any]:
    """An answer with its maps as plain dicts and its passing names sorted, ready for
    ``==``. The order of maps is free, and so is the order of ``NodeNames``:
    kube-scheduler maps the names back to its nodes by name (pkg/scheduler/extender.go,
    ``HTTPExtender.Filter``), and the extender promises none (docs/reference.md,
    ``POST /filter``). Sorted, not a set: a name passing twice still differs."""
    names = answer.get("NodeNames")
    return {
        "Nodes": answer.get("Nodes"),
        "NodeNames": sorted(names) if names is not None else None,
        "FailedNodes": dict(answer.get("FailedNodes") or {}),
        "FailedAndUnresolvableNodes": dict(answer.get("FailedAndUnresolvableNodes") or {}),
        "Error": answer.get("Error", ""),
    }
