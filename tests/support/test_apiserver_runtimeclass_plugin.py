"""The test API server's RuntimeClass admission plugin (``runtimeclass_plugin=True``) against
what kube-apiserver 1.36.2 did with it on.

tests/data/admission/ holds the same pods as kube-apiserver 1.36.2 sent them to a
webhook with the plugin on and with it off: what the plugin did is the difference. The
fake's model (tests/support/apiserver/runtimeclass_plugin.py) turns the pod of the
plugin-off capture into the pod of the plugin-on one; and over HTTP the server refuses
a pod of a class that does not exist, and one whose overhead is not its class's, with
the plugin's words (plugin/pkg/admission/runtimeclass/admission.go).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import aiohttp
import pytest

from tests.support.apiserver import PODS, RUNTIME_CLASSES, FakeApiServer, runtimeclass_plugin
from tests.support.paths import ADMISSION_DATA

Manifest = dict[str, Any]


def _pod(way: str, capture: str) -> Manifest:
    review = json.loads((ADMISSION_DATA / way / capture).read_text())
    pod: Manifest = review["request"]["object"]
    # Not the plugin's: what differs between the two runs of the capture.
    pod["spec"].pop("volumes", None)
    for container in pod["spec"]["containers"]:
        container.pop("volumeMounts", None)
    pod["metadata"].pop("uid", None)
    pod["metadata"].pop("creationTimestamp", None)
    pod["metadata"].pop("managedFields", None)
    return pod


KATA = json.loads((ADMISSION_DATA / "plugin-on" / "00-runtimeclasses.json").read_text())["request"]["object"]


@pytest.mark.parametrize("capture", ["03-pods.json", "04-pods.json", "05-pods.json"])
def test_the_model_turns_the_pod_without_the_plugin_into_the_pod_with_it(capture: str) -> None:
    admitted, refusal = runtimeclass_plugin.admit(_pod("plugin-off", capture), KATA)
    assert refusal == ""
    assert admitted == _pod("plugin-on", capture)
    assert runtimeclass_plugin.validate(admitted, KATA) == ""


def test_the_model_refuses_as_the_plugin_does() -> None:
    pod = _pod("plugin-off", "03-pods.json")
    other = copy.deepcopy(pod)
    other["spec"]["overhead"] = {"cpu": "1"}
    assert runtimeclass_plugin.admit(other, KATA) == (None, runtimeclass_plugin.OVERHEAD_DIFFERS)
    # By value, as resource.Quantity compares: 160Mi is 163840Ki.
    same = copy.deepcopy(pod)
    same["spec"]["overhead"] = {"cpu": "0.25", "memory": "163840Ki"}
    assert runtimeclass_plugin.admit(same, KATA)[1] == ""
    conflicting = copy.deepcopy(pod)
    conflicting["spec"]["nodeSelector"] = {"katacontainers.io/kata-runtime": "false"}
    assert runtimeclass_plugin.admit(conflicting, KATA) == (
        None,
        "conflict: runtimeClass.scheduling.nodeSelector[katacontainers.io/kata-runtime] = true; "
        "pod.spec.nodeSelector[katacontainers.io/kata-runtime] = false",
    )
    without = {k: v for k, v in KATA.items() if k != "overhead"}
    assert runtimeclass_plugin.validate(other, without) == runtimeclass_plugin.OVERHEAD_WITHOUT_CLASS


async def test_the_server_runs_it_on_pod_creates() -> None:
    server = FakeApiServer(runtimeclass_plugin=True)
    server.add(RUNTIME_CLASSES, KATA)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def create(pod: Manifest) -> tuple[int, Manifest]:
                async with session.post(
                    f"{server.url}/api/v1/namespaces/{pod['metadata']['namespace']}/pods",
                    data=json.dumps(pod),
                    headers={"Content-Type": "application/json", "Authorization": f"Bearer {server.token}"},
                    params={"dryRun": "All"},
                ) as response:
                    return response.status, await response.json()

            status, body = await create({**_pod("plugin-off", "03-pods.json"), "status": {}})
            assert status == 201, body
            assert body["spec"]["overhead"] == {"cpu": "250m", "memory": "160Mi"}
            assert body["spec"]["nodeSelector"] == {"katacontainers.io/kata-runtime": "true"}
            missing = copy.deepcopy(_pod("plugin-off", "04-pods.json"))
            missing["spec"]["runtimeClassName"] = "nope"
            status, body = await create(missing)
            # As kube-apiserver 1.36.2 answered it (the experiment in tests/real/).
            assert (status, body["reason"]) == (403, "Forbidden")
            assert body["message"] == (
                f'pods "{missing["metadata"]["generateName"]}" is forbidden: pod rejected: RuntimeClass "nope" not found'
            )
        assert server.objects(PODS) == []
    finally:
        await server.stop()
