"""The fields every pod view shares, decoded once (extender/cluster/pod_fields.py)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.objects import ObjectError
from extender.cluster.pending_pods import pending_pod_from_api
from extender.cluster.pod_fields import pod_key
from extender.cluster.pod_views import scheduled_pod_from_api
from extender.kube.defaults import DEFAULT_SCHEDULER

POD: dict[str, Any] = {
    "metadata": {"name": "web-0", "namespace": "shop", "uid": "u-1", "resourceVersion": "42"},
    "spec": {"runtimeClassName": "gvisor", "schedulerName": "sandbox-scheduler", "nodeName": "n"},
}


def test_both_views_decode_the_shared_fields_alike() -> None:
    scheduled, pending = scheduled_pod_from_api(POD), pending_pod_from_api(POD)
    for view in (scheduled, pending):
        assert (view.namespace, view.pod_name, view.uid, view.resource_version) == (
            "shop",
            "web-0",
            "u-1",
            "42",
        )
        assert view.runtime_class_name == "gvisor"
        assert view.name == pod_key(POD) == "shop/web-0"
    assert pending.scheduler_name == "sandbox-scheduler"
    bare = pending_pod_from_api({"metadata": {"name": "p", "namespace": "n"}})
    assert (bare.scheduler_name, bare.runtime_class_name, bare.uid) == (DEFAULT_SCHEDULER, "", "")


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "Pod: Input should be a valid dictionary"),
        ({"spec": {}}, "Pod.metadata: Field required"),
        ({"metadata": {"name": "p"}}, "Pod has no metadata.name or metadata.namespace"),
        (
            {"metadata": {"name": "p", "namespace": 3}},
            "Pod.metadata.namespace: Input should be a valid string",
        ),
        (
            {"metadata": {"name": "p", "namespace": "n"}, "spec": {"runtimeClassName": ["gvisor"]}},
            "Pod.spec.runtimeClassName: Input should be a valid string",
        ),
        (
            {"metadata": {"name": "p", "namespace": "n"}, "spec": {"schedulerName": 7}},
            "Pod.spec.schedulerName: Input should be a valid string",
        ),
    ],
)
def test_both_views_reject_a_malformed_shared_field_alike(obj: Any, message: str) -> None:
    for convert in (scheduled_pod_from_api, pending_pod_from_api):
        with pytest.raises(ObjectError) as info:
            convert(obj)
        assert str(info.value) == message
