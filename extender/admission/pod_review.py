"""Mutating admission for pods: the pure decision behind ``POST /admission/pods``.

The API server sends an ``admission.k8s.io/v1`` AdmissionReview for each pod CREATE the
webhook configuration matches (deploy/components/pod-webhook: only pods that name a
RuntimeClass); ``review_pod`` answers it from the body and the watch-fed
``ClusterState`` alone, allowing with a JSONPatch, allowing unchanged, or denying.

Two jobs, for two holes in predicate mode (docs/pod-webhook.md):

**Pod Overhead, always on**, as the in-tree RuntimeClass admission plugin does it
(kubernetes/kubernetes plugin/pkg/admission/runtimeclass/admission.go: ``setOverhead``
in its mutating half, ``validateOverhead`` in its validating half). With
``--disable-admission-plugins=RuntimeClass`` nothing else sets ``spec.overhead``:

- the class has ``overhead`` and the pod no (or an empty) ``spec.overhead``: set it to
  ``overhead.podFixed``. An empty one counts as none: ``overhead`` is ``omitempty``, so
  the API server never sends one to a webhook (the plugin, which sees the decoded
  object, rejects an explicit ``{}`` as not matching; only other callers can tell);
- the pod's non-empty overhead differs from ``podFixed`` (by value: ``1Gi`` equals
  ``1024Mi``, policies/quantity.py): deny, ``pod rejected: Pod's Overhead doesn't match
  RuntimeClass's defined Overhead``;
- the pod has an overhead and its class has no ``overhead``: deny, ``pod rejected: Pod
  Overhead set without corresponding RuntimeClass defined Overhead``.

Where the plugin is enabled it has run before any webhook (built-in mutating plugins
first), so the pod arrives with the class's overhead and this is a no-op.

**Routing, opt-in** (``RoutingConfig.scheduler_name``, from ``serve
--route-pods-to-scheduler``): a pod that names a RuntimeClass and whose
``schedulerName`` is unset or ``default-scheduler`` (defaulting has run before mutating
webhooks, so an unset one arrives as ``default-scheduler``) is sent to the RuntimeClass
scheduler. Never rerouted: a pod naming any other scheduler (its author chose); a pod
labelled ``runtimeclass-extender.dev/webhook: ignore``; a pod in ``kube-system`` or the
extender's own namespace (a scheduler must not depend on itself to be scheduled). The
pod label opts out of routing only: overhead is not a choice a pod makes, the plugin
sets it for every pod. The namespace label is the webhook configuration's business
(``namespaceSelector``): such pods never reach this code.

**The class's node label, with ``serve --label-nodes``** (``RoutingConfig.class_labels``):
a pod whose class has node rules gets ``spec.nodeSelector["<prefix>/<class>"] = "true"``,
the label the leader keeps on exactly the nodes that fit the class
(``extender.cluster.class_labels``), so kube-scheduler's NodeAffinity filter narrows to
them before it samples. ``spec.nodeSelector`` is ANDed with everything else the pod
asks for (``RequiredNodeAffinity``, component-helpers/scheduling/corev1/nodeaffinity),
so one more entry constrains a pod with any affinity. A pod that already asks for
another value of that label is denied, as the in-tree plugin denies a conflicting
selector. Opted-out pods and namespaces, as for routing, get no label; nor does a pod
whose class is unknown or whose rules select every node, nor one whose nodeSelector
holds its class's whole scheduling.nodeSelector when that is all of its node rules (the
in-tree RuntimeClass plugin merged it: ``extender.admission.pod_table``,
``unlessNodeSelector``).

**The class's tolerations, with ``--label-nodes``**: a pod of a class with tolerations
gets each of them the extender honours (``pod_tolerations``: NoSchedule ones) that no
toleration of its own covers (``covers``: one with no operator for the same value, one
with ``Exists``, one with no key), as the in-tree RuntimeClass plugin merges them
(``setScheduling``), so
that an autoscaler, which judges a node group's taints by a pod's own tolerations, can
pick a tainted group for it. Not opted-out pods.

**The autoscalers' annotations, without ``--label-nodes``** (``RoutingConfig.node_rules``:
which classes have node rules under the policy): a pod whose class has node rules gets
``AUTOSCALER_ANNOTATIONS`` (``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``,
``karpenter.sh/do-not-disrupt: "true"``), each where the pod does not set it, so that
cluster-autoscaler and Karpenter, which judge where a pod could move by the in-tree
filters alone, never remove the node it runs on believing it could run elsewhere
(``extender.admission.pod_table`` says more). Not a pod whose ``nodeSelector`` already
holds its class's ``scheduling.nodeSelector``, when that is all of the class's node
rules (the in-tree RuntimeClass plugin merged it, with the plugin on: the autoscalers
see it); not opted-out pods.

**A class that does not exist (yet)**: allowed without overhead, with a warning. The
in-tree plugin rejects such a pod; KEP-585 lets it wait instead, and the
``RuntimeClassExists`` predicate keeps it pending until the class exists. It is still
routed, so that predicate sees it. Its overhead cannot follow later: ``spec.overhead``
is immutable, which the warning says.

**Cache only**, as the RuntimeClass review: no API call on the request path. Before the
cache has synced a missing class may just be unseen, so the review sets no overhead and
warns, but never blocks (the API server would hold the user's request meanwhile;
``/readyz`` keeps the Service from sending reviews to an unsynced extender anyway).

Idempotent, as ``reinvocationPolicy: IfNeeded`` requires: a pod already routed and
carrying its class's overhead gets no patch. Misrouted reviews (another kind,
operation or a subresource) are allowed unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import BaseModel, ValidationError

from extender.admission.pod_table import AUTOSCALER_ANNOTATIONS, pod_tolerations
from extender.admission.reviews import (
    MAX_MESSAGE_CHARS,
    WIRE,
    AdmissionRequest,
    ReviewError,
    fit,
    parse_review,
    response_body,
    shorten,
)
from extender.cluster.class_labels import LABEL_VALUE, ClassLabels
from extender.cluster.objects import describe_validation_error
from extender.cluster.state import ClusterState
from extender.kube.defaults import DEFAULT_SCHEDULER
from policies.quantity import QuantityError, resource_lists_equal

__all__ = [
    "DEFAULT_SCHEDULER",
    "NEVER_ROUTED_NAMESPACES",
    "PATCHED_FIELDS",
    "POD_RESULTS",
    "WEBHOOK_LABEL",
    "PatchedField",
    "PodResult",
    "PodReviewOutcome",
    "RoutingConfig",
    "review_pod",
]

PodResult = Literal["patched", "unchanged", "denied"]
POD_RESULTS: Final[tuple[PodResult, ...]] = ("patched", "unchanged", "denied")
PatchedField = Literal["overhead", "schedulerName", "nodeSelector", "tolerations", "annotations"]
PATCHED_FIELDS: Final[tuple[PatchedField, ...]] = (
    "overhead",
    "schedulerName",
    "nodeSelector",
    "tolerations",
    "annotations",
)

# The pod (and namespace) label that opts out; its one meaningful value.
WEBHOOK_LABEL: Final = "runtimeclass-extender.dev/webhook"
_IGNORE: Final = "ignore"
# What the API server's defaulting writes into a pod that names no scheduler
# (pkg/apis/core/v1/defaults.go, SetDefaults_PodSpec; v1.DefaultSchedulerName).
NEVER_ROUTED_NAMESPACES: Final = frozenset({"kube-system"})

# The in-tree plugin's messages, word for word (admission.go), so users and searches
# find the same text whichever of the two rejected their pod.
MISMATCH: Final = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
WITHOUT_CLASS_OVERHEAD: Final = (
    "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
)

_SPEC_OVERHEAD = "/spec/overhead"
_SPEC_SCHEDULER_NAME = "/spec/schedulerName"
_SPEC_NODE_SELECTOR = "/spec/nodeSelector"
_ANNOTATIONS = "/metadata/annotations"
_SPEC_TOLERATIONS = "/spec/tolerations"


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """Routing settings: off when ``scheduler_name`` is None."""

    scheduler_name: str | None = None
    # The extender's own namespace ("" when unknown): its pods are never routed.
    own_namespace: str = ""
    # With label-nodes: the labels pods of a class with node rules must require.
    class_labels: ClassLabels | None = None
    # Which classes have node rules under the extender's policy: without label-nodes,
    # their pods get the autoscalers' annotations (None: none).
    node_rules: ClassLabels | None = None

    def never_routed(self, namespace: str) -> bool:
        return namespace in NEVER_ROUTED_NAMESPACES or (
            bool(self.own_namespace) and namespace == self.own_namespace
        )


@dataclass(frozen=True, slots=True)
class PodReviewOutcome:
    """The answer to one pod AdmissionReview, with what metrics and logs need."""

    response: bytes
    result: PodResult
    # What the patch sets, in PATCHED_FIELDS order (empty unless ``patched``).
    patched: tuple[PatchedField, ...] = ()
    message: str = ""
    warnings: tuple[str, ...] = ()
    # "namespace/name" (generateName + "…" before the pod has a name) and its class.
    pod: str = ""
    runtime_class: str = ""
    patch: tuple[Mapping[str, Any], ...] = field(default=())

    @property
    def allowed(self) -> bool:
        return self.result != "denied"


class _PodMeta(BaseModel):
    model_config = WIRE
    name: str = ""
    generateName: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class _PodSpec(BaseModel):
    model_config = WIRE
    runtimeClassName: str | None = None
    schedulerName: str | None = None
    nodeSelector: dict[str, str] | None = None
    # ResourceList: quantities are strings on the wire (Quantity.MarshalJSON).
    overhead: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None


class _Pod(BaseModel):
    model_config = WIRE
    metadata: _PodMeta = _PodMeta()
    spec: _PodSpec = _PodSpec()


def review_pod(body: bytes, state: ClusterState, routing: RoutingConfig) -> PodReviewOutcome:
    """Answer one AdmissionReview request body for a pod. Raises ReviewError for a bad body."""
    request = parse_review(body).request
    checked = (
        request.operation == "CREATE"
        and request.kind.group == ""
        and request.kind.version == "v1"
        and request.kind.kind == "Pod"
        # pods/binding, pods/ephemeralcontainers...: the plugin ignores subresources too.
        and not request.subResource
    )
    if not checked:
        return _answer(request, "unchanged")
    if request.object is None:
        raise ReviewError("request.object: missing (required for CREATE of a Pod)")
    try:
        pod = _Pod.model_validate(request.object)
    except ValidationError as exc:
        raise ReviewError(describe_validation_error(exc, "request.object")) from None
    class_name = pod.spec.runtimeClassName or ""
    key = _pod_key(request, pod)
    if not class_name:
        # The webhook configuration's matchCondition sends only pods with a class; a
        # pod without one is none of the plugin's business either.
        return _answer(request, "unchanged", pod=key)

    patch: list[dict[str, Any]] = []
    patched: list[PatchedField] = []
    warnings: list[str] = []
    pod_overhead = pod.spec.overhead or {}

    if not state.synced:
        warnings.append(
            fit(
                "RuntimeClass {name}: overhead not checked, the extender's cache is not synced yet",
                name=class_name,
            )
        )
    elif (runtime_class := state.runtime_classes.get(class_name)) is None:
        warnings.append(
            fit(
                "RuntimeClass {name} not found: the pod waits for it, and never gets its overhead (immutable)",
                name=class_name,
            )
        )
    else:
        class_overhead = runtime_class.overhead
        try:
            equal = resource_lists_equal(class_overhead, pod_overhead)
        except QuantityError as exc:
            # Only the pod's side can be bad: the class's was checked when it was loaded.
            # A real API server has decoded every Quantity before webhooks run.
            return _answer(
                request,
                "denied",
                message=shorten(f"spec.overhead: {exc}", MAX_MESSAGE_CHARS),
                pod=key,
                runtime_class=class_name,
            )
        if class_overhead is None:
            if pod_overhead:
                return _answer(
                    request, "denied", message=WITHOUT_CLASS_OVERHEAD, pod=key, runtime_class=class_name
                )
        elif pod_overhead and not equal:
            return _answer(request, "denied", message=MISMATCH, pod=key, runtime_class=class_name)
        elif not pod_overhead and class_overhead:
            # "add" replaces an existing (empty) member too (RFC 6902 §4.1). The path is
            # fixed; the resource names (which may hold "/") travel in the value, so
            # no JSON Pointer escaping is needed.
            patch.append({"op": "add", "path": _SPEC_OVERHEAD, "value": dict(class_overhead)})
            patched.append("overhead")
        labels = routing.class_labels
        if (
            labels is not None
            and labels.has_node_rules(runtime_class)
            and not _shows(pod, labels.visible_selector(runtime_class))
            and not _opted_out(request, pod, routing)
        ):
            key_name = labels.key(class_name)
            wanted = (pod.spec.nodeSelector or {}).get(key_name)
            if wanted is not None and wanted != LABEL_VALUE:
                return _answer(
                    request,
                    "denied",
                    message=shorten(
                        f"conflict: RuntimeClass {class_name} requires {key_name} = {LABEL_VALUE}; "
                        f"pod.spec.nodeSelector[{key_name}] = {wanted}",
                        MAX_MESSAGE_CHARS,
                    ),
                    pod=key,
                    runtime_class=class_name,
                )
            if wanted is None:
                patch.append(_require_label(pod, key_name))
                patched.append("nodeSelector")
        if labels is not None and not _opted_out(request, pod, routing):
            tolerating = _tolerate(pod, pod_tolerations(runtime_class))
            if tolerating:
                patch.extend(tolerating)
                patched.append("tolerations")
        rules = routing.node_rules
        if (
            labels is None
            and rules is not None
            and rules.has_node_rules(runtime_class)
            and not _shows(pod, rules.visible_selector(runtime_class))
            and not _opted_out(request, pod, routing)
        ):
            added = _annotate(pod)
            if added:
                patch.extend(added)
                patched.append("annotations")

    if _routes(request, pod, routing):
        scheduler = routing.scheduler_name
        op = "add" if pod.spec.schedulerName is None else "replace"
        patch.append({"op": op, "path": _SPEC_SCHEDULER_NAME, "value": scheduler})
        patched.append("schedulerName")

    return _answer(
        request,
        "patched" if patch else "unchanged",
        patch=tuple(patch),
        patched=tuple(patched),
        warnings=tuple(warnings),
        pod=key,
        runtime_class=class_name,
    )


def _routes(request: AdmissionRequest, pod: _Pod, routing: RoutingConfig) -> bool:
    if routing.scheduler_name is None:
        return False
    current = pod.spec.schedulerName or ""
    if current not in ("", DEFAULT_SCHEDULER) or current == routing.scheduler_name:
        return False
    return not _opted_out(request, pod, routing)


def _opted_out(request: AdmissionRequest, pod: _Pod, routing: RoutingConfig) -> bool:
    if (pod.metadata.labels or {}).get(WEBHOOK_LABEL) == _IGNORE:
        return True
    return routing.never_routed(request.namespace or pod.metadata.namespace)


def _require_label(pod: _Pod, key: str) -> dict[str, Any]:
    """The JSONPatch operation adding ``key: "true"`` to the pod's nodeSelector."""
    if pod.spec.nodeSelector is None:
        return {"op": "add", "path": _SPEC_NODE_SELECTOR, "value": {key: LABEL_VALUE}}
    # RFC 6901: "~" and "/" in a member name are escaped as "~0" and "~1".
    escaped = key.replace("~", "~0").replace("/", "~1")
    return {"op": "add", "path": f"{_SPEC_NODE_SELECTOR}/{escaped}", "value": LABEL_VALUE}


def _tolerate(pod: _Pod, tolerations: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The JSONPatch operations adding each of ``tolerations`` that no toleration of the
    pod already covers (``covers``; the whole list where the pod has none)."""
    own = pod.spec.tolerations
    if own is None:
        return [{"op": "add", "path": _SPEC_TOLERATIONS, "value": tolerations}] if tolerations else []
    return [
        {"op": "add", "path": _SPEC_TOLERATIONS + "/-", "value": t}
        for t in tolerations
        if not any(covers(o, t) for o in own)
    ]


def covers(superset: Mapping[str, Any], toleration: Mapping[str, Any]) -> bool:
    """``superset`` tolerates everything ``toleration`` does, as the in-tree plugin's merge
    decides it: ``isSuperset`` in pkg/util/tolerations/tolerations.go (MergeTolerations,
    which the RuntimeClass admission plugin's setScheduling calls). An absent field is
    empty; an empty key with ``Exists`` covers every key, an empty effect every effect;
    an ``Equal`` (or empty) operator covers only an ``Equal`` toleration of its value."""

    def field(t: Mapping[str, Any], name: str) -> Any:
        value = t.get(name)
        return value if name == "tolerationSeconds" else value or ""

    names = ("key", "operator", "value", "effect", "tolerationSeconds")
    if all(field(superset, n) == field(toleration, n) for n in names):
        return True
    key, operator = field(superset, "key"), field(superset, "operator")
    if field(toleration, "key") != key and (key != "" or operator != "Exists"):
        return False
    effect = field(superset, "effect")
    if field(toleration, "effect") != effect and effect != "":
        return False
    if effect == "NoExecute" and field(superset, "tolerationSeconds") is not None:
        seconds = field(toleration, "tolerationSeconds")
        if seconds is None or seconds > field(superset, "tolerationSeconds"):
            return False
    if operator in ("Equal", ""):
        return bool(field(toleration, "operator") == "Equal" and field(toleration, "value") == field(superset, "value"))
    return bool(operator == "Exists")


def _shows(pod: _Pod, selector: Mapping[str, str] | None) -> bool:
    """The pod's nodeSelector holds ``selector``, all of its class's node rules (None:
    some rule no selector can show)."""
    if selector is None:
        return False
    own = pod.spec.nodeSelector or {}
    return all(own.get(key) == value for key, value in selector.items())


def _annotate(pod: _Pod) -> list[dict[str, Any]]:
    """The JSONPatch operations adding each of the autoscalers' annotations the pod does
    not set (the whole map where it has none: an "add" below a missing member fails)."""
    own = pod.metadata.annotations
    if own is None:
        return [{"op": "add", "path": _ANNOTATIONS, "value": dict(AUTOSCALER_ANNOTATIONS)}]
    return [
        {"op": "add", "path": f"{_ANNOTATIONS}/{key.replace('~', '~0').replace('/', '~1')}", "value": value}
        for key, value in AUTOSCALER_ANNOTATIONS
        if key not in own
    ]


def _pod_key(request: AdmissionRequest, pod: _Pod) -> str:
    namespace = request.namespace or pod.metadata.namespace
    name = (
        pod.metadata.name
        or request.name
        or (pod.metadata.generateName + "…" if pod.metadata.generateName else "")
    )
    return f"{namespace}/{name}" if namespace else name


def _answer(
    request: AdmissionRequest,
    result: PodResult,
    *,
    message: str = "",
    patch: tuple[Mapping[str, Any], ...] = (),
    patched: tuple[PatchedField, ...] = (),
    warnings: tuple[str, ...] = (),
    pod: str = "",
    runtime_class: str = "",
) -> PodReviewOutcome:
    allowed = result != "denied"
    return PodReviewOutcome(
        response=response_body(request.uid, allowed=allowed, message=message, warnings=warnings, patch=patch),
        result=result,
        patched=patched,
        message=message,
        warnings=warnings,
        pod=pod,
        runtime_class=runtime_class,
        patch=patch,
    )
