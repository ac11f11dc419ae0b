"""POST /admission/pods over HTTP: captured AdmissionReviews, both listeners, metrics, logs.

The main port through the aiohttp test client; the ``--admission-port`` listener through
``serve`` itself over HTTPS, with the settings an operator passes
(``route-pods-to-scheduler``, ``namespace``), as tests/http/test_admission_listener.py
runs it.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from typing import Any

import jsonpatch
import pytest

from extender.admission import RoutingConfig
from extender.cluster.state import ClusterState
from extender.http.admission import POD_PATH
from extender.settings import ServeSettings
from tests.http.test_admission_listener import (
    Pki,
    _request,
    _settings,
    _trusting,
    pki,  # noqa: F401  (a fixture)
    running,
)
from tests.support.apps import AppFactory
from tests.support.paths import ADMISSION_CLUSTER, ADMISSION_DATA

JSON = {"Content-Type": "application/json"}
KATA_OVERHEAD = {"cpu": "250m", "memory": "160Mi"}
ROUTE = RoutingConfig("runtimeclass-scheduler", own_namespace="runtimeclass-extender")


def captured(plugin: str, number: str = "03") -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        (ADMISSION_DATA / f"plugin-{plugin}" / f"{number}-pods.json").read_bytes()
    )
    return document


async def _post(client: Any, body: bytes | dict[str, Any]) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await client.post(POD_PATH, data=data, headers=JSON)
    return response.status, await response.json()


def _applied(review: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(review["request"]["object"])
    assert response["patchType"] == "JSONPatch"
    result: dict[str, Any] = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    return result


def _routing_settings(pki: Pki, *, namespace: str) -> ServeSettings:  # noqa: F811
    """serve over the admission test cluster, routing on, with both listeners."""
    return _settings(
        pki,
        cluster_file=str(ADMISSION_CLUSTER),
        route_pods_to_scheduler="runtimeclass-scheduler",
        namespace=namespace,
    )


def _sample(text: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


async def test_captured_pod_round_trip_patches_overhead_and_scheduler(
    aiohttp_client: Any, make_app: AppFactory
) -> None:
    client = await aiohttp_client(make_app(cluster_file=ADMISSION_CLUSTER, routing=ROUTE))
    review = captured("off")
    status, answer = await _post(client, review)
    assert status == 200
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is True
    expected = copy.deepcopy(review["request"]["object"])
    expected["spec"]["overhead"] = KATA_OVERHEAD
    expected["spec"]["schedulerName"] = "runtimeclass-scheduler"
    assert _applied(review, response) == expected

    text = await (await client.get("/metrics")).text()
    assert _sample(text, 'runtimeclass_extender_pod_admission_reviews_total{result="patched"}') == 1
    assert _sample(text, 'runtimeclass_extender_pod_admission_reviews_total{result="denied"}') == 0
    assert _sample(text, 'runtimeclass_extender_pod_admission_patches_total{field="overhead"}') == 1
    assert _sample(text, 'runtimeclass_extender_pod_admission_patches_total{field="schedulerName"}') == 1
    assert _sample(text, "runtimeclass_extender_pod_admission_review_duration_seconds_count") == 1
    # The RuntimeClass webhook's counters are its own.
    assert 'runtimeclass_extender_admission_reviews_total{operation="CREATE",result="allowed"} 0.0' in text


async def test_plugin_on_pod_without_routing_is_unchanged(aiohttp_client: Any, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(cluster_file=ADMISSION_CLUSTER))
    status, answer = await _post(client, captured("on"))
    assert status == 200
    assert answer["response"] == {"uid": captured("on")["request"]["uid"], "allowed": True}
    text = await (await client.get("/metrics")).text()
    assert _sample(text, 'runtimeclass_extender_pod_admission_reviews_total{result="unchanged"}') == 1


async def test_denied_pod_is_logged_naming_pod_class_and_reason(
    aiohttp_client: Any, make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.admission")
    client = await aiohttp_client(make_app(cluster_file=ADMISSION_CLUSTER, routing=ROUTE))
    review = captured("off")
    review["request"]["object"]["spec"]["overhead"] = {"cpu": "1", "memory": "1Gi"}
    status, answer = await _post(client, review)
    assert status == 200
    assert answer["response"]["allowed"] is False
    message = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
    assert answer["response"]["status"] == {"code": 422, "reason": "Invalid", "message": message}
    (record,) = [r for r in caplog.records if r.name == "extender.admission"]
    assert record.getMessage() == "pod admission review"
    assert record.__dict__["pod"] == "apps/kata-pod"
    assert record.__dict__["runtimeClass"] == "kata"
    assert record.__dict__["result"] == "denied"
    assert record.__dict__["denial"] == message
    text = await (await client.get("/metrics")).text()
    assert _sample(text, 'runtimeclass_extender_pod_admission_reviews_total{result="denied"}') == 1


async def test_unsynced_cache_answers_allowed_with_a_warning(
    aiohttp_client: Any, make_app: AppFactory
) -> None:
    client = await aiohttp_client(make_app(state=ClusterState(), routing=ROUTE))
    status, answer = await _post(client, captured("off"))
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is True
    assert response["warnings"] == [
        "RuntimeClass kata: overhead not checked, the extender's cache is not synced yet"
    ]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"not json", "body: not valid JSON"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request: missing"),
        (
            json.dumps(
                {**captured("off"), "request": {**captured("off")["request"], "object": None}}
            ).encode(),
            "request.object: missing (required for CREATE of a Pod)",
        ),
    ],
)
async def test_malformed_review_is_400_one_line_and_the_server_keeps_serving(
    aiohttp_client: Any, make_app: AppFactory, caplog: pytest.LogCaptureFixture, body: bytes, fragment: str
) -> None:
    caplog.set_level(logging.INFO)
    client = await aiohttp_client(make_app(cluster_file=ADMISSION_CLUSTER))
    status, answer = await _post(client, body)
    assert status == 400
    assert answer == {"error": "malformed AdmissionReview", "detail": answer["detail"]}
    assert answer["detail"].startswith(fragment)
    assert "\n" not in answer["detail"]
    refused = [r for r in caplog.records if r.getMessage() == "rejected request"]
    assert len(refused) == 1 and refused[0].__dict__["path"] == POD_PATH
    assert not any(r.exc_info for r in caplog.records)
    text = await (await client.get("/metrics")).text()
    assert _sample(text, "runtimeclass_extender_pod_admission_reviews_malformed_total") == 1
    status, _ = await _post(client, captured("off"))
    assert status == 200


async def test_wrong_content_type_and_method(aiohttp_client: Any, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(cluster_file=ADMISSION_CLUSTER))
    response = await client.post(POD_PATH, data=b"{}", headers={"Content-Type": "text/plain"})
    assert response.status == 415
    assert (await client.get(POD_PATH)).status == 405


async def test_both_listeners_serve_the_pod_webhook_with_serve_settings(
    pki: Pki,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with running(_routing_settings(pki, namespace="apps"), caplog) as ports:
        webhook = f"https://127.0.0.1:{ports.admission_port}"
        main = f"http://127.0.0.1:{ports.port}"
        review = captured("off")
        status, answer = await _request("POST", webhook + POD_PATH, ssl_context=_trusting(pki), body=review)
        assert status == 200
        # namespace=apps: the extender's own namespace is never routed; overhead only.
        expected = copy.deepcopy(review["request"]["object"])
        expected["spec"]["overhead"] = KATA_OVERHEAD
        assert _applied(review, answer["response"]) == expected

        other = captured("off", "04")
        other["request"]["namespace"] = "shop"
        other["request"]["object"]["metadata"]["namespace"] = "shop"
        status, answer = await _request("POST", main + POD_PATH, body=other)
        assert status == 200
        routed = _applied(other, answer["response"])
        assert routed["spec"]["schedulerName"] == "runtimeclass-scheduler"
        assert routed["spec"]["overhead"] == KATA_OVERHEAD

        # One registry: each review counted once, whichever listener answered it.
        status, metrics = await _request("GET", main + "/metrics")
        assert _sample(metrics, 'runtimeclass_extender_pod_admission_reviews_total{result="patched"}') == 2
        assert (
            _sample(metrics, 'runtimeclass_extender_pod_admission_patches_total{field="schedulerName"}') == 1
        )
    started = [r for r in caplog.records if r.getMessage() == "serving admission webhook"]
    assert started and started[0].__dict__["path"] == "/admission/runtimeclasses,/admission/pods"


def _case(plugin: str = "off", namespace: str = "shop", **spec: Any) -> dict[str, Any]:
    review = captured(plugin)
    review["request"]["namespace"] = namespace
    review["request"]["object"]["metadata"]["namespace"] = namespace
    labels = spec.pop("labels", None)
    if labels is not None:
        review["request"]["object"]["metadata"]["labels"] = labels
    for key, value in spec.items():
        if value is None:
            review["request"]["object"]["spec"].pop(key, None)
        else:
            review["request"]["object"]["spec"][key] = value
    return review


MISMATCH = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
WITHOUT = "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
ROUTED = {"schedulerName": "runtimeclass-scheduler"}
# kata has node rules the autoscalers cannot see in a pod the in-tree plugin did not
# merge them into: marked not to be moved (docs/autoscaling.md).
MARKED = {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "karpenter.sh/do-not-disrupt": "true"}}
# (id, review, allowed, the fields of the stored pod's spec that change (and its
# annotations), denial or warning)
EVERY_CASE: list[tuple[str, dict[str, Any], bool, dict[str, Any], str]] = [
    ("plugin-off", _case("off"), True, {"overhead": KATA_OVERHEAD, **ROUTED, **MARKED}, ""),
    ("plugin-on", _case("on"), True, ROUTED, ""),
    ("equal-by-value", _case(overhead={"cpu": "0.25", "memory": "163840Ki"}), True, {**ROUTED, **MARKED}, ""),
    ("overhead-differs", _case(overhead={"cpu": "250m", "memory": "160M"}), False, {}, MISMATCH),
    ("overhead-without-class-one", _case(runtimeClassName="runc", overhead={"cpu": "1"}), False, {}, WITHOUT),
    ("class-without-overhead", _case(runtimeClassName="runc"), True, ROUTED, ""),
    (
        "class-missing",
        _case(runtimeClassName="gvisor"),
        True,
        ROUTED,
        "RuntimeClass gvisor not found: the pod waits for it, and never gets its overhead (immutable)",
    ),
    ("scheduler-unset", _case(schedulerName=None), True, {"overhead": KATA_OVERHEAD, **ROUTED, **MARKED}, ""),
    ("other-scheduler", _case(schedulerName="volcano"), True, {"overhead": KATA_OVERHEAD, **MARKED}, ""),
    (
        "pod-opt-out",
        _case(labels={"runtimeclass-extender.dev/webhook": "ignore"}),
        True,
        {"overhead": KATA_OVERHEAD},
        "",
    ),
    ("kube-system", _case(namespace="kube-system"), True, {"overhead": KATA_OVERHEAD}, ""),
    ("own-namespace", _case(namespace="runtimeclass-extender"), True, {"overhead": KATA_OVERHEAD}, ""),
    ("no-runtime-class", _case(runtimeClassName=None), True, {}, ""),
]


async def test_every_case_through_both_listeners(
    pki: Pki,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with running(_routing_settings(pki, namespace="runtimeclass-extender"), caplog) as ports:
        listeners = {
            "admission-port": (f"https://127.0.0.1:{ports.admission_port}", _trusting(pki)),
            "main": (f"http://127.0.0.1:{ports.port}", None),
        }
        for case, review, allowed, changes, text in EVERY_CASE:
            for listener, (base, context) in listeners.items():
                status, answer = await _request("POST", base + POD_PATH, ssl_context=context, body=review)
                where = f"{case} on {listener}"
                assert status == 200, where
                response = answer["response"]
                assert response["uid"] == review["request"]["uid"], where
                assert response["allowed"] is allowed, where
                if not allowed:
                    assert response["status"]["message"] == text, where
                    assert "patch" not in response, where
                    continue
                assert response.get("warnings", []) == ([text] if text else []), where
                stored = _applied(review, response) if "patch" in response else review["request"]["object"]
                expected = copy.deepcopy(review["request"]["object"])
                expected["spec"].update({k: v for k, v in changes.items() if k != "annotations"})
                if "annotations" in changes:
                    expected["metadata"]["annotations"] = changes["annotations"]
                assert stored == expected, where
                assert ("patch" in response) is bool(changes), where
        status, metrics = await _request("GET", listeners["main"][0] + "/metrics")
        counted = sum(
            _sample(metrics, f'runtimeclass_extender_pod_admission_reviews_total{{result="{result}"}}')
            for result in ("patched", "unchanged", "denied")
        )
        assert counted == 2 * len(EVERY_CASE)
        assert _sample(metrics, 'runtimeclass_extender_pod_admission_reviews_total{result="denied"}') == 4
