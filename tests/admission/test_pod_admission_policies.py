"""The pod admission policies as shipped (deploy/components/pod-admission-policy): their shape.

What they make of pods is tests/admission/test_pod_admission_both_ways.py's (the same
table through the policies and through the webhook), and on kube-apiserver itself
tests/real/test_pod_admission.py's. Here: that they are bound as the webhook is scoped
(the same namespaces left out, pod CREATE only, failing closed inside the API server),
that the mutating policy takes the one table as its param, by name, and the guard
none, and what their bindings and match conditions let through: nothing for a pod that
names no RuntimeClass, and for a pod of a class only the mutating policy; the guard,
bound by label to the pods the mutating policy marked to refuse, only those.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.admission.pod_table import entry
from extender.cluster.class_labels import ClassLabels
from extender.cluster.objects import runtime_class_from_api
from extender.policy_file import load_policy
from extender.settings import DEFAULT_NODE_LABEL_PREFIX
from tests.support.apiserver.admission_policy import label_selector_matches
from tests.support.apiserver.cel_env import compile_expression, execute
from tests.support.manifests import OVERLAYS, PREDICATE_LABELS, one, render, render_webhook_way

Manifest = dict[str, Any]
NAME = "runtimeclass-extender-pod-admission"
GUARD = "runtimeclass-extender-pod-admission-guard"
REQUIRED = "runtimeclass-extender-pod-admission-required"
TABLE = "runtimeclass-extender"
LARGE = render(PREDICATE_LABELS)
POD_POLICIES = {("MutatingAdmissionPolicy", NAME), ("ValidatingAdmissionPolicy", GUARD)}
REFUSAL = "runtimeclass-extender.dev/refusal"


def _pod_policies(docs: tuple[Manifest, ...]) -> list[Manifest]:
    return [d for d in docs if (d["kind"], d["metadata"]["name"]) in POD_POLICIES]


def _binding(docs: tuple[Manifest, ...], policy: Manifest) -> Manifest:
    return one(docs, policy["kind"] + "Binding", policy["metadata"]["name"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_has_the_two_pod_policies_and_the_webhook_way_none(overlay: str) -> None:
    docs = render(overlay)
    assert {(d["kind"], d["metadata"]["name"]) for d in _pod_policies(docs)} == POD_POLICIES
    # Every policy the API server evaluates on pods: these two and no other (each one
    # more costs every pod, one that names no class too: BENCHMARKS.md), but for the
    # default-scheduler placement's guard, which refuses a pod of a class admission did
    # not admit (nothing else would keep it off nodes that cannot run its class).
    on_pods = [
        d
        for d in docs
        if d["kind"] in ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy")
        and "pods" in str(d["spec"]["matchConstraints"])
        and d["spec"]["matchConditions"][0]["name"] != "only-the-extender"
    ]
    expected = [("MutatingAdmissionPolicy", NAME), ("ValidatingAdmissionPolicy", GUARD)]
    if overlay == "overlays/default-scheduler":
        expected.append(("ValidatingAdmissionPolicy", REQUIRED))
    assert sorted((d["kind"], d["metadata"]["name"]) for d in on_pods) == sorted(expected)
    assert _pod_policies(render_webhook_way(overlay)) == []


def test_the_mutating_policy_admits_pod_creates_from_the_table_and_fails_closed() -> None:
    policy = one(LARGE, "MutatingAdmissionPolicy", NAME)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"] == {
        "resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
        ]
    }
    # One param by name (one evaluation per pod whatever the number of classes): the
    # table, cluster-scoped.
    assert spec["paramKind"] == {"apiVersion": "runtimeclass-extender.dev/v1alpha1", "kind": "PodAdmissionTable"}
    binding = _binding(LARGE, policy)["spec"]
    assert binding["policyName"] == NAME
    # Allow: the param is looked up before the match conditions are evaluated, so Deny
    # would refuse every pod of a bound namespace while the table is missing.
    assert binding["paramRef"] == {"name": TABLE, "parameterNotFoundAction": "Allow"}
    crd = one(LARGE, "CustomResourceDefinition", "podadmissiontables.runtimeclass-extender.dev")
    assert crd["spec"]["scope"] == "Cluster"
    # Evaluated once per pod: never again after a later mutation.
    assert spec["reinvocationPolicy"] == "Never"
    assert [m["patchType"] for m in spec["mutations"]] == ["JSONPatch"]


def test_the_policies_leave_out_the_namespaces_the_webhook_leaves_out() -> None:
    """Opt-out namespaces, kube-system and the install's own, as the webhook; the guard
    selects, in those, the pods marked to refuse alone."""
    webhook = one(render_webhook_way(PREDICATE_LABELS), "MutatingWebhookConfiguration")
    (hook,) = webhook["webhooks"]
    marked = {"objectSelector": {"matchExpressions": [{"key": REFUSAL, "operator": "Exists"}]}}
    for policy in _pod_policies(LARGE):
        assert _binding(LARGE, policy)["spec"]["matchResources"] == {
            "namespaceSelector": hook["namespaceSelector"],
            **(marked if policy["metadata"]["name"] == GUARD else {}),
        }, policy["metadata"]["name"]


# --- what the match conditions let through (their CEL, as written) ------------------------

GVISOR = runtime_class_from_api(
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "gvisor"},
        "handler": "runsc",
        "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}},
        "scheduling": {"nodeSelector": {"sandbox": "gvisor"}},
    }
)
RULES = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, load_policy())
PARAMS = {"spec": {"labelNodes": True, "runtimeClasses": {"gvisor": entry(GVISOR, RULES)}}}


def _matches(
    kind: str,
    spec: Manifest,
    name: str = NAME,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> bool:
    metadata = {
        "name": "p",
        "namespace": "apps",
        **({"labels": labels} if labels else {}),
        **({"annotations": annotations} if annotations else {}),
    }
    pod = {"metadata": metadata, "spec": {"containers": [{"name": "c"}], **spec}}
    context = {"object": pod, "params": PARAMS if name == NAME else None}
    conditions = one(LARGE, kind, name)["spec"]["matchConditions"]
    # As the API server evaluates them, with the strings library (split) it has.
    return all(
        execute(compile_expression(c["expression"]), c["expression"], context) is True for c in conditions
    )


NO_CLASS: list[Manifest] = [{}, {"runtimeClassName": ""}, {"schedulerName": "default-scheduler"}]


@pytest.mark.parametrize(("kind", "name"), sorted(POD_POLICIES))
@pytest.mark.parametrize("spec", NO_CLASS, ids=["none", "empty", "scheduler"])
def test_a_pod_that_names_no_runtimeclass_evaluates_no_policy(kind: str, name: str, spec: Manifest) -> None:
    assert _matches(kind, spec, name) is False


@pytest.mark.parametrize(
    "spec",
    [
        {"runtimeClassName": "gvisor"},
        {"runtimeClassName": "gvisor", "overhead": {"cpu": "500m", "memory": "64Mi"}},
        {"runtimeClassName": "unknown"},
    ],
    ids=["plain", "own-overhead", "unknown-class"],
)
def test_a_pod_of_a_class_evaluates_the_mutating_policy(spec: Manifest) -> None:
    assert _matches("MutatingAdmissionPolicy", spec) is True


OPTED_OUT = {"runtimeclass-extender.dev/webhook": "ignore"}
MARK = {REFUSAL: "true"}
WORDS = {REFUSAL: "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"}


def _selected_by_the_guard(labels: dict[str, str] | None) -> bool:
    """Whether the guard's binding selects a pod with ``labels``, as the API server
    matches an objectSelector: on the labels, before any expression."""
    binding = _binding(LARGE, one(LARGE, "ValidatingAdmissionPolicy", GUARD))["spec"]
    return label_selector_matches(binding["matchResources"]["objectSelector"], dict(labels or {}))


@pytest.mark.parametrize(
    ("spec", "labels", "annotations", "refused"),
    [
        # What the mutating policy leaves unmarked: admitted, whatever it is, without the
        # guard evaluating anything (not even its match conditions).
        ({"runtimeClassName": "gvisor", "schedulerName": "runtimeclass-scheduler"}, None, None, False),
        ({"runtimeClassName": "gvisor", "schedulerName": "default-scheduler"}, None, None, False),
        ({"runtimeClassName": "gvisor", "schedulerName": "default-scheduler"}, OPTED_OUT, None, False),
        ({}, None, WORDS, False),
        ({}, {"team": "a"}, None, False),
        # Marked (a label and the words): refused, with the words.
        ({"runtimeClassName": "gvisor", "overhead": {"cpu": "1"}}, MARK, WORDS, True),
        ({"runtimeClassName": "gvisor"}, {**MARK, "team": "a"}, WORDS, True),
    ],
    ids=["routed", "unrouted", "opted-out", "words-alone", "other-labels", "marked", "marked-among-labels"],
)
def test_the_guard_refuses_the_pods_the_mutating_policy_marked_and_no_other(
    spec: Manifest, labels: dict[str, str] | None, annotations: dict[str, str] | None, refused: bool
) -> None:
    evaluated = _selected_by_the_guard(labels) and _matches(
        "ValidatingAdmissionPolicy", spec, GUARD, labels, annotations
    )
    assert evaluated is refused
    guard = one(LARGE, "ValidatingAdmissionPolicy", GUARD)
    if refused:
        (validation,) = guard["spec"]["validations"]
        context = {"object": {"metadata": {"annotations": annotations}, "spec": spec}}
        assert execute(compile_expression(validation["expression"]), validation["expression"], context) is False
        said = execute(compile_expression(validation["messageExpression"]), validation["messageExpression"], context)
        assert said == WORDS[REFUSAL]
    binding = _binding(LARGE, guard)["spec"]
    assert "paramKind" not in guard["spec"] and "paramRef" not in binding
    assert guard["spec"]["failurePolicy"] == "Fail" and binding["validationActions"] == ["Deny"]
