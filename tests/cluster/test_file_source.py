"""The cluster file: Nodes and RuntimeClasses as ``kubectl get nodes,runtimeclasses``
prints them (``-o yaml`` or ``-o json``): a ``List``, a typed list (``NodeList``,
``RuntimeClassList``, whose items carry no ``kind``), or a multi-document YAML stream.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml

from extender.cluster.file_source import MAX_MISTAKES_SHOWN, ClusterFileError, load_cluster_file
from extender.cluster.state import ClusterState
from policies.objects import NodeView, RuntimeClassView, RuntimeHandler, Taint, Toleration
from tests.support.paths import REPO

LIST_YAML = """\
apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: gvisor-1
    resourceVersion: "210"
    labels:
      runtime/gvisor: "true"
    managedFields:
    - manager: kubectl
      operation: Update
  spec:
    taints:
    - key: sandbox
      value: "true"
      effect: NoSchedule
    - key: dedicated
      effect: PreferNoSchedule
  status:
    capacity: {cpu: "8"}
    runtimeHandlers:
    - name: runsc
      features: {recursiveReadOnlyMounts: true, userNamespaces: false}
    - name: ""
- apiVersion: v1
  kind: Node
  metadata:
    name: plain-1
  spec: {}
- apiVersion: node.k8s.io/v1
  kind: RuntimeClass
  metadata:
    name: gvisor
    resourceVersion: "7"
  handler: runsc
  scheduling:
    nodeSelector:
      runtime/gvisor: "true"
    tolerations:
    - key: sandbox
      operator: Equal
      value: "true"
      effect: NoSchedule
- apiVersion: node.k8s.io/v1
  kind: RuntimeClass
  metadata:
    name: runc
  handler: runc
"""

EXPECTED_NODES = {
    "gvisor-1": NodeView(
        name="gvisor-1",
        labels=MappingProxyType({"runtime/gvisor": "true"}),
        taints=(Taint("sandbox", "NoSchedule", "true"), Taint("dedicated", "PreferNoSchedule", "")),
        runtime_handlers=(
            RuntimeHandler("runsc", frozenset({"recursiveReadOnlyMounts"})),
            RuntimeHandler("", frozenset()),
        ),
        resource_version="210",
    ),
    # No status.runtimeHandlers at all: None (does not report), not () (reports none).
    "plain-1": NodeView(name="plain-1"),
}
EXPECTED_CLASSES = {
    "gvisor": RuntimeClassView(
        name="gvisor",
        handler="runsc",
        node_selector=MappingProxyType({"runtime/gvisor": "true"}),
        tolerations=(Toleration("sandbox", "Equal", "true", "NoSchedule"),),
        resource_version="7",
    ),
    "runc": RuntimeClassView(name="runc", handler="runc"),
}


def load(tmp_path: Path, text: str, name: str = "cluster.yaml") -> ClusterState:
    path = tmp_path / name
    path.write_text(text)
    return load_cluster_file(path)


def snapshot(state: ClusterState) -> tuple[dict[str, NodeView], dict[str, RuntimeClassView]]:
    return dict(state.nodes.items()), dict(state.runtime_classes.items())


def test_list(tmp_path: Path) -> None:
    state = load(tmp_path, LIST_YAML)
    assert snapshot(state) == (EXPECTED_NODES, EXPECTED_CLASSES)
    assert state.synced
    assert state.unsynced_kinds() == []


def test_json_list(tmp_path: Path) -> None:
    as_json = json.dumps(yaml.safe_load(LIST_YAML), indent=4)  # what kubectl -o json prints
    assert snapshot(load(tmp_path, as_json, "cluster.json")) == (EXPECTED_NODES, EXPECTED_CLASSES)


def test_typed_lists_in_a_multi_document_stream(tmp_path: Path) -> None:
    text = """\
---
apiVersion: v1
kind: NodeList
items:
- metadata:
    name: gvisor-1
    resourceVersion: "210"
    labels: {runtime/gvisor: "true"}
  spec:
    taints:
    - {key: sandbox, value: "true", effect: NoSchedule}
    - {key: dedicated, effect: PreferNoSchedule}
  status:
    runtimeHandlers:
    - name: runsc
      features: {recursiveReadOnlyMounts: true, userNamespaces: false}
    - name: ""
---
apiVersion: node.k8s.io/v1
kind: RuntimeClassList
items:
- metadata: {name: gvisor, resourceVersion: "7"}
  handler: runsc
  scheduling:
    nodeSelector: {runtime/gvisor: "true"}
    tolerations: [{key: sandbox, operator: Equal, value: "true", effect: NoSchedule}]
---
# a single object between lists
apiVersion: v1
kind: Node
metadata: {name: plain-1}
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: runc}
handler: runc
---
"""
    assert snapshot(load(tmp_path, text)) == (EXPECTED_NODES, EXPECTED_CLASSES)


def test_empty_list_is_synced_and_empty(tmp_path: Path) -> None:
    state = load(tmp_path, "apiVersion: v1\nkind: List\nitems: []\n")
    assert snapshot(state) == ({}, {})
    assert state.synced


def test_load_into_existing_state_replaces_contents(tmp_path: Path) -> None:
    state = ClusterState()
    assert state.unsynced_kinds() == ["nodes", "runtimeclasses"]
    path = tmp_path / "c.yaml"
    path.write_text(LIST_YAML)
    assert load_cluster_file(path, state) is state
    assert snapshot(state) == (EXPECTED_NODES, EXPECTED_CLASSES)


NODE_A = "{kind: Node, metadata: {name: a}}"

BAD_FILES = [
    pytest.param(
        "kind: [",
        "not valid YAML (line 1, column 8: expected the node content, but found '<stream end>')",
        id="not-yaml",
    ),
    pytest.param("just a string\n", "document 0: expected a Kubernetes object or List", id="scalar-document"),
    pytest.param(
        f"---\n{NODE_A}\n---\n- a\n", "document 1: expected a Kubernetes object or List", id="list-document"
    ),
    pytest.param("kind: List\nitems: {a: 1}\n", "document 0: items must be a list", id="items-not-a-list"),
    pytest.param(
        "kind: List\nitems: [1]\n", "document 0, item 0: expected an object", id="item-not-an-object"
    ),
    pytest.param(
        f"kind: List\nitems:\n- {NODE_A}\n- {NODE_A}\n",
        'document 0, item 1: node/a: metadata.name: Duplicate value: "a" (a Node of this name is at document 0, item 0)',
        id="duplicate-node",
    ),
    pytest.param(
        f"{NODE_A}\n---\nkind: NodeList\nitems: [{{metadata: {{name: a}}}}]\n",
        'document 1, item 0: node/a: metadata.name: Duplicate value: "a" (a Node of this name is at document 0)',
        id="duplicate-node-across-documents",
    ),
    pytest.param(
        "kind: RuntimeClassList\nitems:\n- {metadata: {name: r}, handler: h}\n- {metadata: {name: r}, handler: h2}\n",
        'document 0, item 1: runtimeclass/r: metadata.name: Duplicate value: "r" '
        "(a RuntimeClass of this name is at document 0, item 0)",
        id="duplicate-runtimeclass",
    ),
    pytest.param(
        f"{NODE_A}\n---\nkind: Pod\nmetadata: {{name: p}}\n",
        'document 1: pod/p: kind: Unsupported value: "Pod": supported values: "Node", "RuntimeClass" '
        "(Pods are read by audit alone)",
        id="unknown-kind",
    ),
    pytest.param(
        "metadata: {name: a}\n",
        'document 0: object/a: kind: Required value: one of "Node", "RuntimeClass"',
        id="no-kind",
    ),
    pytest.param(
        "kind: PodList\nitems: [{metadata: {name: p}}]\n",
        'document 0, item 0: pod/p: kind: Unsupported value: "Pod": supported values: "Node", "RuntimeClass" '
        "(Pods are read by audit alone)",
        id="unknown-list-kind",
    ),
    pytest.param(
        "kind: Node\nmetadata: {name: a}\nspec:\n  taints:\n  - {key: k, value: v}\n",
        "document 0: node/a: spec.taints[0].effect: Required value",
        id="taint-without-effect",
    ),
    pytest.param(
        "kind: Node\nmetadata: {name: a}\nspec:\n  taints:\n  - {value: v, effect: NoSchedule}\n",
        "document 0: node/a: spec.taints[0].key: Required value",
        id="taint-without-key",
    ),
    pytest.param(
        "kind: NodeList\nitems:\n- metadata: {name: a}\n- metadata:\n    name: b\n    labels: {ready: true}\n",
        "document 0, item 1: node/b: metadata.labels[ready]: Invalid value: true: must be a string",
        id="label-value-not-a-string",
    ),
    pytest.param(
        "kind: Node\nmetadata: {}\n",
        "document 0: node: metadata.name: Required value: name or generateName is required",
        id="node-without-name",
    ),
    pytest.param(
        "kind: Node\nspec: {}\n",
        "document 0: node: metadata.name: Required value: name or generateName is required",
        id="node-without-metadata",
    ),
    pytest.param(
        "kind: RuntimeClass\nmetadata: {name: r}\n",
        "document 0: runtimeclass/r: handler: Required value",
        id="runtimeclass-without-handler",
    ),
    pytest.param(
        "kind: RuntimeClass\nmetadata: {name: r}\nhandler: h\nscheduling: {nodeSelector: {zone: 1}}\n",
        "document 0: runtimeclass/r: scheduling.nodeSelector[zone]: Invalid value: 1: must be a string",
        id="selector-value-not-a-string",
    ),
    pytest.param(
        "kind: RuntimeClass\nmetadata: {name: r}\nhandler: h\nscheduling: {tolerations: {key: k}}\n",
        'document 0: runtimeclass/r: scheduling.tolerations: Invalid value: {"key":"k"}: must be a list',
        id="tolerations-not-a-list",
    ),
    pytest.param(
        "kind: RuntimeClass\nmetadata: {name: ''}\nhandler: h\n",
        "document 0: runtimeclass: metadata.name: Required value: name or generateName is required",
        id="runtimeclass-without-name",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_bad_files_name_the_file_and_item(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(path)
    # One mistake, one line, in check's words: the object, the field, what is wrong.
    assert str(caught.value) == f"{path}: {message}"


SIX_MISTAKES = """\
apiVersion: v1
kind: List
items:
- kind: Node
  metadata: {name: n1, labels: {ready: true}}
- kind: Node
  metadata: {name: n2}
  spec:
    taints: [{key: k, effect: Bogus}]
- {kind: Node, metadata: {name: n1}}
- {kind: RuntimeClass, metadata: {name: r1}, handler: 5}
- kind: RuntimeClass
  metadata: {name: r2}
  handler: runsc
  scheduling: {nodeselector: {a: b}, tolerations: [{operator: exists}]}
- {kind: ConfigMap, metadata: {name: c}}
"""


def test_every_mistake_of_a_file_at_once(tmp_path: Path) -> None:
    """Six mistakes, six lines: each names the item, the object and the field in plain
    words (no pydantic "Input should be a valid string"), and the walk goes on past each."""
    path = tmp_path / "cluster.yaml"
    path.write_text(SIX_MISTAKES)
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(path)
    assert str(caught.value).splitlines() == [
        f"{path}: document 0, item 0: node/n1: metadata.labels[ready]: Invalid value: true: must be a string",
        f'{path}: document 0, item 1: node/n2: spec.taints[0].effect: Unsupported value: "Bogus": '
        'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
        f"{path}: document 0, item 3: runtimeclass/r1: handler: Invalid value: 5: must be a string",
        f"{path}: document 0, item 4: runtimeclass/r2: scheduling.nodeselector: unknown field "
        "(did you mean nodeSelector?)",
        f"{path}: document 0, item 4: runtimeclass/r2: scheduling.tolerations[0].operator: Unsupported value: "
        '"exists": supported values: "Equal", "Exists", "Lt", "Gt" (did you mean "Exists"?)',
        f'{path}: document 0, item 5: configmap/c: kind: Unsupported value: "ConfigMap": supported values: '
        '"Node", "RuntimeClass"',
    ]
    assert "Input should" not in str(caught.value)
    assert caught.value.more == 0


def test_a_duplicate_is_a_mistake_once_its_first_is_good(tmp_path: Path) -> None:
    """The first n1 above was refused, so the second is no duplicate: a duplicate names
    where the object it repeats was read."""
    path = tmp_path / "cluster.yaml"
    path.write_text(f"kind: List\nitems:\n- {NODE_A}\n- {NODE_A}\n- {NODE_A}\n")
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(path)
    assert [line.removeprefix(f"{path}: ") for line in str(caught.value).splitlines()] == [
        f'document 0, item {i}: node/a: metadata.name: Duplicate value: "a" (a Node of this name is at '
        "document 0, item 0)"
        for i in (1, 2)
    ]


def test_the_mistakes_shown_are_bounded(tmp_path: Path) -> None:
    items = "".join(f"- {{kind: Node, metadata: {{name: n{i}, labels: {{a: {i}}}}}}}\n" for i in range(50))
    path = tmp_path / "cluster.yaml"
    path.write_text(f"kind: List\nitems:\n{items}")
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(path)
    lines = str(caught.value).splitlines()
    assert len(lines) == MAX_MISTAKES_SHOWN + 1
    assert (
        lines[0]
        == f"{path}: document 0, item 0: node/n0: metadata.labels[a]: Invalid value: 0: must be a string"
    )
    assert lines[-1] == f"{path}: and {50 - MAX_MISTAKES_SHOWN} more mistakes"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(tmp_path / "absent.yaml")
    assert str(caught.value) == f"{tmp_path / 'absent.yaml'}: no such file or directory"


def test_a_directory_is_no_cluster_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(tmp_path)
    assert str(caught.value) == f"{tmp_path}: is a directory: give a file"


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_bytes(b"kind: Node\nmetadata: {name: \xff}\n")
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(path)
    assert str(caught.value) == f"{path}: cannot read: not UTF-8 text (invalid start byte at byte 28)"


def test_example_cluster() -> None:
    state = load_cluster_file(REPO / "deploy" / "examples" / "cluster.yaml")
    nodes, classes = snapshot(state)
    # At least what docs/reference.md ("Cluster file") promises (the example may grow more nodes and classes).
    assert {"gvisor-1", "gvisor-2", "kata-1", "runc-1", "runc-2", "win-1"} <= set(nodes)
    assert {"gvisor", "kata-containers", "runc", "sandboxed", "windows-hyperv"} <= set(classes)
    assert state.synced
    # docs/reference.md describes these: gVisor nodes labelled and tainted, a tainted Windows
    # node, and `sandboxed` an alias of `gvisor` (same handler and rules).
    sandbox_taint = Taint("sandbox.gke.io/runtime", "NoSchedule", "gvisor")
    assert nodes["gvisor-1"].taints == nodes["gvisor-2"].taints == (sandbox_taint,)
    assert nodes["gvisor-1"].labels["sandbox.gke.io/runtime"] == "gvisor"
    assert nodes["win-1"].taints == (Taint("os", "NoSchedule", "windows"),)
    assert nodes["runc-1"].taints == nodes["kata-1"].taints == ()
    gvisor, sandboxed = classes["gvisor"], classes["sandboxed"]
    assert (sandboxed.handler, sandboxed.node_selector, sandboxed.tolerations) == (
        gvisor.handler,
        gvisor.node_selector,
        gvisor.tolerations,
    )
    assert gvisor.tolerations == (Toleration("sandbox.gke.io/runtime", "Equal", "gvisor", "NoSchedule"),)
    assert dict(classes["kata-containers"].node_selector) == {"katacontainers.io/kata-runtime": "true"}
