"""The ``check`` command: RuntimeClass manifests judged before they reach a cluster.

Every case of the webhook's own tests (tests/admission/test_runtimeclasses.py: each bad
annotation it denies, each warning it gives) goes through ``check`` as a manifest file,
and must come out exactly as the webhook answers it: the same denial message, the same warnings.
Then the inputs (files, directories, standard input, Lists, other kinds), the exit
statuses, ``-o json|yaml``, a live cluster, and the kubectl plugin form.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.admission import MAX_WARNING_CHARS, review
from extender.cli import main
from extender.cluster.file_source import load_cluster_file
from extender.tools.check import NO_NODES_NOTE, admission_review
from extender.tools.commands import kubectl_main
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from policies.objects import NodeView
from tests.admission.test_runtimeclasses import BAD_ANNOTATIONS, WARNING_CASES
from tests.cluster.test_validation import REFUSED
from tests.support.admission import runtime_class
from tests.support.apiserver.objects import make_node
from tests.support.apiserver.server import CONFIGMAPS, NODES, FakeApiServer
from tests.support.autoscaler import status_configmap
from tests.support.manifests import render
from tests.support.paths import EXAMPLE_CLUSTER, EXAMPLES, REPO

ANNOTATION_PATH = f"metadata.annotations[{NODE_SELECTOR_TERM_ANNOTATION}]"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    status = main(["check", *argv])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def write(path: Path, *objects: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


def node_object(view: NodeView) -> dict[str, Any]:
    """A NodeView of the webhook's tests as the API object a cluster file holds."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": view.name, "labels": dict(view.labels)},
        "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in view.taints]},
    }
    if view.runtime_handlers is not None:
        obj["status"] = {"runtimeHandlers": [{"name": h.name} for h in view.runtime_handlers]}
    return obj


def cluster_file(tmp_path: Path, cluster: str | tuple[NodeView, ...]) -> Path:
    if cluster == "example":
        return EXAMPLE_CLUSTER
    return write(
        tmp_path / "cluster.yaml",
        {"apiVersion": "v1", "kind": "List", "items": [node_object(n) for n in cluster]},
    )


def whole_of(whole: str, shortened: str) -> bool:
    """Whether ``whole`` is the webhook's warning ``shortened`` before the webhook cut its
    values to 120 characters: the same text where nothing was cut, and each piece between
    the cuts ("…") in order where something was. Never cut itself."""
    assert "…" not in whole, whole
    if "…" not in shortened:
        assert whole == shortened
        return True
    at = 0
    for piece in shortened.split("…"):
        found = whole.find(piece, at)
        assert found >= at, (piece, whole)
        at = found + len(piece)
    assert len(whole) > len(shortened)
    return True


# --- the webhook's cases, through check ------------------------------------------------

# The API server itself refuses this one (handler "" is not a DNS label), before any
# webhook: check says so as bad input.
REFUSED_BY_THE_API_SERVER = {"default-handler-entry-is-not-a-name"}


@pytest.mark.parametrize(("cluster", "obj", "warnings"), WARNING_CASES)
def test_every_webhook_warning(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    cluster: str | tuple[NodeView, ...],
    obj: dict[str, Any],
    warnings: list[str],
) -> None:
    manifest = write(tmp_path / "rc.yaml", obj)
    name = obj["metadata"]["name"]
    status, out, err = run(capsys, str(manifest), "--cluster-file", str(cluster_file(tmp_path, cluster)))
    if request.node.callspec.id in REFUSED_BY_THE_API_SERVER:
        assert status == 2
        assert err == [
            f'error: {manifest}: document 0: runtimeclass/{name}: handler: Invalid value: "": '
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character"
        ]
        return
    # The webhook's warnings, printed whole.
    assert all(line.startswith("Warning: ") for line in err)
    for line, warning in zip(err, warnings, strict=True):
        assert whole_of(line.removeprefix("Warning: "), warning)
    assert out == [f"runtimeclass/{name} {'warned' if warnings else 'valid'}"]
    assert status == 0
    # Warnings alone never fail the check, unless asked to.
    status, _, _ = run(
        capsys, str(manifest), "--cluster-file", str(cluster_file(tmp_path, cluster)), "--warnings-as-errors"
    )
    assert status == (1 if warnings else 0)


@pytest.mark.parametrize(("annotation", "parser_message"), BAD_ANNOTATIONS)
@pytest.mark.parametrize("with_nodes", [True, False], ids=["with-nodes", "without-nodes"])
def test_every_bad_annotation_is_denied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], annotation: str, parser_message: str, with_nodes: bool
) -> None:
    manifest = write(tmp_path / "rc.yaml", runtime_class(annotation=annotation))
    nodes = ["--cluster-file", str(EXAMPLE_CLUSTER)] if with_nodes else []
    status, out, err = run(capsys, str(manifest), *nodes)
    assert status == 1
    assert out == []
    denial = f"error: {manifest}: document 0: runtimeclass/sandbox: {ANNOTATION_PATH}: {parser_message}"
    assert err == ([] if with_nodes else [NO_NODES_NOTE]) + [denial]


def test_warnings_are_printed_whole_where_the_webhook_cuts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    selector = {"example.com/a-rather-long-label-key": "a-rather-long-label-value", "pool": "p" * 60}
    obj = runtime_class("long-selector", node_selector=selector)
    manifest = write(tmp_path / "rc.yaml", obj)
    status, out, err = run(capsys, str(manifest), "--cluster-file", str(EXAMPLE_CLUSTER))
    whole = (
        "RuntimeClass long-selector: no node matches scheduling.nodeSelector "
        f"{{example.com/a-rather-long-label-key=a-rather-long-label-value,pool={'p' * 60}}}; "
        "its pods will stay pending"
    )
    assert (status, out, err) == (0, ["runtimeclass/long-selector warned"], [f"Warning: {whole}"])
    # The webhook itself still answers within the API server's 120 characters.
    outcome = review(admission_review(obj, uid="u"), load_cluster_file(EXAMPLE_CLUSTER))
    (shortened,) = outcome.warnings
    assert len(shortened) <= MAX_WARNING_CHARS < len(whole) and "…" in shortened
    assert whole_of(whole, shortened)


def test_without_nodes_only_the_node_independent_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A selector no node matches: a warning with nodes, nothing without them.
    manifest = write(
        tmp_path / "rc.yaml",
        runtime_class("a", node_selector={"pool": "none"}),
        runtime_class("b", node_selector={"pool": "none"}),
    )
    status, out, err = run(capsys, str(manifest))
    assert (status, out) == (0, ["runtimeclass/a valid", "runtimeclass/b valid"])
    assert err == [NO_NODES_NOTE]  # said once, not per class
    status, out, err = run(capsys, str(manifest), "--cluster-file", str(EXAMPLE_CLUSTER))
    assert status == 0 and len(err) == 2 and all(line.startswith("Warning: RuntimeClass ") for line in err)


# --- what the API server would refuse -------------------------------------------------

RC_REFUSED = [p for p in REFUSED if p.values[1].startswith("runtimeclass/")]


@pytest.mark.parametrize(("text", "message"), RC_REFUSED)
def test_what_the_api_server_refuses_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    manifest = tmp_path / "x.yaml"
    manifest.write_text(text)
    status, out, err = run(capsys, str(manifest), "--cluster-file", str(EXAMPLE_CLUSTER))
    assert (status, out) == (2, [])
    # A cluster file is refused in the same words, a line per problem.
    assert err == [f"error: {manifest}: document 0: {line}" for line in message.splitlines()]


def test_every_problem_of_a_class_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(
        tmp_path / "x.yaml",
        {
            **runtime_class("gvisor"),
            "nodeSelector": {"a": "b"},
            "scheduling": {"tolerations": [{"key": "k", "operator": "exists"}]},
        },
    )
    status, _, err = run(capsys, str(manifest))
    assert status == 2
    assert err[1:] == [
        f"error: {manifest}: document 0: runtimeclass/gvisor: nodeSelector: unknown field "
        "(did you mean scheduling.nodeSelector?)",
        f'error: {manifest}: document 0: runtimeclass/gvisor: scheduling.tolerations[0].operator: Unsupported value: "exists": '
        'supported values: "Equal", "Exists", "Lt", "Gt" (did you mean "Exists"?)',
    ]


def test_wrong_types_are_bad_input_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path / "x.yaml", {**runtime_class("gvisor"), "handler": 5})
    status, _, err = run(capsys, str(manifest))
    assert status == 2
    assert err[1:] == [
        f"error: {manifest}: document 0: runtimeclass/gvisor: handler: Invalid value: 5: must be a string"
    ]


def test_a_bad_quantity_hides_no_other_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One run lists every problem of the object, as the API server lists its field
    errors: a quantity that does not parse stopped the check before the unknown fields."""
    manifest = tmp_path / "unk.yaml"
    manifest.write_text(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: unk\n  labelz: {a: b}\n"
        "handler: runsc\nhandlr: runsc\noverhead:\n  podFixed: {cpu: lots, memory: -1Gi}\n  podfixed: {}\n"
        "scheduling:\n  nodeselector: {a: b}\n"
    )
    status, out, err = run(capsys, str(manifest))
    assert (status, out) == (2, [])
    at = f"error: {manifest}: document 0: runtimeclass/unk: "
    assert err[1:] == [
        at + "handlr: unknown field (did you mean handler?)",
        at + "metadata.labelz: unknown field (did you mean labels?)",
        at + "scheduling.nodeselector: unknown field (did you mean nodeSelector?)",
        at + "overhead.podfixed: unknown field (did you mean podFixed?)",
        at + 'overhead.podFixed[cpu]: Invalid value: "lots": not a quantity (e.g. 250m, 0.5, 160Mi, 1Gi)',
        at + 'overhead.podFixed[memory]: Invalid value: "-1Gi": must be greater than or equal to 0',
    ]


def test_wrong_types_hide_no_other_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "types.yaml"
    manifest.write_text(
        "kind: RuntimeClass\nmetadata: {name: types, labels: {1: a, b: 2}}\nhandler: 5\nhandlr: x\n"
        "overhead: {podFixed: {cpu: [1], memory: lots}}\n"
        "scheduling:\n  tolerations:\n  - {key: 1, operator: exists}\n  - just a string\n"
    )
    status, _, err = run(capsys, str(manifest))
    assert status == 2
    at = f"error: {manifest}: document 0: runtimeclass/types: "
    assert err[1:] == [
        # What the types refuse, each at its field...
        at + "metadata.labels[1]: Invalid value: 1: keys must be strings",
        at + "metadata.labels[b]: Invalid value: 2: must be a string",
        at + "handler: Invalid value: 5: must be a string",
        at + "scheduling.tolerations[0].key: Invalid value: 1: must be a string",
        at + 'scheduling.tolerations[1]: Invalid value: "just a string": must be an object',
        at + "overhead.podFixed[cpu]: Invalid value: [1]: must be a string or an integer",
        # ...then what validation refuses in the fields it could read.
        at + "handlr: unknown field (did you mean handler?)",
        at + 'scheduling.tolerations[0].operator: Unsupported value: "exists": supported values: "Equal", '
        '"Exists", "Lt", "Gt" (did you mean "Exists"?)',
        at + 'overhead.podFixed[memory]: Invalid value: "lots": not a quantity (e.g. 250m, 0.5, 160Mi, 1Gi)',
    ]


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        (
            "kind: RuntimeClass\nhandler: runsc\n",
            ["metadata.name: Required value: name or generateName is required"],
        ),
        (
            "kind: RuntimeClass\nmetadata: {labels: {a: b}}\n",
            ["metadata.name: Required value: name or generateName is required", "handler: Required value"],
        ),
        (
            "kind: RuntimeClass\nmetadata: just a name\nhandler: runsc\n",
            ['metadata: Invalid value: "just a name": must be an object'],
        ),
    ],
    ids=["no-metadata", "no-name-no-handler", "metadata-not-an-object"],
)
def test_required_fields_are_named_as_the_api_server_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problems: list[str]
) -> None:
    manifest = tmp_path / "x.yaml"
    manifest.write_text(text)
    status, _, err = run(capsys, str(manifest))
    assert status == 2
    assert err[1:] == [f"error: {manifest}: document 0: runtimeclass: {problem}" for problem in problems]


# --- inputs ---------------------------------------------------------------------------


def test_directories_recursively_lists_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(
        tmp_path / "a.yaml",
        runtime_class("one"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
    )
    write(
        tmp_path / "nested" / "deeper" / "b.yml",
        {"apiVersion": "v1", "kind": "List", "items": [runtime_class("two"), runtime_class("three")]},
    )
    # A typed list's items carry no kind, as kubectl prints them.
    items = [{k: v for k, v in runtime_class("four").items() if k not in ("kind", "apiVersion")}]
    (tmp_path / "nested" / "c.json").write_text(
        json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClassList", "items": items})
    )
    (tmp_path / "README.md").write_text("not: a manifest\n")
    (tmp_path / "notes.txt").write_text("kind: [\n")
    status, out, err = run(capsys, str(tmp_path))
    assert status == 0, err
    # Sorted paths: a.yaml, nested/c.json, nested/deeper/b.yml.
    assert out == [
        "runtimeclass/one valid",
        "runtimeclass/four valid",
        "runtimeclass/two valid",
        "runtimeclass/three valid",
    ]
    assert err == [NO_NODES_NOTE, "note: skipped 1 object that is not a RuntimeClass: 1 ConfigMap"]


def test_several_paths_in_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = write(tmp_path / "z.yaml", runtime_class("z"))
    second = write(tmp_path / "a.yaml", runtime_class("a"))
    status, out, _ = run(capsys, str(first), str(second))
    assert (status, out) == (0, ["runtimeclass/z valid", "runtimeclass/a valid"])


def test_standard_input(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    text = yaml.safe_dump_all([runtime_class("a"), runtime_class("bad", annotation="[]")])
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    status, out, err = run(capsys, "-")
    assert status == 1
    assert out == ["runtimeclass/a valid"]
    assert err[1].startswith(
        f"error: <stdin>: document 1: runtimeclass/bad: {ANNOTATION_PATH}: expected a NodeSelectorTerm"
    )


def test_stdin_twice_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "-", "-")
    assert status == 2
    assert err == ["runtimeclass-extender: error: standard input (-) can be read only once"]


def test_the_bundled_examples_are_valid(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        capsys, str(EXAMPLES / "runtimeclasses.yaml"), "--cluster-file", str(EXAMPLE_CLUSTER)
    )
    assert status == 0, err
    assert out == [f"runtimeclass/{n} valid" for n in ("runc", "gvisor", "kata-containers", "windows-hyperv")]
    status, out, err = run(capsys, str(EXAMPLES), "--cluster-file", str(EXAMPLE_CLUSTER))
    assert status == 0 and not [line for line in err if not line.startswith("note: ")]


BAD_FILES = [
    pytest.param(
        "kind: [\n",
        "not valid YAML (line 2, column 1: expected the node content, but found '<stream end>')",
        id="not-yaml",
    ),
    pytest.param("just a string\n", "document 0: expected a Kubernetes object or List", id="scalar"),
    pytest.param("kind: List\nitems: {a: 1}\n", "document 0: items must be a list", id="items-not-a-list"),
    pytest.param(
        "kind: List\nitems: [1]\n", "document 0, item 0: expected an object", id="item-not-an-object"
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_bad_files_are_bad_input_and_the_others_still_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    good = write(tmp_path / "good.yaml", runtime_class("ok"))
    status, out, err = run(capsys, str(bad), str(good))
    assert status == 2
    assert out == ["runtimeclass/ok valid"]
    assert err == [NO_NODES_NOTE, f"error: {bad}: {message}"]


def test_missing_path_and_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    status, _, err = run(capsys, str(tmp_path / "absent.yaml"), str(tmp_path / "empty"))
    assert status == 2
    assert err[1] == f"error: {tmp_path / 'absent.yaml'}: no such file or directory"
    assert err[2] == f"error: {tmp_path / 'empty'}: empty: no *.yaml, *.yml, *.json file in the directory"


@pytest.mark.parametrize(
    "text", ["", "\n\n", "# nothing rendered\n---\n---\n"], ids=["empty", "blank", "comments"]
)
def test_empty_input_is_bad_input_alike_for_files_stdin_and_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """A pipeline that rendered nothing must not pass: an empty file, empty standard
    input and a directory whose manifests are all empty are each one error line, exit 2."""
    empty = tmp_path / "empty.yaml"
    empty.write_text(text)
    status, out, err = run(capsys, str(empty))
    assert (status, out, err) == (
        2,
        [],
        [NO_NODES_NOTE, f"error: {empty}: empty: no Kubernetes objects to check"],
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    status, out, err = run(capsys, "-")
    assert (status, out, err) == (
        2,
        [],
        [NO_NODES_NOTE, "error: <stdin>: empty: no Kubernetes objects to check"],
    )
    directory = tmp_path / "rendered"
    (directory / "nested").mkdir(parents=True)
    (directory / "a.yaml").write_text(text)
    (directory / "nested" / "b.yaml").write_text(text)
    status, out, err = run(capsys, str(directory))
    assert (status, out, err) == (
        2,
        [],
        [
            NO_NODES_NOTE,
            f"error: {directory}: empty: its *.yaml, *.yml, *.json files hold no Kubernetes objects",
        ],
    )
    # An empty file beside manifests is no error: it is skipped, with a note.
    write(directory / "rc.yaml", runtime_class("ok"))
    status, out, err = run(capsys, str(directory))
    assert (status, out) == (0, ["runtimeclass/ok valid"])
    assert err == [
        NO_NODES_NOTE,
        f"note: {directory / 'a.yaml'}: skipped (empty)",
        f"note: {directory / 'nested' / 'b.yaml'}: skipped (empty)",
    ]


def test_empty_input_in_json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    status = main(["check", "-", "-o", "json"])
    document = json.loads(capsys.readouterr().out)
    assert status == 2 and document["exitStatus"] == 2
    assert document["results"] == [
        {
            "source": "<stdin>",
            "location": "",
            "object": "",
            "result": "invalid",
            "warnings": [],
            "errors": ["<stdin>: empty: no Kubernetes objects to check"],
        }
    ]


def test_bad_cluster_file_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("kind: Node\nmetadata: {name: n}\nspec:\n  Taints: []\n")
    manifest = write(tmp_path / "rc.yaml", runtime_class())
    status, out, err = run(capsys, str(manifest), "--cluster-file", str(cluster))
    assert (status, out) == (2, [])
    assert err == [
        f"runtimeclass-extender: error: {cluster}: document 0: node/n: spec.Taints: unknown field (did you mean taints?)"
    ]


def test_cluster_file_and_kubeconfig_together_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path / "rc.yaml", runtime_class())
    status, _, err = run(capsys, str(manifest), "--cluster-file", str(EXAMPLE_CLUSTER), "--kubeconfig", "k")
    assert status == 2
    assert err == [
        "runtimeclass-extender: error: give either --cluster-file or --kubeconfig/--context, not both"
    ]


# --- exit status and structured output -------------------------------------------------


def mixed_inputs(tmp_path: Path) -> list[str]:
    return [
        str(
            write(tmp_path / "good.yaml", runtime_class("good", node_selector={"kubernetes.io/os": "linux"}))
        ),
        str(write(tmp_path / "warned.yaml", runtime_class("warned", node_selector={"pool": "none"}))),
        str(write(tmp_path / "denied.yaml", runtime_class("denied", annotation="[]"))),
        str(
            write(tmp_path / "other.yaml", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}})
        ),
    ]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_structured_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str) -> None:
    paths = mixed_inputs(tmp_path)
    status = main(["check", *paths, "--cluster-file", str(EXAMPLE_CLUSTER), "-o", output])
    out, err = capsys.readouterr()
    document = json.loads(out) if output == "json" else yaml.safe_load(out)
    assert status == 1 and err == ""
    assert document["nodeChecks"] is True and document["exitStatus"] == 1
    assert [(r["object"], r["result"]) for r in document["results"]] == [
        ("runtimeclass/good", "valid"),
        ("runtimeclass/warned", "warned"),
        ("runtimeclass/denied", "denied"),
        ("service/s", "skipped"),
    ]
    good, warned, denied, other = document["results"]
    assert good == {
        "source": paths[0],
        "location": "document 0",
        "object": "runtimeclass/good",
        "result": "valid",
        "warnings": [],
        "errors": [],
    }
    assert warned["warnings"] == [
        "RuntimeClass warned: no node matches scheduling.nodeSelector {pool=none}; its pods will stay pending"
    ]
    assert denied["errors"] == [
        f"{paths[2]}: document 0: runtimeclass/denied: {ANNOTATION_PATH}: expected a NodeSelectorTerm object "
        "with matchExpressions and/or matchFields"
    ]
    assert other["source"] == paths[3]
    assert other["reason"] == "not a RuntimeClass"  # a skipped result says why; the others have none
    assert "reason" not in good


def test_structured_output_without_nodes_and_with_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [\n")
    status = main(["check", str(bad), "-o", "json"])
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert status == 2 and err == NO_NODES_NOTE + "\n"
    assert document["nodeChecks"] is False
    assert document["results"][0]["result"] == "invalid"


@pytest.mark.parametrize(
    ("kept", "warnings_as_errors", "status"),
    [
        pytest.param({"good", "other"}, False, 0, id="valid"),
        pytest.param({"good", "warned"}, False, 0, id="warnings-alone"),
        pytest.param({"good", "warned"}, True, 1, id="warnings-as-errors"),
        pytest.param({"good", "denied"}, False, 1, id="denied"),
        pytest.param({"good", "denied", "bad"}, False, 2, id="bad-input-wins"),
    ],
)
def test_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kept: set[str], warnings_as_errors: bool, status: int
) -> None:
    (tmp_path / "bad.yaml").write_text(
        "kind: RuntimeClass\nmetadata: {name: bad}\nhandler: runsc\nhandlr: x\n"
    )
    paths = [p for p in [*mixed_inputs(tmp_path), str(tmp_path / "bad.yaml")] if Path(p).stem in kept]
    flags = ["--warnings-as-errors"] if warnings_as_errors else []
    got, _, _ = run(capsys, *paths, "--cluster-file", str(EXAMPLE_CLUSTER), *flags)
    assert got == status


# --- a live cluster and the kubectl plugin --------------------------------------------


async def test_live_cluster_gives_the_node_checks(
    tmp_path: Path,
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_apiserver.add(
        NODES,
        make_node("sandbox-1", labels={"pool": "sandbox"}, taints=[{"key": "s", "effect": "NoSchedule"}]),
    )
    manifest = write(tmp_path / "rc.yaml", runtime_class("sandboxed", node_selector={"pool": "sandbox"}))
    # The command runs its own event loop (asyncio.run), so it gets a thread of its own.
    status = await asyncio.to_thread(main, ["check", str(manifest), "--kubeconfig", str(fake_kubeconfig)])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert out == "runtimeclass/sandboxed warned\n"
    assert (
        err
        == "Warning: RuntimeClass sandboxed: every matching node has an untolerated taint, e.g. s:NoSchedule on 1/1\n"
    )
    assert {"/api/v1/nodes", "/apis/node.k8s.io/v1/runtimeclasses"} <= {
        r.path for r in fake_apiserver.requests
    }


async def test_live_cluster_with_cluster_autoscaler_warns_of_the_classes_it_cannot_see(
    tmp_path: Path,
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """cluster-autoscaler runs (its status ConfigMap is there): in predicate mode without
    the node labels and the RuntimeClass admission plugin it cannot see a class's rules;
    with the node labels it can, and where the API server runs the plugin it sees a
    class's scheduling.nodeSelector (the plugin merges it) but not the annotation."""
    fake_apiserver.add(NODES, make_node("sandbox-1", labels={"pool": "sandbox"}))
    fake_apiserver.add(CONFIGMAPS, status_configmap())
    manifest = write(tmp_path / "rc.yaml", runtime_class("sandboxed", node_selector={"pool": "sandbox"}))
    live = ["check", str(manifest), "--kubeconfig", str(fake_kubeconfig)]
    status = await asyncio.to_thread(main, [*live, "--warnings-as-errors", "--runtimeclass-admission-plugin=off"])
    out, err = capsys.readouterr()
    assert status == 1 and out == "runtimeclass/sandboxed warned\n"
    assert err == (
        "Warning: cluster-autoscaler (ConfigMap kube-system/cluster-autoscaler-status) runs in this cluster "
        "and cannot see the node rules of RuntimeClass sandboxed (scheduling.nodeSelector pool=sandbox) in "
        "its pods: it will add no node for a pending pod of the class when an existing node fits the pod by "
        "kube-scheduler's own filters; turn on the node labels (labelNodes.enabled=true, or "
        "components/label-nodes; docs/autoscaling.md)\n"
    )
    # The node labels; the plugin said on (the flag alone, or on); and without the
    # extender's table the plugin as kube-apiserver ships it: on.
    for flags in (
        ["--runtimeclass-admission-plugin=off", "--label-nodes"],
        ["--runtimeclass-admission-plugin"],
        ["--runtimeclass-admission-plugin=on"],
        [],
    ):
        status = await asyncio.to_thread(main, [*live, "--warnings-as-errors", *flags])
        assert status == 0 and capsys.readouterr().err == "", flags
    # Not looked for: nothing to say.
    status = await asyncio.to_thread(
        main, [*live, "--warnings-as-errors", "--runtimeclass-admission-plugin=off", "--cluster-autoscaler-status", ""]
    )
    assert status == 0 and capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("spec", "warned"),
    [
        # What the extender found out: the plugin off, so the class's selector is in no pod.
        ({"labelNodes": False, "runtimeClassAdmissionPlugin": False}, True),
        # The plugin on: the selector is in every pod of the class.
        ({"labelNodes": False, "runtimeClassAdmissionPlugin": True}, False),
        # The node labels: every class's label is in its pods.
        ({"labelNodes": True, "runtimeClassAdmissionPlugin": False}, False),
        # A table without the fields: the leader writes each only when it is true.
        ({}, True),
    ],
)
async def test_live_cluster_reads_how_the_extender_runs_from_its_table(
    tmp_path: Path,
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    spec: dict[str, Any],
    warned: bool,
) -> None:
    """Without a flag, check takes the node labels and the plugin from the extender's pod
    admission table (--pod-admission-table), as its leader wrote them."""
    fake_apiserver.add(NODES, make_node("sandbox-1", labels={"pool": "sandbox"}))
    fake_apiserver.add(CONFIGMAPS, status_configmap())
    crd = next(d for d in render("overlays/predicate-mode") if d["kind"] == "CustomResourceDefinition")
    fake_apiserver.apply(
        [
            crd,
            {
                "apiVersion": "runtimeclass-extender.dev/v1alpha1",
                "kind": "PodAdmissionTable",
                "metadata": {"name": "table-of-mine"},
                "spec": {"runtimeClasses": {}, **spec},
            },
        ]
    )
    manifest = write(tmp_path / "rc.yaml", runtime_class("sandboxed", node_selector={"pool": "sandbox"}))
    argv = ["check", str(manifest), "--kubeconfig", str(fake_kubeconfig), "--warnings-as-errors"]
    status = await asyncio.to_thread(main, [*argv, "--pod-admission-table", "table-of-mine"])
    err = capsys.readouterr().err
    assert (status == 1) == warned and ("cannot see the node rules of RuntimeClass sandboxed" in err) == warned
    # Another table's name: none to read, the defaults.
    status = await asyncio.to_thread(main, argv)
    assert status == 0 and capsys.readouterr().err == ""


async def test_unreachable_cluster_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = FakeApiServer()
    await server.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    await server.stop()
    manifest = write(tmp_path / "rc.yaml", runtime_class())
    status = await asyncio.to_thread(main, ["check", str(manifest), "--kubeconfig", str(kubeconfig)])
    _, err = capsys.readouterr()
    assert status == 2
    assert err.startswith("runtimeclass-extender: error: cannot list from ")


def test_kubectl_plugin_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path / "rc.yaml", runtime_class("bad", annotation="[]"))
    status = kubectl_main(["check", str(manifest), "--cluster-file", str(EXAMPLE_CLUSTER)])
    out, err = capsys.readouterr()
    assert (status, out) == (1, "")
    assert err.startswith(f"error: {manifest}: document 0: runtimeclass/bad: {ANNOTATION_PATH}: ")
    status = kubectl_main(["check", str(tmp_path / "absent"), "--cluster-file", str(tmp_path / "absent")])
    assert status == 2
    assert capsys.readouterr().err.startswith("kubectl runtimeclass: error: ")


def test_kubectl_plugin_executable(tmp_path: Path) -> None:
    path = Path(sys.executable).parent / "kubectl-runtimeclass"
    assert path.exists(), f"{path} missing: install the project (pip install -e .) to get the console script"
    manifest = write(
        tmp_path / "rc.yaml", runtime_class("gvisor", node_selector={"sandbox.gke.io/runtime": "gvisor"})
    )
    done = subprocess.run(
        [str(path), "check", str(manifest), "--cluster-file", str(EXAMPLE_CLUSTER)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "runtimeclass/gvisor warned\n"
    assert done.stderr == (
        "Warning: RuntimeClass gvisor: every matching node has an untolerated taint, "
        "e.g. sandbox.gke.io/runtime=gvisor:NoSchedule on 3/3\n"
    )


@pytest.mark.parametrize("value", ["bogus", "kube-system/", "/name", "a/b/c", "kube system/x"])
def test_cluster_autoscaler_status_is_read_as_serve_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    manifest = write(tmp_path / "rc.yaml", runtime_class())
    with pytest.raises(SystemExit) as exited:
        main(["check", str(manifest), "--cluster-autoscaler-status", value])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"runtimeclass-extender check: error: argument --cluster-autoscaler-status: invalid value {value!r}: "
        "must be NAMESPACE/NAME, such as kube-system/cluster-autoscaler-status, or empty"
    )


# --- a whole manifest directory --------------------------------------------------------


def manifest_tree(root: Path) -> None:
    """A repository's manifest directory: a kustomize base with patches of every kind, a
    Helm chart, data files, a RuntimeClass, and a file meant as a manifest that is broken."""
    write(root / "base" / "runtimeclass.yaml", runtime_class("gvisor", node_selector={"pool": "none"}))
    (root / "base" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- runtimeclass.yaml\n"
        "patches:\n- path: patches/handler.yaml\n  target: {kind: RuntimeClass}\n- patch: |-\n    - op: remove\n"
        "      path: /handler\npatchesJson6902:\n- path: json6902.yaml\n  target: {kind: RuntimeClass, name: gvisor}\n"
        "patchesStrategicMerge:\n- ../shared/merge.yaml\n- |-\n  kind: RuntimeClass\n  metadata: {name: inline}\n"
    )
    # A strategic-merge patch of a RuntimeClass has no handler: judged, it would be refused.
    write(
        root / "base" / "patches" / "handler.yaml", {"kind": "RuntimeClass", "metadata": {"name": "gvisor"}}
    )
    (root / "base" / "json6902.yaml").write_text("- op: replace\n  path: /handler\n  value: kata\n")
    write(
        root / "shared" / "merge.yaml",
        {"kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handlr": "x"},
    )
    # A JSON patch no kustomization names (another tool's) is no object either.
    (root / "shared" / "ops.json").write_text('[{"op": "add", "path": "/metadata/labels", "value": {}}]')
    chart = root / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: chart\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("enabled: true\n")
    (chart / "templates" / "a.yaml").write_text("{{- if .Values.enabled }}\nkind: RuntimeClass\n{{- end }}\n")
    (chart / "templates" / "b.yaml").write_text('{{ include "x" . }}\n')
    (root / "dashboard.json").write_text('{"title": "RuntimeClasses", "panels": []}')


def test_a_manifest_directory_is_checked_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest_tree(tmp_path)
    status, out, err = run(capsys, str(tmp_path), "--cluster-file", str(EXAMPLE_CLUSTER))
    assert status == 0, err
    assert out == ["runtimeclass/gvisor warned"]
    base = tmp_path / "base"
    kustomization = base / "kustomization.yaml"
    assert err == [
        f"note: {base / 'json6902.yaml'}: skipped (a kustomize patch of {kustomization})",
        f"note: {base / 'patches' / 'handler.yaml'}: skipped (a kustomize patch of {kustomization})",
        "Warning: RuntimeClass gvisor: no node matches scheduling.nodeSelector {pool=none}; its pods will stay pending",
        f"note: {tmp_path / 'chart' / 'Chart.yaml'}: skipped (not a Kubernetes object: no kind)",
        f"note: {tmp_path / 'chart' / 'templates'}: skipped (2 Helm chart templates: check what helm template "
        "renders them into, with check -)",
        f"note: {tmp_path / 'chart' / 'values.yaml'}: skipped (not a Kubernetes object: no kind)",
        f"note: {tmp_path / 'dashboard.json'}: skipped (not a Kubernetes object: no kind)",
        f"note: {tmp_path / 'shared' / 'merge.yaml'}: skipped (a kustomize patch of {kustomization})",
        f"note: {tmp_path / 'shared' / 'ops.json'}: skipped (a JSON patch (RFC 6902), not an object)",
        "note: skipped 1 object that is not a RuntimeClass: 1 Kustomization",
    ]
    # Skipping is no warning: --warnings-as-errors fails on the class's warning alone.
    status, _, _ = run(capsys, str(tmp_path), "--cluster-file", str(EXAMPLE_CLUSTER), "--warnings-as-errors")
    assert status == 1
    (base / "runtimeclass.yaml").unlink()
    status, out, _ = run(
        capsys, str(tmp_path), "--cluster-file", str(EXAMPLE_CLUSTER), "--warnings-as-errors"
    )
    assert (status, out) == (0, [])


def test_a_broken_manifest_in_a_directory_is_still_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest_tree(tmp_path)
    # Not a chart template, not a patch: meant as a manifest, and not YAML.
    (tmp_path / "base" / "broken.yaml").write_text("kind: [\n")
    # A list where an object belongs, beside real objects: no JSON patch either.
    write(tmp_path / "base" / "z-list.yaml", runtime_class("ok"), ["not", "an", "object"])
    status, out, err = run(capsys, str(tmp_path), "--cluster-file", str(EXAMPLE_CLUSTER))
    assert status == 2
    assert out == ["runtimeclass/gvisor warned", "runtimeclass/ok valid"]
    assert [line for line in err if line.startswith("error: ")] == [
        f"error: {tmp_path / 'base' / 'broken.yaml'}: not valid YAML (line 2, column 1: expected the node "
        "content, but found '<stream end>')",
        f"error: {tmp_path / 'base' / 'z-list.yaml'}: document 1: expected a Kubernetes object or List",
    ]


def test_a_file_named_on_the_command_line_is_always_a_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest_tree(tmp_path)
    patch = tmp_path / "base" / "json6902.yaml"
    template = tmp_path / "chart" / "templates" / "a.yaml"
    handler = tmp_path / "base" / "patches" / "handler.yaml"
    status, _, err = run(capsys, str(patch), str(template), str(handler))
    assert status == 2
    assert err[1:] == [
        f"error: {patch}: document 0: expected a Kubernetes object or List",
        f"error: {template}: not valid YAML (line 1, column 3: expected the node content, but found '-')",
        f"error: {handler}: document 0: runtimeclass/gvisor: handler: Required value",
    ]


def test_this_repositorys_deploy_directory_passes_as_the_docs_say(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/check.md's CI example: deploy/ as it is, against the example cluster."""
    status, out, err = run(
        capsys, str(REPO / "deploy"), "--cluster-file", str(EXAMPLE_CLUSTER), "--warnings-as-errors"
    )
    assert status == 0, [line for line in err if not line.startswith("note: ")]
    assert [line for line in err if not line.startswith("note: ")] == []
    assert out and all(line.endswith(" valid") for line in out)
    # The kustomize patches and the chart's templates are skipped, each said once.
    assert any("skipped (a kustomize patch of " in line for line in err)
    assert sum("Helm chart templates" in line for line in err) == 1


def _workload(kind: str, image: str) -> dict[str, Any]:
    pod_spec = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}, {"name": "ext", "image": image}]}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, "spec": pod_spec}
    spec: dict[str, Any] = {"template": {"spec": pod_spec}}
    if kind == "CronJob":
        spec = {"schedule": "* * * * *", "jobTemplate": {"spec": spec}}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w"}, "spec": spec}


@pytest.mark.parametrize(
    ("image", "unserved"),
    [
        ("runtimeclass-extender:0.1.0", True),
        ("runtimeclass-extender", True),
        ("runtimeclass-extender@sha256:" + "0" * 64, True),
        ("runtimeclass-extender:0.1.0@sha256:" + "0" * 64, True),
        # A registry, or a Docker Hub namespace anyone may push to: the operator's own.
        ("ghcr.io/example/runtimeclass-extender:0.1.0", False),
        ("example/runtimeclass-extender:0.1.0", False),
        ("localhost:5000/runtimeclass-extender", False),
        ("runtimeclass-extender-fork:1", False),
    ],
)
@pytest.mark.parametrize("kind", ["Deployment", "Pod", "DaemonSet", "CronJob"])
def test_an_install_naming_the_extenders_image_without_a_registry_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], image: str, unserved: bool, kind: str
) -> None:
    """docker.io/library/ holds Docker's official images only: the pods would never
    start. Warned of as the install is applied; --warnings-as-errors fails it."""
    path = write(tmp_path / "install.yaml", _workload(kind, image))
    status, out, err = run(capsys, str(path), "--warnings-as-errors")
    ref = f"{kind.lower()}/w"
    if unserved:
        assert status == 1
        assert out == [f"{ref} warned"]
        assert err[1] == (
            f"Warning: {path}: document 0: {ref}: container ext: image {image} names no registry, and none "
            "serves it (docker.io/library/ holds Docker's official images only): its pods would not start; "
            "build and push it, then name it (docs/install.md#get-the-image)"
        )
    else:
        assert (status, out) == (0, [])
        assert err[1] == f"note: skipped 1 object that is not a RuntimeClass: 1 {kind}"


def test_a_base_in_a_directory_walk_gets_a_note_about_its_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Walked, the file is a kustomize base an overlay may rewrite (``images:``): a note,
    and the status stays 0, as this repository's deploy/ is checked in CI."""
    write(tmp_path / "base" / "deployment.yaml", _workload("Deployment", "runtimeclass-extender:0.1.0"))
    status, out, err = run(capsys, str(tmp_path), "--warnings-as-errors")
    assert (status, out) == (0, [])
    assert err[1] == (
        f"note: {tmp_path / 'base' / 'deployment.yaml'}: document 0: deployment/w skipped (not a RuntimeClass; "
        "its image runtimeclass-extender:0.1.0 names no registry: an overlay must set it "
        "(docs/install.md#get-the-image))"
    )
    status, _, _ = run(capsys, str(REPO / "deploy"), "--cluster-file", str(EXAMPLE_CLUSTER), "--warnings-as-errors")
    assert status == 0


def test_a_rendered_overlay_that_names_a_registry_passes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What docs/install.md's "Get the image" pipes in: the shipped overlay rendered,
    warned about, then with an image of the operator's registry, clean."""
    from tests.support.manifests import render

    docs = render("overlays/default-scheduler")
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump_all(docs)))
    status, out, _ = run(capsys, "-", "--warnings-as-errors")
    assert (status, out) == (1, ["deployment/runtimeclass-scheduler warned"])
    for doc in docs:
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            container["image"] = container["image"].replace("runtimeclass-extender:", "ghcr.io/example/runtimeclass-extender:")
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump_all(docs)))
    status, out, _ = run(capsys, "-", "--warnings-as-errors")
    assert (status, out) == (0, [])


@pytest.mark.parametrize(
    "image",
    [
        "REGISTRY/runtimeclass-extender:0.1.0",
        "REGISTRY/runtimeclass-extender",
        "REGISTRY/team/runtimeclass-extender:0.1.0@sha256:" + "0" * 64,
        "<registry>/runtimeclass-extender:0.1.0",
        "My_Registry/runtimeclass-extender:0.1.0",
    ],
)
def test_a_placeholder_registry_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], image: str
) -> None:
    """docs/install.md writes the registry as REGISTRY: left as it is, it is no registry
    host (no dot, no port, not localhost) and no Docker Hub namespace (upper case), so no
    node can pull the image. --warnings-as-errors fails it, as it fails no registry."""
    placeholder = image.split("/", 1)[0]
    path = write(tmp_path / "install.yaml", _workload("Deployment", image))
    status, out, err = run(capsys, str(path), "--warnings-as-errors")
    assert (status, out) == (1, ["deployment/w warned"])
    assert err[1:] == [
        f"Warning: {path}: document 0: deployment/w: container ext: image {image} names the placeholder "
        f"{placeholder} where its registry belongs (a registry host has a dot or a port, or is localhost): its "
        f"pods would not start; replace {placeholder} with the registry you pushed the image to "
        "(docs/install.md#get-the-image)"
    ]


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/runtimeclass-extender:0.1.0",
        "REGISTRY.example.com/runtimeclass-extender:0.1.0",  # a host may be upper case
        "registry:5000/runtimeclass-extender:0.1.0",
        "localhost/runtimeclass-extender:0.1.0",
        "my-team/runtimeclass-extender:0.1.0",  # a Docker Hub namespace
        "REGISTRY/some-other-image:1",  # not the extender's
    ],
)
def test_a_registry_host_or_namespace_is_no_placeholder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], image: str
) -> None:
    path = write(tmp_path / "install.yaml", _workload("Deployment", image))
    status, out, err = run(capsys, str(path), "--warnings-as-errors")
    assert (status, out) == (0, [])
    assert err[1:] == ["note: skipped 1 object that is not a RuntimeClass: 1 Deployment"]


def test_a_placeholder_in_a_base_of_a_directory_walk_gets_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = "REGISTRY/runtimeclass-extender:0.1.0"
    write(tmp_path / "base" / "deployment.yaml", _workload("Deployment", image))
    status, out, err = run(capsys, str(tmp_path), "--warnings-as-errors")
    assert (status, out) == (0, [])
    assert err[1:] == [
        f"note: {tmp_path / 'base' / 'deployment.yaml'}: document 0: deployment/w skipped (not a RuntimeClass; "
        "its image REGISTRY/runtimeclass-extender:0.1.0 names the placeholder REGISTRY: an overlay must replace "
        "it (docs/install.md#get-the-image))"
    ]


def test_a_rendered_overlay_with_the_docs_placeholder_fails_warnings_as_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl kustomize of an overlay whose images: says newName: REGISTRY/runtimeclass-extender,
    as docs/install.md writes it, piped into check."""
    from tests.support.manifests import render

    docs = render("overlays/predicate-mode")
    for doc in docs:
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            image = container["image"]
            container["image"] = image.replace("runtimeclass-extender:", "REGISTRY/runtimeclass-extender:")
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump_all(docs)))
    status, out, err = run(capsys, "-", "--warnings-as-errors")
    assert (status, out) == (1, ["deployment/runtimeclass-scheduler warned"])
    assert [line for line in err if line.startswith("Warning: ")] == [
        f"Warning: <stdin>: document {i}: deployment/runtimeclass-scheduler: container extender: image "
        "REGISTRY/runtimeclass-extender:0.1.0 names the placeholder REGISTRY where its registry belongs (a "
        "registry host has a dot or a port, or is localhost): its pods would not start; replace REGISTRY with "
        "the registry you pushed the image to (docs/install.md#get-the-image)"
        for i, doc in enumerate(docs)
        if doc["kind"] == "Deployment"
    ]


# --- a rendered install: the objects of other kinds in one line ------------------------


def test_a_rendered_overlay_counts_what_it_skips_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl kustomize deploy/overlays/predicate-mode | check -: 50 objects, one warning.
    A note per skipped object buried the warning; now the warning stands alone, and one
    note counts the others by kind. The exit statuses are as before."""
    from tests.support.manifests import render

    docs = render("overlays/predicate-mode")
    others = Counter(doc["kind"] for doc in docs if doc["kind"] not in ("RuntimeClass", "Deployment"))
    assert sum(others.values()) > 20  # what made the notes a wall
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump_all(docs)))
    status, out, err = run(capsys, "-")
    assert (status, out) == (0, ["deployment/runtimeclass-scheduler warned"])
    counted = ", ".join(f"{n} {kind}" for kind, n in sorted(others.items(), key=lambda kv: (-kv[1], kv[0])))
    assert err[0] == NO_NODES_NOTE
    assert err[1].startswith("Warning: <stdin>: document ")
    assert err[2:] == [f"note: skipped {sum(others.values())} objects that are not RuntimeClasses: {counted}"]
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump_all(docs)))
    status, _, _ = run(capsys, "-", "--warnings-as-errors")
    assert status == 1
    # Machines still get every object, each with its reason.
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump_all(docs)))
    status = main(["check", "-", "-o", "json"])
    results = json.loads(capsys.readouterr().out)["results"]
    assert status == 0 and len(results) == len(docs)
    assert sum(r.get("reason") == "not a RuntimeClass" for r in results) == sum(others.values())


def test_the_summary_keeps_errors_and_warnings_in_their_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path / "mixed.yaml",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
        runtime_class("bad", annotation="[]"),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}},
        runtime_class("warned", node_selector={"pool": "none"}),
    )
    status, out, err = run(capsys, str(path), "--cluster-file", str(EXAMPLE_CLUSTER))
    assert (status, out) == (1, ["runtimeclass/warned warned"])
    assert err[0].startswith(f"error: {path}: document 1: runtimeclass/bad: ")
    assert err[1:] == [
        "Warning: RuntimeClass warned: no node matches scheduling.nodeSelector {pool=none}; its pods will stay pending",
        "note: skipped 3 objects that are not RuntimeClasses: 2 ConfigMap, 1 Service",
    ]
