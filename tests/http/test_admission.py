"""POST /admission/runtimeclasses over HTTP: AdmissionReview round trips and metrics."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from extender.cluster.state import ClusterState
from tests.support.admission import request, review, runtime_class
from tests.support.apps import AppFactory
from tests.support.paths import EXAMPLE_CLUSTER

ANNOTATION = "runtimeclass-extender.dev/node-selector-term"
JSON = {"Content-Type": "application/json"}


async def _post(client: Any, body: bytes | dict[str, Any]) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await client.post("/admission/runtimeclasses", data=data, headers=JSON)
    return response.status, await response.json()


def _metric(text: str, operation: str, result: str) -> float:
    prefix = f'runtimeclass_extender_admission_reviews_total{{operation="{operation}",result="{result}"}} '
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


async def test_allowed_review_echoes_the_uid(aiohttp_client: Any, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    status, answer = await _post(client, review(request(runtime_class("plain"), uid="abc-123")))
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "abc-123"
    assert answer["response"]["allowed"] is True
    assert "warnings" not in answer["response"]


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
async def test_bad_annotation_is_denied_with_the_parsers_message(
    aiohttp_client: Any, make_app: AppFactory, operation: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.admission")
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    bad = runtime_class("broken", annotation="matchExpressions:\n- {key: gpu, operator: Gt, values: [many]}")
    status, answer = await _post(client, review(request(bad, operation=operation)))
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["message"].startswith(f"metadata.annotations[{ANNOTATION}]: ")
    assert "integer" in response["status"]["message"]
    (record,) = [r for r in caplog.records if r.name == "extender.admission"]
    assert record.__dict__["result"] == "denied"
    assert record.__dict__["denial"] == response["status"]["message"]
    # The denial names the field, not the class: the log line must.
    assert record.__dict__["runtimeClass"] == "broken"


async def test_selector_matching_no_node_is_allowed_with_a_warning(
    aiohttp_client: Any, make_app: AppFactory
) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    status, answer = await _post(
        client, review(request(runtime_class("nowhere", node_selector={"no-such": "label"})))
    )
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert warning.startswith("RuntimeClass nowhere: no node matches scheduling.nodeSelector")
    assert "its pods will stay pending" in warning


async def test_unsynced_cache_allows_and_says_the_check_was_skipped(
    aiohttp_client: Any, make_app: AppFactory
) -> None:
    client = await aiohttp_client(make_app(state=ClusterState()))
    status, answer = await _post(client, review(request(runtime_class("later", node_selector={"a": "b"}))))
    assert status == 200
    assert answer["response"]["allowed"] is True
    assert "not synced" in answer["response"]["warnings"][0]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "AdmissionReview"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "request"),
    ],
)
async def test_malformed_review_is_400_and_the_server_keeps_serving(
    aiohttp_client: Any, make_app: AppFactory, body: bytes, fragment: str
) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    status, answer = await _post(client, body)
    assert status == 400
    assert set(answer) == {"error", "detail"}
    assert answer["error"] == "malformed AdmissionReview"
    assert fragment in answer["detail"]
    status, _ = await _post(client, review(request(runtime_class("plain"))))
    assert status == 200


async def test_reviews_are_counted_by_operation_and_result(aiohttp_client: Any, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    await _post(client, review(request(runtime_class("plain"))))
    await _post(
        client, review(request(runtime_class("broken", annotation="matchExpressions: 3"), operation="UPDATE"))
    )
    await _post(client, review(request(runtime_class("nowhere", node_selector={"x": "y"}))))
    text = await (await client.get("/metrics")).text()
    assert _metric(text, "CREATE", "allowed") == 1
    assert _metric(text, "UPDATE", "denied") == 1
    assert _metric(text, "CREATE", "warned") == 1
    assert _metric(text, "DELETE", "skipped") == 0
    assert "runtimeclass_extender_admission_review_duration_seconds_count 3.0" in text
