"""The pod admission policies as shipped (deploy/components/pod-admission-policy): their shape.

What they make of pods is tests/admission/test_pod_admission_both_ways.py's (the same
table through the policies and through the webhook). Here: that they are bound as the
webhook is scoped (the same namespaces left out, pod CREATE only, every RuntimeClass a
param, failing closed inside the API server), that the two label policies compute one
"requires", and that the patch docs/large-clusters.md shows for a policy file whose
every class has node rules changes both.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.docs import fenced_blocks, page
from tests.support.manifests import one, render, render_own, render_webhook_way

Manifest = dict[str, Any]
LARGE = render("overlays/large-cluster")
POLICY_KINDS = ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy")
POD_POLICIES = {
    ("MutatingAdmissionPolicy", "runtimeclass-extender-pod-routing"),
    ("MutatingAdmissionPolicy", "runtimeclass-extender-pod-overhead"),
    ("ValidatingAdmissionPolicy", "runtimeclass-extender-pod-overhead"),
    ("MutatingAdmissionPolicy", "runtimeclass-extender-pod-node-label"),
    ("ValidatingAdmissionPolicy", "runtimeclass-extender-pod-node-label"),
}


def _pod_policies(docs: tuple[Manifest, ...]) -> list[Manifest]:
    return [d for d in docs if (d["kind"], d["metadata"]["name"]) in POD_POLICIES]


def _binding(docs: tuple[Manifest, ...], policy: Manifest) -> Manifest:
    return one(docs, policy["kind"] + "Binding", policy["metadata"]["name"])


def test_every_overlay_has_the_pod_policies_and_large_cluster_the_label_ones() -> None:
    for overlay in ("overlays/predicate-mode", "overlays/alongside-admission", "overlays/tls"):
        names = {(d["kind"], d["metadata"]["name"]) for d in _pod_policies(render(overlay))}
        assert names == {p for p in POD_POLICIES if "node-label" not in p[1]}, overlay
    assert {(d["kind"], d["metadata"]["name"]) for d in _pod_policies(LARGE)} == POD_POLICIES
    # The webhook way has none of them.
    assert _pod_policies(render_webhook_way("overlays/large-cluster")) == []


@pytest.mark.parametrize("name", sorted(f"{k}/{n}" for k, n in POD_POLICIES))
def test_each_policy_admits_pod_creates_and_fails_closed_in_the_api_server(name: str) -> None:
    kind, policy_name = name.split("/")
    policy = one(LARGE, kind, policy_name)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"] == {
        "resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
        ]
    }
    if kind == "MutatingAdmissionPolicy":
        assert spec["reinvocationPolicy"] == "IfNeeded"
        assert all(m["patchType"] == "JSONPatch" for m in spec["mutations"])
    binding = _binding(LARGE, policy)["spec"]
    assert binding["policyName"] == policy_name
    if kind == "ValidatingAdmissionPolicy":
        assert binding["validationActions"] == ["Deny"]
    if policy_name == "runtimeclass-extender-pod-routing":
        # No params: a pod naming a class that does not exist is routed too.
        assert "paramKind" not in spec and "paramRef" not in binding
    else:
        assert spec["paramKind"] == {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"}
        # Every RuntimeClass (cluster-scoped: no namespace); no class, no change.
        assert binding["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}
        own = "has(object.spec.runtimeClassName) && object.spec.runtimeClassName == params.metadata.name"
        if kind == "ValidatingAdmissionPolicy":
            assert spec["matchConditions"][0]["expression"] == own
        else:
            assert own in json.dumps(spec["variables"])
    if kind == "MutatingAdmissionPolicy":
        # Decided in the expression: a policy whose matchConditions were false is never
        # evaluated again, and a webhook may set runtimeClassName after the policies ran;
        # the conditions only pass over the params of other classes.
        conditions = [c["expression"] for c in spec.get("matchConditions", [])]
        if policy_name == "runtimeclass-extender-pod-routing":
            assert conditions == []
        else:
            assert conditions == [
                "!has(object.spec.runtimeClassName) || object.spec.runtimeClassName == '' "
                "|| object.spec.runtimeClassName == params.metadata.name"
            ]


def test_the_policies_leave_out_the_namespaces_the_webhook_leaves_out() -> None:
    """Opt-out namespaces, kube-system and the install's own, as today's webhook."""
    webhook = one(render_webhook_way("overlays/large-cluster"), "MutatingWebhookConfiguration")
    (hook,) = webhook["webhooks"]
    for policy in _pod_policies(LARGE):
        assert _binding(LARGE, policy)["spec"]["matchResources"] == {
            "namespaceSelector": hook["namespaceSelector"]
        }, policy["metadata"]["name"]


def test_both_label_policies_compute_one_requirement() -> None:
    mutating = one(LARGE, "MutatingAdmissionPolicy", "runtimeclass-extender-pod-node-label")
    validating = one(LARGE, "ValidatingAdmissionPolicy", "runtimeclass-extender-pod-node-label")
    assert mutating["spec"]["variables"] == validating["spec"]["variables"]
    names = [v["name"] for v in mutating["spec"]["variables"]]
    # docs/large-clusters.md's patch addresses them by position.
    assert names[:2] == ["prefix", "everyClassHasNodeRules"]
    assert mutating["spec"]["variables"][1]["expression"] == "false"


def test_large_cluster_keeps_the_webhook_for_long_class_names_only() -> None:
    (hook,) = one(LARGE, "MutatingWebhookConfiguration")["webhooks"]
    assert [c["expression"] for c in hook["matchConditions"]] == [
        'has(object.spec.runtimeClassName) && object.spec.runtimeClassName != ""',
        "size(object.spec.runtimeClassName) > 63",
    ]
    whole = one(render_webhook_way("overlays/large-cluster"), "MutatingWebhookConfiguration")
    assert len(whole["webhooks"][0]["matchConditions"]) == 1


def test_the_documented_patch_for_a_policy_file_with_node_rules_everywhere() -> None:
    (block,) = [
        b
        for b in fenced_blocks(page("large-clusters.md"), "yaml")
        if b.startswith("# my-overlay/kustomization.yaml\n")
        and "everyClassHasNodeRules" not in b
        and "runtimeclass-extender-pod-node-label" in b
    ]
    docs = render_own(block)
    for kind in POLICY_KINDS:
        variables = one(docs, kind, "runtimeclass-extender-pod-node-label")["spec"]["variables"]
        assert variables[1] == {"name": "everyClassHasNodeRules", "expression": "true"}
    # Nothing else moves.
    untouched = [d for d in docs if d["metadata"]["name"] != "runtimeclass-extender-pod-node-label"]
    assert untouched == [d for d in LARGE if d["metadata"]["name"] != "runtimeclass-extender-pod-node-label"]
