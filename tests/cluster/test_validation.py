"""Cluster files are as strict as the API server in the fields the extender reads.

Each refused case is one the API server refuses too (server-side field validation
``Strict``, kubectl's default; ``ValidateRuntimeClass`` in pkg/apis/node/validation,
``ValidateTolerations``/``validateNodeTaints`` in pkg/apis/core/validation, label and
DNS syntax in staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go and
pkg/api/validate/content), and each would otherwise load silently into a view that
decides differently from the cluster: a class selecting every node, a toleration that
never tolerates. The error is one line naming the file, the document, the object and
the field path.

Objects from the API server are not validated again (the watch stays fast): the last
tests show a live LIST keeping what a file refuses.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.cluster.file_source import ClusterFileError, load_cluster_file, load_cluster_file_with_pods
from extender.cluster.snapshot import list_cluster
from extender.cluster.validation import (
    dns_label_errors,
    dns_subdomain_errors,
    label_key_errors,
    label_value_errors,
    valid_label_key,
    valid_label_value,
)
from tests.support.apiserver.server import NODES, RUNTIME_CLASSES, FakeApiServer


def runtime_class(body: str, name: str = "gvisor") -> str:
    return (
        f"apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {name}\nhandler: runsc\n{body}"
    )


def node(body: str, name: str = "n1") -> str:
    return f"apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n{body}"


def pod(body: str) -> str:
    return f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\n{body}"


def toleration(text: str) -> str:
    return runtime_class(f"scheduling:\n  tolerations:\n  - {text}\n")


def taints(*items: str) -> str:
    return node("spec:\n  taints:\n" + "".join(f"  - {item}\n" for item in items))


DNS_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
OPERATORS = '"Equal", "Exists", "Lt", "Gt"'
EFFECTS = '"NoSchedule", "PreferNoSchedule", "NoExecute"'

# (file text, the error after "PATH: document 0: ")
REFUSED = [
    # --- RuntimeClass: unknown fields, with a hint ---
    pytest.param(
        runtime_class("scheduling:\n  nodeselector: {a: b}\n"),
        "runtimeclass/gvisor: scheduling.nodeselector: unknown field (did you mean nodeSelector?)",
        id="rc-nodeselector-lower-case",
    ),
    pytest.param(
        runtime_class("nodeSelector: {a: b}\n"),
        "runtimeclass/gvisor: nodeSelector: unknown field (did you mean scheduling.nodeSelector?)",
        id="rc-nodeselector-top-level",
    ),
    pytest.param(
        runtime_class("tolerations: []\n"),
        "runtimeclass/gvisor: tolerations: unknown field (did you mean scheduling.tolerations?)",
        id="rc-tolerations-top-level",
    ),
    pytest.param(
        runtime_class("schedulng: {}\n"),
        "runtimeclass/gvisor: schedulng: unknown field (did you mean scheduling?)",
        id="rc-misspelt-scheduling",
    ),
    pytest.param(
        runtime_class("color: blue\n"), "runtimeclass/gvisor: color: unknown field", id="rc-unrelated-field"
    ),
    pytest.param(
        runtime_class("scheduling:\n  toleration: []\n"),
        "runtimeclass/gvisor: scheduling.toleration: unknown field (did you mean tolerations?)",
        id="rc-toleration-singular",
    ),
    pytest.param(
        runtime_class("overhead:\n  podfixed: {cpu: 250m}\n"),
        "runtimeclass/gvisor: overhead.podfixed: unknown field (did you mean podFixed?)",
        id="rc-overhead-podfixed",
    ),
    pytest.param(
        runtime_class("").replace("metadata:\n", "metadata:\n  Labels: {a: b}\n"),
        "runtimeclass/gvisor: metadata.Labels: unknown field (did you mean labels?)",
        id="metadata-Labels",
    ),
    pytest.param(
        toleration("{key: k, operater: Exists}"),
        "runtimeclass/gvisor: scheduling.tolerations[0].operater: unknown field (did you mean operator?)",
        id="toleration-misspelt-field",
    ),
    # --- RuntimeClass: enums and toleration rules ---
    pytest.param(
        toleration("{key: k, operator: exists}"),
        f'runtimeclass/gvisor: scheduling.tolerations[0].operator: Unsupported value: "exists": '
        f'supported values: {OPERATORS} (did you mean "Exists"?)',
        id="toleration-operator-lower-case",
    ),
    pytest.param(
        toleration("{key: k, operator: In}"),
        f'runtimeclass/gvisor: scheduling.tolerations[0].operator: Unsupported value: "In": '
        f"supported values: {OPERATORS}",
        id="toleration-operator-unknown",
    ),
    pytest.param(
        toleration("{key: k, operator: Exists, effect: noschedule}"),
        f'runtimeclass/gvisor: scheduling.tolerations[0].effect: Unsupported value: "noschedule": '
        f'supported values: {EFFECTS} (did you mean "NoSchedule"?)',
        id="toleration-effect-lower-case",
    ),
    pytest.param(
        toleration("{operator: Equal, value: v}"),
        'runtimeclass/gvisor: scheduling.tolerations[0].operator: Invalid value: "Equal": operator must be '
        'Exists when `key` is empty, which means "match all values and all keys"',
        id="toleration-empty-key-equal",
    ),
    pytest.param(
        toleration("{key: k, operator: Exists, value: v}"),
        'runtimeclass/gvisor: scheduling.tolerations[0].value: Invalid value: "v": value must be empty when '
        "`operator` is 'Exists'",
        id="toleration-exists-with-value",
    ),
    pytest.param(
        toleration("{key: k, operator: Equal, value: 'a b'}"),
        f'runtimeclass/gvisor: scheduling.tolerations[0].value: Invalid value: "a b": {LABEL_VALUE_MSG}',
        id="toleration-value-syntax",
    ),
    pytest.param(
        toleration("{key: 'a b', operator: Exists}"),
        f'runtimeclass/gvisor: scheduling.tolerations[0].key: Invalid value: "a b": {NAME_PART_MSG}',
        id="toleration-key-syntax",
    ),
    pytest.param(
        toleration("{key: k, operator: Exists, effect: NoSchedule, tolerationSeconds: 30}"),
        'runtimeclass/gvisor: scheduling.tolerations[0].effect: Invalid value: "NoSchedule": effect must be '
        "'NoExecute' when `tolerationSeconds` is set",
        id="toleration-seconds-without-noexecute",
    ),
    pytest.param(
        toleration("{key: k, operator: Lt, value: '007'}"),
        'runtimeclass/gvisor: scheduling.tolerations[0].value: Invalid value: "007": must be a decimal '
        "integer (int64) for operator Lt",
        id="toleration-lt-not-an-integer",
    ),
    pytest.param(
        runtime_class(
            "scheduling:\n  tolerations:\n  - {key: k, operator: Exists}\n  - {key: k, operator: Exists}\n"
        ),
        "runtimeclass/gvisor: scheduling.tolerations[1]: Duplicate value: the same toleration again",
        id="toleration-duplicate",
    ),
    # --- RuntimeClass: names, handler, selector, overhead ---
    pytest.param(
        runtime_class("").replace("handler: runsc", "handler: runsc.v1"),
        'runtimeclass/gvisor: handler: Invalid value: "runsc.v1": must not contain dots',
        id="handler-with-dots",
    ),
    pytest.param(
        runtime_class("").replace("handler: runsc", "handler: Runsc"),
        f'runtimeclass/gvisor: handler: Invalid value: "Runsc": {DNS_LABEL_MSG}',
        id="handler-upper-case",
    ),
    pytest.param(
        runtime_class("").replace("handler: runsc", "handler: ''"),
        f'runtimeclass/gvisor: handler: Invalid value: "": {DNS_LABEL_MSG}',
        id="handler-empty",
    ),
    pytest.param(
        runtime_class("", name="GVisor"),
        f'runtimeclass/GVisor: metadata.name: Invalid value: "GVisor": {DNS_SUBDOMAIN_MSG}',
        id="rc-name-upper-case",
    ),
    pytest.param(
        runtime_class("scheduling:\n  nodeSelector: {'-zone': a}\n"),
        f'runtimeclass/gvisor: scheduling.nodeSelector[-zone]: Invalid value: "-zone": {NAME_PART_MSG}',
        id="selector-key-syntax",
    ),
    pytest.param(
        runtime_class("scheduling:\n  nodeSelector: {zone: 'eu west'}\n"),
        f'runtimeclass/gvisor: scheduling.nodeSelector[zone]: Invalid value: "eu west": {LABEL_VALUE_MSG}',
        id="selector-value-syntax",
    ),
    pytest.param(
        runtime_class("scheduling:\n  nodeSelector: {'a/b/c': x}\n"),
        'runtimeclass/gvisor: scheduling.nodeSelector[a/b/c]: Invalid value: "a/b/c": a label key has at most '
        "one '/' (prefix/name), must consist of alphanumeric characters, '-', '_' or '.', and must start and "
        "end with an alphanumeric character in the name part",
        id="selector-key-two-slashes",
    ),
    pytest.param(
        runtime_class("scheduling:\n  nodeSelector: {'/zone': x}\n"),
        'runtimeclass/gvisor: scheduling.nodeSelector[/zone]: Invalid value: "/zone": prefix part must be '
        "non-empty",
        id="selector-key-empty-prefix",
    ),
    pytest.param(
        runtime_class("scheduling:\n  nodeSelector: {'Example.com/zone': x}\n"),
        'runtimeclass/gvisor: scheduling.nodeSelector[Example.com/zone]: Invalid value: "Example.com/zone": '
        f"prefix part {DNS_SUBDOMAIN_MSG}",
        id="selector-key-upper-case-prefix",
    ),
    pytest.param(
        runtime_class(f"scheduling:\n  nodeSelector: {{zone: {'a' * 70}}}\n"),
        f'runtimeclass/gvisor: scheduling.nodeSelector[zone]: Invalid value: "{"a" * 61}...": must be no '
        "more than 63 characters",
        id="selector-value-too-long",
    ),
    pytest.param(
        runtime_class("overhead:\n  podFixed: {memory: -1Mi}\n"),
        'runtimeclass/gvisor: overhead.podFixed[memory]: Invalid value: "-1Mi": must be greater than or equal '
        "to 0",
        id="overhead-negative",
    ),
    pytest.param(
        runtime_class("").replace("node.k8s.io/v1", "node.k8s.io/v1beta1"),
        'runtimeclass/gvisor: apiVersion: Unsupported value: "node.k8s.io/v1beta1": supported values: '
        '"node.k8s.io/v1"',
        id="rc-api-version-not-served",
    ),
    pytest.param(
        runtime_class("color: blue\nscheduling:\n  nodeselector: {}\n"),
        # Every problem of the object, a line each, as check lists them.
        "runtimeclass/gvisor: color: unknown field\n"
        "runtimeclass/gvisor: scheduling.nodeselector: unknown field (did you mean nodeSelector?)",
        id="several-problems-each-a-line",
    ),
    # --- Node ---
    pytest.param(node("Spec: {}\n"), "node/n1: Spec: unknown field (did you mean spec?)", id="node-Spec"),
    pytest.param(
        node("spec:\n  Taints: []\n"),
        "node/n1: spec.Taints: unknown field (did you mean taints?)",
        id="node-spec-Taints",
    ),
    pytest.param(
        node("spec:\n  taint: []\n"),
        "node/n1: spec.taint: unknown field (did you mean taints?)",
        id="node-spec-taint-singular",
    ),
    pytest.param(
        taints("{key: k, effect: noschedule}"),
        f'node/n1: spec.taints[0].effect: Unsupported value: "noschedule": supported values: {EFFECTS} '
        '(did you mean "NoSchedule"?)',
        id="taint-effect-lower-case",
    ),
    pytest.param(
        taints("{key: k, effect: ''}"),
        "node/n1: spec.taints[0].effect: Required value",
        id="taint-effect-empty",
    ),
    pytest.param(
        taints("{key: k, effect: NoSchedule, efect: x}"),
        "node/n1: spec.taints[0].efect: unknown field (did you mean effect?)",
        id="taint-misspelt-field",
    ),
    pytest.param(
        taints("{key: k, value: a, effect: NoSchedule}", "{key: k, value: b, effect: NoSchedule}"),
        'node/n1: spec.taints[1]: Duplicate value: "k:NoSchedule": taints must be unique by key and effect pair',
        id="taint-duplicate-key-and-effect",
    ),
    pytest.param(
        taints("{key: 'a b', effect: NoSchedule}"),
        f'node/n1: spec.taints[0].key: Invalid value: "a b": {NAME_PART_MSG}',
        id="taint-key-syntax",
    ),
    pytest.param(
        taints("{key: k, value: 'x y', effect: NoSchedule}"),
        f'node/n1: spec.taints[0].value: Invalid value: "x y": {LABEL_VALUE_MSG}',
        id="taint-value-syntax",
    ),
    pytest.param(
        node("").replace("name: n1\n", "name: n1\n  labels: {'runtime gvisor': 'true'}\n"),
        f'node/n1: metadata.labels[runtime gvisor]: Invalid value: "runtime gvisor": {NAME_PART_MSG}',
        id="node-label-key-syntax",
    ),
    pytest.param(
        node("").replace("name: n1\n", "name: n1\n  labels: {gvisor: 'yes please'}\n"),
        f'node/n1: metadata.labels[gvisor]: Invalid value: "yes please": {LABEL_VALUE_MSG}',
        id="node-label-value-syntax",
    ),
    pytest.param(
        node("status:\n  runtimehandlers: []\n"),
        "node/n1: status.runtimehandlers: unknown field (did you mean runtimeHandlers?)",
        id="node-status-runtimehandlers",
    ),
    pytest.param(
        node("status:\n  runtimeHandlers:\n  - {nmae: runsc}\n"),
        "node/n1: status.runtimeHandlers[0].nmae: unknown field (did you mean name?)",
        id="node-runtime-handler-misspelt",
    ),
    pytest.param(
        node("", name="Node_1"),
        f'node/Node_1: metadata.name: Invalid value: "Node_1": {DNS_SUBDOMAIN_MSG}',
        id="node-name-syntax",
    ),
    pytest.param(
        node("").replace("apiVersion: v1", "apiVersion: v2"),
        'node/n1: apiVersion: Unsupported value: "v2": supported values: "v1"',
        id="node-api-version",
    ),
]

# Pods are read only by the files that may hold them (the audit's).
REFUSED_PODS = [
    pytest.param(
        pod("spec:\n  runtimeclassname: gvisor\n"),
        "pod/p: spec.runtimeclassname: unknown field (did you mean runtimeClassName?)",
        id="pod-runtimeclassname",
    ),
    pytest.param(
        pod("spec:\n  toleration: []\n"),
        "pod/p: spec.toleration: unknown field (did you mean tolerations?)",
        id="pod-toleration-singular",
    ),
    pytest.param(
        pod("spec:\n  Overhead: {cpu: 250m}\n"),
        "pod/p: spec.Overhead: unknown field (did you mean overhead?)",
        id="pod-Overhead",
    ),
    pytest.param(
        pod("spec:\n  overhead: {cpu: -250m}\n"),
        'pod/p: spec.overhead[cpu]: Invalid value: "-250m": must be greater than or equal to 0',
        id="pod-overhead-negative",
    ),
    pytest.param(
        pod("spec:\n  NodeName: n1\n"),
        "pod/p: spec.NodeName: unknown field (did you mean nodeName?)",
        id="pod-NodeName",
    ),
    pytest.param(
        pod("spec:\n  tolerations:\n  - {key: k, operator: exists}\n"),
        f'pod/p: spec.tolerations[0].operator: Unsupported value: "exists": supported values: {OPERATORS} '
        '(did you mean "Exists"?)',
        id="pod-toleration-operator",
    ),
    pytest.param(
        pod("spec:\n  runtimeClassName: GVisor\n"),
        f'pod/p: spec.runtimeClassName: Invalid value: "GVisor": {DNS_SUBDOMAIN_MSG}',
        id="pod-runtimeclassname-syntax",
    ),
    pytest.param(
        pod("spec:\n  nodeName: 'n 1'\n"),
        f'pod/p: spec.nodeName: Invalid value: "n 1": {DNS_SUBDOMAIN_MSG}',
        id="pod-nodename-syntax",
    ),
    pytest.param(
        pod("").replace("name: p\n", "name: p\n  Namespace: x\n"),
        "pod/p: metadata.Namespace: unknown field (did you mean namespace?)",
        id="pod-metadata-Namespace",
    ),
]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "message"), REFUSED)
def test_cluster_file_refuses_what_the_api_server_refuses(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(path)
    assert str(caught.value).splitlines() == [f"{path}: document 0: {line}" for line in message.splitlines()]


@pytest.mark.parametrize(("text", "message"), [*REFUSED, *REFUSED_PODS])
def test_cluster_file_with_pods_refuses_them_too(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file_with_pods(path)
    assert str(caught.value).splitlines() == [f"{path}: document 0: {line}" for line in message.splitlines()]


def test_the_document_and_item_are_named(tmp_path: Path) -> None:
    good = node("")
    bad = "kind: RuntimeClassList\nitems:\n- {metadata: {name: ok}, handler: runc}\n- {metadata: {name: x}, handler: h, nodeSelector: {}}\n"
    path = write(tmp_path, f"{good}---\n{bad}")
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(path)
    assert str(caught.value) == (
        f"{path}: document 1, item 1: runtimeclass/x: nodeSelector: unknown field "
        "(did you mean scheduling.nodeSelector?)"
    )


ACCEPTED = [
    pytest.param(toleration("{key: k, operator: Lt, value: '10'}"), id="toleration-lt"),
    pytest.param(toleration("{key: k, operator: Gt, value: '-3', effect: NoSchedule}"), id="toleration-gt"),
    pytest.param(toleration("{operator: Exists}"), id="toleration-match-all"),
    pytest.param(toleration("{key: k}"), id="toleration-equal-by-default-empty-value"),
    pytest.param(toleration("{key: k, operator: Equal, value: v, effect: ''}"), id="toleration-empty-effect"),
    pytest.param(
        toleration("{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 30}"),
        id="toleration-seconds-noexecute",
    ),
    pytest.param(
        runtime_class(
            "scheduling:\n  tolerations:\n  - {key: k, operator: Exists, effect: NoSchedule}\n"
            "  - {key: k, operator: Exists, effect: NoExecute}\n"
        ),
        id="tolerations-differing-in-effect",
    ),
    pytest.param(
        runtime_class("scheduling:\n  nodeSelector: {'example.com/zone': '', 'a_b.c-d': X1}\n"),
        id="selector-prefixed-key-and-empty-value",
    ),
    pytest.param(
        runtime_class("overhead:\n  podFixed: {cpu: 250m, memory: 120Mi, example.com/gpu: 1, eph: 1e3}\n"),
        id="overhead-quantities",
    ),
    pytest.param(
        runtime_class("").replace(
            "name: gvisor\n",
            "name: gvisor\n  uid: u\n  resourceVersion: '7'\n  creationTimestamp: '2024-01-01T00:00:00Z'\n"
            "  annotations: {a: b}\n  managedFields: []\n  generation: 1\n",
        ),
        id="full-metadata",
    ),
    pytest.param(runtime_class("", name="sandbox.example.com"), id="rc-name-subdomain"),
    pytest.param(
        taints(
            "{key: k, value: a, effect: NoSchedule}",
            "{key: k, value: a, effect: NoExecute, timeAdded: '2024-01-01T00:00:00Z'}",
            "{key: example.com/k, effect: PreferNoSchedule}",
        ),
        id="taints-same-key-other-effects",
    ),
    pytest.param(
        node(
            "spec:\n  podCIDR: 10.0.0.0/24\n  providerID: aws:///x\n  unschedulable: true\n"
            "status:\n  capacity: {cpu: '8'}\n  conditions: []\n  nodeInfo: {kubeletVersion: v1.36.0}\n"
            "  futureField: {}\n  runtimeHandlers:\n  - name: runsc\n    features: {newFeature: true}\n"
        ),
        id="node-fields-the-extender-does-not-read",
    ),
    pytest.param(node(""), id="node-plain"),
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_cluster_file_accepts_what_the_api_server_accepts(tmp_path: Path, text: str) -> None:
    load_cluster_file(write(tmp_path, text))


def test_pod_fields_the_extender_does_not_read_are_accepted(tmp_path: Path) -> None:
    text = pod(
        "spec:\n  containers: [{name: c, image: i}]\n  nodeSelector: {a: b}\n  schedulingGates: []\n"
        "  runtimeClassName: gvisor\n  nodeName: n1\n  tolerations:\n  - {key: k, operator: Exists}\n"
        "status: {phase: Running, podIPs: []}\n"
    )
    _, pods = load_cluster_file_with_pods(write(tmp_path, text))
    assert [p.name for p in pods] == ["default/p"]


# The syntax helpers on Kubernetes' own test values (content/kube_test.go, dns_test.go).
@pytest.mark.parametrize(
    "key",
    [
        "simple",
        "now-with-dashes",
        "1-starts-with-num",
        "1234",
        "simple/simple",
        "now-with-dashes/simple",
        "example.com/Upper_Case",
        "a" * 63,
        "k8s.io/" + "a" * 63,
    ],
)
def testvalid_label_keys(key: str) -> None:
    assert label_key_errors(key) == []


@pytest.mark.parametrize(
    "key",
    [
        "nospecialchars%^=@",
        "cantendwithadash-",
        "-cantstartwithadash-",
        "only/one/slash",
        "Example/Upper",
        "example.com/",
        "/simple",
        "a" * 64,
        "example.com/" + "a" * 64,
        "",
        "é",
    ],
)
def test_invalid_label_keys(key: str) -> None:
    assert label_key_errors(key)


@pytest.mark.parametrize("value", ["", "simple", "now-with-dashes", "1-starts-with-num", "a" * 63, "A.b_c"])
def testvalid_label_values(value: str) -> None:
    assert label_value_errors(value) == []


@pytest.mark.parametrize(
    "value",
    ["nospecialchars%^=@", "Tama-nui-te-rā.is.Māori.sun", "\\backslashes", "-x", "a" * 64, "x/y", "a b"],
)
def test_invalid_label_values(value: str) -> None:
    assert label_value_errors(value)


def test_dns_names() -> None:
    assert dns_label_errors("runsc") == [] and dns_label_errors("kata-qemu") == []
    assert dns_label_errors("a.b") == ["must not contain dots"]
    assert dns_label_errors("a" * 64) == ["must be no more than 63 characters"]
    assert dns_label_errors("-a") == [DNS_LABEL_MSG]
    assert dns_subdomain_errors("a.b-c.d") == []
    assert dns_subdomain_errors("a..b") == [DNS_SUBDOMAIN_MSG]
    assert dns_subdomain_errors(".".join(["a" * 63] * 4)) == ["must be no more than 253 characters"]


async def test_live_objects_are_not_validated_again(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path
) -> None:
    """A one-shot LIST (and the watch, which parses with the same functions) takes what
    the API server serves: it validated them, and the watch must stay fast. The fake
    server validates nothing, so it can serve what a file would be refused for."""
    fake_apiserver.add(
        NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b c"}}}
    )
    fake_apiserver.add(
        RUNTIME_CLASSES,
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "gvisor"},
            "handler": "runsc",
            "scheduling": {"tolerations": [{"key": "k", "operator": "exists"}]},
        },
    )
    state = await list_cluster(kubeconfig=str(fake_kubeconfig))
    assert state.nodes["n1"].labels == {"a": "b c"}
    assert state.runtime_classes["gvisor"].tolerations[0].operator == "exists"


def test_watch_modules_do_not_import_the_validation() -> None:
    # Belt and braces for the test above: the live path has no way to call it.
    import ast
    import inspect

    from extender.cluster import objects, snapshot, watch
    from extender.kube import reflector

    for module in (objects, reflector, snapshot, watch):
        tree = ast.parse(inspect.getsource(module))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "extender.cluster.validation" not in imported, module.__name__


@given(st.text(alphabet="aZ09-_./é ", max_size=80))
def test_the_fast_label_checks_agree_with_the_step_by_step_ones(text: str) -> None:
    # The one-match fast paths decide; the step-by-step checks word the message.
    assert valid_label_key(text) == (label_key_errors(text) == [])
    assert valid_label_value(text) == (label_value_errors(text) == [])


@pytest.mark.parametrize("length", [62, 63, 64])
def test_the_fast_label_checks_at_the_length_limits(length: int) -> None:
    for text in ("a" * length, "example.com/" + "a" * length, "a" * (length + 190) + "/x"):
        assert valid_label_key(text) == (label_key_errors(text) == [])
    assert valid_label_value("a" * length) == (length <= 63)


def test_serve_refuses_the_file_at_start(tmp_path: Path) -> None:
    """The issue's own example, end to end: one line, exit status 2, nothing served."""
    bad = write(tmp_path, runtime_class("scheduling:\n  nodeselector: {a: b}\n"))
    command = Path(sys.executable).parent / "runtimeclass-extender"
    done = subprocess.run(
        [str(command), "serve", "--cluster-file", str(bad), "--port", "0", "--host", "127.0.0.1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"runtimeclass-extender: error: {bad}: document 0: runtimeclass/gvisor: scheduling.nodeselector: "
        "unknown field (did you mean nodeSelector?)\n"
    )
