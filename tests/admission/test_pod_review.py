"""The pod webhook's decision (extender/admission/pod_review.py), replaying real AdmissionReviews.

The pods come from kube-apiserver v1.36.2 (tests/data/admission/): with the in-tree
RuntimeClass plugin off they arrive without overhead, with it on they carry it. Every
patch is applied with the ``jsonpatch`` library (RFC 6902) and the result compared with
the exact pod expected: the patch must do what the API server will do with it.

The overhead rules are the in-tree plugin's (kubernetes/kubernetes
plugin/pkg/admission/runtimeclass/admission.go, ``setOverhead`` / ``validateOverhead``).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import jsonpatch
import orjson
import pytest

from extender.admission import (
    POD_RESULTS,
    WEBHOOK_LABEL,
    PodReviewOutcome,
    ReviewError,
    RoutingConfig,
    review_pod,
)
from extender.admission.pod_review import MISMATCH, WITHOUT_CLASS_OVERHEAD
from extender.cluster.class_labels import ClassLabels
from extender.cluster.file_source import load_cluster_file
from extender.cluster.objects import ObjectError, runtime_class_from_api
from extender.cluster.state import ClusterState
from extender.policy_file import load_policy
from policies.quantity import QuantityError, parse_quantity, resource_lists_equal
from tests.support.paths import ADMISSION_CLUSTER, ADMISSION_DATA

KATA_OVERHEAD = {"cpu": "250m", "memory": "160Mi"}
ROUTE = RoutingConfig("runtimeclass-scheduler", own_namespace="runtimeclass-extender")
OFF = RoutingConfig()


def captured(plugin: str, number: str) -> dict[str, Any]:
    """A captured AdmissionReview (plugin "on" or "off"), as a dict."""
    document: dict[str, Any] = json.loads(
        (ADMISSION_DATA / f"plugin-{plugin}" / f"{number}-pods.json").read_bytes()
    )
    return document


def kata_pod(plugin: str = "off") -> dict[str, Any]:
    return captured(plugin, "03")


def with_pod(review: dict[str, Any], **spec: Any) -> bytes:
    """``review`` with ``spec`` keys set on its pod (None removes a key)."""
    review = copy.deepcopy(review)
    pod_spec = review["request"]["object"]["spec"]
    for key, value in spec.items():
        if value is None:
            pod_spec.pop(key, None)
        else:
            pod_spec[key] = value
    return orjson.dumps(review)


def state() -> ClusterState:
    return load_cluster_file(ADMISSION_CLUSTER)


def state_with(*classes: dict[str, Any]) -> ClusterState:
    loaded = state()
    for obj in classes:
        loaded.runtime_classes.upsert(runtime_class_from_api(obj))
    return loaded


def runtime_class(name: str, overhead: Mapping[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}}
    obj["handler"] = name
    if overhead is not None:
        obj["overhead"] = dict(overhead)
    return obj


def answer(outcome: PodReviewOutcome) -> dict[str, Any]:
    response: dict[str, Any] = orjson.loads(outcome.response)["response"]
    return response


def patched_pod(review: dict[str, Any] | bytes, outcome: PodReviewOutcome) -> dict[str, Any]:
    """The pod the API server stores: the review's object with the answer's patch applied."""
    document = orjson.loads(review) if isinstance(review, bytes) else review
    pod = copy.deepcopy(document["request"]["object"])
    response = answer(outcome)
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(pod, ops)
    return result


def expected(review: dict[str, Any] | bytes, **spec: Any) -> dict[str, Any]:
    document = orjson.loads(review) if isinstance(review, bytes) else review
    pod = copy.deepcopy(document["request"]["object"])
    pod["spec"].update(spec)
    return pod


# ----- quantities: Kubernetes' resource.Quantity, by value ---------------------------------


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("1Gi", "1024Mi"),
        ("1", "1000m"),
        ("0.5", "500m"),
        ("250m", "0.25"),
        ("160Mi", "167772160"),
        ("1k", "1000"),
        ("1e3", "1k"),
        ("1E3", "1000"),
        ("1.5Gi", "1536Mi"),
        ("100m", "1e-1"),
        ("+1", "1"),
        ("1.", "1"),
        (".5", "500m"),
        ("0", "0m"),
        ("1M", "1000k"),
        ("1E", "1000P"),  # E alone is exa, not an exponent
        ("1u", "1000n"),
        ("1.5n", "2n"),  # finer than 1n rounds up (ParseQuantity, inf.RoundUp)
        ("0.1n", "1n"),
    ],
)
def test_equal_quantities(left: str, right: str) -> None:
    assert parse_quantity(left) == parse_quantity(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [("1G", "1Gi"), ("1m", "1"), ("1Ki", "1000"), ("250m", "251m"), ("160Mi", "160M"), ("1k", "1Ki")],
)
def test_different_quantities(left: str, right: str) -> None:
    assert parse_quantity(left) != parse_quantity(right)


def test_quantity_values_are_exact() -> None:
    assert parse_quantity("160Mi") == Decimal(167772160)
    assert parse_quantity("250m") == Decimal("0.25")
    assert parse_quantity("1Ei") == Decimal(2**60)


@pytest.mark.parametrize(
    "text", ["", " 1", "1 ", "abc", "1.2.3", "1Mb", "1KI", "1ki", "--1", "1e", "Gi", ".", "1i"]
)
def test_not_quantities(text: str) -> None:
    with pytest.raises(QuantityError, match="not a quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        (None, None, True),
        (None, {}, True),  # Semantic.DeepEqual: nil and empty maps are equal
        ({"cpu": "1"}, {"cpu": "1000m"}, True),
        ({"cpu": "1", "memory": "1Gi"}, {"memory": "1024Mi", "cpu": "1"}, True),
        ({"cpu": "1"}, {"cpu": "1", "memory": "1Gi"}, False),
        ({"cpu": "1"}, None, False),
        ({"cpu": "0"}, None, False),  # a zero entry is still an entry
        ({"cpu": "1"}, {"memory": "1"}, False),
    ],
)
def test_resource_lists_compare_like_semantic_deep_equal(
    left: dict[str, str] | None, right: dict[str, str] | None, equal: bool
) -> None:
    assert resource_lists_equal(left, right) is equal
    assert resource_lists_equal(right, left) is equal


def test_runtime_class_overhead_is_read_into_the_view() -> None:
    kata = state().runtime_classes["kata"]
    assert kata.overhead == KATA_OVERHEAD
    assert state().runtime_classes["runc"].overhead is None
    assert runtime_class_from_api(runtime_class("empty", {})).overhead == {}
    assert runtime_class_from_api(runtime_class("int", {"podFixed": {"cpu": 1}})).overhead == {"cpu": "1"}


def test_runtime_class_with_a_bad_overhead_quantity_is_an_object_error() -> None:
    with pytest.raises(ObjectError, match=r"overhead\.podFixed\.cpu: 'lots' is not a quantity"):
        runtime_class_from_api(runtime_class("bad", {"podFixed": {"cpu": "lots"}}))


# ----- overhead: the in-tree plugin's rules ---------------------------------------------


def test_plugin_off_pod_gets_the_class_overhead() -> None:
    review = kata_pod("off")
    outcome = review_pod(orjson.dumps(review), state(), OFF)
    assert outcome.result == "patched"
    assert outcome.patched == ("overhead",)
    assert answer(outcome)["allowed"] is True
    assert answer(outcome)["uid"] == review["request"]["uid"]
    assert patched_pod(review, outcome) == expected(review, overhead=KATA_OVERHEAD)
    assert outcome.pod == "apps/kata-pod" and outcome.runtime_class == "kata"


def test_plugin_on_pod_is_left_alone() -> None:
    # The plugin ran first and set the same overhead: the webhook is a no-op.
    review = kata_pod("on")
    assert review["request"]["object"]["spec"]["overhead"] == KATA_OVERHEAD
    outcome = review_pod(orjson.dumps(review), state(), OFF)
    assert outcome.result == "unchanged"
    assert "patch" not in answer(outcome) and "patchType" not in answer(outcome)
    assert answer(outcome)["allowed"] is True


@pytest.mark.parametrize("number", ["03", "04", "05"])
@pytest.mark.parametrize("plugin", ["on", "off"])
def test_every_captured_pod_ends_with_the_class_overhead_and_is_routed(plugin: str, number: str) -> None:
    review = captured(plugin, number)
    outcome = review_pod(orjson.dumps(review), state(), ROUTE)
    assert outcome.result == "patched"
    assert outcome.patched == (("schedulerName",) if plugin == "on" else ("overhead", "schedulerName"))
    assert patched_pod(review, outcome) == expected(
        review, overhead=KATA_OVERHEAD, schedulerName="runtimeclass-scheduler"
    )


def test_generate_name_pod_is_named_by_its_prefix() -> None:
    outcome = review_pod(orjson.dumps(captured("off", "04")), state(), OFF)
    assert outcome.pod == "apps/web-7d4b9c6f5-…"


def test_the_patched_pod_is_unchanged_on_reinvocation() -> None:
    # reinvocationPolicy: IfNeeded may call the webhook again with its own result.
    review = kata_pod("off")
    first = review_pod(orjson.dumps(review), state(), ROUTE)
    again = copy.deepcopy(review)
    again["request"]["object"] = patched_pod(review, first)
    second = review_pod(orjson.dumps(again), state(), ROUTE)
    assert second.result == "unchanged"
    assert "patch" not in answer(second)


@pytest.mark.parametrize(
    "overhead",
    [
        {"cpu": "0.25", "memory": "167772160"},
        {"cpu": "250m", "memory": "163840Ki"},
        {"memory": "0.15625Gi", "cpu": "250000000n"},
    ],
)
def test_equal_overhead_written_differently_is_accepted_unchanged(overhead: dict[str, str]) -> None:
    outcome = review_pod(with_pod(kata_pod(), overhead=overhead), state(), OFF)
    assert outcome.result == "unchanged"
    assert answer(outcome)["allowed"] is True


@pytest.mark.parametrize(
    "overhead",
    [
        {"cpu": "250m", "memory": "160M"},  # 160M is not 160Mi
        {"cpu": "250m"},  # a resource missing
        {"cpu": "250m", "memory": "160Mi", "example.com/vm": "1"},  # one too many
        {"cpu": "1", "memory": "1Gi"},
    ],
)
def test_different_overhead_is_denied_with_the_plugins_message(overhead: dict[str, str]) -> None:
    outcome = review_pod(with_pod(kata_pod(), overhead=overhead), state(), ROUTE)
    assert outcome.result == "denied"
    response = answer(outcome)
    assert response["allowed"] is False
    assert response["status"] == {"code": 422, "reason": "Invalid", "message": MISMATCH}
    assert MISMATCH == "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
    assert "patch" not in response  # denied: not routed either


def test_overhead_without_class_overhead_is_denied_with_the_plugins_message() -> None:
    outcome = review_pod(with_pod(kata_pod(), runtimeClassName="runc", overhead={"cpu": "1"}), state(), OFF)
    assert outcome.result == "denied"
    assert answer(outcome)["status"]["message"] == WITHOUT_CLASS_OVERHEAD
    assert (
        WITHOUT_CLASS_OVERHEAD
        == "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
    )


def test_class_without_overhead_and_pod_without_overhead_is_unchanged() -> None:
    outcome = review_pod(with_pod(kata_pod(), runtimeClassName="runc"), state(), OFF)
    assert outcome.result == "unchanged"


def test_class_with_empty_overhead() -> None:
    # overhead: {} (no podFixed) is an Overhead all the same: setOverhead compares the
    # pod's with an empty PodFixed ("doesn't match"), and sets nothing on a pod without.
    loaded = state_with(runtime_class("empty", {}))
    unchanged = review_pod(with_pod(kata_pod(), runtimeClassName="empty"), loaded, OFF)
    assert (unchanged.result, unchanged.patched) == ("unchanged", ())
    denied = review_pod(with_pod(kata_pod(), runtimeClassName="empty", overhead={"cpu": "1"}), loaded, OFF)
    assert denied.result == "denied" and denied.message == MISMATCH


def test_empty_pod_overhead_counts_as_none_and_is_set() -> None:
    body = with_pod(kata_pod(), overhead={})
    outcome = review_pod(body, state(), OFF)
    assert outcome.result == "patched"
    assert patched_pod(body, outcome) == expected(body, overhead=KATA_OVERHEAD)


def test_resource_names_with_slashes_are_carried_whole() -> None:
    # The patch's path is fixed (/spec/overhead); names go in the value, unescaped.
    overhead = {"podFixed": {"cpu": "100m", "example.com/vm~slots": "1"}}
    loaded = state_with(runtime_class("vm", overhead))
    body = with_pod(kata_pod(), runtimeClassName="vm")
    outcome = review_pod(body, loaded, OFF)
    assert patched_pod(body, outcome) == expected(
        body, runtimeClassName="vm", overhead={"cpu": "100m", "example.com/vm~slots": "1"}
    )


def test_pod_overhead_that_is_not_a_quantity_is_denied_naming_it() -> None:
    outcome = review_pod(with_pod(kata_pod(), overhead={"cpu": "lots", "memory": "160Mi"}), state(), OFF)
    assert outcome.result == "denied"
    assert outcome.message == "spec.overhead: 'lots' is not a quantity (e.g. 250m, 0.5, 160Mi, 1Gi)"


# ----- a class that does not exist, a cache not synced ------------------------------------


def test_missing_class_is_allowed_without_overhead_with_a_warning_and_still_routed() -> None:
    body = with_pod(kata_pod(), runtimeClassName="gvisor")
    outcome = review_pod(body, state(), ROUTE)
    assert outcome.result == "patched"
    assert outcome.patched == ("schedulerName",)
    (warning,) = answer(outcome)["warnings"]
    assert (
        warning
        == "RuntimeClass gvisor not found: the pod waits for it, and never gets its overhead (immutable)"
    )
    assert patched_pod(body, outcome) == expected(
        body, runtimeClassName="gvisor", schedulerName="runtimeclass-scheduler"
    )
    assert "overhead" not in patched_pod(body, outcome)["spec"]


def test_missing_class_without_routing_is_unchanged_with_the_warning() -> None:
    outcome = review_pod(with_pod(kata_pod(), runtimeClassName="gvisor"), state(), OFF)
    assert (outcome.result, len(outcome.warnings)) == ("unchanged", 1)


@pytest.mark.parametrize("overhead", [None, {"cpu": "9"}])
def test_unsynced_cache_allows_with_a_warning_never_blocks(overhead: dict[str, str] | None) -> None:
    unsynced = ClusterState()
    outcome = review_pod(with_pod(kata_pod(), overhead=overhead), unsynced, ROUTE)
    response = answer(outcome)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "RuntimeClass kata: overhead not checked, the extender's cache is not synced yet"
    ]
    # Routing needs no cache.
    assert outcome.patched == ("schedulerName",)


# ----- routing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheduler", "op"),
    [(None, "add"), ("", "replace"), ("default-scheduler", "replace")],
)
def test_pods_naming_no_scheduler_are_routed(scheduler: str | None, op: str) -> None:
    body = with_pod(kata_pod("on"), schedulerName=scheduler)
    if scheduler is None:
        assert b"schedulerName" not in body.split(b'"spec"')[1].split(b'"status"')[0]
    outcome = review_pod(body, state(), ROUTE)
    ops = json.loads(base64.b64decode(answer(outcome)["patch"]))
    assert ops == [{"op": op, "path": "/spec/schedulerName", "value": "runtimeclass-scheduler"}]
    assert patched_pod(body, outcome)["spec"]["schedulerName"] == "runtimeclass-scheduler"


@pytest.mark.parametrize("scheduler", ["volcano", "my-scheduler", "runtimeclass-scheduler"])
def test_pods_naming_another_scheduler_are_untouched(scheduler: str) -> None:
    outcome = review_pod(with_pod(kata_pod("on"), schedulerName=scheduler), state(), ROUTE)
    assert outcome.result == "unchanged"


def test_routing_is_off_by_default() -> None:
    outcome = review_pod(orjson.dumps(kata_pod("on")), state(), OFF)
    assert outcome.result == "unchanged"


def test_pod_label_opts_out_of_routing_not_of_overhead() -> None:
    review = kata_pod("off")
    review["request"]["object"]["metadata"]["labels"] = {WEBHOOK_LABEL: "ignore"}
    outcome = review_pod(orjson.dumps(review), state(), ROUTE)
    assert outcome.patched == ("overhead",)
    assert patched_pod(review, outcome)["spec"]["schedulerName"] == "default-scheduler"
    # Any other value of the label does not opt out.
    review["request"]["object"]["metadata"]["labels"] = {WEBHOOK_LABEL: "yes"}
    assert review_pod(orjson.dumps(review), state(), ROUTE).patched == ("overhead", "schedulerName")


@pytest.mark.parametrize("namespace", ["kube-system", "runtimeclass-extender"])
def test_kube_system_and_the_extenders_namespace_are_never_routed(namespace: str) -> None:
    review = kata_pod("off")
    review["request"]["namespace"] = namespace
    review["request"]["object"]["metadata"]["namespace"] = namespace
    outcome = review_pod(orjson.dumps(review), state(), ROUTE)
    assert outcome.patched == ("overhead",)


def test_without_a_known_namespace_only_kube_system_is_excluded() -> None:
    review = kata_pod("off")
    review["request"]["namespace"] = "runtimeclass-extender"
    outcome = review_pod(orjson.dumps(review), state(), RoutingConfig("runtimeclass-scheduler"))
    assert outcome.patched == ("overhead", "schedulerName")


# ----- what is not reviewed ----------------------------------------------------------------


def test_pod_without_runtime_class_is_unchanged() -> None:
    outcome = review_pod(with_pod(kata_pod(), runtimeClassName=None), state(), ROUTE)
    assert outcome.result == "unchanged"
    empty = review_pod(with_pod(kata_pod(), runtimeClassName=""), state(), ROUTE)
    assert empty.result == "unchanged"


@pytest.mark.parametrize(
    "change",
    [
        {"operation": "UPDATE"},
        {"operation": "DELETE"},
        {"subResource": "ephemeralcontainers"},
        {"kind": {"group": "", "version": "v1", "kind": "ConfigMap"}},
        {"kind": {"group": "apps", "version": "v1", "kind": "Pod"}},
    ],
)
def test_misrouted_reviews_are_allowed_unchanged(change: dict[str, Any]) -> None:
    review = kata_pod("off")
    review["request"].update(change)
    outcome = review_pod(orjson.dumps(review), state(), ROUTE)
    assert outcome.result == "unchanged"
    assert answer(outcome) == {"uid": review["request"]["uid"], "allowed": True}


def test_every_result_is_listed() -> None:
    assert POD_RESULTS == ("patched", "unchanged", "denied")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: b"{", "body: not valid JSON"),
        (lambda r: b"[]", "body: must be an AdmissionReview object, got an array"),
        (
            lambda r: {**r, "apiVersion": "admission.k8s.io/v1beta1"},
            'apiVersion: must be "admission.k8s.io/v1"',
        ),
        (lambda r: {**r, "request": {**r["request"], "uid": ""}}, "request.uid: must not be empty"),
        (
            lambda r: {**r, "request": {**r["request"], "object": None}},
            "request.object: missing (required for CREATE of a Pod)",
        ),
        (
            lambda r: {**r, "request": {**r["request"], "object": {"spec": {"runtimeClassName": 7}}}},
            "request.object.spec.runtimeClassName: Input should be a valid string",
        ),
        (
            lambda r: {**r, "request": {**r["request"], "object": {"spec": {"overhead": {"cpu": 1}}}}},
            "request.object.spec.overhead.cpu: Input should be a valid string",
        ),
        (
            lambda r: {**r, "request": {**r["request"], "object": {"metadata": {"labels": []}}}},
            "request.object.metadata.labels: Input should be a valid dictionary",
        ),
    ],
)
def test_malformed_reviews_are_one_line_errors(mutate: Any, message: str) -> None:
    changed = mutate(copy.deepcopy(kata_pod()))
    body = changed if isinstance(changed, bytes) else orjson.dumps(changed)
    with pytest.raises(ReviewError) as raised:
        review_pod(body, state(), ROUTE)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


# ----- the class's node label (serve --label-nodes) ----------------------------------------

LABEL_KEY = "runtimeclass.node-restriction.kubernetes.io/kata"
LABELS = RoutingConfig(
    "runtimeclass-scheduler",
    own_namespace="runtimeclass-extender",
    class_labels=ClassLabels("runtimeclass.node-restriction.kubernetes.io", load_policy()),
)
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
        }
    }
}


@pytest.mark.parametrize(
    ("spec", "node_selector"),
    [
        ({"nodeSelector": None}, {LABEL_KEY: "true"}),
        ({"nodeSelector": {"disk": "ssd"}}, {"disk": "ssd", LABEL_KEY: "true"}),
        # Affinity stays as it is: nodeSelector is ANDed with it (RequiredNodeAffinity).
        ({"nodeSelector": None, "affinity": AFFINITY}, {LABEL_KEY: "true"}),
    ],
    ids=["no-selector", "selector", "affinity"],
)
def test_a_pod_of_a_class_with_node_rules_requires_the_class_label(
    spec: dict[str, Any], node_selector: dict[str, str]
) -> None:
    review = with_pod(kata_pod(), **spec)
    outcome = review_pod(review, state(), LABELS)
    assert outcome.result == "patched" and "nodeSelector" in outcome.patched
    pod = patched_pod(review, outcome)
    assert pod["spec"]["nodeSelector"] == node_selector
    assert pod["spec"].get("affinity") == spec.get("affinity")
    # Reinvoked (reinvocationPolicy: IfNeeded) on the patched pod: nothing more to do.
    again = orjson.loads(review)
    again["request"]["object"] = pod
    assert review_pod(orjson.dumps(again), state(), LABELS).result == "unchanged"


def test_a_pod_asking_for_another_value_of_the_label_is_denied() -> None:
    review = with_pod(kata_pod(), nodeSelector={LABEL_KEY: "false"})
    outcome = review_pod(review, state(), LABELS)
    assert outcome.result == "denied"
    assert outcome.message == (
        f"conflict: RuntimeClass kata requires {LABEL_KEY} = true; pod.spec.nodeSelector[{LABEL_KEY}] = false"
    )


def test_no_label_for_opted_out_pods_namespaces_classes_without_rules_or_with_the_mode_off() -> None:
    opted_out = kata_pod()
    opted_out["request"]["object"]["metadata"]["labels"] = {WEBHOOK_LABEL: "ignore"}
    in_kube_system = kata_pod()
    in_kube_system["request"]["namespace"] = "kube-system"
    in_kube_system["request"]["object"]["metadata"]["namespace"] = "kube-system"
    for review in (opted_out, in_kube_system):
        outcome = review_pod(orjson.dumps(review), state(), LABELS)
        assert "nodeSelector" not in outcome.patched
    # runc has no node rules: requiring its label would narrow nothing.
    runc = with_pod(kata_pod(), runtimeClassName="runc", overhead=None)
    assert "nodeSelector" not in review_pod(runc, state(), LABELS).patched
    # The mode off: the pod webhook never touches nodeSelector.
    assert "nodeSelector" not in review_pod(with_pod(kata_pod()), state(), ROUTE).patched
