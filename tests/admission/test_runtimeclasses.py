"""The RuntimeClass admission decision (extender/admission/runtimeclasses.py), from review
body to answer.

Bodies are admission.k8s.io/v1 AdmissionReviews as the API server sends them
(staging/src/k8s.io/api/admission/v1/types.go); cluster states are built by hand or from
the example cluster (deploy/examples/cluster.yaml: runc, gVisor, Kata, Windows and GPU
nodes with taints and runtimeHandlers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pytest
import yaml

from extender.admission import (
    MAX_MESSAGE_CHARS,
    MAX_WARNING_CHARS,
    MAX_WARNINGS,
    RESULTS,
    ReviewError,
    ReviewOutcome,
    review,
)
from extender.cluster.file_source import load_cluster_file
from extender.cluster.objects import runtime_class_from_api
from extender.cluster.state import ClusterState
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from policies.objects import NodeView, PodView, RuntimeHandler, Taint
from policies.predicates import RuntimeClassNodeSelector
from policies.verdict import REASON_RUNTIMECLASS_MISMATCH, reason_runtimeclass_selector_invalid
from tests.support.admission import RUNTIME_CLASS_KIND, UID, body, request, runtime_class
from tests.support.paths import REPO

EXAMPLE_CLUSTER = REPO / "deploy" / "examples" / "cluster.yaml"
ANNOTATION_PATH = f"metadata.annotations[{NODE_SELECTOR_TERM_ANNOTATION}]"
PENDING = "; its pods will stay pending"
GVISOR_TAINT = {
    "key": "sandbox.gke.io/runtime",
    "operator": "Equal",
    "value": "gvisor",
    "effect": "NoSchedule",
}


# --- builders -------------------------------------------------------------------------


def state_of(*nodes: NodeView) -> ClusterState:
    state = ClusterState()
    state.nodes.replace(nodes)
    state.runtime_classes.replace([])
    return state


def node(
    name: str,
    labels: Mapping[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    handlers: tuple[str, ...] | None = None,
) -> NodeView:
    return NodeView(
        name=name,
        labels=dict(labels or {}),
        taints=taints,
        runtime_handlers=None if handlers is None else tuple(RuntimeHandler(h) for h in handlers),
    )


def answer(outcome: ReviewOutcome) -> dict[str, Any]:
    """The response document, checked against the record's own fields."""
    document: dict[str, Any] = orjson.loads(outcome.response)
    assert document["apiVersion"] == "admission.k8s.io/v1"
    assert document["kind"] == "AdmissionReview"
    response: dict[str, Any] = document["response"]
    assert response["allowed"] is outcome.allowed
    assert response.get("warnings", []) == list(outcome.warnings)
    assert outcome.result in RESULTS
    return response


@pytest.fixture(scope="module")
def example() -> ClusterState:
    return load_cluster_file(EXAMPLE_CLUSTER)


# --- allowed --------------------------------------------------------------------------


EXAMPLE_CLASSES = [
    item for item in yaml.safe_load(EXAMPLE_CLUSTER.read_text())["items"] if item["kind"] == "RuntimeClass"
]


def test_example_classes_are_allowed_without_warnings(example: ClusterState) -> None:
    # Every class of the example cluster can place its pods: no warning, nothing else.
    assert len(EXAMPLE_CLASSES) == len(example.runtime_classes) == 6
    for obj in EXAMPLE_CLASSES:
        name = obj["metadata"]["name"]
        for operation in ("CREATE", "UPDATE"):
            outcome = review(body(request(obj, operation=operation)), example)
            assert (outcome.result, outcome.operation, outcome.allowed) == ("allowed", operation, True), name
            assert orjson.loads(outcome.response) == {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": UID, "allowed": True},
            }


@pytest.mark.parametrize(
    "req",
    [
        request(runtime_class()),
        request(runtime_class(annotation="[]")),
        request(runtime_class(), operation="DELETE"),
        request({"metadata": {"name": "p"}}, kind={"group": "", "version": "v1", "kind": "Pod"}),
    ],
    ids=["allowed", "denied", "delete", "pod"],
)
@pytest.mark.parametrize("uid", ["x", UID, "0" * 36, "ünïcode-üid"])
def test_uid_is_echoed(example: ClusterState, req: dict[str, Any], uid: str) -> None:
    outcome = review(body({**req, "uid": uid}), example)
    assert answer(outcome)["uid"] == uid


def test_review_reads_state_and_does_not_change_it(example: ClusterState) -> None:
    generations = (example.nodes.generation, example.runtime_classes.generation)
    first = review(body(request(runtime_class(node_selector={"absent": "label"}))), example)
    second = review(body(request(runtime_class(node_selector={"absent": "label"}))), example)
    assert first == second
    assert (example.nodes.generation, example.runtime_classes.generation) == generations


# --- denied: the annotation the filter cannot read -------------------------------------

BAD_ANNOTATIONS = [
    pytest.param("", "the annotation is empty; expected a NodeSelectorTerm as JSON or YAML", id="empty"),
    pytest.param(
        "not: [valid",
        "not valid JSON or YAML (line 1, column 12: expected ',' or ']', but got '<stream end>')",
        id="not-yaml",
    ),
    pytest.param(
        "[]", "expected a NodeSelectorTerm object with matchExpressions and/or matchFields", id="a-list"
    ),
    pytest.param(
        '{"matchExpressions": [{"key": "a", "operator": "in", "values": ["x"]}]}',
        'matchExpressions[0].operator: Unsupported value: "in": supported values: '
        '"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"',
        id="lowercase-operator",
    ),
    pytest.param(
        "matchExpressions:\n- {key: nvidia.com/gpu.count, operator: Gt, values: [4]}",
        'matchExpressions[0].values[0]: must be a string (quote it: "4")',
        id="unquoted-number",
    ),
    pytest.param(
        "matchExpressions:\n- {key: zone, operator: In}",
        "matchExpressions[0].values: for 'In', 'NotIn' operators, values set can't be empty",
        id="in-without-values",
    ),
    pytest.param(
        "nodeSelectorTerms: []",
        "unknown field(s) nodeSelectorTerms (a NodeSelectorTerm has matchExpressions, matchFields)",
        id="unknown-field",
    ),
    pytest.param(
        '{"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["a"]}]}',
        'matchFields[0].key: Invalid value: "metadata.labels": '
        "not a valid field selector key (only metadata.name)",
        id="match-fields-key",
    ),
]


@pytest.mark.parametrize(("annotation", "parser_message"), BAD_ANNOTATIONS)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_bad_annotation_is_denied_with_the_parser_message(
    example: ClusterState, annotation: str, parser_message: str, operation: str
) -> None:
    outcome = review(body(request(runtime_class(annotation=annotation), operation=operation)), example)
    assert (outcome.result, outcome.allowed, outcome.operation) == ("denied", False, operation)
    assert outcome.message == f"{ANNOTATION_PATH}: {parser_message}"
    assert answer(outcome) == {
        "uid": UID,
        "allowed": False,
        "status": {"code": 422, "reason": "Invalid", "message": outcome.message},
    }
    # The annotation is named once, as the field path, not again by the parser's prefix.
    assert outcome.message.count(NODE_SELECTOR_TERM_ANNOTATION) == 1


GOOD_ANNOTATIONS = [
    "{}",
    "matchExpressions: []",
    "matchExpressions:\n- {key: nvidia.com/gpu.count, operator: Gt, values: ['0']}",
    '{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "NotIn", "values": ["windows"]}]}',
    "matchFields: [{key: metadata.name, operator: In, values: [gpu-1]}]",
    "{matchExpressions: [{key: katacontainers.io/kata-runtime, operator: Exists}]}",
]


@pytest.mark.parametrize("annotation", [p.values[0] for p in BAD_ANNOTATIONS] + GOOD_ANNOTATIONS)
def test_admission_denies_exactly_what_the_filter_fails_closed(
    example: ClusterState, annotation: str
) -> None:
    """What admission accepts the filter can evaluate, and the reverse."""
    obj = runtime_class(annotation=annotation, node_selector={"kubernetes.io/os": "linux"})
    outcome = review(body(request(obj)), example)
    view = runtime_class_from_api(obj)
    invalid = reason_runtimeclass_selector_invalid(view.name)
    pod = PodView(name="p", runtime_class_name=view.name)
    verdicts = [RuntimeClassNodeSelector().check(pod, view, n) for n in example.nodes.values()]
    fails_closed = all(v.reason == invalid for v in verdicts)
    assert fails_closed == any(v.reason == invalid for v in verdicts)  # all nodes or none
    assert (outcome.result == "denied") == fails_closed
    if fails_closed:
        # The detail the filter logs is the message admission returns.
        assert verdicts[0].detail.endswith(outcome.message.removeprefix(f"{ANNOTATION_PATH}: "))
    else:
        # Accepted: the filter reads the rules and answers per node, match or mismatch.
        assert outcome.allowed
        assert all(v.fits or v.reason == REASON_RUNTIMECLASS_MISMATCH for v in verdicts)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "x"}},
            "RuntimeClass.handler: Field required",
        ),
        (
            {**runtime_class(), "metadata": {"name": "x", "annotations": {"a": 1}}},
            "RuntimeClass.metadata.annotations.a: Input should be a valid string",
        ),
        ({**runtime_class(), "metadata": {}}, "RuntimeClass has no metadata.name"),
    ],
    ids=["no-handler", "annotation-not-string", "no-name"],
)
def test_malformed_runtime_class_is_denied(example: ClusterState, obj: dict[str, Any], message: str) -> None:
    outcome = review(body(request(obj)), example)
    assert (outcome.result, outcome.message) == ("denied", message)
    assert answer(outcome)["status"] == {"code": 422, "reason": "Invalid", "message": message}


def test_huge_parser_message_is_cut(example: ClusterState) -> None:
    value = "v" * 100_000
    annotation = orjson.dumps({"matchExpressions": [{"key": "a", "operator": "Bogus", "values": [value]}]})
    outcome = review(body(request(runtime_class(annotation=annotation.decode()))), example)
    assert outcome.result == "denied"
    assert outcome.message.startswith(f"{ANNOTATION_PATH}: matchExpressions[0].operator: Unsupported value")
    assert len(outcome.message) == MAX_MESSAGE_CHARS and outcome.message.endswith("…")


# --- warnings -------------------------------------------------------------------------

NO_SCHEDULE = Taint("dedicated", "NoSchedule", "sandbox")
NO_EXECUTE = Taint("dedicated", "NoExecute", "sandbox")
SANDBOX = {"pool": "sandbox"}
TOLERATE_ALL = [{"operator": "Exists"}]

WARNING_CASES = [
    # (cluster: "example" or a tuple of nodes, RuntimeClass object, expected warnings)
    pytest.param(
        "example",
        runtime_class(node_selector={"example.com/pool": "none"}),
        ["RuntimeClass sandbox: no node matches scheduling.nodeSelector {example.com/pool=none}" + PENDING],
        id="selector-matches-no-node",
    ),
    pytest.param(
        "example",
        runtime_class(node_selector={"zone": "b", "arch": "arm"}),
        ["RuntimeClass sandbox: no node matches scheduling.nodeSelector {arch=arm,zone=b}" + PENDING],
        id="selector-sorted-keys",
    ),
    pytest.param(
        "example",
        runtime_class(
            node_selector={"kubernetes.io/os": "windows"},
            annotation="matchExpressions: [{key: nvidia.com/gpu.count, operator: Gt, values: ['0']}]",
        ),
        ["RuntimeClass sandbox: no node matches scheduling.nodeSelector AND the annotation term" + PENDING],
        id="each-half-matches-but-not-together",
    ),
    pytest.param(
        "example",
        runtime_class(
            node_selector={"sandbox.gke.io/runtime": "gvisor"},
            annotation="matchExpressions: [{key: nvidia.com/gpu.count, operator: Gt, values: ['8']}]",
        ),
        ["RuntimeClass sandbox: no node matches the node-selector-term annotation" + PENDING],
        id="annotation-excludes-all",
    ),
    pytest.param(
        "example",
        runtime_class(
            node_selector={"kubernetes.io/os": "solaris"},
            annotation="matchExpressions: [{key: nvidia.com/gpu.count, operator: Gt, values: ['0']}]",
        ),
        [
            "RuntimeClass sandbox: no node matches scheduling.nodeSelector {kubernetes.io/os=solaris}"
            + PENDING
        ],
        id="map-excludes-all-with-annotation",
    ),
    pytest.param(
        "example",
        runtime_class(annotation="{}"),
        ["RuntimeClass sandbox: the annotation term is empty, and an empty term matches no node" + PENDING],
        id="empty-term",
    ),
    pytest.param(
        (),
        runtime_class(),
        ["RuntimeClass sandbox: no node matches, the cluster has no nodes" + PENDING],
        id="empty-cluster",
    ),
    pytest.param(
        "example",
        runtime_class("gvisor", node_selector={"sandbox.gke.io/runtime": "gvisor"}),
        [
            "RuntimeClass gvisor: every matching node has an untolerated taint, "
            "e.g. sandbox.gke.io/runtime=gvisor:NoSchedule on 3/3"
        ],
        id="no-schedule-taint-not-tolerated",
    ),
    pytest.param(
        "example",
        runtime_class(
            "gvisor-gpu",
            node_selector={"nvidia.com/gpu.present": "true"},
            tolerations=[GVISOR_TAINT],
        ),
        [
            "RuntimeClass gvisor-gpu: every matching node has an untolerated taint, "
            "e.g. nvidia.com/gpu=present:NoSchedule on 1/1"
        ],
        id="one-of-two-taints-tolerated",
    ),
    pytest.param(
        "example",
        runtime_class(
            "windows",
            handler="runhcs-wcow-hypervisor",
            node_selector={"kubernetes.io/os": "windows"},
            tolerations=[{"key": "os", "operator": "Equal", "value": "linux", "effect": "NoSchedule"}],
        ),
        [
            "RuntimeClass windows: every matching node has an untolerated taint, e.g. os=windows:NoSchedule on 1/1"
        ],
        id="toleration-for-another-value",
    ),
    pytest.param(
        (node("a", SANDBOX, (NO_EXECUTE,)), node("b", SANDBOX, (NO_EXECUTE,))),
        runtime_class(node_selector=SANDBOX, tolerations=TOLERATE_ALL),
        [
            "RuntimeClass sandbox: every matching node has a taint only pods can tolerate, "
            "e.g. dedicated=sandbox:NoExecute on 2/2"
        ],
        id="no-execute-tolerated-by-class-only",
    ),
    pytest.param(
        (node("a", SANDBOX, (NO_EXECUTE,)),),
        runtime_class(node_selector=SANDBOX),
        [
            "RuntimeClass sandbox: every matching node has a taint only pods can tolerate, "
            "e.g. dedicated=sandbox:NoExecute on 1/1"
        ],
        id="no-execute-not-tolerated",
    ),
    pytest.param(
        (
            node("a", SANDBOX, (NO_EXECUTE,)),
            node("b", SANDBOX, (NO_EXECUTE,)),
            node("c", SANDBOX, (NO_SCHEDULE,)),
        ),
        runtime_class(node_selector=SANDBOX),
        # The NoSchedule taint is named although fewer nodes carry it: the class can fix it.
        [
            "RuntimeClass sandbox: every matching node has an untolerated taint, e.g. dedicated=sandbox:NoSchedule on 1/3"
        ],
        id="mixed-effects-name-no-schedule",
    ),
    pytest.param(
        (
            node("a", SANDBOX, (Taint("x", "NoSchedule"), Taint("y", "NoSchedule"))),
            node("b", SANDBOX, (Taint("y", "NoSchedule"),)),
            node("c", SANDBOX, (Taint("z", "NoSchedule"),)),
        ),
        runtime_class(node_selector=SANDBOX),
        ["RuntimeClass sandbox: every matching node has an untolerated taint, e.g. y:NoSchedule on 2/3"],
        id="most-common-taint-named",
    ),
    pytest.param(
        (node("a", SANDBOX, (NO_SCHEDULE,)), node("b", SANDBOX)),
        runtime_class(node_selector=SANDBOX),
        [],
        id="one-untainted-node-is-enough",
    ),
    pytest.param(
        (node("a", SANDBOX, (Taint("dedicated", "PreferNoSchedule", "sandbox"),)),),
        runtime_class(node_selector=SANDBOX),
        [],
        id="prefer-no-schedule-does-not-filter",
    ),
    pytest.param(
        (node("a", {"pool": "other"}, (NO_SCHEDULE,)), node("b", SANDBOX)),
        runtime_class(node_selector=SANDBOX),
        [],
        id="taints-on-other-nodes-do-not-count",
    ),
    pytest.param(
        "example",
        runtime_class(
            "gvisor",
            handler="gvisor",
            node_selector={"sandbox.gke.io/runtime": "gvisor"},
            tolerations=TOLERATE_ALL,
        ),
        ['RuntimeClass gvisor: none of the 3 matching node(s) reporting runtimeHandlers lists "gvisor"'],
        id="handler-not-reported",
    ),
    pytest.param(
        (node("a", SANDBOX, handlers=("", "runc")), node("b", SANDBOX), node("c", SANDBOX, handlers=())),
        runtime_class(node_selector=SANDBOX, handler="runsc"),
        ['RuntimeClass sandbox: none of the 1 matching node(s) reporting runtimeHandlers lists "runsc"'],
        id="handler-silent-nodes-skipped",
    ),
    pytest.param(
        (node("a", SANDBOX, handlers=("",)),),
        runtime_class(node_selector=SANDBOX, handler=""),
        ['RuntimeClass sandbox: none of the 1 matching node(s) reporting runtimeHandlers lists ""'],
        id="default-handler-entry-is-not-a-name",
    ),
    pytest.param(
        (node("a", SANDBOX, handlers=("", "runc")), node("b", SANDBOX, handlers=("runsc",))),
        runtime_class(node_selector=SANDBOX, handler="runsc"),
        [],
        id="handler-on-one-matching-node-is-enough",
    ),
    pytest.param(
        (node("a", SANDBOX, handlers=("runc",)), node("b", {"pool": "x"}, handlers=("runsc",))),
        runtime_class(node_selector=SANDBOX, handler="runsc"),
        ['RuntimeClass sandbox: none of the 1 matching node(s) reporting runtimeHandlers lists "runsc"'],
        id="handler-on-other-nodes-does-not-count",
    ),
    pytest.param(
        "example",
        runtime_class(
            "windows-hyperv",
            handler="not-reported-anyway",
            node_selector={"kubernetes.io/os": "windows"},
            tolerations=TOLERATE_ALL,
        ),
        [],
        id="no-matching-node-reports-handlers",
    ),
    pytest.param(
        (node("a", SANDBOX, (NO_SCHEDULE,), handlers=("runc",)),),
        runtime_class(node_selector=SANDBOX),
        [
            "RuntimeClass sandbox: every matching node has an untolerated taint, e.g. dedicated=sandbox:NoSchedule on 1/1",
            'RuntimeClass sandbox: none of the 1 matching node(s) reporting runtimeHandlers lists "runsc"',
        ],
        id="taint-and-handler",
    ),
]


@pytest.mark.parametrize(("cluster", "obj", "warnings"), WARNING_CASES)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_warnings(
    example: ClusterState,
    cluster: str | tuple[NodeView, ...],
    obj: dict[str, Any],
    warnings: list[str],
    operation: str,
) -> None:
    state = example if cluster == "example" else state_of(*cluster)
    outcome = review(body(request(obj, operation=operation)), state)
    assert list(outcome.warnings) == warnings
    assert outcome.allowed
    assert outcome.result == ("warned" if warnings else "allowed")
    assert outcome.operation == operation
    response = answer(outcome)
    assert "status" not in response
    assert ("warnings" in response) == bool(warnings)
    assert len(outcome.warnings) <= MAX_WARNINGS
    assert all(len(w) <= MAX_WARNING_CHARS for w in outcome.warnings)


# --- limits ---------------------------------------------------------------------------

LONG_NAME = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 characters, the longest name
LONG_KEY = "example.com/" + "k" * 63
LONG_VALUE = "v" * 63


def test_long_values_are_cut_and_the_advice_kept(example: ClusterState) -> None:
    selector = {LONG_KEY: LONG_VALUE, "kubernetes.io/os": LONG_VALUE}
    outcome = review(body(request(runtime_class(LONG_NAME, node_selector=selector))), example)
    [warning] = outcome.warnings
    assert len(warning) == MAX_WARNING_CHARS
    # The name and the selector are shortened; the fixed wording survives whole.
    assert warning.startswith(
        f"RuntimeClass {LONG_NAME[:11]}…: no node matches scheduling.nodeSelector {{example.com/k"
    )
    assert warning.endswith("…}" + PENDING)


def test_long_taint_is_cut(example: ClusterState) -> None:
    taint = Taint(LONG_KEY, "NoSchedule", LONG_VALUE)
    state = state_of(node("a", SANDBOX, (taint,)))
    outcome = review(body(request(runtime_class("gvisor", node_selector=SANDBOX))), state)
    [warning] = outcome.warnings
    assert len(warning) == MAX_WARNING_CHARS
    assert warning.startswith(
        "RuntimeClass gvisor: every matching node has an untolerated taint, e.g. example.com/k"
    )
    assert warning.endswith("… on 1/1")


def test_most_warnings_at_once_stay_within_the_limits() -> None:
    taint = Taint(LONG_KEY, "NoSchedule", LONG_VALUE)
    state = state_of(node("a", SANDBOX, (taint,), handlers=("runc",)))
    obj = runtime_class(LONG_NAME, node_selector=SANDBOX, handler="h" * 63)
    outcome = review(body(request(obj)), state)
    assert outcome.result == "warned"
    assert 2 == len(outcome.warnings) <= MAX_WARNINGS
    assert [len(w) for w in outcome.warnings] == [MAX_WARNING_CHARS, MAX_WARNING_CHARS]
    assert outcome.warnings[0].endswith(" on 1/1")
    assert outcome.warnings[1].startswith("RuntimeClass aaaaaaaa")
    assert ': none of the 1 matching node(s) reporting runtimeHandlers lists "hhhhhhhh' in outcome.warnings[1]
    assert outcome.warnings[1].endswith('…"')


# --- not synced -----------------------------------------------------------------------


@pytest.mark.parametrize("synced_kind", [None, "nodes", "runtimeclasses"])
def test_unsynced_cache_skips_the_node_checks(synced_kind: str | None) -> None:
    state = ClusterState()
    if synced_kind is not None:
        state.store(synced_kind).replace([])
    outcome = review(body(request(runtime_class(node_selector={"absent": "label"}))), state)
    assert (outcome.result, outcome.allowed) == ("skipped", True)
    assert outcome.warnings == (
        "RuntimeClass sandbox: node checks skipped, the extender's cache is not synced yet",
    )
    assert answer(outcome) == {"uid": UID, "allowed": True, "warnings": list(outcome.warnings)}


def test_unsynced_cache_still_denies_a_bad_annotation() -> None:
    # Reading the annotation needs no cluster state: a class the filter would fail
    # closed is refused whether or not the cache has synced.
    outcome = review(body(request(runtime_class(annotation="[]"))), ClusterState())
    assert outcome.result == "denied"
    assert outcome.message == (
        f"{ANNOTATION_PATH}: expected a NodeSelectorTerm object with matchExpressions and/or matchFields"
    )


# --- skipped: not a RuntimeClass write ------------------------------------------------


@pytest.mark.parametrize(
    ("req", "operation"),
    [
        (request(runtime_class(annotation="[]"), operation="DELETE", object=None), "DELETE"),
        (
            request(
                runtime_class(annotation="[]"),
                operation="DELETE",
                object=None,
                oldObject=runtime_class(annotation="[]"),
            ),
            "DELETE",
        ),
        (request(None, operation="CONNECT"), "CONNECT"),
        (
            request(
                {"metadata": {"name": "p"}, "spec": {}}, kind={"group": "", "version": "v1", "kind": "Pod"}
            ),
            "CREATE",
        ),
        (
            request(
                runtime_class(annotation="[]"),
                kind={"group": "example.com", "version": "v1", "kind": "RuntimeClass"},
            ),
            "CREATE",
        ),
        (
            request(
                runtime_class(annotation="[]"),
                kind={"group": "node.k8s.io", "version": "v1beta1", "kind": "RuntimeClass"},
            ),
            "UPDATE",
        ),
        (request(runtime_class(annotation="[]"), subResource="status"), "UPDATE"),
        (request(None, kind={"group": "apps", "version": "v1", "kind": "Deployment"}), "CREATE"),
    ],
    ids=[
        "delete",
        "delete-old-object",
        "connect",
        "pod",
        "other-group",
        "v1beta1",
        "subresource",
        "no-object",
    ],
)
def test_other_requests_are_allowed_unchecked(req: dict[str, Any], operation: str) -> None:
    req = {**req, "operation": operation}
    # Even an unsynced cache and a bad annotation do not matter: nothing is checked.
    outcome = review(body(req), ClusterState())
    assert (outcome.result, outcome.allowed, outcome.operation) == ("skipped", True, operation)
    assert answer(outcome) == {"uid": UID, "allowed": True}


# --- malformed reviews ----------------------------------------------------------------

GOOD_REQUEST = request(runtime_class())

BAD_BODIES = [
    pytest.param(
        b"",
        "body: not valid JSON: Input is a zero-length, empty document: line 1 column 1 (char 0)",
        id="empty",
    ),
    pytest.param(b"{", "body: not valid JSON: ", id="truncated"),
    pytest.param(b"\xff\xfe", "body: not valid JSON: ", id="not-utf8"),
    pytest.param(b"[]", "body: must be an AdmissionReview object, got an array", id="array"),
    pytest.param(b'"AdmissionReview"', "body: must be an AdmissionReview object, got a string", id="string"),
    pytest.param(b"null", "body: must be an AdmissionReview object, got null", id="null"),
    pytest.param(
        orjson.dumps({"kind": "AdmissionReview", "request": GOOD_REQUEST}),
        "apiVersion: missing",
        id="no-api-version",
    ),
    pytest.param(
        body(GOOD_REQUEST, apiVersion="admission.k8s.io/v1beta1"),
        'apiVersion: must be "admission.k8s.io/v1", got "admission.k8s.io/v1beta1"',
        id="v1beta1",
    ),
    pytest.param(
        body(GOOD_REQUEST, apiVersion=1),
        "apiVersion: must be a string, got a number",
        id="api-version-number",
    ),
    pytest.param(
        body(GOOD_REQUEST, kind="Pod"), 'kind: must be "AdmissionReview", got "Pod"', id="wrong-kind"
    ),
    pytest.param(
        body(GOOD_REQUEST, kind="x" * 500),
        'kind: must be "AdmissionReview", got "' + "x" * 63 + '…"',
        id="long-kind",
    ),
    pytest.param(
        orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        "request: missing",
        id="no-request",
    ),
    pytest.param(body(None), "request: must be an object, got null", id="null-request"),
    pytest.param(body([GOOD_REQUEST]), "request: must be an object, got an array", id="request-array"),
    pytest.param(
        body({k: v for k, v in GOOD_REQUEST.items() if k != "uid"}), "request.uid: missing", id="no-uid"
    ),
    pytest.param(body({**GOOD_REQUEST, "uid": ""}), "request.uid: must not be empty", id="empty-uid"),
    pytest.param(
        body({**GOOD_REQUEST, "uid": 7}), "request.uid: must be a string, got a number", id="uid-number"
    ),
    pytest.param(
        body({**GOOD_REQUEST, "uid": None}), "request.uid: must be a string, got null", id="uid-null"
    ),
    pytest.param(
        body({k: v for k, v in GOOD_REQUEST.items() if k != "kind"}), "request.kind: missing", id="no-kind"
    ),
    pytest.param(
        body({**GOOD_REQUEST, "kind": "RuntimeClass"}),
        "request.kind: must be an object, got a string",
        id="kind-string",
    ),
    pytest.param(
        body({**GOOD_REQUEST, "kind": {**RUNTIME_CLASS_KIND, "group": True}}),
        "request.kind.group: must be a string, got a boolean",
        id="group-bool",
    ),
    pytest.param(
        body({k: v for k, v in GOOD_REQUEST.items() if k != "operation"}),
        "request.operation: missing",
        id="no-operation",
    ),
    pytest.param(
        body({**GOOD_REQUEST, "operation": "create"}),
        'request.operation: must be one of CREATE, UPDATE, DELETE, CONNECT, got "create"',
        id="operation-lowercase",
    ),
    pytest.param(
        body({**GOOD_REQUEST, "operation": ["CREATE"]}),
        "request.operation: must be one of CREATE, UPDATE, DELETE, CONNECT, got an array",
        id="operation-array",
    ),
    pytest.param(
        body({**GOOD_REQUEST, "object": "{}"}),
        "request.object: must be an object, got a string",
        id="object-string",
    ),
    pytest.param(
        body({**GOOD_REQUEST, "object": None}),
        "request.object: missing (required for CREATE of a RuntimeClass)",
        id="create-without-object",
    ),
    pytest.param(
        body({**GOOD_REQUEST, "uid": 1, "operation": 2}),
        "request.uid: must be a string, got a number (and 1 more)",
        id="several-problems",
    ),
]


@pytest.mark.parametrize(("raw", "message"), BAD_BODIES)
def test_malformed_reviews_raise_review_error(example: ClusterState, raw: bytes, message: str) -> None:
    with pytest.raises(ReviewError) as caught:
        review(raw, example)
    text = str(caught.value)
    assert text.startswith(message) if message.endswith(": ") else text == message
    assert "\n" not in text
    assert isinstance(caught.value, ValueError)


def test_unknown_fields_are_ignored(example: ClusterState) -> None:
    raw = body({**GOOD_REQUEST, "futureField": {"x": 1}}, futureTopLevel=[1, 2])
    assert review(raw, example).result == "allowed"
