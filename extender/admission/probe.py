"""What pod admission should make of a probe pod, and how far the API server's answer is from it.

``check-pod-admission`` (``extender.tools.pod_admission``) creates one pod of each
RuntimeClass with ``dryRun=All`` and compares the pod the API server answers with what
the pod webhook's own review (``review_pod``) makes of the same pod. Whichever way the
cluster admits pods (the admission policies of components/pod-admission-policy, or the
pod webhook), the answer must be the webhook's: routed to the RuntimeClass scheduler,
the class's overhead, with the node labels the class's node-label requirement and
tolerations, otherwise the autoscalers' annotations. A
served MutatingAdmissionPolicy is not proof that it runs (an API server with the
feature gate off accepts policies and runs none), so this is how an install proves it.

Pure: dicts in, dicts and sentences out.

The probe pod passes the Pod Security Standards' ``restricted`` profile (a namespace
that enforces it must not refuse it for a reason unrelated to the check): a non-root
user, no privilege escalation, every capability dropped, the runtime's seccomp profile.
A dry run never pulls its image.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from extender.admission.pod_review import RoutingConfig, review_pod
from extender.admission.pod_table import ADMITTED_LABEL, AUTOSCALER_ANNOTATIONS
from extender.admission.reviews import API_VERSION, KIND
from extender.cluster.state import ClusterState
from extender.kube.defaults import DEFAULT_SCHEDULER
from policies.quantity import QuantityError, resource_lists_equal

# The annotations pod admission sets: the autoscalers'.
_AUTOSCALER_KEYS: Final = frozenset(key for key, _ in AUTOSCALER_ANNOTATIONS)
# The labels it sets: the default-scheduler placement's admitted mark.
_MARKS: Final = frozenset({ADMITTED_LABEL})

__all__ = [
    "PROBE_IMAGE",
    "Admission",
    "apply_patch",
    "differences",
    "expected_admission",
    "probe_pod",
    "summary",
]

PROBE_IMAGE: Final = "registry.k8s.io/pause:3.10"
_UID: Final = "00000000-0000-4000-8000-00000000c4ec"


def probe_pod(name: str, namespace: str, runtime_class: str) -> dict[str, Any]:
    """A pod of ``runtime_class`` as a user would write it: no scheduler, no overhead, no
    node selector."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "runtimeclass-extender-check"},
        },
        "spec": {
            "runtimeClassName": runtime_class,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": PROBE_IMAGE,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


@dataclass(frozen=True)
class Admission:
    """A pod as admission left it, or the refusal's message (``pod`` is then None)."""

    pod: Mapping[str, Any] | None
    refusal: str = ""


def expected_admission(pod: Mapping[str, Any], state: ClusterState, routing: RoutingConfig) -> Admission:
    """What the pod webhook makes of ``pod`` (after the API server's defaulting, which
    names ``default-scheduler`` when the pod names none: pkg/apis/core/v1/defaults.go)."""
    defaulted = copy.deepcopy(dict(pod))
    spec = defaulted.setdefault("spec", {})
    if not spec.get("schedulerName"):
        spec["schedulerName"] = DEFAULT_SCHEDULER
    metadata = defaulted.get("metadata") or {}
    review = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "request": {
            "uid": _UID,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": metadata.get("name", ""),
            "namespace": metadata.get("namespace", ""),
            "operation": "CREATE",
            "userInfo": {},
            "object": defaulted,
        },
    }
    outcome = review_pod(orjson.dumps(review), state, routing)
    if not outcome.allowed:
        return Admission(None, outcome.message)
    return Admission(apply_patch(defaulted, outcome.patch))


def apply_patch(obj: Mapping[str, Any], operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``obj`` with the JSON Patch (RFC 6902) ``add`` and ``replace`` operations on object
    members that the pod review writes; ValueError for anything else."""
    result = copy.deepcopy(dict(obj))
    for operation in operations:
        op, path = operation.get("op"), str(operation.get("path", ""))
        if op not in ("add", "replace") or not path.startswith("/"):
            raise ValueError(f"unsupported JSON Patch operation: {dict(operation)}")
        # RFC 6901: "~1" is "/", then "~0" is "~".
        *parents, last = (token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/"))
        target: Any = result
        for token in parents:
            target = target.get(token) if isinstance(target, dict) else None
        if op == "add" and last == "-" and isinstance(target, list):
            target.append(copy.deepcopy(operation.get("value")))
            continue
        if not isinstance(target, dict) or (op == "replace" and last not in target):
            raise ValueError(f"JSON Patch {op} {path}: no such member")
        target[last] = copy.deepcopy(operation.get("value"))
    return result


def differences(expected: Admission, got: Admission, *, label_prefix: str, marks: bool = True) -> list[str]:
    """Where the pod ``got`` from the API server is not the ``expected`` one, in the
    fields pod admission sets: schedulerName, overhead (by value), the nodeSelector
    entries under ``label_prefix``, the autoscalers' annotations, the NoSchedule
    tolerations (other mutations of the cluster's own are not ours to judge) and, with
    ``marks``, the admitted mark: the default-scheduler placement's guard reads it; in
    predicate mode nothing does, and the policies set it where the pod webhook does not.
    Empty: the same."""
    if expected.pod is None or got.pod is None:
        if expected.pod is None and got.pod is None:
            return []
        if got.pod is None:
            return [f"refused: {got.refusal}"]
        return [f"admitted, but the pod webhook refuses it: {expected.refusal}"]
    want, have = _fields(expected.pod, label_prefix), _fields(got.pod, label_prefix)
    found = []
    if have["schedulerName"] != want["schedulerName"]:
        found.append(f"schedulerName {have['schedulerName'] or '(none)'}, want {want['schedulerName']}")
    try:
        same_overhead = resource_lists_equal(have["overhead"], want["overhead"])
    except QuantityError:
        same_overhead = False
    if not same_overhead:
        found.append(f"overhead {_resources(have['overhead'])}, want {_resources(want['overhead'])}")
    if have["labels"] != want["labels"]:
        found.append(f"node label {_labels(have['labels'])}, want {_labels(want['labels'])}")
    if have["annotations"] != want["annotations"]:
        found.append(f"annotations {_labels(have['annotations'])}, want {_labels(want['annotations'])}")
    if marks and have["marks"] != want["marks"]:
        found.append(f"pod labels {_labels(have['marks'])}, want {_labels(want['marks'])}")
    if have["tolerations"] != want["tolerations"]:
        found.append(
            f"NoSchedule tolerations {_tolerations(have['tolerations'])}, "
            f"want {_tolerations(want['tolerations'])}"
        )
    return found


def summary(admission: Admission, *, label_prefix: str) -> dict[str, str]:
    """The admitted pod's fields as the table shows them."""
    if admission.pod is None:
        return {"schedulerName": "", "overhead": "", "nodeLabel": ""}
    fields = _fields(admission.pod, label_prefix)
    return {
        "schedulerName": str(fields["schedulerName"] or "(none)"),
        "overhead": _resources(fields["overhead"]),
        "nodeLabel": _labels(fields["labels"]),
    }


def _fields(pod: Mapping[str, Any], label_prefix: str) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    owned = label_prefix + "/"
    return {
        "schedulerName": spec.get("schedulerName") or "",
        "overhead": dict(spec.get("overhead") or {}),
        "labels": {k: v for k, v in (spec.get("nodeSelector") or {}).items() if k.startswith(owned)},
        "annotations": {k: v for k, v in annotations.items() if k in _AUTOSCALER_KEYS},
        "marks": {k: v for k, v in (metadata.get("labels") or {}).items() if k in _MARKS},
        # The API server adds NoExecute tolerations of its own (DefaultTolerationSeconds:
        # plugin/pkg/admission/defaulttolerationseconds); pod admission adds NoSchedule ones.
        "tolerations": sorted(
            _toleration(t) for t in spec.get("tolerations") or () if t.get("effect", "") in ("", "NoSchedule")
        ),
    }


def _toleration(toleration: Mapping[str, Any]) -> str:
    key, operator = toleration.get("key", ""), toleration.get("operator") or "Equal"
    value, effect = toleration.get("value", ""), toleration.get("effect", "")
    match = f"{key}={value}" if operator == "Equal" else f"{key} {operator}"
    return f"{match}:{effect}" if effect else match


def _tolerations(tolerations: Sequence[str]) -> str:
    return ",".join(tolerations) or "(none)"


def _resources(resources: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(resources.items())) or "(none)"


def _labels(labels: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "(none)"
