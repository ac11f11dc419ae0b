"""The explain and classes commands, the kubectl plugin executable, and the live one-shot LIST."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from extender.cli import main
from extender.tools.commands import build_kubectl_parser, kubectl_main
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from tests.support.apiserver.objects import make_node, make_runtime_class
from tests.support.apiserver.server import NODES, RUNTIME_CLASSES, FakeApiServer
from tests.support.docs import INVOCATION, block_after, page
from tests.support.paths import EXAMPLE_CLUSTER

CLUSTER = ["--cluster-file", str(EXAMPLE_CLUSTER)]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def table_rows(text: str) -> list[list[str]]:
    """Split a kubectl-style table on runs of 3+ spaces (cells contain single spaces)."""
    import re

    return [re.split(r" {3,}", line.rstrip()) for line in text.splitlines() if line.strip()]


def test_explain_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "explain", "gvisor", *CLUSTER)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NODE", "FITS", "REASON", "DETAIL"]
    rows = table_rows("\n".join(lines[1:]))
    by_node = {row[0]: row for row in rows if row[1]}
    assert by_node["gvisor-1"] == ["gvisor-1", "yes"]
    assert by_node["runc-1"] == [
        "runc-1",
        "no",
        "node(s) didn't match RuntimeClass",
        "missing label sandbox.gke.io/runtime=gvisor",
    ]
    # win-1 fails two predicates: a continuation row follows it with the second one. It
    # names the node again (so grep finds every row of a node), FITS left empty.
    win = lines.index(next(line for line in lines if line.startswith("win-1")))
    assert lines[win + 1].split("   ")[0] == "win-1"
    fits = lines[0].index("FITS")
    assert lines[win][fits : fits + 4] == "no  " and lines[win + 1][fits : fits + 4] == "    "
    assert "untolerated taint os=windows:NoSchedule" in lines[win + 1]
    assert [line for line in lines if line.startswith("win-1")] == lines[win : win + 2]
    # Only table rows on stdout; the summary sentence (a footer) on stderr.
    assert all(not line.startswith("2/") for line in lines) and "" not in lines
    assert err.startswith("2/") and "4 node(s) didn't match RuntimeClass" in err
    assert len(err.splitlines()) == 1


def test_explain_json_and_yaml_agree(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "explain", "windows-hyperv", *CLUSTER, "-o", "json")
    assert status == 0
    doc = json.loads(out)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes["win-1"]["fits"] is True
    assert nodes["gvisor-1"]["failures"][1]["predicate"] == "TaintToleration"
    assert (
        doc["summary"]
        == f"1/{len(nodes)} nodes are available: {len(nodes) - 1} node(s) didn't match RuntimeClass."
    )
    status, out, _ = run(capsys, "explain", "windows-hyperv", *CLUSTER, "-o", "yaml")
    assert status == 0
    assert yaml.safe_load(out) == doc


def test_explain_pod_file_tolerations_count(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  runtimeClassName: runc\n"
        "  containers: [{name: c, image: x}]\n"
        "  tolerations: [{key: sandbox.gke.io/runtime, operator: Exists, effect: NoSchedule}]\n"
    )
    status, out, _ = run(capsys, "explain", "--pod", str(pod), *CLUSTER, "-o", "json")
    assert status == 0
    fits = {n["name"]: n["fits"] for n in json.loads(out)["nodes"]}
    assert fits["gvisor-1"] is True and fits["win-1"] is False
    # RUNTIMECLASS replaces the pod's runtimeClassName; its tolerations still count.
    status, out, _ = run(capsys, "explain", "kata-containers", "--pod", str(pod), *CLUSTER, "-o", "json")
    doc = json.loads(out)
    assert doc["pod"]["runtimeClassName"] == "kata-containers"
    assert doc["pod"]["tolerations"][0]["operator"] == "Exists"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "nope", *CLUSTER], 'RuntimeClass "nope" not found (known: '),
        (["explain", *CLUSTER], "name a RUNTIMECLASS, or give a pod with --pod FILE"),
        (
            ["explain", "gvisor", "--cluster-file", "/nonexistent.yaml"],
            "/nonexistent.yaml: no such file or directory",
        ),
        (
            ["explain", "gvisor", "--pod", "/nonexistent.yaml", *CLUSTER],
            "/nonexistent.yaml: no such file or directory",
        ),
        (["classes", "--cluster-file", "/nonexistent.yaml"], "/nonexistent.yaml: no such file or directory"),
    ],
)
def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    status, out, err = run(capsys, *argv)
    assert status == 2
    assert out == ""
    assert err.startswith("runtimeclass-extender: error: ")
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "holds"),
    [
        ("", "holds 0 nodes and 0 RuntimeClasses"),
        ("apiVersion: v1\nkind: List\nitems: []\n", "holds 0 nodes and 0 RuntimeClasses"),
        (EXAMPLE_CLUSTER.parent.joinpath("runtimeclasses.yaml").read_text(), "holds 0 nodes"),
    ],
    ids=["empty-file", "empty-list", "classes-only"],
)
def test_unknown_class_in_a_cluster_file_without_classes_or_nodes_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, holds: str
) -> None:
    """As serve warns of it: the file is likely the mistake, not the class's name."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(content)
    status, out, err = run(capsys, "explain", "nope", "--cluster-file", str(cluster))
    assert (status, out) == (2, "")
    known = "none" if "0 RuntimeClasses" in holds else "gvisor, kata-containers, runc, windows-hyperv"
    assert err == (
        f'runtimeclass-extender: error: RuntimeClass "nope" not found (known: {known}): '
        f"cluster file {cluster} {holds}\n"
    )
    # A file holding both says nothing more than the name.
    status, _, err = run(capsys, "explain", "nope", *CLUSTER)
    assert status == 2 and err.rstrip("\n").endswith(
        "(known: gvisor, gvisor-gpu, kata-containers, runc, sandboxed, windows-hyperv)"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kind: Node\n", "expected kind Pod"),
        ("spec: {tolerations: 3}\n", "malformed Pod: pod.spec.tolerations"),
        ("[1, 2]\n", "expected a Pod object"),
    ],
)
def test_bad_pod_file_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(content)
    status, _, err = run(capsys, "explain", "gvisor", "--pod", str(pod), *CLUSTER)
    assert status == 2
    assert message in err


def test_no_cluster_at_all_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    status, _, err = run(capsys, "explain", "gvisor")
    assert status == 2
    assert "no Kubernetes API server configured" in err
    assert "--cluster-file" in err


def test_classes_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "classes", *CLUSTER)
    assert status == 0
    rows = table_rows(out)
    assert rows[0] == ["NAME", "HANDLER", "SELECTED", "FITTING"]
    narrow = {row[0]: row for row in rows[1:]}
    status, out, _ = run(capsys, "classes", *CLUSTER, "-o", "wide")
    assert status == 0
    rows = table_rows(out)
    assert rows[0] == [
        "NAME",
        "HANDLER",
        "SELECTED",
        "FITTING",
        "NODE-SELECTOR",
        "TOLERATIONS",
        "EXPRESSIONS",
    ]
    by_name = {row[0]: row for row in rows[1:]}
    assert {name: row[:4] for name, row in by_name.items()} == narrow
    assert by_name["gvisor"][1] == "runsc"
    assert by_name["gvisor"][4] == "sandbox.gke.io/runtime=gvisor"
    assert by_name["gvisor"][5] == "sandbox.gke.io/runtime Equal gvisor:NoSchedule"
    assert by_name["kata-containers"][5] == "<none>"

    status, out, _ = run(capsys, "classes", *CLUSTER, "-o", "json")
    doc = json.loads(out)
    classes = {rc["name"]: rc for rc in doc["runtimeClasses"]}
    assert classes["gvisor"]["fitting"] == 2
    # Three nodes carry the gvisor label; one of them has a taint the class does not tolerate.
    assert classes["gvisor"]["selected"] == 3
    assert by_name["gvisor"][2] == f"3/{doc['nodeCount']}"
    assert by_name["gvisor"][3] == f"2/{doc['nodeCount']}"
    assert classes["windows-hyperv"]["nodeSelector"]["kubernetes.io/os"] == "windows"
    assert classes["gvisor"]["summary"].startswith(f"2/{doc['nodeCount']} nodes are available: ")


def _plugin_executable() -> str:
    path = Path(sys.executable).parent / "kubectl-runtimeclass"
    assert path.exists(), f"{path} missing: install the project (pip install -e .) to get the console script"
    return str(path)


def test_kubectl_plugin_executable() -> None:
    done = subprocess.run(
        [_plugin_executable(), "explain", "gvisor", *CLUSTER, "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fitting"] == 2

    done = subprocess.run(
        [_plugin_executable(), "explain", "nope", *CLUSTER],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith('kubectl runtimeclass: error: RuntimeClass "nope" not found')


def test_kubectl_plugin_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        kubectl_main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kubectl runtimeclass")
    assert "explain" in out and "classes" in out and "replay" in out
    assert "serve" not in out


async def test_live_cluster_one_shot_list(
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_apiserver.add(
        NODES,
        make_node("sandbox-1", labels={"sandbox": "yes"}, taints=[{"key": "s", "effect": "NoSchedule"}]),
    )
    fake_apiserver.add(NODES, make_node("plain-1"))
    fake_apiserver.add(
        RUNTIME_CLASSES,
        make_runtime_class(
            "sandboxed",
            handler="runsc",
            node_selector={"sandbox": "yes"},
            tolerations=[{"key": "s", "operator": "Exists"}],
        ),
    )
    monkeypatch.setenv("KUBECONFIG", str(fake_kubeconfig))
    # The command runs its own event loop (asyncio.run), so it gets a thread of its own.
    status = await asyncio.to_thread(main, ["explain", "sandboxed", "-o", "json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    doc = json.loads(out)
    assert {n["name"]: n["fits"] for n in doc["nodes"]} == {"plain-1": False, "sandbox-1": True}
    assert doc["summary"] == "1/2 nodes are available: 1 node(s) didn't match RuntimeClass."
    paths = {r.path for r in fake_apiserver.requests}
    assert {"/api/v1/nodes", "/apis/node.k8s.io/v1/runtimeclasses"} <= paths


async def test_live_cluster_unreachable_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = FakeApiServer()
    await server.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    await server.stop()
    monkeypatch.delenv("KUBECONFIG", raising=False)
    status = await asyncio.to_thread(main, ["classes", "--kubeconfig", str(kubeconfig)])
    _, err = capsys.readouterr()
    assert status == 2
    assert "cannot list from http://127.0.0.1:" in err
    assert os.path.exists(kubeconfig)


def test_malformed_selector_annotation_is_shown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    make_node("n1", labels={"gpu": "yes"}),
                    {
                        **make_runtime_class("bad", handler="runsc"),
                        "metadata": {
                            "name": "bad",
                            "annotations": {
                                NODE_SELECTOR_TERM_ANNOTATION: '{"matchExpressions": [{"key": "gpu"}]}'
                            },
                        },
                    },
                ],
            }
        )
    )
    status, out, _ = run(capsys, "classes", "--cluster-file", str(cluster), "-o", "wide")
    assert status == 0
    (row,) = table_rows(out)[1:]
    assert row[6].startswith("<invalid: ") and row[2:4] == ["0/1", "0/1"]
    status, out, _ = run(capsys, "explain", "bad", "--cluster-file", str(cluster), "-o", "json")
    (node,) = json.loads(out)["nodes"]
    assert node["reason"] == 'RuntimeClass "bad" has an invalid node selector annotation'
    assert NODE_SELECTOR_TERM_ANNOTATION in node["failures"][0]["detail"]


# --- docs/explain.md shows what the commands print -------------------------------------

DOCS_EXAMPLES = [
    (["explain", "gvisor"], []),
    (["explain", "gvisor"], ["-o", "wide"]),
    (["classes"], []),
    (["classes"], ["-o", "wide"]),
]


@pytest.mark.parametrize(("command", "options"), DOCS_EXAMPLES, ids=lambda words: " ".join(words))
def test_docs_examples_are_the_commands_output(
    capsys: pytest.CaptureFixture[str], command: list[str], options: list[str]
) -> None:
    """Each output docs/explain.md shows under its command: whole, or its first rows when
    the page ends the block with ``...``."""
    shown_command = " ".join(
        [INVOCATION, *command, "--cluster-file", "deploy/examples/cluster.yaml", *options]
    )
    shown = block_after(page("explain.md"), shown_command + "\n```", "text")
    status, out, err = run(capsys, *command, *CLUSTER, *options)
    assert status == 0, err
    # What a terminal shows: the rows (stdout), then the summary sentence (stderr).
    screen = out + err
    if shown.endswith("\n...\n"):
        rows = [line.rstrip() for line in shown.splitlines()[:-1]]
        assert [line.rstrip() for line in out.splitlines()[: len(rows)]] == rows
        assert len(out.splitlines()) > len(rows)
    else:
        assert screen == shown


def _json_table(text: str) -> dict[str, str]:
    """docs/explain.md's table of the JSON fields: the meaning of each, by field name."""
    rows: dict[str, str] = {}
    for line in text.split("| field | meaning |", 1)[1].splitlines()[2:]:
        if not line.startswith("|"):
            break
        fields, meaning = line.strip("|").split("|", 1)
        for name in re.findall(r"`(\w+)`", fields):
            rows[name] = meaning
    return rows


def test_docs_list_every_field_of_explain_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every key of ``explain -o json`` (and of its RuntimeClass view) is in the page's table."""
    cluster = tmp_path / "cluster.yaml"
    document = yaml.safe_load(EXAMPLE_CLUSTER.read_text())
    for item in document["items"]:
        if item["kind"] == "RuntimeClass" and item["metadata"]["name"] == "gvisor":
            item["overhead"] = {"podFixed": {"cpu": "250m", "memory": "160Mi"}}
    cluster.write_text(yaml.safe_dump(document))
    status, out, _ = run(capsys, "explain", "gvisor", "--cluster-file", str(cluster), "-o", "json")
    explained = json.loads(out)
    assert status == 0
    assert explained["runtimeClass"]["overhead"] == {"cpu": "250m", "memory": "160Mi"}
    table = _json_table(page("explain.md"))
    assert [key for key in explained if key not in table] == []
    view = table["runtimeClass"]
    assert [key for key in explained["runtimeClass"] if f"`{key}`" not in view] == []


def test_docs_name_every_command_of_the_kubectl_plugin() -> None:
    plugin = " ".join(page("explain.md").split("## kubectl plugin", 1)[1].split("\n## ", 1)[0].split())
    (commands,) = [action for action in build_kubectl_parser()._actions if action.dest == "command"]
    names = list(getattr(commands, "choices", {}))
    assert len(names) == 7 and "the same seven commands" in plugin
    assert [name for name in names if f"`{name}`" not in plugin] == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["explain", "gvisor"], ["node/gvisor-1", "node/gvisor-2"]),
        (["explain", "windows-hyperv"], ["node/win-1"]),
    ],
    ids=["gvisor", "windows-hyperv"],
)
def test_explain_output_name_lists_the_fitting_nodes(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: list[str]
) -> None:
    status, out, err = run(capsys, *argv, *CLUSTER, "-o", "name")
    assert (status, err) == (0, "")
    assert out.splitlines() == expected
    # The same nodes the JSON says fit.
    _, as_json, _ = run(capsys, *argv, *CLUSTER, "-o", "json")
    assert [f"node/{n['name']}" for n in json.loads(as_json)["nodes"] if n["fits"]] == expected


def test_classes_output_name_is_kubectls(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "classes", *CLUSTER, "-o", "name")
    assert status == 0
    _, as_json, _ = run(capsys, "classes", *CLUSTER, "-o", "json")
    names = [rc["name"] for rc in json.loads(as_json)["runtimeClasses"]]
    # `kubectl get runtimeclasses -o name` prints runtimeclass.node.k8s.io/NAME.
    assert out.splitlines() == [f"runtimeclass.node.k8s.io/{name}" for name in names]
    assert "runtimeclass.node.k8s.io/gvisor" in out.splitlines()


@pytest.mark.parametrize(
    "argv",
    [["explain", "gvisor"], ["explain", "gvisor", "-o", "wide"], ["classes"], ["classes", "-o", "wide"]],
    ids=["explain", "explain-wide", "classes", "classes-wide"],
)
def test_no_headers_drops_only_the_header_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    status, with_headers, err = run(capsys, *argv, *CLUSTER)
    assert status == 0, err
    status, without, err_without = run(capsys, *argv, *CLUSTER, "--no-headers")
    assert status == 0, err_without
    # Same rows, same column widths (kubectl pads as if the header were there).
    assert without.splitlines() == with_headers.splitlines()[1:]
    assert not without.startswith(("NODE", "NAME"))
    assert err_without == err


# --- nothing to list, nothing to explain ------------------------------------------------


def nodes_only(path: Path) -> Path:
    """The example cluster's Nodes alone, as ``kubectl get nodes -o yaml`` prints them."""
    items = [item for item in yaml.safe_load(EXAMPLE_CLUSTER.read_text())["items"] if item["kind"] == "Node"]
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


@pytest.mark.parametrize("output", [[], ["-o", "wide"], ["-o", "name"], ["--no-headers"]], ids=" ".join)
def test_classes_with_no_runtimeclass_says_so_instead_of_a_header(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, output: list[str]
) -> None:
    """A header over no rows read as a list of nothing, or a failure to list: the file
    holds no RuntimeClass, said plainly on stderr, as kubectl says "No resources found";
    nothing failed, so the status is 0."""
    for cluster in (nodes_only(tmp_path / "nodes.yaml"), tmp_path / "empty.yaml"):
        cluster.touch()
        status, out, err = run(capsys, "classes", "--cluster-file", str(cluster), *output)
        assert (status, out) == (0, "")
        assert err == f"cluster file {cluster} holds no RuntimeClass: nothing to list\n"


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_classes_with_no_runtimeclass_in_json_is_an_empty_list(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, output: str
) -> None:
    status, out, err = run(
        capsys, "classes", "--cluster-file", str(nodes_only(tmp_path / "n.yaml")), "-o", output
    )
    assert (status, err) == (0, "")
    assert yaml.safe_load(out) == {"nodeCount": 7, "runtimeClasses": []}


def test_docs_example_of_classes_with_nothing_to_list(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = block_after(page("explain.md"), f"{INVOCATION} classes --cluster-file nodes.yaml\n```", "text")
    monkeypatch.chdir(tmp_path)
    nodes_only(tmp_path / "nodes.yaml")
    status, out, err = run(capsys, "classes", "--cluster-file", "nodes.yaml")
    assert (status, out + err) == (0, shown)


async def test_classes_of_a_live_cluster_with_no_runtimeclass(
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_apiserver.add(NODES, make_node("plain-1"))
    status = await asyncio.to_thread(main, ["classes", "--kubeconfig", str(fake_kubeconfig)])
    out, err = capsys.readouterr()
    assert (status, out, err) == (0, "", "the cluster holds no RuntimeClass: nothing to list\n")


POD_HINT = "expected a Pod (YAML or JSON, as kubectl get pod NAME -o yaml prints it)"


@pytest.mark.parametrize(
    "content", ["", "\n\n", "# nothing here\n", "---\n"], ids=["empty", "blank", "comment", "separator"]
)
def test_explain_pod_of_an_empty_file_says_the_file_is_empty(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str
) -> None:
    """Not "expected a Pod object, got null": YAML's null is what an empty file decodes to,
    not what the operator gave."""
    pod = tmp_path / "empty.yaml"
    pod.write_text(content)
    status, out, err = run(capsys, "explain", "--pod", str(pod), *CLUSTER)
    assert (status, out) == (2, "")
    assert err == f"runtimeclass-extender: error: {pod}: the file is empty: {POD_HINT}\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(content))
    status, out, err = run(capsys, "explain", "--pod", "-", *CLUSTER)
    assert (status, out) == (2, "")
    assert err == f"runtimeclass-extender: error: standard input is empty: {POD_HINT}\n"


def test_a_node_template_or_filter_request_of_an_empty_file_says_so_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    status, _, err = run(capsys, "node-template", "--node", str(empty), *CLUSTER)
    assert (status, err) == (
        2,
        f"runtimeclass-extender: error: {empty}: the file is empty: expected a Node (YAML or JSON)\n",
    )
    status, _, err = run(capsys, "filter", str(empty), *CLUSTER)
    assert (status, err) == (
        2,
        f"runtimeclass-extender: error: {empty}: the file is empty: expected an ExtenderArgs request "
        "(as kube-scheduler POSTs to /filter)\n",
    )
