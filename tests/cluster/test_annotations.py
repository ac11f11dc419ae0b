"""The node-selector-term annotation, from RuntimeClass API objects to ``POST /filter``.

The annotation ``runtimeclass-extender.dev/node-selector-term`` holds one core/v1
NodeSelectorTerm (KEP-585 alternative "NodeSelectorTerm"), evaluated like required node
affinity (staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/
nodeaffinity.go) and ANDed with ``scheduling.nodeSelector``, the way
``RequiredNodeAffinity.Match`` ANDs a pod's nodeSelector with its affinity. A malformed
annotation fails the class closed on every node and is logged once per revision.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from pytest_aiohttp import AiohttpClient

from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.file_source import load_cluster_file
from extender.cluster.objects import runtime_class_from_api
from extender.filtering import decide
from extender.policy_file import load_policy
from extender.protocol import ExtenderArgs
from policies.node_affinity import EMPTY_TERM_DETAIL, NODE_SELECTOR_TERM_ANNOTATION
from policies.objects import PodView
from policies.objects import SelectorRequirement as Req
from policies.predicates import RuntimeClassNodeSelector
from tests.support.docs import page
from tests.support.paths import REPO

EXAMPLES = REPO / "deploy" / "examples"
EXAMPLE_CLUSTER = EXAMPLES / "cluster.yaml"
EXAMPLE_NODES = ["runc-1", "runc-2", "gvisor-1", "gvisor-2", "kata-1", "win-1", "gpu-1"]
MISMATCH = "node(s) didn't match RuntimeClass"
UNTOLERATED = "node(s) had untolerated taint(s)"
JSON = {"Content-Type": "application/json"}


def runtime_class(
    name: str = "fast",
    annotation: str | None = None,
    *,
    resource_version: str = "7",
    node_selector: dict[str, str] | None = None,
    handler: str = "runc",
) -> dict[str, Any]:
    """A RuntimeClass as the API serves it."""
    metadata: dict[str, Any] = {"name": name, "resourceVersion": resource_version}
    if annotation is not None:
        metadata["annotations"] = {
            NODE_SELECTOR_TERM_ANNOTATION: annotation,
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        }
    obj: dict[str, Any] = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": metadata}
    obj["handler"] = handler
    if node_selector is not None:
        obj["scheduling"] = {"nodeSelector": node_selector}
    return obj


# --- parsing the annotation of an API object ------------------------------------------

IN_ZONES = (Req("topology.kubernetes.io/zone", "In", ("a", "b")), Req("gpu.count", "Gt", ("4",)))
IN_ZONES_JSON = json.dumps(
    {
        "matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]},
            {"key": "gpu.count", "operator": "Gt", "values": ["4"]},
        ]
    }
)
IN_ZONES_YAML = """
matchExpressions:
- key: topology.kubernetes.io/zone
  operator: In
  values: [a, b]
- {key: gpu.count, operator: Gt, values: ["4"]}
"""
IN_ZONES_FLOW = '{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [a, b]}, {key: gpu.count, operator: Gt, values: ["4"]}]}'


@pytest.mark.parametrize(
    "text", [IN_ZONES_JSON, IN_ZONES_YAML, IN_ZONES_FLOW], ids=["json", "yaml", "yaml-flow"]
)
def test_json_and_yaml_give_the_same_term(text: str) -> None:
    view = runtime_class_from_api(runtime_class(annotation=text))
    assert view.match_expressions == IN_ZONES
    assert view.match_fields == ()
    assert view.selector_error is None


def test_no_annotation_means_no_term() -> None:
    view = runtime_class_from_api(runtime_class())
    assert view.match_expressions is None and view.selector_error is None
    # Other annotations are not ours.
    other = runtime_class()
    other["metadata"]["annotations"] = {"example.com/node-selector-term": "not: [valid"}
    assert runtime_class_from_api(other).selector_error is None


def test_match_fields_are_kept_apart() -> None:
    text = '{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-1"]}]}'
    view = runtime_class_from_api(runtime_class(annotation=text))
    assert view.match_expressions == ()
    assert view.match_fields == (Req("metadata.name", "NotIn", ("gpu-1",)),)


# --- malformed: fail closed on every node ---------------------------------------------

# (annotation, fragment of the error the detail carries)
MALFORMED: list[tuple[str, str]] = [
    ("", "the annotation is empty"),
    ("   \n", "the annotation is empty"),
    ("{matchExpressions: [}", "not valid JSON or YAML"),
    ('{"matchExpressions": [', "not valid JSON or YAML"),
    ("- key: a\n  operator: Exists", "expected a NodeSelectorTerm object"),
    ("null", "expected a NodeSelectorTerm object"),
    ("kubernetes.io/os in (linux)", "expected a NodeSelectorTerm object"),
    ("nodeSelectorTerms:\n- matchExpressions: []", "unknown field(s) nodeSelectorTerms"),
    ("matchExpressions:\n- {key: a, operator: Equal, values: [b]}", 'Unsupported value: "Equal"'),
    ("matchExpressions:\n- {key: a, operator: In}", "values set can't be empty"),
    ("matchExpressions:\n- {key: a, operator: Exists, values: [b]}", "values set must be empty"),
    ('matchExpressions:\n- {key: a, operator: Gt, values: ["1", "2"]}', "exactly one value is required"),
    ("matchExpressions:\n- {key: a, operator: Lt, values: [ten]}", "the value must be an integer"),
    ("matchExpressions:\n- {key: a, operator: Gt, values: [4]}", 'must be a string (quote it: "4")'),
    ("matchExpressions:\n- {key: 'bad key', operator: Exists}", 'key: Invalid value: "bad key"'),
    ("matchFields:\n- {key: metadata.labels, operator: In, values: [x]}", "not a valid field selector key"),
]


@pytest.mark.parametrize(("annotation", "fragment"), MALFORMED)
def test_malformed_annotation_fails_closed_on_every_node(annotation: str, fragment: str) -> None:
    view = runtime_class_from_api(runtime_class("broken", annotation, node_selector={}))
    assert view.selector_error is not None
    assert view.selector_error.startswith(f"annotation {NODE_SELECTOR_TERM_ANNOTATION}: ")
    assert fragment in view.selector_error
    state = load_cluster_file(EXAMPLE_CLUSTER)
    pod = PodView(name="p", runtime_class_name="broken")
    verdicts = {name: RuntimeClassNodeSelector().check(pod, view, n) for name, n in state.nodes.items()}
    assert set(verdicts) == set(EXAMPLE_NODES)
    for verdict in verdicts.values():
        assert not verdict.fits
        assert verdict.unresolvable
        assert verdict.reason == 'RuntimeClass "broken" has an invalid node selector annotation'
        assert verdict.detail == view.selector_error


def _selector_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "extender.cluster" and "node selector annotation" in r.message
    ]


def test_malformed_annotation_is_logged_once_per_revision(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="extender.cluster")
    errors = SelectorErrorLog()
    bad = "matchExpressions:\n- {key: a, operator: Gt, values: [x]}"
    for _ in range(3):  # a re-list or resync delivers the same revision again
        runtime_class_from_api(runtime_class("broken", bad, resource_version="7"), selector_errors=errors)
    records = _selector_warnings(caplog)
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.WARNING
    assert record.__dict__["runtimeclass"] == "broken"
    assert record.__dict__["resource_version"] == "7"
    assert "the value must be an integer" in record.__dict__["error"]

    runtime_class_from_api(
        runtime_class("broken", bad, resource_version="8"), selector_errors=errors
    )  # edited: new revision
    runtime_class_from_api(
        runtime_class("other", bad, resource_version="7"), selector_errors=errors
    )  # another class
    assert len(_selector_warnings(caplog)) == 3

    runtime_class_from_api(
        runtime_class("fixed", IN_ZONES_JSON, resource_version="9"), selector_errors=errors
    )
    runtime_class_from_api(runtime_class("plain", None, resource_version="9"), selector_errors=errors)
    assert len(_selector_warnings(caplog)) == 3


def test_without_resource_version_an_edited_annotation_logs_again(caplog: pytest.LogCaptureFixture) -> None:
    """Cluster files often carry no resourceVersion; the annotation text tells revisions apart."""
    caplog.set_level(logging.WARNING, logger="extender.cluster")
    errors = SelectorErrorLog()
    runtime_class_from_api(
        runtime_class("broken", "matchExpressions: 3", resource_version=""), selector_errors=errors
    )
    runtime_class_from_api(
        runtime_class("broken", "matchExpressions: 3", resource_version=""), selector_errors=errors
    )
    runtime_class_from_api(
        runtime_class("broken", "matchExpressions: 4", resource_version=""), selector_errors=errors
    )
    assert len(_selector_warnings(caplog)) == 2


def test_error_log_is_bounded() -> None:
    seen = SelectorErrorLog(max_entries=2, logger=logging.getLogger("test.selector"))
    report = {"annotation": "x", "error": "e"}
    assert seen.report(name="a", resource_version="1", **report)
    assert seen.report(name="b", resource_version="1", **report)
    assert not seen.report(name="a", resource_version="1", **report)  # a is now the most recent
    assert seen.report(name="c", resource_version="1", **report)  # evicts b, the least recent
    assert not seen.report(name="a", resource_version="1", **report)
    assert seen.report(name="b", resource_version="1", **report)  # forgotten, so logged again


# --- ANDed with scheduling.nodeSelector ---------------------------------------------


def test_term_is_anded_with_the_node_selector() -> None:
    state = load_cluster_file(EXAMPLE_CLUSTER)
    view = runtime_class_from_api(
        runtime_class(
            "gvisor-large",
            "matchExpressions:\n- {key: nvidia.com/gpu.count, operator: Gt, values: ['2']}\n"
            "- {key: kubernetes.io/os, operator: In, values: [linux]}",
            node_selector={"sandbox.gke.io/runtime": "gvisor"},
            handler="runsc",
        )
    )
    pod = PodView(name="p", runtime_class_name="gvisor-large")
    verdicts = {name: RuntimeClassNodeSelector().check(pod, view, n) for name, n in state.nodes.items()}
    assert {name for name, v in verdicts.items() if v.fits} == {"gpu-1"}
    assert {v.reason for v in verdicts.values() if not v.fits} == {MISMATCH}
    # Map only (gvisor-1 has the sandbox label but no GPUs), both, and term only.
    assert verdicts["gvisor-1"].detail == "label nvidia.com/gpu.count missing (Gt 2)"
    assert verdicts["runc-1"].detail == (
        "missing label sandbox.gke.io/runtime=gvisor; label nvidia.com/gpu.count missing (Gt 2)"
    )
    assert verdicts["win-1"].detail == (
        "missing label sandbox.gke.io/runtime=gvisor; label nvidia.com/gpu.count missing (Gt 2); "
        "label kubernetes.io/os=windows is not In [linux]"
    )


def test_empty_term_matches_no_node() -> None:
    """An empty NodeSelectorTerm matches no objects in node affinity; so here too."""
    state = load_cluster_file(EXAMPLE_CLUSTER)
    view = runtime_class_from_api(runtime_class("nothing", "{}"))
    assert view.selector_error is None and view.match_expressions == ()
    pod = PodView(name="p", runtime_class_name="nothing")
    for n in state.nodes.values():
        verdict = RuntimeClassNodeSelector().check(pod, view, n)
        assert (verdict.fits, verdict.reason, verdict.detail) == (False, MISMATCH, EMPTY_TERM_DETAIL)


def test_example_cluster_class_uses_the_annotation() -> None:
    state = load_cluster_file(EXAMPLE_CLUSTER)
    view = state.runtime_classes.get("gvisor-gpu")
    assert view is not None
    assert view.match_expressions == (Req("nvidia.com/gpu.count", "Gt", ("0",)),)
    assert dict(view.node_selector) == {"sandbox.gke.io/runtime": "gvisor"}


# --- through the real POST /filter ----------------------------------------------------


def _cluster_with(tmp_path: Path, *classes: dict[str, Any]) -> Path:
    """The example cluster plus extra RuntimeClasses, as a multi-document YAML file."""
    path = tmp_path / "cluster.yaml"
    text = EXAMPLE_CLUSTER.read_text()
    path.write_text(text + "".join("---\n" + yaml.safe_dump(c) for c in classes))
    return path


def _pod(runtime_class_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "app", "namespace": "default", "uid": "u-1"},
        "spec": {"containers": [{"name": "app", "image": "app"}], "runtimeClassName": runtime_class_name},
    }


async def test_filter_fails_a_malformed_class_closed_on_every_node(
    aiohttp_client: AiohttpClient, make_app: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="extender.cluster")
    broken = runtime_class("broken", "matchExpressions:\n- {key: gpu, operator: Gt, values: [many]}")
    client = await aiohttp_client(make_app(cluster_file=_cluster_with(tmp_path, broken)))
    body = {"Pod": _pod("broken"), "Nodes": None, "NodeNames": EXAMPLE_NODES}
    for _ in range(2):
        response = await client.post("/filter", data=json.dumps(body), headers=JSON)
        assert response.status == 200
        answer = await response.json()
        assert answer["NodeNames"] == []
        assert answer["FailedNodes"] == {}
        assert answer["FailedAndUnresolvableNodes"] == dict.fromkeys(
            EXAMPLE_NODES, 'RuntimeClass "broken" has an invalid node selector annotation'
        )
        assert answer["Error"] == ""
    # Logged when the class was loaded, not on every filter call.
    assert len(_selector_warnings(caplog)) == 1


async def test_filter_example_request_for_the_annotated_class(
    aiohttp_client: AiohttpClient, make_app: Any
) -> None:
    """deploy/examples/filter-request-gvisor-gpu.json, as docs/predicates.md shows it."""
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    body = (EXAMPLES / "filter-request-gvisor-gpu.json").read_bytes()
    response = await client.post("/filter", data=body, headers=JSON)
    assert response.status == 200
    assert await response.json() == {
        "Nodes": None,
        "NodeNames": ["gpu-1"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": dict.fromkeys(
            ["runc-1", "runc-2", "gvisor-1", "gvisor-2", "kata-1", "win-1"], MISMATCH
        ),
        "Error": "",
    }


async def test_filter_full_nodes_mode_evaluates_match_fields(
    aiohttp_client: AiohttpClient, make_app: Any, tmp_path: Path
) -> None:
    """With full Node objects the node name comes from each item's metadata."""
    not_gpu = runtime_class(
        "no-gpu-node",
        '{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-1"]}],'
        ' "matchExpressions": [{"key": "kubernetes.io/os", "operator": "NotIn", "values": ["windows"]}]}',
    )
    client = await aiohttp_client(make_app(cluster_file=_cluster_with(tmp_path, not_gpu)))
    items = [i for i in yaml.safe_load(EXAMPLE_CLUSTER.read_text())["items"] if i["kind"] == "Node"]
    body = {"Pod": _pod("no-gpu-node"), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    response = await client.post("/filter", data=json.dumps(body), headers=JSON)
    answer = await response.json()
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["runc-1", "runc-2", "kata-1"]
    assert answer["FailedAndUnresolvableNodes"] == {
        "gvisor-1": UNTOLERATED,  # the term matches; the class does not tolerate the sandbox taint
        "gvisor-2": UNTOLERATED,
        "win-1": MISMATCH,
        "gpu-1": MISMATCH,
    }


def test_docs_example_answer_is_what_the_filter_command_prints() -> None:
    """docs/predicates.md's gvisor-gpu example: its command's answer, decided offline like the CLI."""
    readme = page("predicates.md")
    command = "runtimeclass-extender filter deploy/examples/filter-request-gvisor-gpu.json"
    after = readme[readme.index(command) :]
    shown = json.loads(after.split("```json\n", 1)[1].split("```", 1)[0])
    args = ExtenderArgs.model_validate_json((EXAMPLES / "filter-request-gvisor-gpu.json").read_bytes())
    decision = decide(args, load_cluster_file(EXAMPLE_CLUSTER), load_policy())
    assert asdict(decision.result) == shown
