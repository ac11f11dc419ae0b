"""The fake API server's ValidatingAdmissionPolicy admission answers as kube-apiserver's.

The tables run tests/support/apiserver/admission_policy.py's pure ``admit`` (which
policies match a request, matchConditions, variables, validations, failurePolicy,
params and the configuration errors of a binding's paramRef, the denial's wording); the
HTTP tests show the server running it on every write, with the objects it stores as
params, and replay the denial a real kube-apiserver 1.36.2 gave
(tests/data/fixtures/kube-apiserver/node-patch-denied-by-admission-policy.json) byte for
byte. Mutating admission is tests/support/test_apiserver_mutation.py's.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import orjson
import pytest
import yaml

from tests.support.apiserver import (
    NODES,
    PODS,
    RUNTIME_CLASSES,
    VALIDATING_WEBHOOKS,
    FakeApiServer,
    ResourceType,
    admission_policy,
    make_node,
    make_pod,
    make_runtime_class,
    rbac,
)
from tests.support.apiserver.admission_policy import AdmissionAttributes, Policies, admit
from tests.support.apiserver.client import send_as
from tests.support.paths import FIXTURES, REPO

EXTENDER = rbac.service_account("runtimeclass-extender", "runtimeclass-extender")
PREFIX = "runtimeclass.node-restriction.kubernetes.io/"
POLICY_FILE = REPO / "deploy" / "components" / "label-nodes" / "admission-policy.yaml"
DENIED = json.loads((FIXTURES / "kube-apiserver" / "node-patch-denied-by-admission-policy.json").read_text())
SHIPPED_RBAC = (
    "deploy/base/extender-rbac.yaml",
    "deploy/components/label-nodes/rbac.yaml",
    "deploy/components/leader-election/rbac.yaml",
)


def shipped_policy_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]


def rbac_manifests() -> list[dict[str, Any]]:
    return [d for path in SHIPPED_RBAC for d in yaml.safe_load_all((REPO / path).read_text()) if d]


def test_a_policy_the_cel_package_cannot_parse_is_refused_naming_the_expression(
    fake_apiserver: FakeApiServer,
) -> None:
    """CEL's optional syntax (``.?labels.orValue({})``), which the ``cel`` package cannot
    parse (the shipped policies use has() for it): refused, never half-loaded."""
    documents = shipped_policy_documents()
    policy = copy.deepcopy(next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"))
    policy["spec"]["variables"][1]["expression"] = "oldObject.metadata.?labels.orValue({})"
    with pytest.raises(ValueError) as refused:
        fake_apiserver.apply([policy, *(d for d in documents if d is not policy)])
    message = str(refused.value)
    assert (
        f'ValidatingAdmissionPolicy "{policy["metadata"]["name"]}": spec.variables[1].expression' in message
    )
    assert "oldObject.metadata.?labels.orValue({})" in message
    # Nothing of it is loaded: not the policy, not its binding.
    assert not fake_apiserver.admission_policies


# ----- over HTTP --------------------------------------------------------------------


async def send(
    server: FakeApiServer,
    method: str,
    path: str,
    token: str,
    body: Any = None,
    *,
    content_type: str = "application/merge-patch+json",
    params: dict[str, str] | None = None,
) -> tuple[int, bytes, list[str]]:
    return await send_as(server, token, method, path, body, content_type=content_type, params=params)


@pytest.fixture
async def labelled(fake_apiserver: FakeApiServer) -> FakeApiServer:
    """The shipped RBAC and the shipped policies and bindings, as they are, and a node
    with a label outside the prefix, as when the fixture was captured."""
    fake_apiserver.add(NODES, make_node("node-1", labels={"runtime/gvisor": "true"}))
    fake_apiserver.apply([*rbac_manifests(), *shipped_policy_documents()])
    return fake_apiserver


async def test_the_real_denial_byte_for_byte(labelled: FakeApiServer) -> None:
    sent = DENIED["request"]
    status, body, _ = await send(
        labelled,
        sent["method"],
        sent["path"],
        labelled.token_for(EXTENDER),
        sent["body"],
        content_type=sent["contentType"],
    )
    assert status == DENIED["httpStatus"] == 422
    assert body == orjson.dumps(DENIED["response"])
    assert labelled.get(NODES, "node-1")["metadata"]["labels"]["runtime/gvisor"] == "true"  # type: ignore[index]


def denial(message: str) -> str:
    return (
        "ValidatingAdmissionPolicy 'runtimeclass-extender-node-labels' with binding "
        f"'runtimeclass-extender-node-labels' denied request: {message}"
    )


# (what, path, patch, the policy's message or None: allowed)
NODE_WRITES: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("add-prefixed", "", {"metadata": {"labels": {PREFIX + "gvisor": "true"}}}, None),
    ("remove-prefixed", "", {"metadata": {"labels": {PREFIX + "kata": None}}}, None),
    (
        "change-other",
        "",
        {"metadata": {"labels": {"runtime/gvisor": "false"}}},
        "labels outside the prefix may not change or be removed",
    ),
    ("add-other", "", {"metadata": {"labels": {"zone": "a"}}}, "labels outside the prefix may not be added"),
    ("taint", "", {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}, "node spec may not change, but for removing the startup taint"),
    ("status", "/status", {"status": {"phase": "x"}}, "may only update the node object itself"),
]


@pytest.mark.parametrize(("what", "sub", "patch", "message"), NODE_WRITES, ids=[w[0] for w in NODE_WRITES])
async def test_the_policy_confines_the_extenders_node_writes(
    labelled: FakeApiServer, what: str, sub: str, patch: dict[str, Any], message: str | None
) -> None:
    labelled.modify(NODES, "node-1", lambda n: n["metadata"]["labels"].update({PREFIX + "kata": "true"}))
    # RBAC would refuse the status patch first; grant it, to show the policy's own check.
    labelled.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "node-status"},
                "rules": [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "node-status"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "node-status",
                },
                "subjects": [{"kind": "User", "name": EXTENDER}],
            },
        ]
    )
    before = labelled.resource_version
    status, body, _ = await send(
        labelled, "PATCH", f"/api/v1/nodes/node-1{sub}", labelled.token_for(EXTENDER), patch
    )
    if message is None:
        assert status == 200, body
        assert labelled.resource_version == before + 1
    else:
        assert status == 422
        answer = orjson.loads(body)
        assert answer["message"] == f'nodes "node-1" is forbidden: {denial(message)}'
        assert answer["details"] == {
            "name": "node-1",
            "kind": "nodes",
            "causes": [{"message": denial(message)}],
        }
        assert labelled.resource_version == before


async def test_the_administrator_is_outside_the_shipped_policys_match_condition(
    labelled: FakeApiServer,
) -> None:
    assert labelled.token is not None
    status, _, _ = await send(
        labelled, "PATCH", "/api/v1/nodes/node-1", labelled.token, {"metadata": {"labels": {"zone": "a"}}}
    )
    assert status == 200


def deny_all(
    name: str = "deny", *, rules: list[dict[str, Any]] | None = None, **spec: Any
) -> list[dict[str, Any]]:
    """A policy whose one validation is false, and its Deny binding."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": rules
                or [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"], "operations": ["*"]}]
            },
            "validations": [{"expression": "false", "message": f"{name} says no"}],
            **spec,
        },
    }
    return [policy, binding_of(name)]


def binding_of(
    policy: str, name: str | None = None, actions: tuple[str, ...] = ("Deny",), **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name or policy},
        "spec": {"policyName": policy, "validationActions": list(actions), **spec},
    }


async def test_a_policy_without_match_conditions_binds_the_administrator_too(
    fake_apiserver: FakeApiServer,
) -> None:
    """As on a real server: admission runs for system:masters like for anyone."""
    fake_apiserver.add(NODES, make_node("node-1"))
    fake_apiserver.apply(deny_all())
    assert fake_apiserver.token is not None
    status, body, _ = await send(fake_apiserver, "DELETE", "/api/v1/nodes/node-1", fake_apiserver.token)
    assert status == 422
    assert orjson.loads(body)["message"] == (
        "nodes \"node-1\" is forbidden: ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: deny says no"
    )
    assert fake_apiserver.get(NODES, "node-1") is not None


async def test_reads_are_never_admitted(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.add(NODES, make_node("node-1"))
    fake_apiserver.apply(deny_all())
    assert fake_apiserver.token is not None
    for path in ("/api/v1/nodes", "/api/v1/nodes/node-1", "/api/v1/nodes/node-1/status"):
        assert (await send(fake_apiserver, "GET", path, fake_apiserver.token))[0] == 200


async def test_a_warn_binding_warns_and_admits(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.add(NODES, make_node("node-1"))
    policy, _ = deny_all()
    fake_apiserver.apply(
        [policy, binding_of("deny", "deny-warn", ("Warn",)), binding_of("deny", "deny-audit", ("Audit",))]
    )
    assert fake_apiserver.token is not None
    status, _, warnings = await send(
        fake_apiserver,
        "PATCH",
        "/api/v1/nodes/node-1",
        fake_apiserver.token,
        {"metadata": {"labels": {"a": "b"}}},
    )
    assert status == 200
    assert warnings == [
        "299 - \"Validation failed for ValidatingAdmissionPolicy 'deny' with binding 'deny-warn': deny says no\""
    ]


async def test_subresource_writes_are_admitted_with_their_own_request(fake_apiserver: FakeApiServer) -> None:
    """pods/eviction and pods/binding are CREATEs of that subresource with the posted
    object; status writes UPDATEs of the status subresource."""
    fake_apiserver.add(PODS, make_pod("p1"))
    seen = (
        "request.operation + ' ' + request.resource.resource + '/' + "
        "(has(request.subResource) ? request.subResource : '-') + ' ' + request.kind.kind + ' ' + "
        "request.name + ' ' + request.namespace + ' ' + (oldObject == null ? 'true' : 'false')"
    )
    policy, binding = deny_all()
    policy["spec"]["validations"] = [{"expression": "false", "messageExpression": seen}]
    fake_apiserver.apply([policy, binding])
    assert fake_apiserver.token is not None
    for method, sub, body, expected in [
        ("POST", "/eviction", {"metadata": {"name": "p1"}}, "CREATE pods/eviction Eviction p1 default true"),
        ("POST", "/binding", {"target": {"name": "n1"}}, "CREATE pods/binding Binding p1 default true"),
        ("PATCH", "/status", {"status": {"phase": "Running"}}, "UPDATE pods/status Pod p1 default false"),
        ("PUT", "/status", make_pod("p1"), "UPDATE pods/status Pod p1 default false"),
        ("PATCH", "", {"metadata": {"labels": {"a": "b"}}}, "UPDATE pods/- Pod p1 default false"),
        ("DELETE", "", None, "DELETE pods/- Pod p1 default false"),
    ]:
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        status, answer, _ = await send(
            fake_apiserver,
            method,
            f"/api/v1/namespaces/default/pods/p1{sub}",
            fake_apiserver.token,
            body,
            content_type=content_type,
        )
        assert status == 422, answer
        assert orjson.loads(answer)["message"].endswith(f"denied request: {expected}")
    assert fake_apiserver.get(PODS, "p1", namespace="default") is not None


async def test_a_dry_run_is_admitted_like_the_write_and_says_so(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.add(NODES, make_node("node-1"))
    policy, binding = deny_all()
    policy["spec"]["validations"] = [{"expression": "!request.dryRun", "message": "no dry runs"}]
    fake_apiserver.apply([policy, binding])
    assert fake_apiserver.token is not None
    patch = {"metadata": {"labels": {"a": "b"}}}
    path = "/api/v1/nodes/node-1"
    status, body, _ = await send(
        fake_apiserver, "PATCH", path, fake_apiserver.token, patch, params={"dryRun": "All"}
    )
    assert status == 422
    assert orjson.loads(body)["message"].endswith("denied request: no dry runs")
    assert (await send(fake_apiserver, "PATCH", path, fake_apiserver.token, patch))[0] == 200


async def test_webhook_configurations_are_admitted_policies_are_not(fake_apiserver: FakeApiServer) -> None:
    """Only the policy resources escape API-defined policies (plugin/policy/generic/
    plugin.go), not webhook configurations, whose exemption is from webhooks only."""
    fake_apiserver.apply(deny_all())
    assert fake_apiserver.token is not None
    hook = {"metadata": {"name": "h"}, "webhooks": []}
    path = VALIDATING_WEBHOOKS.collection_path()
    status, _, _ = await send(
        fake_apiserver, "POST", path, fake_apiserver.token, hook, content_type="application/json"
    )
    assert status == 422
    policies = ResourceType(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy"
    )
    fake_apiserver.register(policies)
    status, _, _ = await send(
        fake_apiserver,
        "POST",
        policies.collection_path(),
        fake_apiserver.token,
        {"metadata": {"name": "p"}, "spec": {}},
        content_type="application/json",
    )
    assert status == 201


# ----- the pure function -----------------------------------------------------------


def attributes(
    operation: str = "UPDATE",
    *,
    resource: str = "nodes",
    subresource: str = "",
    group: str = "",
    version: str = "v1",
    kind: str = "Node",
    namespace: str = "",
    name: str = "node-1",
    labels: dict[str, str] | None = None,
    old_labels: dict[str, str] | None = None,
    user: str = EXTENDER,
    namespace_labels: dict[str, str] | None = None,
    dry_run: bool = False,
) -> AdmissionAttributes:
    new = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "labels": labels or {}}, "spec": {}}
    old = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "labels": old_labels or {}},
        "spec": {},
    }
    return AdmissionAttributes(
        operation=operation,
        user=rbac.user_info(user),
        group=group,
        version=version,
        resource=resource,
        kind=(group, version, kind),
        subresource=subresource,
        namespace=namespace,
        name=name,
        object=None if operation == "DELETE" else new,
        old_object=None if operation == "CREATE" else old,
        dry_run=dry_run,
        namespace_object={"metadata": {"name": namespace, "labels": namespace_labels or {}}}
        if namespace
        else None,
    )


def loaded(*manifests: dict[str, Any]) -> Policies:
    policies = Policies()
    for manifest in manifests:
        policies.add(manifest)
    return policies


def rule(resources: list[str], **more: Any) -> dict[str, Any]:
    return {"apiGroups": [""], "apiVersions": ["v1"], "resources": resources, "operations": ["*"], **more}


POD = {"resource": "pods", "kind": "Pod", "namespace": "default", "name": "p1"}

# (the policy's matchConstraints (or resource rules), the request, whether it matches)
MATCHING: list[tuple[str, Any, AdmissionAttributes, bool]] = [
    ("resource", [rule(["nodes"])], attributes(), True),
    ("resource-not-its-status", [rule(["nodes"])], attributes(subresource="status"), False),
    ("status-only", [rule(["nodes/status"])], attributes(subresource="status"), True),
    ("status-not-the-object", [rule(["nodes/status"])], attributes(), False),
    ("star-no-subresources", [rule(["*"])], attributes(subresource="status"), False),
    ("star-the-object", [rule(["*"])], attributes(), True),
    ("star-star", [rule(["*/*"])], attributes(subresource="status"), True),
    ("pods-star", [rule(["pods/*"])], attributes(subresource="eviction", **POD), True),
    # rules.go splits "pods/*" into resource "pods" and subresource "*", which any
    # subresource matches, none included: the pod itself too.
    ("pods-star-the-pod-too", [rule(["pods/*"])], attributes(**POD), True),
    ("pods-star-not-nodes", [rule(["pods/*"])], attributes(subresource="status"), False),
    ("star-status", [rule(["*/status"])], attributes(subresource="status", **POD), True),
    ("operation", [rule(["nodes"], operations=["CREATE", "DELETE"])], attributes(), False),
    ("operation-delete", [rule(["nodes"], operations=["DELETE"])], attributes("DELETE"), True),
    ("group", [rule(["nodes"], apiGroups=["apps"])], attributes(), False),
    ("group-star", [rule(["nodes"], apiGroups=["*"])], attributes(), True),
    ("version", [rule(["nodes"], apiVersions=["v1beta1"])], attributes(), False),
    ("namespaced-scope", [rule(["*"], scope="Namespaced")], attributes(**POD), True),
    ("namespaced-scope-node", [rule(["*"], scope="Namespaced")], attributes(), False),
    ("cluster-scope", [rule(["*"], scope="Cluster")], attributes(), True),
    ("cluster-scope-pod", [rule(["*"], scope="Cluster")], attributes(**POD), False),
    ("resource-names", [rule(["nodes"], resourceNames=["node-1"])], attributes(), True),
    ("resource-names-other", [rule(["nodes"], resourceNames=["node-2"])], attributes(), False),
    (
        "excluded",
        {"resourceRules": [rule(["*"])], "excludeResourceRules": [rule(["nodes"])]},
        attributes(),
        False,
    ),
    (
        "namespace-selector",
        {"resourceRules": [rule(["*"])], "namespaceSelector": {"matchLabels": {"team": "a"}}},
        attributes(namespace_labels={"team": "a"}, **POD),
        True,
    ),
    (
        "namespace-selector-other",
        {"resourceRules": [rule(["*"])], "namespaceSelector": {"matchLabels": {"team": "a"}}},
        attributes(namespace_labels={"team": "b"}, **POD),
        False,
    ),
    (
        "namespace-selector-cluster-scoped",
        {"resourceRules": [rule(["*"])], "namespaceSelector": {"matchLabels": {"team": "a"}}},
        attributes(),
        True,
    ),
    (
        "namespace-selector-expression",
        {
            "resourceRules": [rule(["*"])],
            "namespaceSelector": {
                "matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]
            },
        },
        attributes(namespace_labels={"team": "b"}, **POD),
        True,
    ),
    (
        "object-selector-new",
        {"resourceRules": [rule(["*"])], "objectSelector": {"matchLabels": {"a": "b"}}},
        attributes(labels={"a": "b"}),
        True,
    ),
    (
        "object-selector-old",
        {"resourceRules": [rule(["*"])], "objectSelector": {"matchLabels": {"a": "b"}}},
        attributes(old_labels={"a": "b"}),
        True,
    ),
    (
        "object-selector-neither",
        {
            "resourceRules": [rule(["*"])],
            "objectSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
        },
        attributes(),
        False,
    ),
]


@pytest.mark.parametrize(
    ("what", "constraints", "request_", "matching"), MATCHING, ids=[m[0] for m in MATCHING]
)
def test_which_requests_a_policy_matches(
    what: str, constraints: Any, request_: AdmissionAttributes, matching: bool
) -> None:
    policy, binding = deny_all()
    policy["spec"]["matchConstraints"] = (
        constraints if isinstance(constraints, dict) else {"resourceRules": constraints}
    )
    verdict = admit(loaded(policy, binding), request_)
    assert (verdict.denial is not None) is matching


def test_a_binding_narrows_with_its_match_resources_and_a_policy_needs_one() -> None:
    policy, _ = deny_all()
    narrow = binding_of("deny", matchResources={"resourceRules": [rule(["nodes"], resourceNames=["node-2"])]})
    assert admit(loaded(policy, narrow), attributes()).denial is None
    assert admit(loaded(policy), attributes()).denial is None  # no binding: never run
    assert admit(loaded(*deny_all()), attributes()).denial is not None


def validations(*items: dict[str, Any], failure_policy: str = "Fail", **spec: Any) -> Policies:
    policy, binding = deny_all("p")
    policy["spec"].update(validations=list(items), failurePolicy=failure_policy, **spec)
    return loaded(policy, binding)


def message(policies: Policies, request_: AdmissionAttributes | None = None) -> str | None:
    """The denial's message after the common prefix, or None when admitted."""
    verdict = admit(policies, request_ or attributes())
    if verdict.denial is None:
        return None
    prefix = "nodes \"node-1\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'p' denied request: "
    assert verdict.denial["message"].startswith(prefix)
    return str(verdict.denial["message"][len(prefix) :])


MISSING = "object.metadata.missing == 'x'"

# (what, the policies, the message, or None: admitted)
EVALUATION: list[tuple[str, Policies, str | None]] = [
    ("true-admits", validations({"expression": "true"}), None),
    ("message", validations({"expression": "false", "message": " no "}), "no"),
    ("no-message", validations({"expression": "1 == 2"}), "failed expression: 1 == 2"),
    (
        "message-expression",
        validations(
            {"expression": "false", "message": "m", "messageExpression": "'node ' + object.metadata.name"}
        ),
        "node node-1",
    ),
    (
        "message-expression-error-falls-back",
        validations({"expression": "false", "message": "m", "messageExpression": "object.nope"}),
        "m",
    ),
    (
        "message-expression-not-a-string",
        validations({"expression": "false", "message": "m", "messageExpression": "1"}),
        "m",
    ),
    (
        "first-false-wins",
        validations({"expression": "false", "message": "a"}, {"expression": "false", "message": "b"}),
        "a",
    ),
    (
        "error-under-fail",
        validations({"expression": MISSING, "message": "m"}),
        f"expression '{MISSING}' resulted in error: no such key: missing",
    ),
    ("error-under-ignore", validations({"expression": MISSING}, failure_policy="Ignore"), None),
    (
        "error-ignored-then-false",
        validations(
            {"expression": MISSING}, {"expression": "false", "message": "b"}, failure_policy="Ignore"
        ),
        "b",
    ),
    (
        "variables-in-order",
        validations(
            {"expression": "variables.b == 'node-1!'", "message": "m"},
            variables=[
                {"name": "a", "expression": "object.metadata.name"},
                {"name": "b", "expression": "variables.a + '!'"},
            ],
        ),
        None,
    ),
    (
        "a-failing-variable-unused",
        validations({"expression": "true"}, variables=[{"name": "bad", "expression": "object.nope"}]),
        None,
    ),
    (
        "a-failing-variable-used",
        validations(
            {"expression": "variables.bad == 1"}, variables=[{"name": "bad", "expression": "object.nope"}]
        ),
        "expression 'variables.bad == 1' resulted in error: composited variable \"bad\" fails to evaluate: no such key: nope",
    ),
    (
        "a-failing-variable-short-circuited",
        validations(
            {"expression": "true || variables.bad == 1"},
            variables=[{"name": "bad", "expression": "object.nope"}],
        ),
        None,
    ),
    (
        "match-condition-false",
        validations({"expression": "false"}, matchConditions=[{"name": "c", "expression": "false"}]),
        None,
    ),
    (
        "match-condition-error",
        validations({"expression": "false"}, matchConditions=[{"name": "c", "expression": MISSING}]),
        f"expression '{MISSING}' resulted in error: no such key: missing",
    ),
    (
        "match-condition-errors",
        validations(
            {"expression": "false"},
            matchConditions=[
                {"name": "c", "expression": MISSING},
                {"name": "d", "expression": "object.x == 1"},
            ],
        ),
        f"[expression '{MISSING}' resulted in error: no such key: missing, "
        "expression 'object.x == 1' resulted in error: no such key: x]",
    ),
    (
        "match-condition-error-and-false",
        validations(
            {"expression": "false"},
            matchConditions=[{"name": "c", "expression": MISSING}, {"name": "d", "expression": "false"}],
        ),
        None,
    ),
    (
        "match-condition-error-ignored",
        validations(
            {"expression": "false"},
            failure_policy="Ignore",
            matchConditions=[{"name": "c", "expression": MISSING}],
        ),
        None,
    ),
    (
        "match-condition-sees-the-user",
        validations(
            {"expression": "false", "message": "m"},
            matchConditions=[{"name": "c", "expression": f"request.userInfo.username == '{EXTENDER}'"}],
        ),
        "m",
    ),
]


@pytest.mark.parametrize(("what", "policies", "expected"), EVALUATION, ids=[e[0] for e in EVALUATION])
def test_how_a_policy_evaluates(what: str, policies: Policies, expected: str | None) -> None:
    assert message(policies) == expected


def test_delete_has_no_object_and_create_no_old_object() -> None:
    policies = validations({"expression": "object == null && oldObject.metadata.name == 'node-1'"})
    assert message(policies, attributes("DELETE")) is None
    policies = validations({"expression": "oldObject == null && object.metadata.name == 'node-1'"})
    assert message(policies, attributes("CREATE")) is None
    policies = validations({"expression": "object.spec == oldObject.spec"})
    assert message(policies, attributes("DELETE")) is not None


def test_the_reason_sets_the_code() -> None:
    policies = validations({"expression": "false", "message": "m", "reason": "Forbidden"})
    denial = admit(policies, attributes()).denial
    assert denial is not None
    assert (denial["code"], denial["reason"]) == (403, "Forbidden")


def test_the_first_denying_policy_is_reported() -> None:
    policies = loaded(*deny_all("b-second"), *deny_all("a-first"))
    denial = admit(policies, attributes()).denial
    assert denial is not None
    assert "'a-first'" in denial["message"]


def test_a_denial_names_the_object_and_its_group() -> None:
    request_ = AdmissionAttributes(
        operation="CREATE",
        user=rbac.ADMIN,
        group="coordination.k8s.io",
        version="v1",
        resource="leases",
        kind=("coordination.k8s.io", "v1", "Lease"),
        namespace="ns",
        object={"metadata": {"generateName": "lock-"}},
    )
    denial = admit(loaded(*deny_all()), request_).denial
    assert denial is not None
    assert denial["message"].startswith('leases.coordination.k8s.io "lock-" is forbidden: ')
    assert list(denial["details"]) == ["name", "group", "kind", "causes"]
    assert (denial["details"]["group"], denial["details"]["kind"]) == ("coordination.k8s.io", "leases")


def test_the_request_variable_as_kube_apiserver_builds_it() -> None:
    node = admission_policy.admission_request(attributes())
    assert node == {
        "uid": "",
        "kind": {"group": "", "version": "v1", "kind": "Node"},
        "resource": {"group": "", "version": "v1", "resource": "nodes"},
        "requestKind": {"group": "", "version": "v1", "kind": "Node"},
        "requestResource": {"group": "", "version": "v1", "resource": "nodes"},
        "name": "node-1",
        "operation": "UPDATE",
        "userInfo": {
            "username": EXTENDER,
            "groups": [
                "system:serviceaccounts",
                "system:serviceaccounts:runtimeclass-extender",
                "system:authenticated",
            ],
        },
        "dryRun": False,
    }
    status = admission_policy.admission_request(attributes(subresource="status", dry_run=True, **POD))
    assert (status["subResource"], status["requestSubResource"], status["namespace"], status["dryRun"]) == (
        "status",
        "status",
        "default",
        True,
    )


def test_the_namespace_object_and_params() -> None:
    policies = validations({"expression": "namespaceObject.metadata.labels.team == 'a' && params == null"})
    assert admit(policies, attributes(namespace_labels={"team": "a"}, **POD)).denial is None
    assert admit(policies, attributes(namespace_labels={"team": "b"}, **POD)).denial is not None
    # A cluster-scoped request has none.
    assert admit(validations({"expression": "namespaceObject == null"}), attributes()).denial is None


def test_what_the_cel_package_cannot_evaluate_is_an_error_not_a_decision() -> None:
    policies = validations({"expression": "authorizer.group('').resource('nodes').check('get').allowed()"})
    with pytest.raises(admission_policy.UnsupportedExpression, match="authorizer"):
        admit(policies, attributes())


async def test_the_server_answers_what_it_cannot_evaluate_with_a_500(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.add(NODES, make_node("node-1"))
    policy, binding = deny_all()
    policy["spec"]["validations"] = [{"expression": "string(true) == 'true'"}]
    fake_apiserver.apply([policy, binding])
    assert fake_apiserver.token is not None
    status, body, _ = await send(fake_apiserver, "DELETE", "/api/v1/nodes/node-1", fake_apiserver.token)
    assert status == 500
    assert "string(true) == 'true'" in orjson.loads(body)["message"]
    assert fake_apiserver.get(NODES, "node-1") is not None


def test_the_kubernetes_cel_libraries_the_cel_package_provides_are_there() -> None:
    policies = validations(
        {"expression": "'a,b'.split(',').size() == 2 && [1, 3].max() == 3 && 'ABC'.lowerAscii() == 'abc'"}
    )
    assert message(policies) is None


def test_match_conditions_see_no_namespace_object() -> None:
    """matchconditions/matcher.go ``Match`` evaluates with no namespace: null there,
    the Namespace in validations."""
    policies = validations(
        {"expression": "namespaceObject.metadata.labels.team == 'b'", "message": "validated"},
        matchConditions=[{"name": "c", "expression": "namespaceObject == null"}],
    )
    request_ = attributes(namespace_labels={"team": "a"}, **POD)
    denial = admit(policies, request_).denial
    assert denial is not None
    assert denial["message"].endswith("denied request: validated")


# ----- params ----------------------------------------------------------------------------

RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"}
CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap"}


def stored_runtime_class(name: str, handler: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name, "labels": labels},
        "handler": handler,
    }


def config_map(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


STORED = {
    ("node.k8s.io/v1", "RuntimeClass"): admission_policy.ParamKind(
        False,
        [stored_runtime_class("gvisor", "runsc", sandboxed="true"), stored_runtime_class("runc", "runc")],
    ),
    ("v1", "ConfigMap"): admission_policy.ParamKind(
        True, [config_map("limits", "default", team="a"), config_map("limits", "other", team="b")]
    ),
}


def stored(api_version: str, kind: str) -> admission_policy.ParamKind | None:
    return STORED.get((api_version, kind))


def with_params(
    *items: dict[str, Any],
    param_kind: dict[str, str] | None = RUNTIME_CLASS,
    param_ref: dict[str, Any] | None = None,
    failure_policy: str = "Fail",
    actions: tuple[str, ...] = ("Deny",),
    **spec: Any,
) -> Policies:
    policy, binding = deny_all("p")
    policy["spec"].update(validations=list(items), failurePolicy=failure_policy, **spec)
    if param_kind is not None:
        policy["spec"]["paramKind"] = param_kind
    binding["spec"]["validationActions"] = list(actions)
    if param_ref is not None:
        binding["spec"]["paramRef"] = param_ref
    return loaded(policy, binding)


def param_message(policies: Policies, request_: AdmissionAttributes | None = None) -> str | None:
    """The denial's message after ``... denied request: ``, or None when admitted."""
    denial = admit(policies, request_ or attributes(), params=stored).denial
    if denial is None:
        return None
    return str(denial["message"].split("denied request: ", 1)[1])


EVERY = {"selector": {}, "parameterNotFoundAction": "Allow"}
NAMED_CLASS = "'class ' + params.metadata.name"
NOT_FOUND_DENY = (
    "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
)

# (what, the policies, the request (None: a Node update), the message, or None: admitted)
PARAMS: list[tuple[str, Policies, AdmissionAttributes | None, str | None]] = [
    (
        "by-name-with-its-kind",
        with_params(
            {
                "expression": "params.metadata.name == 'gvisor' && params.handler == 'runsc' && "
                "params.kind == 'RuntimeClass' && params.apiVersion == 'node.k8s.io/v1'"
            },
            param_ref={"name": "gvisor", "parameterNotFoundAction": "Deny"},
        ),
        None,
        None,
    ),
    (
        "in-the-message-expression",
        with_params(
            {"expression": "false", "messageExpression": NAMED_CLASS},
            param_ref={"name": "runc", "parameterNotFoundAction": "Deny"},
        ),
        None,
        "class runc",
    ),
    (
        "in-variables",
        with_params(
            {"expression": "variables.handler == 'x'", "messageExpression": "'handler ' + variables.handler"},
            param_ref={"name": "gvisor", "parameterNotFoundAction": "Deny"},
            variables=[{"name": "handler", "expression": "params.handler"}],
        ),
        None,
        "handler runsc",
    ),
    (
        "in-match-conditions",
        with_params(
            {"expression": "false", "messageExpression": NAMED_CLASS},
            param_ref=EVERY,
            matchConditions=[{"name": "c", "expression": "params.metadata.name == 'runc'"}],
        ),
        None,
        "class runc",
    ),
    # Once per param, the first denial reported (params in name order here).
    (
        "every-param",
        with_params({"expression": "false", "messageExpression": NAMED_CLASS}, param_ref=EVERY),
        None,
        "class gvisor",
    ),
    (
        "a-selector",
        with_params(
            {"expression": "params.metadata.name == 'runc'", "messageExpression": NAMED_CLASS},
            param_ref={
                "selector": {"matchLabels": {"sandboxed": "true"}},
                "parameterNotFoundAction": "Allow",
            },
        ),
        None,
        "class gvisor",
    ),
    (
        "none-found-allow",
        with_params({"expression": "false"}, param_ref={"name": "nope", "parameterNotFoundAction": "Allow"}),
        None,
        None,
    ),
    (
        "none-found-deny",
        with_params({"expression": "true"}, param_ref={"name": "nope", "parameterNotFoundAction": "Deny"}),
        None,
        NOT_FOUND_DENY,
    ),
    (
        "none-found-deny-ignored",
        with_params(
            {"expression": "true"},
            param_ref={"name": "nope", "parameterNotFoundAction": "Deny"},
            failure_policy="Ignore",
        ),
        None,
        None,
    ),
    (
        "none-found-deny-whatever-the-actions",
        with_params(
            {"expression": "true"},
            param_ref={"name": "nope", "parameterNotFoundAction": "Deny"},
            actions=("Warn",),
        ),
        None,
        NOT_FOUND_DENY,
    ),
    ("a-binding-without-param-ref", with_params({"expression": "params == null"}), None, None),
    (
        "a-policy-without-param-kind",
        with_params({"expression": "params == null"}, param_kind=None, param_ref=EVERY),
        None,
        None,
    ),
    (
        "namespaced-of-the-requests-namespace",
        with_params(
            {"expression": "false", "messageExpression": "'team ' + params.data.team"},
            param_kind=CONFIG_MAP,
            param_ref={"name": "limits", "parameterNotFoundAction": "Deny"},
        ),
        attributes(**POD),
        "team a",
    ),
    (
        "namespaced-of-the-param-refs-namespace",
        with_params(
            {"expression": "false", "messageExpression": "'team ' + params.data.team"},
            param_kind=CONFIG_MAP,
            param_ref={"name": "limits", "namespace": "other", "parameterNotFoundAction": "Deny"},
        ),
        None,
        "team b",
    ),
    (
        "namespaced-for-a-cluster-scoped-request",
        with_params(
            {"expression": "true"},
            param_kind=CONFIG_MAP,
            param_ref={"name": "limits", "parameterNotFoundAction": "Deny"},
        ),
        None,
        "failed to configure binding: cannot use namespaced paramRef in policy binding that matches "
        "cluster-scoped resources",
    ),
    (
        "cluster-scoped-with-a-namespace",
        with_params(
            {"expression": "true"},
            param_ref={"name": "runc", "namespace": "x", "parameterNotFoundAction": "Deny"},
        ),
        None,
        "failed to configure binding: paramRef.namespace must not be provided for a cluster-scoped `paramKind`",
    ),
]


@pytest.mark.parametrize(("what", "policies", "request_", "expected"), PARAMS, ids=[p[0] for p in PARAMS])
def test_how_a_policy_uses_params(
    what: str, policies: Policies, request_: AdmissionAttributes | None, expected: str | None
) -> None:
    assert param_message(policies, request_) == expected


def test_a_configuration_error_is_an_invalid_denial() -> None:
    denial = admit(
        with_params({"expression": "true"}, param_ref={"name": "nope", "parameterNotFoundAction": "Deny"}),
        attributes(),
        params=stored,
    ).denial
    assert denial is not None
    assert (denial["code"], denial["reason"]) == (422, "Invalid")
    assert denial["message"] == (
        f"nodes \"node-1\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'p' denied request: {NOT_FOUND_DENY}"
    )


@pytest.mark.parametrize(
    ("param_ref", "refusal"),
    [
        ({"name": "a"}, "spec.paramRef.parameterNotFoundAction: Required value"),
        (
            {"name": "a", "parameterNotFoundAction": "Skip"},
            'parameterNotFoundAction: Unsupported value: "Skip"',
        ),
        (
            {"name": "a", "selector": {}, "parameterNotFoundAction": "Allow"},
            "name and selector are mutually exclusive",
        ),
        ({"parameterNotFoundAction": "Allow"}, "one of name or selector must be specified"),
    ],
)
def test_a_param_ref_the_api_would_refuse_is_refused_when_loaded(
    param_ref: dict[str, Any], refusal: str
) -> None:
    _, binding = deny_all("p")
    binding["spec"]["paramRef"] = param_ref
    with pytest.raises(admission_policy.PolicyError, match=re.escape(refusal)):
        loaded(binding)


async def test_params_are_the_objects_the_server_stores(fake_apiserver: FakeApiServer) -> None:
    policy, binding = deny_all("p")
    policy["spec"]["paramKind"] = RUNTIME_CLASS
    policy["spec"]["matchConditions"] = [{"name": "c", "expression": "params.metadata.name == 'strict'"}]
    binding["spec"]["paramRef"] = {"selector": {}, "parameterNotFoundAction": "Allow"}
    fake_apiserver.add(NODES, make_node("node-1"))
    fake_apiserver.apply([policy, binding])
    assert fake_apiserver.token is not None
    status, _, _ = await send(fake_apiserver, "DELETE", "/api/v1/nodes/node-1", fake_apiserver.token)
    assert status == 200  # no param named strict: never evaluated
    fake_apiserver.add(NODES, make_node("node-1"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("strict"))
    status, _, _ = await send(fake_apiserver, "DELETE", "/api/v1/nodes/node-1", fake_apiserver.token)
    assert status == 422
