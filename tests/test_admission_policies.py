"""Every ValidatingAdmissionPolicy the overlays ship, its exact CEL evaluated over old and new objects.

RBAC grants whole objects; these policies confine each write the extender makes to its
job (deploy/components/*/admission-policy.yaml). Each one is taken from the rendered
overlays (``kubectl kustomize``, as ``kubectl apply -k`` applies them) and its match
condition, variables and validations run as they are on ``common-expression-language``
(cel-rust), over real objects: the example cluster's nodes, a pod as kube-apiserver
1.36.2 sent it to a webhook, the shipped webhook configurations. The cases are the
writes the extender makes (allowed) and the writes its rights would allow without the
policy (each refused with its own message).

How kube-apiserver evaluates a policy (staging/src/k8s.io/apiserver/pkg/admission/plugin/
policy/validating): ``request`` carries ``operation`` (a PATCH is an UPDATE),
``userInfo``, ``name`` and, for a subresource only, ``subResource`` (absent, not
empty, for the object itself); ``object`` is null on DELETE and ``oldObject`` on CREATE;
every validation that is false denies with its message (the first one is what the
denial's message carries), and an expression that errors denies under
``failurePolicy: Fail``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import cel
import pytest
import yaml

from extender.settings import DEFAULT_STARTUP_TAINT
from tests.support.manifests import OVERLAYS, PREDICATE_LABELS, Manifest, one, render, render_webhook_way
from tests.support.paths import ADMISSION_DATA, EXAMPLE_CLUSTER, FIXTURES

EXTENDER = "system:serviceaccount:runtimeclass-extender:runtimeclass-extender"
PREFIX = "runtimeclass.node-restriction.kubernetes.io/"
DENIED = json.loads((FIXTURES / "kube-apiserver" / "node-patch-denied-by-admission-policy.json").read_text())


def confines_the_extender(policy: Manifest) -> bool:
    """A policy that keeps the extender's own writes to its job (its first match
    condition picks the extender's requests); the pod admission policies, which admit
    everyone's pods, are tests/admission/test_pod_admission_policies.py's."""
    conditions = policy["spec"].get("matchConditions") or [{}]
    return conditions[0].get("name") == "only-the-extender"


# The one policy bound to some namespaces only: the pod creates it confines can only be
# in the extender's own namespace (a Role there grants them), which carries this label
# (deploy/base/namespace.yaml); bound so, no other pod of the cluster costs the API server
# its match condition.
BOUND_TO = {
    "runtimeclass-extender-plugin-probe": {
        "namespaceSelector": {"matchLabels": {"runtimeclass-extender.dev/webhook": "ignore"}}
    }
}


def policies() -> dict[str, Manifest]:
    """Every policy of every shipped overlay that confines the extender's writes, by name
    (each overlay carries the same text)."""
    found: dict[str, Manifest] = {}
    for overlay in OVERLAYS:
        docs = render(overlay)
        for doc in docs:
            if doc["kind"] != "ValidatingAdmissionPolicy" or not confines_the_extender(doc):
                continue
            name = doc["metadata"]["name"]
            assert found.setdefault(name, doc)["spec"] == doc["spec"], name
            binding = one(docs, "ValidatingAdmissionPolicyBinding", name)
            selects = BOUND_TO.get(name)
            assert binding["spec"] == {
                "policyName": name,
                "validationActions": ["Deny"],
                **({"matchResources": selects} if selects else {}),
            }
    return found


POLICIES = policies()


def evaluate(
    policy_name: str,
    *,
    operation: str,
    old: Manifest | None,
    new: Manifest | None,
    user: str = EXTENDER,
    sub_resource: str | None = None,
    name: str = "",
    dry_run: bool = False,
) -> list[str] | None:
    """The messages of the validations that deny (empty: allowed); None when the policy
    does not apply to the request (a match condition is false)."""
    spec = POLICIES[policy_name]["spec"]
    assert spec["failurePolicy"] == "Fail"
    request: dict[str, Any] = {
        "operation": operation,
        "userInfo": {"username": user},
        "name": name or ((new or old or {}).get("metadata") or {}).get("name", ""),
    }
    if sub_resource is not None:
        request["subResource"] = sub_resource
    # Always present, true or false (the API server's AdmissionRequest for CEL).
    request["dryRun"] = dry_run
    context: dict[str, Any] = {"request": request, "object": new, "oldObject": old, "variables": {}}
    for condition in spec.get("matchConditions", []):
        if cel.evaluate(condition["expression"], context) is not True:
            return None
    for variable in spec.get("variables", []):
        context["variables"][variable["name"]] = cel.evaluate(variable["expression"], context)
    denials = []
    for validation in spec["validations"]:
        try:
            allowed = cel.evaluate(validation["expression"], context) is True
        except Exception as exc:  # failurePolicy Fail: an expression that errors denies
            denials.append(f"expression {validation['expression']!r} resulted in error: {exc}")
            continue
        if not allowed:
            denials.append(validation["message"])
    return denials


def updated(obj: Manifest, change: Callable[[Manifest], None]) -> Manifest:
    new = copy.deepcopy(obj)
    change(new)
    return new


def test_every_write_the_extender_is_granted_is_confined() -> None:
    """A policy for each kind of object the extender may write, each bound with Deny."""
    assert set(POLICIES) == {
        "runtimeclass-extender-node-labels",
        "runtimeclass-extender-events",
        "runtimeclass-extender-requeue",
        "runtimeclass-extender-webhook-ca-bundle",
        "runtimeclass-extender-webhook-certificate",
        "runtimeclass-extender-leader-election",
        "runtimeclass-extender-pod-admission-table",
        "runtimeclass-extender-namespace-annotation",
        "runtimeclass-extender-plugin-probe",
    }


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize(
    ("user", "applies"),
    [
        (EXTENDER, True),
        # Installed into another namespace (an overlay with namespace: other).
        ("system:serviceaccount:other:runtimeclass-extender", True),
        # Anyone else: the policy never applies (it would deny their writes).
        ("system:serviceaccount:runtimeclass-extender:runtimeclass-scheduler", False),
        ("system:serviceaccount:other:runtimeclass-extender-2", False),
        ("runtimeclass-extender", False),
        ("kubernetes-admin", False),
        ("system:node:node-1", False),
    ],
)
def test_each_policy_applies_to_the_extender_in_any_namespace_and_to_no_one_else(
    policy: str, user: str, applies: bool
) -> None:
    (condition,) = POLICIES[policy]["spec"]["matchConditions"]
    assert cel.evaluate(condition["expression"], {"request": {"userInfo": {"username": user}}}) is applies


# --- nodes ----------------------------------------------------------------------------


def _example_node() -> Manifest:
    cluster = yaml.safe_load(EXAMPLE_CLUSTER.read_text())
    node: Manifest = next(item for item in cluster["items"] if item["kind"] == "Node")
    node = copy.deepcopy(node)
    node["metadata"].setdefault("labels", {})["zone"] = "a"
    node["metadata"]["annotations"] = {"csi.volume.kubernetes.io/nodeid": '{"csi.example": "n1"}'}
    node["spec"] = {"taints": [{"key": "sandbox", "value": "gvisor", "effect": "NoSchedule"}]}
    return node


NODE = _example_node()
NOT_CHANGED = "labels outside the prefix may not change or be removed"
SPEC = "node spec may not change, but for removing the startup taint"
SANDBOX_TAINT = {"key": "sandbox", "value": "gvisor", "effect": "NoSchedule"}
STARTUP_TAINT = {"key": DEFAULT_STARTUP_TAINT, "effect": "NoSchedule"}
TAINTED = [STARTUP_TAINT, SANDBOX_TAINT]


def _set(path: str, value: Any) -> Callable[[Manifest], None]:
    def change(obj: Manifest) -> None:
        *parents, last = path.split(".")
        target = obj
        for part in parents:
            target = target.setdefault(part, {})
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value

    return change


def _label(key: str, value: str | None) -> Callable[[Manifest], None]:
    def change(node: Manifest) -> None:
        labels = node["metadata"].setdefault("labels", {})
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value

    return change


def _both(*changes: Callable[[Manifest], None]) -> Callable[[Manifest], None]:
    def change(obj: Manifest) -> None:
        for one_change in changes:
            one_change(obj)

    return change


NODE_CASES: list[tuple[str, Callable[[Manifest], None], dict[str, Any], list[str]]] = [
    # What the labeller does (a merge patch of labels under the prefix): allowed.
    ("add-prefixed", _label(PREFIX + "gvisor", "true"), {}, []),
    ("correct-prefixed", _label(PREFIX + "gvisor", "true"), {"old": _label(PREFIX + "gvisor", "false")}, []),
    ("remove-prefixed", _label(PREFIX + "gvisor", None), {"old": _label(PREFIX + "gvisor", "true")}, []),
    ("node-without-labels", _label(PREFIX + "gvisor", "true"), {"old": _set("metadata.labels", None)}, []),
    # What "patch nodes" would allow without the policy: refused, each with its message.
    ("remove-other", _label("zone", None), {}, [NOT_CHANGED]),
    ("change-other", _label("zone", "b"), {}, [NOT_CHANGED]),
    ("add-other", _label("runtime/gvisor", "true"), {}, ["labels outside the prefix may not be added"]),
    ("taint", _set("spec.taints", []), {}, [SPEC]),
    ("unschedulable", _set("spec.unschedulable", True), {}, [SPEC]),
    # The startup taint (docs/autoscaling.md): removed, exactly, with or without labels.
    ("remove-startup-taint", _set("spec.taints", [SANDBOX_TAINT]), {"old": _set("spec.taints", TAINTED)}, []),
    (
        "remove-startup-taint-and-label",
        _both(_set("spec.taints", [SANDBOX_TAINT]), _label(PREFIX + "gvisor", "true")),
        {"old": _set("spec.taints", TAINTED)},
        [],
    ),
    (
        "remove-only-startup-taint",
        _set("spec.taints", None),
        {"old": _set("spec.taints", [STARTUP_TAINT])},
        [],
    ),
    # ...and nothing else with it: another taint, a taint added, another spec field.
    ("remove-both-taints", _set("spec.taints", []), {"old": _set("spec.taints", TAINTED)}, [SPEC]),
    (
        "remove-other-taint",
        _set("spec.taints", [STARTUP_TAINT]),
        {"old": _set("spec.taints", TAINTED)},
        [SPEC],
    ),
    ("add-startup-taint", _set("spec.taints", TAINTED), {}, [SPEC]),
    (
        "startup-taint-and-unschedulable",
        _both(_set("spec.taints", [SANDBOX_TAINT]), _set("spec.unschedulable", True)),
        {"old": _set("spec.taints", TAINTED)},
        [SPEC],
    ),
    (
        "startup-taint-and-provider",
        _both(_set("spec.taints", [SANDBOX_TAINT]), _set("spec.providerID", "kwok:other")),
        {"old": _set("spec.taints", TAINTED)},
        [SPEC],
    ),
    (
        "startup-taint-and-pod-cidrs",
        _both(_set("spec.taints", [SANDBOX_TAINT]), _set("spec.podCIDRs", ["10.0.0.0/24"])),
        {"old": _set("spec.taints", TAINTED)},
        [SPEC],
    ),
    (
        "changed-taint-value",
        _set("spec.taints", [{**SANDBOX_TAINT, "value": "kata"}]),
        {"old": _set("spec.taints", TAINTED)},
        [SPEC],
    ),
    ("add-annotation", _set("metadata.annotations.x", "y"), {}, ["node annotations may not change"]),
    ("remove-annotations", _set("metadata.annotations", None), {}, ["node annotations may not change"]),
    (
        "change-annotation",
        _set("metadata.annotations.csi.volume.kubernetes.io/nodeid", "{}"),
        {},
        ["node annotations may not change"],
    ),
    ("finalizer", _set("metadata.finalizers", ["example.com/block"]), {}, ["node finalizers may not change"]),
    (
        "owner",
        _set(
            "metadata.ownerReferences",
            [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "gone",
                    "uid": "00000000-0000-0000-0000-000000000000",
                }
            ],
        ),
        {},
        ["node ownerReferences may not change"],
    ),
    (
        "prefixed-and-annotation",
        _both(_label(PREFIX + "gvisor", "true"), _set("metadata.annotations.x", "y")),
        {},
        ["node annotations may not change"],
    ),
]


@pytest.mark.parametrize(
    ("change", "kwargs", "expected"), [c[1:] for c in NODE_CASES], ids=[c[0] for c in NODE_CASES]
)
def test_node_writes_only_touch_labels_under_the_prefix(
    change: Callable[[Manifest], None], kwargs: dict[str, Any], expected: list[str]
) -> None:
    old = updated(NODE, kwargs["old"]) if "old" in kwargs else NODE
    assert (
        evaluate("runtimeclass-extender-node-labels", operation="UPDATE", old=old, new=updated(old, change))
        == expected
    )


@pytest.mark.parametrize(
    ("operation", "sub_resource", "old", "new"),
    [
        ("UPDATE", "status", NODE, NODE),
        ("CREATE", None, None, NODE),
        ("DELETE", None, NODE, None),
    ],
    ids=["status", "create", "delete"],
)
def test_node_status_create_and_delete_are_refused(
    operation: str, sub_resource: str | None, old: Manifest | None, new: Manifest | None
) -> None:
    assert evaluate(
        "runtimeclass-extender-node-labels", operation=operation, old=old, new=new, sub_resource=sub_resource
    ) == ["may only update the node object itself"]


def test_the_real_denial_is_the_one_for_a_label_outside_the_prefix() -> None:
    """kube-apiserver 1.36.2's answer to the same write (the captured fixture)."""
    assert DENIED["httpStatus"] == 422
    (removed,) = DENIED["request"]["body"]["metadata"]["labels"]
    old = updated(NODE, _label(removed, "true"))
    messages = evaluate("runtimeclass-extender-node-labels", operation="UPDATE", old=old, new=NODE)
    assert messages == [NOT_CHANGED]
    assert DENIED["response"]["message"].endswith(f"denied request: {messages[0]}")


# --- events ---------------------------------------------------------------------------

EVENT: Manifest = {
    "apiVersion": "events.k8s.io/v1",
    "kind": "Event",
    "metadata": {"name": "pod-a.runtimeclass-0123456789abcdef", "namespace": "apps"},
    "eventTime": "2026-11-25T10:00:00.000000Z",
    "reportingController": "runtimeclass-extender.dev/node-labeller",
    "reportingInstance": "runtimeclass-scheduler-0_0",
    "action": "Scheduling",
    "reason": "RuntimeClassFitsNoNode",
    "type": "Warning",
    "note": 'RuntimeClass "gvisor": 0 of 3 nodes match scheduling.nodeSelector runtime=gvisor',
    "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "apps", "name": "pod-a", "uid": "u1"},
}
EVENT_REFUSED = "may only create the node labeller's Warning events about pods"


@pytest.mark.parametrize(
    ("operation", "old", "new", "expected"),
    [
        ("CREATE", None, EVENT, []),
        ("CREATE", None, updated(EVENT, _set("reportingController", "kubelet")), [EVENT_REFUSED]),
        ("CREATE", None, updated(EVENT, _set("type", "Normal")), [EVENT_REFUSED]),
        ("CREATE", None, updated(EVENT, _set("regarding.kind", "Node")), [EVENT_REFUSED]),
        ("CREATE", None, updated(EVENT, _set("regarding", None)), [EVENT_REFUSED]),
        ("UPDATE", EVENT, updated(EVENT, _set("note", "x")), ["may only create events"]),
        ("DELETE", EVENT, None, ["may only create events"]),
    ],
    ids=["labeller-event", "other-controller", "normal", "about-a-node", "about-nothing", "update", "delete"],
)
def test_events_are_only_the_labellers_warnings_about_pods(
    operation: str, old: Manifest | None, new: Manifest | None, expected: list[str]
) -> None:
    assert evaluate("runtimeclass-extender-events", operation=operation, old=old, new=new) == expected


# --- pods -----------------------------------------------------------------------------


def _captured_pod() -> Manifest:
    """A pending pod as kube-apiserver 1.36.2 sent it to a webhook (defaults applied)."""
    review = json.loads((ADMISSION_DATA / "plugin-off" / "03-pods.json").read_text())
    pod: Manifest = copy.deepcopy(review["request"]["object"])
    pod["metadata"]["uid"] = "6e1d1c8e-6f43-4f6c-9a55-0f2d8f6a9e10"
    pod["metadata"]["labels"] = {"app": "sandboxed"}
    pod["metadata"]["annotations"] = {"team": "a"}
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs-uid", "controller": True}
    ]
    return pod


POD = _captured_pod()
REQUEUED_AT = "runtimeclass-extender.dev/requeued-at"
REQUEUED_FOR = "runtimeclass-extender.dev/requeued-for"


def _annotations(**changes: str | None) -> Callable[[Manifest], None]:
    names = {"at": REQUEUED_AT, "for_": REQUEUED_FOR}

    def change(pod: Manifest) -> None:
        annotations = pod["metadata"].setdefault("annotations", {})
        for key, value in changes.items():
            key = names.get(key, key)
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value

    return change


def _image(pod: Manifest) -> None:
    pod["spec"]["containers"][0]["image"] = "registry.example/evil:latest"


POD_CASES: list[tuple[str, Callable[[Manifest], None], Callable[[Manifest], None] | None, list[str]]] = [
    # The requeuer's nudge (a merge patch of its two annotations): allowed.
    ("nudge", _annotations(at="2026-11-25T10:00:00.000001Z", for_="0123456789abcdef"), None, []),
    ("nudge-without-revision", _annotations(at="2026-11-25T10:00:00.000001Z"), None, []),
    (
        "nudge-again",
        _annotations(at="2026-11-25T10:00:01.000001Z", for_="fedcba9876543210"),
        _annotations(at="2026-11-25T10:00:00.000001Z", for_="0123456789abcdef"),
        [],
    ),
    ("pod-without-annotations", _annotations(at="t"), _set("metadata.annotations", None), []),
    # Anything else "patch pods" would allow: refused.
    ("image", _image, None, ["pod spec may not change"]),
    ("toleration", _set("spec.tolerations", []), None, ["pod spec may not change"]),
    (
        "scheduling-gates",
        _set("spec.schedulingGates", []),
        _set("spec.schedulingGates", [{"name": "x"}]),
        ["pod spec may not change"],
    ),
    (
        "add-annotation",
        _annotations(other="x"),
        None,
        ["only the requeue annotations may be added or changed"],
    ),
    (
        "change-annotation",
        _annotations(team="b"),
        None,
        ["only the requeue annotations may be added or changed"],
    ),
    (
        "remove-annotation",
        _annotations(team=None),
        None,
        ["annotations other than the requeue annotations may not be removed"],
    ),
    ("label", _set("metadata.labels.app", "other"), None, ["pod labels may not change"]),
    (
        "finalizer",
        _set("metadata.finalizers", ["example.com/block"]),
        None,
        ["pod finalizers may not change"],
    ),
    ("orphan", _set("metadata.ownerReferences", None), None, ["pod ownerReferences may not change"]),
    (
        "nudge-and-image",
        _both(_annotations(at="t"), _image),
        None,
        ["pod spec may not change"],
    ),
]


@pytest.mark.parametrize(
    ("change", "before", "expected"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES]
)
def test_pod_writes_only_touch_the_requeue_annotations(
    change: Callable[[Manifest], None], before: Callable[[Manifest], None] | None, expected: list[str]
) -> None:
    old = updated(POD, before) if before is not None else POD
    assert (
        evaluate("runtimeclass-extender-requeue", operation="UPDATE", old=old, new=updated(old, change))
        == expected
    )


@pytest.mark.parametrize(
    ("operation", "sub_resource", "old", "new"),
    [
        ("UPDATE", "status", POD, POD),
        ("UPDATE", "ephemeralcontainers", POD, POD),
        ("CREATE", "binding", None, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}}),
        (
            "CREATE",
            "eviction",
            None,
            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}},
        ),
        ("CREATE", None, None, POD),
        ("DELETE", None, POD, None),
        ("CONNECT", "exec", None, {"kind": "PodExecOptions", "command": ["sh"]}),
    ],
    ids=["status", "ephemeral-containers", "binding", "eviction", "create", "delete", "exec"],
)
def test_pod_subresources_create_and_delete_are_refused(
    operation: str, sub_resource: str | None, old: Manifest | None, new: Manifest | None
) -> None:
    denials = evaluate(
        "runtimeclass-extender-requeue",
        operation=operation,
        old=old,
        new=new,
        sub_resource=sub_resource,
        name=POD["metadata"]["name"],
    )
    assert denials and denials[0] == "may only update the pod object itself"


# --- webhook configurations -----------------------------------------------------------


def _configuration(kind: str, overlay: str, *, webhook_way: bool = False) -> Manifest:
    docs = render_webhook_way(overlay) if webhook_way else render(overlay)
    obj = copy.deepcopy(one(docs, kind))
    # As the API server stores it: defaults filled in, the caBundle the keeper set.
    for hook in obj["webhooks"]:
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", 10)
        hook["clientConfig"]["caBundle"] = "Q0EgMQ=="
    return obj


VALIDATING = _configuration("ValidatingWebhookConfiguration", "overlays/predicate-mode")
# The pod webhook, as an overlay's copy for an API server without MutatingAdmissionPolicy
# has it (docs/pod-webhook.md).
MUTATING = _configuration("MutatingWebhookConfiguration", PREDICATE_LABELS, webhook_way=True)
ONLY_CA = "only clientConfig.caBundle of a webhook may change"


def _hook(path: str, value: Any) -> Callable[[Manifest], None]:
    def change(configuration: Manifest) -> None:
        _set(path, value)(configuration["webhooks"][0])

    return change


def _flip_failure_policy(configuration: Manifest) -> None:
    hook = configuration["webhooks"][0]
    hook["failurePolicy"] = "Ignore" if hook["failurePolicy"] == "Fail" else "Fail"


def _add_hook(configuration: Manifest) -> None:
    extra = copy.deepcopy(configuration["webhooks"][0])
    extra["name"] = "everything.runtimeclass-extender.dev"
    extra["rules"] = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]
    configuration["webhooks"].append(extra)


_FIRST_CA = _hook("clientConfig.caBundle", "Q0EgMg==")
WEBHOOK_CASES: list[tuple[str, Callable[[Manifest], None], list[str]]] = [
    ("ca-bundle", _hook("clientConfig.caBundle", "Q0EgMg=="), []),
    ("first-ca-bundle", _FIRST_CA, []),
    ("failure-policy", _flip_failure_policy, [ONLY_CA]),
    (
        "rules",
        _hook("rules", [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]),
        [ONLY_CA],
    ),
    ("namespace-selector", _hook("namespaceSelector", {}), [ONLY_CA]),
    ("object-selector", _hook("objectSelector", {"matchLabels": {"a": "b"}}), [ONLY_CA]),
    ("service", _hook("clientConfig.service.name", "elsewhere"), [ONLY_CA]),
    (
        "url",
        _both(_hook("clientConfig.service", None), _hook("clientConfig.url", "https://evil.example/")),
        [ONLY_CA],
    ),
    ("timeout", _hook("timeoutSeconds", 30), [ONLY_CA]),
    ("side-effects", _hook("sideEffects", "NoneOnDryRun"), [ONLY_CA]),
    ("review-versions", _hook("admissionReviewVersions", ["v1beta1"]), [ONLY_CA]),
    ("match-policy", _hook("matchPolicy", "Exact"), [ONLY_CA]),
    ("match-conditions", _hook("matchConditions", []), [ONLY_CA]),
    ("add-webhook", _add_hook, ["webhooks may not be added, removed or renamed"]),
    ("remove-webhooks", _set("webhooks", []), ["webhooks may not be added, removed or renamed"]),
    (
        "rename",
        _hook("name", "renamed.runtimeclass-extender.dev"),
        ["webhooks may not be added, removed or renamed"],
    ),
    (
        "annotation",
        _set("metadata.annotations", {"cert-manager.io/inject-ca-from": "x/y"}),
        ["the configuration's labels, annotations, finalizers and ownerReferences may not change"],
    ),
]


@pytest.mark.parametrize("configuration", [VALIDATING, MUTATING], ids=["validating", "mutating"])
@pytest.mark.parametrize(
    ("change", "expected"), [c[1:] for c in WEBHOOK_CASES], ids=[c[0] for c in WEBHOOK_CASES]
)
def test_webhook_configurations_only_take_a_new_ca_bundle(
    configuration: Manifest, change: Callable[[Manifest], None], expected: list[str]
) -> None:
    old = configuration
    if change is _FIRST_CA:  # a configuration as `kubectl apply` left it, without one
        old = updated(configuration, _hook("clientConfig.caBundle", None))
    assert (
        evaluate(
            "runtimeclass-extender-webhook-ca-bundle", operation="UPDATE", old=old, new=updated(old, change)
        )
        == expected
    )


def test_mutating_webhooks_keep_their_reinvocation_policy() -> None:
    new = updated(MUTATING, _hook("reinvocationPolicy", "Never"))
    assert evaluate("runtimeclass-extender-webhook-ca-bundle", operation="UPDATE", old=MUTATING, new=new) == [
        ONLY_CA
    ]


@pytest.mark.parametrize(
    ("operation", "old", "new"), [("CREATE", None, VALIDATING), ("DELETE", MUTATING, None)]
)
def test_webhook_configurations_are_never_created_or_deleted(
    operation: str, old: Manifest | None, new: Manifest | None
) -> None:
    denials = evaluate("runtimeclass-extender-webhook-ca-bundle", operation=operation, old=old, new=new)
    assert denials and denials[0] == "may only update a webhook configuration"


# --- Secrets and Leases ---------------------------------------------------------------

SECRET: Manifest = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "runtimeclass-extender-webhook-certificate",
        "namespace": "runtimeclass-extender",
        "labels": {"app.kubernetes.io/managed-by": "runtimeclass-extender"},
    },
    "type": "kubernetes.io/tls",
    "data": {"tls.crt": "", "tls.key": ""},
}
TOKEN: Manifest = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "scheduler-token",
        "namespace": "runtimeclass-extender",
        "annotations": {"kubernetes.io/service-account.name": "runtimeclass-scheduler"},
    },
    "type": "kubernetes.io/service-account-token",
}
ONLY_OURS = "may only write the Secret runtimeclass-extender-webhook-certificate"


@pytest.mark.parametrize(
    ("operation", "old", "new", "expected"),
    [
        ("CREATE", None, SECRET, []),
        ("UPDATE", SECRET, updated(SECRET, _set("data.tls.crt", "Y2VydA==")), []),
        (
            "CREATE",
            None,
            TOKEN,
            [
                ONLY_OURS,
                "the certificate Secret must be of type kubernetes.io/tls",
                "the certificate Secret must be labelled app.kubernetes.io/managed-by=runtimeclass-extender",
            ],
        ),
        ("CREATE", None, updated(SECRET, _set("metadata.name", "other")), [ONLY_OURS]),
        (
            "CREATE",
            None,
            updated(SECRET, _set("type", "Opaque")),
            ["the certificate Secret must be of type kubernetes.io/tls"],
        ),
        (
            "UPDATE",
            SECRET,
            updated(SECRET, _set("metadata.labels", None)),
            ["the certificate Secret must be labelled app.kubernetes.io/managed-by=runtimeclass-extender"],
        ),
        ("DELETE", SECRET, None, ["may not delete Secrets"]),
    ],
    ids=[
        "create-own",
        "renew-own",
        "token-for-another-identity",
        "other-name",
        "other-type",
        "unlabelled",
        "delete",
    ],
)
def test_secrets_are_only_the_certificate_secret(
    operation: str, old: Manifest | None, new: Manifest | None, expected: list[str]
) -> None:
    assert (
        evaluate("runtimeclass-extender-webhook-certificate", operation=operation, old=old, new=new)
        == expected
    )


def _lease(name: str) -> Manifest:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "runtimeclass-extender"},
        "spec": {"holderIdentity": "x", "leaseDurationSeconds": 15},
    }


@pytest.mark.parametrize(
    ("operation", "old", "new", "allowed"),
    [
        ("CREATE", None, _lease("runtimeclass-extender"), True),
        ("UPDATE", _lease("runtimeclass-extender"), _lease("runtimeclass-extender"), True),
        # The scheduler's own Lease, which "create leases" would let it take first.
        ("CREATE", None, _lease("runtimeclass-scheduler"), False),
        ("UPDATE", _lease("runtimeclass-scheduler"), _lease("runtimeclass-scheduler"), False),
        ("DELETE", _lease("runtimeclass-extender"), None, False),
    ],
    ids=["create-own", "renew-own", "create-the-schedulers", "update-the-schedulers", "delete-own"],
)
def test_leases_are_only_the_extenders_own(
    operation: str, old: Manifest | None, new: Manifest | None, allowed: bool
) -> None:
    expected = [] if allowed else ["may only create and update the Lease runtimeclass-extender"]
    assert (
        evaluate("runtimeclass-extender-leader-election", operation=operation, old=old, new=new) == expected
    )


# --- the pod admission table ------------------------------------------------------------

TABLE: Manifest = {
    "apiVersion": "runtimeclass-extender.dev/v1alpha1",
    "kind": "PodAdmissionTable",
    "metadata": {
        "name": "runtimeclass-extender",
        "labels": {"app.kubernetes.io/part-of": "runtimeclass-extender"},
    },
    "spec": {"runtimeClasses": {"gvisor": {"overhead": {"cpu": "250m", "memory": "64Mi"}}}},
}
ONLY_THE_TABLE = "may only write the PodAdmissionTable runtimeclass-extender"
TABLE_METADATA = "the table's labels, annotations, finalizers and ownerReferences may not change"


@pytest.mark.parametrize(
    ("operation", "old", "new", "expected"),
    [
        # What the keeper does: create it (with the component's label), patch its entries.
        ("CREATE", None, TABLE, []),
        ("UPDATE", TABLE, updated(TABLE, _set("spec.runtimeClasses", {"gvisor": {}, "runc": {}})), []),
        ("UPDATE", TABLE, updated(TABLE, _set("spec.runtimeClasses", None)), []),
        # What create and patch on the kind would allow without the policy.
        ("CREATE", None, updated(TABLE, _set("metadata.name", "another")), [ONLY_THE_TABLE]),
        ("UPDATE", TABLE, updated(TABLE, _set("metadata.labels.x", "y")), [TABLE_METADATA]),
        ("UPDATE", TABLE, updated(TABLE, _set("metadata.annotations", {"x": "y"})), [TABLE_METADATA]),
        ("UPDATE", TABLE, updated(TABLE, _set("metadata.finalizers", ["x/y"])), [TABLE_METADATA]),
        ("DELETE", TABLE, None, ["may not delete the pod admission table"]),
    ],
    ids=["create", "patch-entries", "empty", "other-name", "label", "annotation", "finalizer", "delete"],
)
def test_the_table_is_only_its_entries(
    operation: str, old: Manifest | None, new: Manifest | None, expected: list[str]
) -> None:
    assert (
        evaluate("runtimeclass-extender-pod-admission-table", operation=operation, old=old, new=new)
        == expected
    )


# --- the extender's own Namespace -------------------------------------------------------

NAMESPACE: Manifest = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {
        "name": "runtimeclass-extender",
        "labels": {
            "kubernetes.io/metadata.name": "runtimeclass-extender",
            "runtimeclass-extender.dev/webhook": "ignore",
        },
        "annotations": {"runtimeclass-extender.dev/placement": "default-scheduler"},
    },
    "spec": {"finalizers": ["kubernetes"]},
}
ADMITTED_BY_PLUGIN = "metadata.annotations.runtimeclass-extender.dev/admitted-by-plugin"
NAMESPACE_ANNOTATIONS = "may change no annotation but runtimeclass-extender.dev/admitted-by-plugin"
NAMESPACE_REST = "the namespace's labels, finalizers, ownerReferences and spec may not change"


def _annotation(key: str, value: str | None) -> Callable[[Manifest], None]:
    def change(namespace: Manifest) -> None:
        annotations = namespace["metadata"].setdefault("annotations", {})
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value

    return change


@pytest.mark.parametrize(
    ("operation", "old", "new", "sub_resource", "expected"),
    [
        # What the keeper does: write, change and clear the one annotation.
        (
            "UPDATE",
            NAMESPACE,
            updated(NAMESPACE, _annotation("runtimeclass-extender.dev/admitted-by-plugin", "gvisor,runc")),
            None,
            [],
        ),
        (
            "UPDATE",
            updated(NAMESPACE, _annotation("runtimeclass-extender.dev/admitted-by-plugin", "gvisor")),
            updated(NAMESPACE, _annotation("runtimeclass-extender.dev/admitted-by-plugin", "")),
            None,
            [],
        ),
        (
            "UPDATE",
            updated(NAMESPACE, _set("metadata.annotations", None)),
            updated(
                NAMESPACE, _set("metadata.annotations", {"runtimeclass-extender.dev/admitted-by-plugin": "a"})
            ),
            None,
            [],
        ),
        # What patch on the Namespace would allow without the policy: its placement (the
        # guard would go inert), its labels (the bindings select namespaces by them).
        (
            "UPDATE",
            NAMESPACE,
            updated(NAMESPACE, _annotation("runtimeclass-extender.dev/placement", None)),
            None,
            [NAMESPACE_ANNOTATIONS],
        ),
        ("UPDATE", NAMESPACE, updated(NAMESPACE, _annotation("x", "y")), None, [NAMESPACE_ANNOTATIONS]),
        (
            "UPDATE",
            NAMESPACE,
            updated(NAMESPACE, _label("runtimeclass-extender.dev/webhook", None)),
            None,
            [NAMESPACE_REST],
        ),
        (
            "UPDATE",
            NAMESPACE,
            updated(NAMESPACE, _set("metadata.finalizers", ["x/y"])),
            None,
            [NAMESPACE_REST],
        ),
        ("UPDATE", NAMESPACE, updated(NAMESPACE, _set("spec.finalizers", [])), None, [NAMESPACE_REST]),
        ("UPDATE", NAMESPACE, NAMESPACE, "status", ["may only update the namespace object itself"]),
        ("DELETE", NAMESPACE, None, None, ["may only update the namespace object itself"]),
    ],
    ids=[
        "write",
        "clear",
        "first-annotation",
        "placement",
        "other-annotation",
        "label",
        "finalizer",
        "spec",
        "status",
        "delete",
    ],
)
def test_the_namespace_is_only_its_list_of_classes_the_plugin_constrains(
    operation: str, old: Manifest | None, new: Manifest | None, sub_resource: str | None, expected: list[str]
) -> None:
    assert (
        evaluate(
            "runtimeclass-extender-namespace-annotation",
            operation=operation,
            old=old,
            new=new,
            sub_resource=sub_resource,
        )
        == expected
    )


@pytest.mark.parametrize(
    ("dry_run", "expected"), [(True, []), (False, ["may only create pods as a dry run"])]
)
def test_pods_are_only_created_as_dry_runs(dry_run: bool, expected: list[str]) -> None:
    """The probe for the RuntimeClass admission plugin stores nothing, nor can any other
    pod the extender's right to create them in its namespace would allow."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "runtimeclass-extender"},
    }
    assert (
        evaluate(
            "runtimeclass-extender-plugin-probe", operation="CREATE", old=None, new=probe, dry_run=dry_run
        )
        == expected
    )
