"""docs/pod-webhook.md: its transcript is what the webhook answers to the captured request.

The page replays a request kube-apiserver v1.36.2 really sent (tests/data/admission/
plugin-off/03-pods.json) against ``serve --route-pods-to-scheduler``; here the same
request goes through the production app, and the page's response line, decoded patch
and resulting pod fields must be exactly what comes back.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import yaml

from extender.admission import RoutingConfig
from extender.http.admission import POD_PATH
from tests.http.test_admission_listener import _fenced_block
from tests.support.apps import AppFactory, ClientFactory
from tests.support.paths import ADMISSION_CLUSTER, ADMISSION_DATA, REPO

PAGE = REPO / "docs" / "pod-webhook.md"
REQUEST = ADMISSION_DATA / "plugin-off" / "03-pods.json"


async def test_transcript_is_what_the_webhook_answers(
    aiohttp_client: ClientFactory, make_app: AppFactory
) -> None:
    page = PAGE.read_text(encoding="utf-8")
    console = _fenced_block(page, "```console\n$ .venv/bin/runtimeclass-extender serve").splitlines()
    # The flags on the page are the ones the test's app is built with.
    assert (
        "--route-pods-to-scheduler runtimeclass-scheduler --namespace runtimeclass-extender &" in console[1]
    )
    assert f"--cluster-file {ADMISSION_CLUSTER.relative_to(REPO)}" in console[0]
    assert f"@{REQUEST.relative_to(REPO)} http://127.0.0.1:18931{POD_PATH}" in console[3]

    client = await aiohttp_client(
        make_app(
            cluster_file=ADMISSION_CLUSTER,
            routing=RoutingConfig("runtimeclass-scheduler", own_namespace="runtimeclass-extender"),
        )
    )
    response = await client.post(
        POD_PATH, data=REQUEST.read_bytes(), headers={"Content-Type": "application/json"}
    )
    assert response.status == 200
    answer = await response.read()
    assert console[4] == answer.decode()

    patch = json.loads(base64.b64decode(json.loads(answer)["response"]["patch"]))
    assert json.loads(_fenced_block(page, "```json\n[")) == patch
    request: dict[str, Any] = json.loads(REQUEST.read_bytes())["request"]
    stored = jsonpatch.apply_patch(copy.deepcopy(request["object"]), patch)
    shown = yaml.safe_load(_fenced_block(page, "```yaml\nspec:\n  runtimeClassName: kata"))["spec"]
    assert {key: stored["spec"][key] for key in shown} == shown

    # The manifest on the page is the pod the request was made for.
    manifest = yaml.safe_load(_fenced_block(page, "```yaml\n# kata-pod.yaml"))
    pod = request["object"]
    assert manifest["metadata"] == {
        "name": pod["metadata"]["name"],
        "namespace": pod["metadata"]["namespace"],
    }
    assert manifest["spec"]["runtimeClassName"] == pod["spec"]["runtimeClassName"]
    assert "schedulerName" not in manifest["spec"]
    (container,) = manifest["spec"]["containers"]
    (sent,) = pod["spec"]["containers"]
    assert (container["name"], container["image"], container["resources"]) == (
        sent["name"],
        sent["image"],
        sent["resources"],
    )
