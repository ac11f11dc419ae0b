"""The fake API server's mutating admission answers as kube-apiserver 1.36's.

The tables run the pure functions: json_patch.py (JSON patches applied as
evanphx/json-patch v4 applies them), cel_env.py (the JSONPatch literal rewrite, the
Kubernetes functions), and mutating_policy.py ``mutate``: a RuntimeClass-aware
MutatingAdmissionPolicy with params and the pods it changes or leaves alone, errors
under Fail and Ignore, and reinvocation as the upstream integration test
(test/integration/apiserver/cel/mutatingadmissionpolicy_test.go) expects it. The HTTP
tests run policies and webhooks through the server: a create is defaulted, mutated,
named and validated in kube-apiserver's order, and a mutating webhook is called over
HTTPS with an AdmissionReview shaped as the one kube-apiserver 1.36.2 sent
(tests/data/admission/plugin-off/03-pods.json and 04-pods.json).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import re
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import pytest
import trustme
import yaml
from aiohttp import web

from tests.support.apiserver import (
    CONFIGMAPS,
    MUTATING_WEBHOOKS,
    PODS,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_pod,
    make_runtime_class,
    rbac,
)
from tests.support.apiserver.admission_policy import AdmissionAttributes, ParamKind, Policies
from tests.support.apiserver.cel_env import compile_expression, execute, rewrite_json_patch_literals
from tests.support.apiserver.client import Answer, send_as
from tests.support.apiserver.json_patch import JsonPatchError, apply_patch
from tests.support.apiserver.mutating_policy import MutationVerdict, ReinvocationContext, mutate
from tests.support.paths import ADMISSION_DATA
from tests.support.ports import free_port

KEY = "runtimeclass.node-restriction.kubernetes.io/"
CONTAINERS = [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]
GVISOR_OVERHEAD = {"cpu": "250m", "memory": "160Mi"}
CAPTURED_CREATE = json.loads((ADMISSION_DATA / "plugin-off" / "03-pods.json").read_text())
CAPTURED_GENERATE_NAME = json.loads((ADMISSION_DATA / "plugin-off" / "04-pods.json").read_text())


# ----- JSON patch as json-patch v4 applies it ----------------------------------------

DOC = {"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"list": [1, 2], "nothing": None}}

# (what, operations, the document after them, or the error's text)
PATCHES: list[tuple[str, list[dict[str, Any]], Any]] = [
    (
        "add-member",
        [{"op": "add", "path": "/metadata/labels/b", "value": "2"}],
        {
            "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}},
            "spec": {"list": [1, 2], "nothing": None},
        },
    ),
    (
        "add-replaces-a-member",
        [{"op": "add", "path": "/metadata/labels/a", "value": "x"}],
        {"metadata": {"name": "p", "labels": {"a": "x"}}, "spec": {"list": [1, 2], "nothing": None}},
    ),
    (
        "add-escaped-key",
        [{"op": "add", "path": "/metadata/labels/example.com~1x~0y", "value": "v"}],
        {
            "metadata": {"name": "p", "labels": {"a": "1", "example.com/x~y": "v"}},
            "spec": {"list": [1, 2], "nothing": None},
        },
    ),
    (
        "add-into-an-absent-map",
        [{"op": "add", "path": "/spec/nodeSelector/k", "value": "v"}],
        'add operation does not apply: doc is missing path: "/spec/nodeSelector/k": missing value',
    ),
    (
        "add-below-null",
        [{"op": "add", "path": "/spec/nothing/k", "value": "v"}],
        'add operation does not apply: doc is missing path: "/spec/nothing/k": missing value',
    ),
    (
        "add-without-value-is-null",
        [{"op": "add", "path": "/spec/x"}],
        {
            "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"list": [1, 2], "nothing": None, "x": None},
        },
    ),
    (
        "add-append",
        [{"op": "add", "path": "/spec/list/-", "value": 3}],
        {"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"list": [1, 2, 3], "nothing": None}},
    ),
    (
        "add-negative-index",
        [{"op": "add", "path": "/spec/list/-1", "value": 3}],
        {"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"list": [1, 2, 3], "nothing": None}},
    ),
    (
        "add-past-the-end",
        [{"op": "add", "path": "/spec/list/5", "value": 3}],
        "error in add for path: '/spec/list/5': Unable to access invalid index: 5: invalid index referenced",
    ),
    (
        "add-not-an-index",
        [{"op": "add", "path": "/spec/list/x", "value": 3}],
        "error in add for path: '/spec/list/x': value was not a proper array index: 'x': "
        'strconv.Atoi: parsing "x": invalid syntax',
    ),
    (
        "remove-absent",
        [{"op": "remove", "path": "/metadata/labels/zz"}],
        "error in remove for path: '/metadata/labels/zz': Unable to remove nonexistent key: zz: missing value",
    ),
    (
        # Not RFC 6902: v4 replaces a member that does not exist.
        "replace-absent-member-sets-it",
        [{"op": "replace", "path": "/metadata/labels/zz", "value": "z"}],
        {
            "metadata": {"name": "p", "labels": {"a": "1", "zz": "z"}},
            "spec": {"list": [1, 2], "nothing": None},
        },
    ),
    (
        "replace-past-the-end",
        [{"op": "replace", "path": "/spec/list/2", "value": 3}],
        "replace operation does not apply: doc is missing key: /spec/list/2: missing value",
    ),
    (
        "move",
        [{"op": "move", "from": "/metadata/labels/a", "path": "/metadata/name"}],
        {"metadata": {"name": "1", "labels": {}}, "spec": {"list": [1, 2], "nothing": None}},
    ),
    (
        "copy-absent-is-null",
        [{"op": "copy", "from": "/metadata/zz", "path": "/spec/copied"}],
        {
            "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"list": [1, 2], "nothing": None, "copied": None},
        },
    ),
    ("test-passes", [{"op": "test", "path": "/spec/list", "value": [1, 2]}], DOC),
    ("test-null-member", [{"op": "test", "path": "/spec/nothing", "value": None}], DOC),
    ("test-absent-member-null", [{"op": "test", "path": "/spec/zz", "value": None}], DOC),
    (
        "test-fails",
        [{"op": "test", "path": "/metadata/name", "value": "q"}],
        "testing value /metadata/name failed: test failed",
    ),
    (
        "test-bool-is-not-a-number",
        [{"op": "test", "path": "/spec/list/0", "value": True}],
        "testing value /spec/list/0 failed: test failed",
    ),
    (
        "all-or-nothing",
        [{"op": "add", "path": "/metadata/labels/b", "value": "2"}, {"op": "remove", "path": "/nope"}],
        "error in remove for path: '/nope': Unable to remove nonexistent key: nope: missing value",
    ),
    ("unknown-op", [{"op": "merge", "path": "/x"}], "Unexpected kind: merge"),
]


@pytest.mark.parametrize(("what", "operations", "expected"), PATCHES, ids=[p[0] for p in PATCHES])
def test_json_patch_as_json_patch_v4_applies_it(
    what: str, operations: list[dict[str, Any]], expected: Any
) -> None:
    document = copy.deepcopy(DOC)
    if isinstance(expected, str):
        with pytest.raises(JsonPatchError) as failed:
            apply_patch(document, operations)
        assert str(failed.value) == expected
        assert failed.value.test_failed == expected.endswith("test failed")
    else:
        assert apply_patch(document, operations) == expected
    assert document == DOC  # never in place


def test_a_null_value_written_as_text_fails_a_test_of_an_absent_member() -> None:
    """A MutatingAdmissionPolicy's operations carry their value as JSON text, so a null
    one is the text null (not v4's nil node): a ``test`` of an absent member fails."""
    operations = [{"op": "test", "path": "/spec/zz", "value": None}]
    assert apply_patch(DOC, operations) == DOC
    with pytest.raises(JsonPatchError, match="test failed"):
        apply_patch(DOC, operations, null_is_text=True)


# ----- the CEL environment -------------------------------------------------------------

# (what, the expression as written, as compiled)
REWRITES = [
    (
        "fields-quoted",
        "[JSONPatch{op: 'add', path: '/a', value: 1}]",
        "[{'op': 'add', 'path': '/a', 'value': 1}]",
    ),
    (
        "map-keys-in-values-untouched",
        "JSONPatch{op: 'add', path: '/spec/nodeSelector', value: {variables.key: 'true'}}",
        "{'op': 'add', 'path': '/spec/nodeSelector', 'value': {variables.key: 'true'}}",
    ),
    (
        "strings-and-comments-untouched",
        "JSONPatch { op: \"JSONPatch{op: 1}\", // JSONPatch{op: 2}\n path: '}' }",
        "{ 'op': \"JSONPatch{op: 1}\", // JSONPatch{op: 2}\n 'path': '}' }",
    ),
    ("from", "JSONPatch{op: 'move', from: '/a', path: '/b'}", "{'op': 'move', 'from': '/a', 'path': '/b'}"),
    ("not-a-jsonpatch", "{op: 1}", "{op: 1}"),
]


@pytest.mark.parametrize(("what", "written", "compiled"), REWRITES, ids=[r[0] for r in REWRITES])
def test_the_one_rewrite_turns_jsonpatch_literals_into_maps(what: str, written: str, compiled: str) -> None:
    assert rewrite_json_patch_literals(written) == compiled


def test_a_field_jsonpatch_does_not_have_is_refused() -> None:
    with pytest.raises(ValueError, match="JSONPatch has no field 'val'"):
        rewrite_json_patch_literals("JSONPatch{op: 'add', path: '/a', val: 1}")


def evaluate(expression: str, **context: Any) -> Any:
    return execute(compile_expression(expression), expression, context)


# (expression, its value, or the error's text)
FUNCTIONS: list[tuple[str, Any]] = [
    ("jsonpatch.escapeKey('example.com/a~b')", "example.com~1a~0b"),
    ("quantity('1Gi').compareTo(quantity('1024Mi')) == 0", True),
    ("quantity('1Gi') == quantity('1024Mi')", True),
    ("quantity('250m') == quantity('0.25')", True),
    ("quantity('2Gi').compareTo(quantity('1Gi'))", 1),
    ("quantity('1').isLessThan(quantity('1001m'))", True),
    ("quantity('2').isGreaterThan(quantity('1'))", True),
    ("isQuantity('160Mi') && !isQuantity('1GB')", True),
    (
        "quantity('1GB')",
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    ),
    ("'a'.compareTo('b')", "no such overload"),
]


@pytest.mark.parametrize(("expression", "expected"), FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_the_kubernetes_functions(expression: str, expected: Any) -> None:
    if isinstance(expected, str) and " " in expected:
        with pytest.raises(Exception, match=re.escape(expected)):
            evaluate(expression)
    else:
        assert evaluate(expression) == expected


# ----- MutatingAdmissionPolicy, the pure function --------------------------------------

ROUTE = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: route
spec:
  failurePolicy: Fail
  reinvocationPolicy: IfNeeded
  paramKind:
    apiVersion: node.k8s.io/v1
    kind: RuntimeClass
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      resources: [pods]
      operations: [CREATE]
  matchConditions:
  - name: its-class
    expression: "has(object.spec.runtimeClassName) && object.spec.runtimeClassName == params.metadata.name"
  variables:
  - name: key
    expression: "'runtimeclass.node-restriction.kubernetes.io/' + params.metadata.name"
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        (has(object.spec.overhead) || !has(params.overhead) ? [] :
        [JSONPatch{op: 'add', path: '/spec/overhead', value: params.overhead.podFixed}]) +
        (has(object.spec.nodeSelector)
        ? [JSONPatch{op: 'add', path: '/spec/nodeSelector/' + jsonpatch.escapeKey(variables.key), value: 'true'}]
        : [JSONPatch{op: 'add', path: '/spec/nodeSelector', value: {variables.key: 'true'}}]) +
        (object.spec.schedulerName == 'default-scheduler'
        ? [JSONPatch{op: 'add', path: '/spec/schedulerName', value: 'runtimeclass-scheduler'}] : [])
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: route
spec:
  policyName: route
  paramRef:
    selector: {}
    parameterNotFoundAction: Allow
  matchResources:
    namespaceSelector:
      matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values: [kube-system]
"""


def route_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(ROUTE) if d]


def runtime_class(name: str, overhead: dict[str, str] | None = None) -> dict[str, Any]:
    rc = make_runtime_class(name)
    if overhead is not None:
        rc["overhead"] = {"podFixed": dict(overhead)}
    return rc


CLASSES = [runtime_class("gvisor", GVISOR_OVERHEAD), runtime_class("runc")]


def runtime_classes(*classes: dict[str, Any]) -> Callable[[str, str], ParamKind | None]:
    """A ParamSource serving these RuntimeClasses."""

    def source(api_version: str, kind: str) -> ParamKind | None:
        if (api_version, kind) == ("node.k8s.io/v1", "RuntimeClass"):
            return ParamKind(False, [copy.deepcopy(c) for c in classes])
        return None

    return source


def pod(
    name: str = "p",
    *,
    runtime_class: str | None = None,
    scheduler: str | None = "default-scheduler",
    node_selector: dict[str, str] | None = None,
    overhead: dict[str, str] | None = None,
    namespace: str = "apps",
) -> dict[str, Any]:
    manifest = make_pod(name, namespace=namespace, runtime_class=runtime_class, scheduler_name=scheduler)
    del manifest["status"]
    if node_selector is not None:
        manifest["spec"]["nodeSelector"] = dict(node_selector)
    if overhead is not None:
        manifest["spec"]["overhead"] = dict(overhead)
    return manifest


def spec(**fields: Any) -> dict[str, Any]:
    return {"containers": CONTAINERS, **fields}


def pod_create(manifest: dict[str, Any], *, operation: str = "CREATE") -> AdmissionAttributes:
    namespace = manifest["metadata"]["namespace"]
    return AdmissionAttributes(
        operation=operation,
        user=rbac.ADMIN,
        group="",
        version="v1",
        resource="pods",
        kind=("", "v1", "Pod"),
        namespace=namespace,
        name=manifest["metadata"].get("name", ""),
        object=manifest,
        old_object=copy.deepcopy(manifest) if operation == "UPDATE" else None,
        namespace_object={
            "metadata": {"name": namespace, "labels": {"kubernetes.io/metadata.name": namespace}}
        },
    )


def loaded(*manifests: dict[str, Any]) -> Policies:
    policies = Policies()
    for manifest in manifests:
        policies.add(manifest)
    return policies


# (what, the pod created, the pod's spec as the policy leaves it)
ROUTED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "plain",
        pod(runtime_class="gvisor"),
        spec(
            schedulerName="runtimeclass-scheduler",
            runtimeClassName="gvisor",
            overhead=GVISOR_OVERHEAD,
            nodeSelector={KEY + "gvisor": "true"},
        ),
    ),
    (
        "own-selector",
        pod(runtime_class="gvisor", node_selector={"disk": "ssd"}),
        spec(
            schedulerName="runtimeclass-scheduler",
            runtimeClassName="gvisor",
            overhead=GVISOR_OVERHEAD,
            nodeSelector={"disk": "ssd", KEY + "gvisor": "true"},
        ),
    ),
    (
        "own-scheduler",
        pod(runtime_class="gvisor", scheduler="my-scheduler"),
        spec(
            schedulerName="my-scheduler",
            runtimeClassName="gvisor",
            overhead=GVISOR_OVERHEAD,
            nodeSelector={KEY + "gvisor": "true"},
        ),
    ),
    (
        "own-overhead",
        pod(runtime_class="gvisor", overhead={"cpu": "1"}),
        spec(
            schedulerName="runtimeclass-scheduler",
            runtimeClassName="gvisor",
            overhead={"cpu": "1"},
            nodeSelector={KEY + "gvisor": "true"},
        ),
    ),
    (
        "class-without-overhead",
        pod(runtime_class="runc"),
        spec(
            schedulerName="runtimeclass-scheduler",
            runtimeClassName="runc",
            nodeSelector={KEY + "runc": "true"},
        ),
    ),
    # No RuntimeClass of that name: no param matches its condition, nothing happens.
    (
        "no-such-class",
        pod(runtime_class="nope"),
        spec(schedulerName="default-scheduler", runtimeClassName="nope"),
    ),
    ("no-class", pod(), spec(schedulerName="default-scheduler")),
    (
        "namespace-left-out-by-the-binding",
        pod(runtime_class="gvisor", namespace="kube-system"),
        spec(schedulerName="default-scheduler", runtimeClassName="gvisor"),
    ),
]


@pytest.mark.parametrize(("what", "created", "expected"), ROUTED, ids=[r[0] for r in ROUTED])
def test_the_pods_a_policy_with_params_changes(
    what: str, created: dict[str, Any], expected: dict[str, Any]
) -> None:
    verdict = mutate(loaded(*route_documents()), pod_create(created), params=runtime_classes(*CLASSES))
    assert verdict.denial is None
    assert verdict.object is not None
    assert verdict.object["spec"] == expected
    assert verdict.object["metadata"] == created["metadata"]


def policy(
    name: str,
    *expressions: str,
    failure_policy: str = "Fail",
    reinvocation: str = "Never",
    match_conditions: tuple[str, ...] = (),
    param_kind: dict[str, str] | None = None,
    param_ref: dict[str, Any] | None = None,
    resources: tuple[str, ...] = ("pods",),
) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy of pod creates and updates with one JSONPatch mutation
    per expression, and its binding (of the same name)."""
    spec: dict[str, Any] = {
        "failurePolicy": failure_policy,
        "reinvocationPolicy": reinvocation,
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": list(resources),
                    "operations": ["CREATE", "UPDATE"],
                }
            ]
        },
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": e}} for e in expressions],
    }
    if match_conditions:
        spec["matchConditions"] = [{"name": f"c{i}", "expression": e} for i, e in enumerate(match_conditions)]
    if param_kind is not None:
        spec["paramKind"] = param_kind
    binding_spec: dict[str, Any] = {"policyName": name}
    if param_ref is not None:
        binding_spec["paramRef"] = param_ref
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": spec,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": binding_spec,
        },
    ]


SELECTOR_ENTRY = "[JSONPatch{op: 'add', path: '/spec/nodeSelector/' + jsonpatch.escapeKey('example.com/disk'), value: 'ssd'}]"
NO_SUCH_PATH = (
    'JSON Patch: add operation does not apply: doc is missing path: "/spec/nodeSelector/example.com~1disk": '
    "missing value"
)
LABEL = "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'patched': 'yes'}}]"
MISSING = "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'x': object.spec.missing}}]"

# (what, the policies, the error of the denial (None: admitted), the labels the pod ends with)
ERRORS: list[tuple[str, list[dict[str, Any]], str | None, dict[str, str] | None]] = [
    ("add-into-an-absent-map", policy("p", SELECTOR_ENTRY), NO_SUCH_PATH, None),
    ("add-into-an-absent-map-ignored", policy("p", SELECTOR_ENTRY, failure_policy="Ignore"), None, None),
    (
        "a-failed-test-skips-the-whole-patch",
        policy(
            "p",
            "[JSONPatch{op: 'test', path: '/spec/schedulerName', value: 'other'},"
            " JSONPatch{op: 'add', path: '/metadata/labels', value: {'patched': 'yes'}}]",
        ),
        None,
        None,
    ),
    (
        "a-passed-test",
        policy(
            "p",
            "[JSONPatch{op: 'test', path: '/spec/schedulerName', value: 'default-scheduler'},"
            " JSONPatch{op: 'add', path: '/metadata/labels', value: {'patched': 'yes'}}]",
        ),
        None,
        {"patched": "yes"},
    ),
    (
        "an-expression-error",
        policy("p", MISSING),
        f"expression '{MISSING}' resulted in error: no such key: missing",
        None,
    ),
    # The next mutation of the invocation still runs, but the request fails.
    ("an-error-then-a-mutation", policy("p", SELECTOR_ENTRY, LABEL), NO_SUCH_PATH, None),
    (
        "an-error-ignored-then-a-mutation",
        policy("p", SELECTOR_ENTRY, LABEL, failure_policy="Ignore"),
        None,
        {"patched": "yes"},
    ),
    (
        "a-match-condition-error",
        policy("p", LABEL, match_conditions=("object.spec.missing == 'x'",)),
        "expression 'object.spec.missing == 'x'' resulted in error: no such key: missing",
        None,
    ),
    (
        "a-match-condition-error-ignored",
        policy("p", LABEL, match_conditions=("object.spec.missing == 'x'",), failure_policy="Ignore"),
        None,
        None,
    ),
    ("a-match-condition-false", policy("p", LABEL, match_conditions=("false",)), None, None),
    (
        "no-param-with-deny",
        policy(
            "p",
            LABEL,
            param_kind={"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"},
            param_ref={"name": "nope", "parameterNotFoundAction": "Deny"},
        ),
        "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
        None,
    ),
    (
        "no-param-with-allow",
        policy(
            "p",
            LABEL,
            param_kind={"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"},
            param_ref={"name": "nope", "parameterNotFoundAction": "Allow"},
        ),
        None,
        None,
    ),
]


@pytest.mark.parametrize(("what", "manifests", "error", "labels"), ERRORS, ids=[e[0] for e in ERRORS])
def test_how_a_policy_fails(
    what: str, manifests: list[dict[str, Any]], error: str | None, labels: dict[str, str] | None
) -> None:
    created = pod(runtime_class="gvisor")
    verdict = mutate(loaded(*manifests), pod_create(created), params=runtime_classes(*CLASSES))
    if error is None:
        assert verdict.denial is None
        assert verdict.object is not None
        assert verdict.object["metadata"].get("labels") == labels
        assert verdict.object["spec"] == created["spec"]
        return
    assert verdict.denial is not None
    assert verdict.denial["message"] == f"policy 'p' with binding 'p' denied request: {error}"


def test_the_denial_is_admission_new_forbidden_with_the_first_error() -> None:
    """generic/policy_dispatcher.go: a 403 whose reason and message are the first error's
    (Invalid for a mutation), every error a cause."""
    verdict = mutate(loaded(*policy("p", SELECTOR_ENTRY, MISSING)), pod_create(pod(runtime_class="gvisor")))
    first = f"policy 'p' with binding 'p' denied request: {NO_SUCH_PATH}"
    second = f"policy 'p' with binding 'p' denied request: expression '{MISSING}' resulted in error: no such key: missing"
    assert verdict.denial == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": first,
        "reason": "Invalid",
        "details": {"name": "p", "kind": "pods", "causes": [{"message": first}, {"message": second}]},
        "code": 403,
    }
    # A binding's configuration error keeps NewForbidden's reason.
    deny = policy(
        "p",
        LABEL,
        param_kind={"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"},
        param_ref={"name": "nope", "parameterNotFoundAction": "Deny"},
    )
    denial = mutate(loaded(*deny), pod_create(pod()), params=runtime_classes()).denial
    assert denial is not None
    assert (denial["code"], denial["reason"]) == (403, "Forbidden")


def test_delete_is_never_mutated_by_a_policy() -> None:
    created = pod()
    attributes = replace(pod_create(created), operation="DELETE", object=None, old_object=created)
    assert mutate(loaded(*policy("p", LABEL)), attributes) == MutationVerdict(None)


def test_params_are_evaluated_in_sequence_on_the_object_as_mutated_so_far() -> None:
    """Each param is an invocation of its own, seeing what the previous one did; the
    param carries no apiVersion and kind (the informer's typed object)."""
    append = (
        "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'seen': "
        "(has(object.metadata.annotations) ? object.metadata.annotations.seen + ',' : '') + params.metadata.name"
        " + (has(params.kind) ? '+kind' : '')}}]"
    )
    manifests = policy(
        "p",
        append,
        param_kind={"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"},
        param_ref={"selector": {"matchLabels": {"pick": "me"}}, "parameterNotFoundAction": "Allow"},
    )
    classes = [runtime_class(n) for n in ("c", "a", "b")]
    for rc in classes[:2]:
        rc["metadata"]["labels"] = {"pick": "me"}
    # The fake takes params in name order; a real server in its informer's (unspecified).
    source = runtime_classes(*sorted(classes, key=lambda c: c["metadata"]["name"]))
    verdict = mutate(loaded(*manifests), pod_create(pod()), params=source)
    assert verdict.object is not None
    assert verdict.object["metadata"]["annotations"] == {"seen": "a,c"}


def chain(policies: Policies, attributes: AdmissionAttributes, params: Any = None) -> MutationVerdict:
    """The mutating chain of policies alone, reinvoked once when asked
    (admission/reinvocation.go), as the server runs it."""
    reinvocation = ReinvocationContext()
    verdict = mutate(policies, attributes, params=params, reinvocation=reinvocation)
    if verdict.denial is None and reinvocation.should_reinvoke:
        reinvocation.is_reinvoke = True
        verdict = mutate(
            policies, replace(attributes, object=verdict.object), params=params, reinvocation=reinvocation
        )
    return verdict


INCREMENT = (
    "[JSONPatch{op: 'replace', path: '/metadata/annotations/foo', "
    "value: string(int(object.metadata.annotations['foo']) + 1)}]"
)


def mark(name: str) -> str:
    return f"[JSONPatch{{op: 'add', path: '/metadata/annotations/{name}', value: 'true'}}]"


def annotated(**annotations: str) -> dict[str, Any]:
    created = pod()
    created["metadata"]["annotations"] = dict(annotations)
    return created


def test_reinvocation_of_several_policies_as_upstream_expects_it() -> None:
    """mutatingadmissionpolicy_test.go "multiple policies requiring reinvocation": 0->1->2->3
    in the first round, then the two IfNeeded policies again: 5."""
    policies = loaded(
        *policy("policy-1", mark("firstApplied"), INCREMENT, reinvocation="IfNeeded"),
        *policy("policy-2", mark("secondApplied"), INCREMENT, reinvocation="IfNeeded"),
        *policy("policy-3", mark("thirdApplied"), INCREMENT),
    )
    verdict = chain(policies, pod_create(annotated(foo="0")))
    assert verdict.object is not None
    assert verdict.object["metadata"]["annotations"] == {
        "foo": "5",
        "firstApplied": "true",
        "secondApplied": "true",
        "thirdApplied": "true",
    }


def test_reinvocation_of_params_as_upstream_expects_it() -> None:
    """mutatingadmissionpolicy_test.go "multiple params causing reinvocation": an IfNeeded
    policy with two params and a Never one with a third: 5 whatever the order of the
    policies, because a round whose patches applied reinvokes every IfNeeded invocation
    that ran (dispatcher.go: ``lastVersionedAttr.Dirty``)."""
    data_as_annotations = (
        "params.data.map(k, JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey(k), "
        "value: params.data[k]})"
    )
    config_maps = [
        {"metadata": {"name": f"param-{i}", "namespace": "apps", "labels": labels}, "data": {key: "true"}}
        for i, (key, labels) in enumerate(
            [
                ("firstApplied", {"reinvoke": "true"}),
                ("secondApplied", {"reinvoke": "true"}),
                ("thirdApplied", {}),
            ],
            start=1,
        )
    ]

    def source(api_version: str, kind: str) -> ParamKind | None:
        return ParamKind(True, config_maps) if (api_version, kind) == ("v1", "ConfigMap") else None

    config_map = {"apiVersion": "v1", "kind": "ConfigMap"}
    reinvoked = policy(
        "multi-param-reinvocation",
        data_as_annotations,
        INCREMENT,
        reinvocation="IfNeeded",
        param_kind=config_map,
        param_ref={"selector": {"matchLabels": {"reinvoke": "true"}}, "parameterNotFoundAction": "Allow"},
    )
    once = policy(
        "policy-with-param-no-reinvoke",
        data_as_annotations,
        INCREMENT,
        param_kind=config_map,
        param_ref={"name": "param-3", "parameterNotFoundAction": "Allow"},
    )
    for order in ([*reinvoked, *once], [*once, *reinvoked]):
        verdict = chain(loaded(*order), pod_create(annotated(foo="0")), source)
        assert verdict.object is not None
        assert verdict.object["metadata"]["annotations"] == {
            "foo": "5",
            "firstApplied": "true",
            "secondApplied": "true",
            "thirdApplied": "true",
        }


def test_an_ifneeded_policy_whose_patch_applied_runs_twice() -> None:
    once = chain(loaded(*policy("p", INCREMENT)), pod_create(annotated(foo="0")))
    twice = chain(loaded(*policy("p", INCREMENT, reinvocation="IfNeeded")), pod_create(annotated(foo="0")))
    assert once.object is not None
    assert twice.object is not None
    assert (once.object["metadata"]["annotations"], twice.object["metadata"]["annotations"]) == (
        {"foo": "1"},
        {"foo": "2"},
    )


def test_a_policy_its_match_conditions_skipped_is_not_reinvoked() -> None:
    """Only invocations that ran are reinvoked: a policy whose matchConditions left the
    pod out in the first round is not run in the second, though a later mutation (here
    a policy, on a real server as well a webhook) gave the pod a RuntimeClass."""
    label_classes = policy(
        "a-label",
        "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'class': object.spec.runtimeClassName}}]",
        reinvocation="IfNeeded",
        match_conditions=("has(object.spec.runtimeClassName)",),
    )
    set_class = policy("b-class", "[JSONPatch{op: 'add', path: '/spec/runtimeClassName', value: 'gvisor'}]")
    verdict = chain(loaded(*label_classes, *set_class), pod_create(pod()))
    assert verdict.object is not None
    assert verdict.object["spec"]["runtimeClassName"] == "gvisor"
    assert "labels" not in verdict.object["metadata"]
    # The same policy deciding in its expression instead runs in both rounds.
    label_in_expression = policy(
        "a-label",
        "has(object.spec.runtimeClassName) ? "
        "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'class': object.spec.runtimeClassName}}] : []",
        reinvocation="IfNeeded",
    )
    verdict = chain(loaded(*label_in_expression, *set_class), pod_create(pod()))
    assert verdict.object is not None
    assert verdict.object["metadata"]["labels"] == {"class": "gvisor"}


# ----- through the server --------------------------------------------------------------


async def send(server: FakeApiServer, method: str, path: str, body: Any = None, **kwargs: Any) -> Answer:
    assert server.token is not None
    return await send_as(server, server.token, method, path, body, **kwargs)


@pytest.fixture
async def routed(fake_apiserver: FakeApiServer) -> FakeApiServer:
    for rc in CLASSES:
        fake_apiserver.add(RUNTIME_CLASSES, rc)
    fake_apiserver.apply(route_documents())
    return fake_apiserver


@pytest.mark.parametrize(("what", "created", "expected"), ROUTED, ids=[r[0] for r in ROUTED])
async def test_the_server_stores_the_pods_as_mutated(
    routed: FakeApiServer, what: str, created: dict[str, Any], expected: dict[str, Any]
) -> None:
    namespace = created["metadata"]["namespace"]
    answer = await send(routed, "POST", f"/api/v1/namespaces/{namespace}/pods", created)
    assert answer.status == 201, answer.body
    stored = routed.get(PODS, "p", namespace=namespace)
    assert stored is not None
    assert stored["spec"] == expected
    assert orjson.loads(answer.body) == stored


async def test_a_pod_without_a_scheduler_is_defaulted_before_admission(routed: FakeApiServer) -> None:
    """pkg/apis/core/v1/defaults.go: an empty schedulerName is default-scheduler by the
    time mutating admission sees the pod, so the policy routes it."""
    answer = await send(
        routed, "POST", "/api/v1/namespaces/apps/pods", pod(runtime_class="runc", scheduler=None)
    )
    assert answer.status == 201
    assert orjson.loads(answer.body)["spec"]["schedulerName"] == "runtimeclass-scheduler"
    answer = await send(routed, "POST", "/api/v1/namespaces/apps/pods", pod("q", scheduler=None))
    assert orjson.loads(answer.body)["spec"]["schedulerName"] == "default-scheduler"


async def test_a_dry_run_answers_the_mutated_pod_and_stores_nothing(routed: FakeApiServer) -> None:
    before = routed.resource_version
    answer = await send(
        routed, "POST", "/api/v1/namespaces/apps/pods", pod(runtime_class="gvisor"), params={"dryRun": "All"}
    )
    assert answer.status == 201
    body = orjson.loads(answer.body)
    assert body["spec"] == ROUTED[0][2]
    assert "resourceVersion" not in body["metadata"]
    assert body["metadata"]["uid"]
    assert routed.get(PODS, "p", namespace="apps") is None
    assert routed.resource_version == before


async def test_a_generated_name_comes_after_mutating_and_before_validating_admission(
    fake_apiserver: FakeApiServer,
) -> None:
    """create.go and store.go: mutating admission sees no name (``request.name`` absent),
    validating admission the generated one, as ``request.name`` too."""
    fake_apiserver.apply(
        [
            *policy(
                "p",
                "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'had-name': has(request.name) ? 'yes' : 'no'}}]",
            ),
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": "v"},
                "spec": {
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "resources": ["pods"],
                                "operations": ["CREATE"],
                            }
                        ]
                    },
                    "validations": [
                        {
                            "expression": "request.name == object.metadata.name && object.metadata.name.startsWith('web-')"
                            " && object.metadata.uid != ''"
                        }
                    ],
                },
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": "v"},
                "spec": {"policyName": "v", "validationActions": ["Deny"]},
            },
        ]
    )
    created = pod()
    del created["metadata"]["name"]
    created["metadata"]["generateName"] = "web-"
    answer = await send(fake_apiserver, "POST", "/api/v1/namespaces/apps/pods", created)
    assert answer.status == 201, answer.body
    body = orjson.loads(answer.body)
    assert re.fullmatch(r"web-[bcdfghjklmnpqrstvwxz2456789]{5}", body["metadata"]["name"])
    assert body["metadata"]["labels"] == {"had-name": "no"}
    assert fake_apiserver.get(PODS, body["metadata"]["name"], namespace="apps") == body


OVERHEAD_VAP = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: overhead
spec:
  failurePolicy: Fail
  paramKind:
    apiVersion: node.k8s.io/v1
    kind: RuntimeClass
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      resources: [pods]
      operations: [CREATE]
  matchConditions:
  - name: its-class
    expression: "has(object.spec.runtimeClassName) && object.spec.runtimeClassName == params.metadata.name"
  - name: both-have-one
    expression: "has(object.spec.overhead) && has(params.overhead)"
  validations:
  - expression: >-
      size(object.spec.overhead) == size(params.overhead.podFixed) &&
      object.spec.overhead.all(r, r in params.overhead.podFixed &&
      quantity(object.spec.overhead[r]).compareTo(quantity(params.overhead.podFixed[r])) == 0)
    messageExpression: "'the overhead of RuntimeClass ' + params.metadata.name + ' is ' + params.kind + ' ' + params.apiVersion"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: overhead
spec:
  policyName: overhead
  validationActions: [Deny]
  paramRef:
    selector: {}
    parameterNotFoundAction: Allow
"""


async def test_a_validating_policy_with_params_compares_overheads_by_value(
    fake_apiserver: FakeApiServer,
) -> None:
    """1Gi is 1024Mi (``quantity().compareTo``); the message shows the param with its
    apiVersion and kind, as validating/dispatcher.go wraps it."""
    fake_apiserver.add(RUNTIME_CLASSES, runtime_class("kata", {"cpu": "250m", "memory": "1Gi"}))
    fake_apiserver.add(RUNTIME_CLASSES, runtime_class("runc"))
    fake_apiserver.apply(d for d in yaml.safe_load_all(OVERHEAD_VAP) if d)
    equal = pod("equal", runtime_class="kata", overhead={"cpu": "0.25", "memory": "1024Mi"})
    assert (await send(fake_apiserver, "POST", "/api/v1/namespaces/apps/pods", equal)).status == 201
    bigger = pod("bigger", runtime_class="kata", overhead={"cpu": "250m", "memory": "2Gi"})
    answer = await send(fake_apiserver, "POST", "/api/v1/namespaces/apps/pods", bigger)
    assert answer.status == 422
    assert orjson.loads(answer.body)["message"] == (
        "pods \"bigger\" is forbidden: ValidatingAdmissionPolicy 'overhead' with binding 'overhead' denied request: "
        "the overhead of RuntimeClass kata is RuntimeClass node.k8s.io/v1"
    )
    assert fake_apiserver.get(PODS, "bigger", namespace="apps") is None
    # A class without an overhead, or none at all: not this policy's business.
    other = pod("other", runtime_class="runc", overhead={"cpu": "1"})
    assert (await send(fake_apiserver, "POST", "/api/v1/namespaces/apps/pods", other)).status == 201


async def test_a_failing_patch_refuses_the_pod_under_fail_only(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.apply(policy("p", SELECTOR_ENTRY))
    answer = await send(fake_apiserver, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 403
    message = f"policy 'p' with binding 'p' denied request: {NO_SUCH_PATH}"
    assert orjson.loads(answer.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Invalid",
        "details": {"name": "p", "kind": "pods", "causes": [{"message": message}]},
        "code": 403,
    }
    assert fake_apiserver.get(PODS, "p", namespace="apps") is None
    fake_apiserver.apply(policy("p", SELECTOR_ENTRY, failure_policy="Ignore"))
    answer = await send(fake_apiserver, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 201
    assert "nodeSelector" not in orjson.loads(answer.body)["spec"]


async def test_an_update_is_mutated(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.apply(policy("p", LABEL))
    fake_apiserver.add(PODS, pod())
    answer = await send(
        fake_apiserver,
        "PATCH",
        "/api/v1/namespaces/apps/pods/p",
        {"metadata": {"annotations": {"a": "b"}}},
        content_type="application/merge-patch+json",
    )
    assert answer.status == 200
    assert orjson.loads(answer.body)["metadata"]["labels"] == {"patched": "yes"}
    assert fake_apiserver.get(PODS, "p", namespace="apps")["metadata"]["labels"] == {"patched": "yes"}  # type: ignore[index]


async def test_what_the_fake_cannot_load_is_refused_whole(fake_apiserver: FakeApiServer) -> None:
    apply_configuration = policy("p", LABEL)
    apply_configuration[0]["spec"]["mutations"] = [
        {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}}
    ]
    no_action = policy("r", LABEL, param_kind={"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"})
    no_action[1]["spec"]["paramRef"] = {"name": "x"}
    for manifests, refusal in (
        (apply_configuration, "patchType ApplyConfiguration"),
        (no_action, "spec.paramRef.parameterNotFoundAction: Required value"),
    ):
        with pytest.raises(ValueError, match=re.escape(refusal)):
            fake_apiserver.apply([*route_documents(), *manifests])
        assert not fake_apiserver.admission_policies


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
async def test_a_policy_whose_param_kind_is_not_served_denies_every_pod_it_matches_or_none(
    fake_apiserver: FakeApiServer, failure_policy: str
) -> None:
    """As kube-apiserver 1.36.2 answered the pod admission policy applied without its
    CustomResourceDefinition: the policy is accepted, and every request it matches is
    denied under failurePolicy Fail (the match conditions are never reached), passed
    over under Ignore."""
    unserved = policy(
        "q",
        LABEL,
        failure_policy=failure_policy,
        match_conditions=("has(object.spec.runtimeClassName)",),
        param_kind={"apiVersion": "example.com/v1", "kind": "Thing"},
    )
    unserved[1]["spec"]["paramRef"] = {"name": "x", "parameterNotFoundAction": "Allow"}
    fake_apiserver.apply([*route_documents(), *unserved])
    answer = await send(fake_apiserver, "POST", "/api/v1/namespaces/apps/pods", pod())
    if failure_policy == "Ignore":
        assert answer.status == 201
        return
    assert answer.status == 403
    assert orjson.loads(answer.body)["message"] == (
        'policy "q" denied request: failed to configure policy: failed to find resource referenced by '
        "paramKind: 'example.com/v1, Kind=Thing'"
    )


async def test_a_value_the_fake_cannot_write_is_a_500(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.apply(policy("p", "[JSONPatch{op: 'add', path: '/metadata/labels', value: b'abc'}]"))
    answer = await send(fake_apiserver, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 500
    assert "cannot write as JSON" in orjson.loads(answer.body)["message"]


# ----- mutating webhooks ----------------------------------------------------------------

HOOK = "pods.example.com"
SERVICE = ("webhooks", "hook", 443)
SERVER_NAME = "hook.webhooks.svc"
ALLOW: dict[str, Any] = {"allowed": True}


@dataclass
class HookServer:
    """A webhook over HTTPS with a certificate for ``hook.webhooks.svc``."""

    port: int
    ca_bundle: str
    reviews: list[dict[str, Any]] = field(default_factory=list)
    # The response (without uid) to a review.
    respond: Callable[[dict[str, Any]], dict[str, Any]] = lambda _review: ALLOW
    # Seconds to wait before answering.
    delay: float = 0.0


@pytest.fixture
async def hook_server() -> AsyncIterator[HookServer]:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(SERVER_NAME).configure_cert(context)
    server = HookServer(0, base64.b64encode(ca.cert_pem.bytes()).decode())

    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        server.reviews.append(review)
        await asyncio.sleep(server.delay)
        response = {"uid": review["request"]["uid"], **server.respond(review)}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )

    app = web.Application()
    app.router.add_post("/mutate", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    server.port = runner.addresses[0][1]
    try:
        yield server
    finally:
        await runner.cleanup()


def configuration(
    ca_bundle: str,
    *,
    name: str = "hooks",
    hook: str = HOOK,
    failure_policy: str = "Fail",
    reinvocation: str = "Never",
    side_effects: str = "None",
    timeout: int = 5,
    **more: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": hook,
                "admissionReviewVersions": ["v1"],
                "sideEffects": side_effects,
                "timeoutSeconds": timeout,
                "failurePolicy": failure_policy,
                "reinvocationPolicy": reinvocation,
                "clientConfig": {
                    "service": {
                        "namespace": SERVICE[0],
                        "name": SERVICE[1],
                        "path": "/mutate",
                        "port": SERVICE[2],
                    },
                    "caBundle": ca_bundle,
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                        "scope": "Namespaced",
                    }
                ],
                **more,
            }
        ],
    }


@pytest.fixture
def hooked(fake_apiserver: FakeApiServer, hook_server: HookServer) -> FakeApiServer:
    fake_apiserver.call_webhooks = True
    fake_apiserver.webhook_addresses[SERVICE] = ("127.0.0.1", hook_server.port)
    fake_apiserver.add(MUTATING_WEBHOOKS, configuration(hook_server.ca_bundle))
    return fake_apiserver


def json_patch(*operations: dict[str, Any]) -> dict[str, Any]:
    return {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(operations).encode()).decode(),
    }


async def test_a_webhook_is_sent_the_review_kube_apiserver_sends(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    hook_server.respond = lambda _review: json_patch(
        {"op": "add", "path": "/metadata/labels", "value": {"captured": "yes"}}
    )
    answer = await send(
        hooked, "POST", "/api/v1/namespaces/apps/pods", pod("kata-pod", runtime_class="kata", scheduler=None)
    )
    assert answer.status == 201
    assert orjson.loads(answer.body)["metadata"]["labels"] == {"captured": "yes"}
    [review] = hook_server.reviews
    sent, captured = review["request"], CAPTURED_CREATE["request"]
    assert (review["kind"], review["apiVersion"]) == (CAPTURED_CREATE["kind"], CAPTURED_CREATE["apiVersion"])
    assert list(sent) == list(captured)
    for key in (
        "kind",
        "resource",
        "requestKind",
        "requestResource",
        "name",
        "namespace",
        "operation",
        "oldObject",
        "dryRun",
        "options",
    ):
        assert sent[key] == captured[key], key
    assert re.fullmatch(r"[0-9a-f-]{36}", sent["uid"])
    assert sent["userInfo"] == {
        "username": "kubernetes-admin",
        "groups": ["system:masters", "system:authenticated"],
    }
    # The pod before the store fills anything in, defaulted, kind and apiVersion first.
    pod_sent = sent["object"]
    assert list(pod_sent)[:2] == ["kind", "apiVersion"]
    assert set(pod_sent["metadata"]) == set(captured["object"]["metadata"]) - {"managedFields"}
    assert pod_sent["spec"]["schedulerName"] == captured["object"]["spec"]["schedulerName"]
    assert pod_sent["spec"]["runtimeClassName"] == captured["object"]["spec"]["runtimeClassName"]


async def test_a_generate_name_create_is_reviewed_without_a_name(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    created = pod(runtime_class="kata")
    del created["metadata"]["name"]
    created["metadata"]["generateName"] = "web-7d4b9c6f5-"
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", created)
    assert answer.status == 201
    [review] = hook_server.reviews
    assert list(review["request"]) == list(CAPTURED_GENERATE_NAME["request"])
    assert review["request"]["object"]["metadata"]["generateName"] == "web-7d4b9c6f5-"
    assert orjson.loads(answer.body)["metadata"]["name"].startswith("web-7d4b9c6f5-")


async def test_a_denial_carries_the_webhooks_status(hooked: FakeApiServer, hook_server: HookServer) -> None:
    hook_server.respond = lambda _review: {
        "allowed": False,
        "status": {"code": 403, "message": "no pods today"},
    }
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 403
    assert orjson.loads(answer.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'admission webhook "{HOOK}" denied the request: no pods today',
        "code": 403,
    }
    assert hooked.get(PODS, "p", namespace="apps") is None
    # No code, no message: 400 "without explanation".
    hook_server.respond = lambda _review: {"allowed": False}
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 400
    assert (
        orjson.loads(answer.body)["message"]
        == f'admission webhook "{HOOK}" denied the request without explanation'
    )


async def test_warnings_are_passed_on(hooked: FakeApiServer, hook_server: HookServer) -> None:
    hook_server.respond = lambda _review: {"allowed": True, "warnings": ["careful"]}
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 201
    assert answer.warnings == ['299 - "careful"']


async def test_a_patch_that_does_not_apply_is_a_500_whatever_the_failure_policy(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    hooked.put(MUTATING_WEBHOOKS, configuration(hook_server.ca_bundle, failure_policy="Ignore"))
    hook_server.respond = lambda _review: json_patch(
        {"op": "test", "path": "/spec/schedulerName", "value": "x"}
    )
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 500
    assert orjson.loads(answer.body)["message"] == (
        "Internal error occurred: testing value /spec/schedulerName failed: test failed"
    )


async def test_an_unreachable_webhook_fails_closed_or_open(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    port = free_port()
    hooked.webhook_addresses[SERVICE] = ("127.0.0.1", port)
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 500
    reason = (
        f'failed calling webhook "{HOOK}": failed to call webhook: Post '
        f'"https://{SERVER_NAME}:443/mutate?timeout=5s": dial tcp 127.0.0.1:{port}: connect: connection refused'
    )
    assert orjson.loads(answer.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {reason}",
        "reason": "InternalError",
        "details": {"causes": [{"message": reason}]},
        "code": 500,
    }
    hooked.put(MUTATING_WEBHOOKS, configuration(hook_server.ca_bundle, failure_policy="Ignore"))
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 201
    assert orjson.loads(answer.body)["spec"] == pod()["spec"]


async def test_a_certificate_the_ca_bundle_does_not_trust_fails_the_call(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    other = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()
    hooked.put(MUTATING_WEBHOOKS, configuration(other))
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 500
    assert orjson.loads(answer.body)["message"].endswith(
        "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    )
    assert hook_server.reviews == []


async def test_a_webhook_that_does_not_answer_in_time(hooked: FakeApiServer, hook_server: HookServer) -> None:
    hooked.put(MUTATING_WEBHOOKS, configuration(hook_server.ca_bundle, timeout=1))
    hook_server.delay = 1.5
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 500
    assert orjson.loads(answer.body)["message"].endswith(
        f'failed to call webhook: Post "https://{SERVER_NAME}:443/mutate?timeout=1s": context deadline exceeded'
    )


async def test_a_service_without_an_address_is_a_500_naming_it(hooked: FakeApiServer) -> None:
    hooked.webhook_addresses.clear()
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 500
    assert "webhook_addresses[('webhooks', 'hook', 443)]" in orjson.loads(answer.body)["message"]


async def test_match_conditions_and_namespace_selector_decide_who_is_sent(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    hooked.put(
        MUTATING_WEBHOOKS,
        configuration(
            hook_server.ca_bundle,
            matchConditions=[
                {"name": "names-a-runtimeclass", "expression": "has(object.spec.runtimeClassName)"}
            ],
            namespaceSelector={
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
                ]
            },
        ),
    )
    for created in (
        pod("without-class"),
        pod("kube-system-pod", runtime_class="kata", namespace="kube-system"),
        pod("with-class", runtime_class="kata"),
    ):
        namespace = created["metadata"]["namespace"]
        assert (await send(hooked, "POST", f"/api/v1/namespaces/{namespace}/pods", created)).status == 201
    assert [r["request"]["name"] for r in hook_server.reviews] == ["with-class"]
    # A condition that cannot be evaluated refuses under Fail, as NewForbidden words it.
    hooked.put(
        MUTATING_WEBHOOKS,
        configuration(
            hook_server.ca_bundle, matchConditions=[{"name": "c", "expression": "object.spec.missing"}]
        ),
    )
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod("q"))
    assert answer.status == 403
    assert orjson.loads(answer.body)["message"] == (
        "pods \"q\" is forbidden: expression 'object.spec.missing' resulted in error: no such key: missing"
    )


async def test_a_dry_run_reaches_only_webhooks_without_side_effects(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod(), params={"dryRun": "All"})
    assert answer.status == 201
    [review] = hook_server.reviews
    assert review["request"]["dryRun"] is True
    assert review["request"]["options"] == {
        "kind": "CreateOptions",
        "apiVersion": "meta.k8s.io/v1",
        "dryRun": ["All"],
    }
    assert hooked.get(PODS, "p", namespace="apps") is None
    hooked.put(
        MUTATING_WEBHOOKS, configuration(hook_server.ca_bundle, side_effects="Some", failure_policy="Ignore")
    )
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod(), params={"dryRun": "All"})
    assert answer.status == 400
    assert orjson.loads(answer.body)["message"] == f'admission webhook "{HOOK}" does not support dry run'
    assert len(hook_server.reviews) == 1


async def test_webhooks_run_after_policies_and_a_webhook_change_reinvokes_them(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    """The chain is MutatingAdmissionPolicy then MutatingAdmissionWebhook: a webhook that
    sets runtimeClassName after an IfNeeded policy ran has the policy run again (its
    matchConditions let it run in the first round), and the webhook (Never) is called once."""
    hooked.apply(
        policy(
            "route",
            "has(object.spec.runtimeClassName) && object.spec.schedulerName == 'default-scheduler' ? "
            "[JSONPatch{op: 'add', path: '/spec/schedulerName', value: 'runtimeclass-scheduler'}] : []",
            reinvocation="IfNeeded",
        )
    )
    hook_server.respond = lambda review: (
        ALLOW
        if "runtimeClassName" in review["request"]["object"]["spec"]
        else json_patch({"op": "add", "path": "/spec/runtimeClassName", "value": "kata"})
    )
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 201
    stored = orjson.loads(answer.body)["spec"]
    assert (stored["runtimeClassName"], stored["schedulerName"]) == ("kata", "runtimeclass-scheduler")
    assert len(hook_server.reviews) == 1
    assert hook_server.reviews[0]["request"]["object"]["spec"]["schedulerName"] == "default-scheduler"


async def test_an_ifneeded_webhook_is_called_again_after_a_later_change(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    """webhook/mutating/dispatcher.go: a change by a later webhook marks the IfNeeded
    webhooks called before it; they are called once more, never a third time."""
    first = configuration(
        hook_server.ca_bundle, name="a-first", hook="first.example.com", reinvocation="IfNeeded"
    )
    second = configuration(hook_server.ca_bundle, name="b-second", hook="second.example.com")
    hooked.put(MUTATING_WEBHOOKS, first)
    hooked.add(MUTATING_WEBHOOKS, second)
    hooked.delete(MUTATING_WEBHOOKS, "hooks")
    calls: list[str] = []

    def respond(review: dict[str, Any]) -> dict[str, Any]:
        labels = review["request"]["object"]["metadata"].get("labels") or {}
        calls.append(labels.get("by", "-"))
        if len(calls) == 2:  # the second webhook
            return json_patch({"op": "add", "path": "/metadata/labels", "value": {"by": "second"}})
        return ALLOW

    hook_server.respond = respond
    answer = await send(hooked, "POST", "/api/v1/namespaces/apps/pods", pod())
    assert answer.status == 201
    assert calls == ["-", "-", "second"]


async def test_webhooks_stay_uncalled_unless_asked(
    fake_apiserver: FakeApiServer, hook_server: HookServer
) -> None:
    fake_apiserver.add(MUTATING_WEBHOOKS, configuration(hook_server.ca_bundle))
    assert (await send(fake_apiserver, "POST", "/api/v1/namespaces/apps/pods", pod())).status == 201
    assert hook_server.reviews == []


async def test_a_stale_update_is_refused_after_mutating_admission(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    """store.go ``Update`` compares the resourceVersion after ``objInfo.UpdatedObject``
    ran the mutating admission: the webhook is called, then the 409."""
    configured = configuration(hook_server.ca_bundle)
    configured["webhooks"][0]["rules"][0]["operations"] = ["UPDATE"]
    hooked.put(MUTATING_WEBHOOKS, configured)
    stale = hooked.add(PODS, pod())
    hooked.modify(PODS, "p", {"metadata": {"labels": {"changed": "yes"}}}, namespace="apps")
    answer = await send(hooked, "PUT", "/api/v1/namespaces/apps/pods/p", stale)
    assert answer.status == 409
    [review] = hook_server.reviews
    assert review["request"]["operation"] == "UPDATE"
    assert review["request"]["options"] == {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}


async def test_a_delete_is_sent_with_the_stored_object_as_old_object(
    hooked: FakeApiServer, hook_server: HookServer
) -> None:
    configured = configuration(hook_server.ca_bundle)
    configured["webhooks"][0]["rules"][0]["operations"] = ["DELETE"]
    hooked.put(MUTATING_WEBHOOKS, configured)
    stored = hooked.add(PODS, pod())
    answer = await send(hooked, "DELETE", "/api/v1/namespaces/apps/pods/p", {"gracePeriodSeconds": 0})
    assert answer.status == 200
    [review] = hook_server.reviews
    request = review["request"]
    assert (request["operation"], request["object"], request["oldObject"]["metadata"]["uid"]) == (
        "DELETE",
        None,
        stored["metadata"]["uid"],
    )
    assert request["options"] == {
        "kind": "DeleteOptions",
        "apiVersion": "meta.k8s.io/v1",
        "gracePeriodSeconds": 0,
    }


async def test_config_maps_serve_as_namespaced_params(fake_apiserver: FakeApiServer) -> None:
    """A namespaced paramKind: the params of the request's namespace (or of
    paramRef.namespace)."""
    fake_apiserver.add(
        CONFIGMAPS, {"metadata": {"name": "labels", "namespace": "apps"}, "data": {"team": "a"}}
    )
    fake_apiserver.add(
        CONFIGMAPS, {"metadata": {"name": "labels", "namespace": "other"}, "data": {"team": "b"}}
    )
    fake_apiserver.apply(
        policy(
            "p",
            "[JSONPatch{op: 'add', path: '/metadata/labels', value: params.data}]",
            param_kind={"apiVersion": "v1", "kind": "ConfigMap"},
            param_ref={"name": "labels", "parameterNotFoundAction": "Allow"},
        )
    )
    for namespace, labels in (("apps", {"team": "a"}), ("other", {"team": "b"}), ("third", None)):
        answer = await send(
            fake_apiserver, "POST", f"/api/v1/namespaces/{namespace}/pods", pod(namespace=namespace)
        )
        assert answer.status == 201
        assert orjson.loads(answer.body)["metadata"].get("labels") == labels
