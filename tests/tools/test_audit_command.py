"""The ``audit`` command: a cluster file with pods, a live cluster, output forms, exit codes.

The executables run as subprocesses where their exit status and streams are the point;
the rest calls ``main`` in-process. The bundled example (deploy/examples/
cluster-with-pods.yaml) is the docs' example, so its expected rows are written out.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.audit.misplaced import PROBLEMS
from extender.cli import main
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from tests.support.apiserver import (
    NODES,
    PODS,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_pod,
    make_runtime_class,
)
from tests.support.docs import page
from tests.support.paths import REPO

EXAMPLE = REPO / "deploy" / "examples" / "cluster-with-pods.yaml"
HEADER = ["NAMESPACE", "POD", "RUNTIMECLASS", "NODE", "PROBLEM"]
# What the example's story (its header comment) makes misplaced.
EXAMPLE_ROWS = [
    ["sandbox", "batch-28931640-2lq9d", "gvisor", "gvisor-3", "node-not-found"],
    ["sandbox", "legacy-worker-0", "sandboxed", "gvisor-1", "runtimeclass-deleted"],
    ["sandbox", "sandboxed-app-7d4b9c6f5-9hj4w", "gvisor", "gvisor-2", "selector-mismatch"],
    ["vm", "kata-db-0", "kata-containers", "kata-1", "noexecute-taint"],
]


def executable(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / name
    return subprocess.run([str(script), *args], capture_output=True, text=True, check=False, cwd=REPO)


def rows(text: str) -> list[list[str]]:
    return [re.split(r" {3,}", line.rstrip()) for line in text.splitlines() if line.strip()]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


# --- the example file ------------------------------------------------------------------


def test_example_table_and_exit_status() -> None:
    result = executable("runtimeclass-extender", "audit", "--cluster-file", str(EXAMPLE))
    assert result.returncode == 1, result.stderr
    # The table on stdout, its summary (a footer, as kubectl prints them) alone on stderr.
    assert result.stderr == "4 of 6 running pods with a RuntimeClass are misplaced.\n"
    lines = result.stdout.splitlines()
    assert rows(lines[0]) == [HEADER]
    assert rows("\n".join(lines[1:])) == EXAMPLE_ROWS
    assert len(lines) == 1 + len(EXAMPLE_ROWS)


def test_kubectl_plugin_json_and_yaml_agree() -> None:
    as_json = executable("kubectl-runtimeclass", "audit", "--cluster-file", str(EXAMPLE), "-o", "json")
    as_yaml = executable("kubectl-runtimeclass", "audit", "--cluster-file", str(EXAMPLE), "-o", "yaml")
    assert (as_json.returncode, as_yaml.returncode) == (1, 1)
    document = json.loads(as_json.stdout)
    assert yaml.safe_load(as_yaml.stdout) == document
    assert document["checked"] == 6
    items = document["misplaced"]
    assert [
        [m["namespace"], m["pod"], m["runtimeClass"], m["node"], m["problem"]] for m in items
    ] == EXAMPLE_ROWS
    assert all(set(m) == {"namespace", "pod", "runtimeClass", "node", "problem", "detail"} for m in items)
    assert "example.com/maintenance=kernel-upgrade:NoExecute" in items[3]["detail"]


def test_wide_adds_the_detail_and_namespace_narrows(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "audit", "--cluster-file", str(EXAMPLE), "-o", "wide", "-n", "sandbox")
    assert status == 1
    table = rows(out)
    assert table[0] == [*HEADER, "DETAIL"]
    assert [row[:5] for row in table[1:]] == EXAMPLE_ROWS[:3]
    assert "missing label sandbox.gke.io/runtime=gvisor" in table[3][5]
    assert err == "3 of 4 running pods with a RuntimeClass are misplaced.\n"
    status, out, err = run(capsys, "audit", "--cluster-file", str(EXAMPLE), "-n", "default")
    # Nothing to list: no table at all, the sentence on stderr (kubectl's "No resources found").
    assert (status, out) == (0, "")
    assert err == "No misplaced pods (0 running pods with a RuntimeClass checked).\n"


# --- every problem kind, and what does not count ---------------------------------------


def write_cluster(path: Path, objects: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


def running(name: str, node: str, runtime_class: str, *, namespace: str = "default") -> dict[str, Any]:
    return make_pod(name, namespace=namespace, node_name=node, runtime_class=runtime_class, phase="Running")


def every_problem() -> list[dict[str, Any]]:
    bad_term = make_runtime_class("broken", node_selector={})
    bad_term["metadata"]["annotations"] = {NODE_SELECTOR_TERM_ANNOTATION: "matchExpressions: 3"}
    kata = make_runtime_class("kata", node_selector={"runtime": "gvisor"})
    kata["overhead"] = {"podFixed": {"cpu": "250m", "memory": "160Mi"}}
    # The same overhead, written another way: equal by value, so it fits.
    overhead_ok = running("overhead-ok", "n1", "kata")
    overhead_ok["spec"]["overhead"] = {"cpu": "0.25", "memory": "167772160"}
    return [
        make_node("n1", labels={"runtime": "gvisor"}),
        make_node("n2", labels={"runtime": "runc"}),
        make_node(
            "tainted",
            labels={"runtime": "gvisor"},
            taints=[{"key": "k", "value": "v", "effect": "NoExecute"}],
        ),
        make_node(
            "cordoned",
            labels={"runtime": "gvisor"},
            taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}],
        ),
        make_runtime_class("gvisor", node_selector={"runtime": "gvisor"}),
        bad_term,
        running("fits", "n1", "gvisor"),
        running("no-longer-matches", "n2", "gvisor"),
        running("class-gone", "n1", "deleted"),
        running("node-gone", "n9", "gvisor"),
        running("bad-class", "n1", "broken"),
        running("evicted", "tainted", "gvisor"),
        running("noschedule-is-fine", "cordoned", "gvisor"),
        kata,
        running("no-overhead", "n1", "kata"),
        overhead_ok,
    ]


def test_every_problem_kind_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = write_cluster(tmp_path / "cluster.yaml", every_problem())
    status, out, err = run(capsys, "audit", "--cluster-file", str(cluster), "-o", "json")
    assert status == 1, err
    document = json.loads(out)
    assert document["checked"] == 9
    assert {m["pod"]: m["problem"] for m in document["misplaced"]} == {
        "no-longer-matches": "selector-mismatch",
        "class-gone": "runtimeclass-deleted",
        "node-gone": "node-not-found",
        "bad-class": "selector-invalid",
        "evicted": "noexecute-taint",
        "no-overhead": "overhead-mismatch",
    }
    assert {m["problem"] for m in document["misplaced"]} == set(PROBLEMS)


def test_clean_cluster_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [
        o
        for o in every_problem()
        if o["metadata"]["name"] in ("n1", "cordoned", "gvisor", "fits", "noschedule-is-fine")
    ]
    cluster = write_cluster(tmp_path / "cluster.yaml", objects)
    status, out, err = run(capsys, "audit", "--cluster-file", str(cluster))
    assert (status, out) == (0, "")
    assert err == "No misplaced pods (2 running pods with a RuntimeClass checked).\n"
    status, out, _ = run(capsys, "audit", "--cluster-file", str(cluster), "-o", "yaml")
    assert (status, yaml.safe_load(out)) == (0, {"checked": 2, "misplaced": []})


# --- bad input: one line, status 2, nothing printed on stdout ----------------------------


def bad_pod_file(tmp_path: Path) -> Path:
    malformed = running("p", "n1", "gvisor")
    malformed["spec"]["tolerations"] = [{"key": "k", "effect": 7}]
    return write_cluster(tmp_path / "bad.yaml", [make_node("n1"), malformed])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster-file", "missing.yaml"], "missing.yaml: no such file or directory"),
        (None, "bad.yaml: document 0, item 1: "),
        (["--cluster-file", str(EXAMPLE), "-o", "csv"], "argument -o/--output: invalid choice: 'csv'"),
        (["--cluster-file", str(EXAMPLE), "-n", "a", "-A"], "not allowed with argument"),
    ],
    ids=["missing-file", "malformed-pod", "bad-output", "namespace-and-all"],
)
def test_bad_input(tmp_path: Path, args: list[str] | None, message: str) -> None:
    argv = args if args is not None else ["--cluster-file", str(bad_pod_file(tmp_path))]
    result = executable("runtimeclass-extender", "audit", *argv)
    assert result.returncode == 2
    assert result.stdout == ""
    assert message in result.stderr and "Traceback" not in result.stderr
    if args is None or args[1] == "missing.yaml":
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("runtimeclass-extender: error: ")


# --- a live cluster ---------------------------------------------------------------------


async def test_live_cluster_through_a_kubeconfig(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for obj in every_problem():
        resource = {"Node": NODES, "RuntimeClass": RUNTIME_CLASSES, "Pod": PODS}[obj["kind"]]
        fake_apiserver.add(resource, obj)
    fake_apiserver.add(PODS, make_pod("done", node_name="n2", runtime_class="gvisor", phase="Succeeded"))
    fake_apiserver.add(PODS, running("elsewhere", "n2", "gvisor", namespace="other"))
    # The command runs its own event loop (asyncio.run), so it gets a thread of its own.
    status = await asyncio.to_thread(main, ["audit", "--kubeconfig", str(fake_kubeconfig), "-o", "json"])
    out, err = capsys.readouterr()
    assert status == 1, err
    document = json.loads(out)
    assert document["checked"] == 10
    problems = {(m["namespace"], m["pod"]): m["problem"] for m in document["misplaced"]}
    assert problems[("other", "elsewhere")] == "selector-mismatch"
    assert set(problems.values()) == set(PROBLEMS)
    # Running pods only, asked of the server, and pods listed before nodes.
    lists = [(r.path, r.query.get("fieldSelector")) for r in fake_apiserver.requests if r.verb == "list"]
    assert lists[0] == ("/api/v1/pods", "spec.nodeName!=,status.phase!=Failed,status.phase!=Succeeded")
    assert [path for path, _ in lists[1:]] == ["/api/v1/nodes", "/apis/node.k8s.io/v1/runtimeclasses"]

    status = await asyncio.to_thread(main, ["audit", "--kubeconfig", str(fake_kubeconfig), "-n", "other"])
    out, _ = capsys.readouterr()
    assert status == 1
    assert rows(out)[1] == ["other", "elsewhere", "gvisor", "n2", "selector-mismatch"]
    assert fake_apiserver.requests[-3].path == "/api/v1/namespaces/other/pods"


async def test_unreachable_cluster_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = FakeApiServer()
    await server.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    await server.stop()
    status = await asyncio.to_thread(main, ["audit", "--kubeconfig", str(kubeconfig)])
    _, err = capsys.readouterr()
    assert status == 2
    assert "cannot list from http://127.0.0.1:" in err and len(err.splitlines()) == 1


# --- the docs show what the command prints (docs/audit.md) ------------------------------------------


def readme_section() -> str:
    return page("audit.md")  # docs/audit.md, "Auditing running pods"


@pytest.mark.parametrize(
    ("argv", "fence"),
    [([], "text"), (["-n", "vm", "-o", "json"], "json")],
    ids=["table", "json"],
)
def test_readme_examples_are_the_commands_output(
    capsys: pytest.CaptureFixture[str], argv: list[str], fence: str
) -> None:
    section = readme_section()
    command = " ".join(["audit", "--cluster-file", "deploy/examples/cluster-with-pods.yaml", *argv])
    shown = section.split(command + "\n```\n\n```" + fence + "\n", 1)[1].split("```", 1)[0]
    _, out, err = run(capsys, "audit", "--cluster-file", str(EXAMPLE), *argv)
    # What a terminal shows: the table (stdout), then the summary (stderr).
    assert shown == out + err


def test_readme_lists_every_problem_metric_and_the_setting() -> None:
    section = readme_section()
    for problem in PROBLEMS:
        assert f"| `{problem}` |" in section, problem
    for metric in ("runtimeclass_extender_misplaced_pods", "runtimeclass_extender_audited_pods"):
        assert f"| `{metric}` |" in section, metric
    assert "--audit-running-pods" in section and "deploy/components/audit-running-pods" in section


# --- kubectl habits: -o name, --no-headers ------------------------------------------------


def test_output_name_is_kubectls_pod_slash_name(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "audit", "--cluster-file", str(EXAMPLE), "-o", "name")
    # The exit status still says whether some are misplaced; no summary, nothing on stderr.
    assert (status, err) == (1, "")
    # As `kubectl get pods -A -o name`: pod/NAME, the namespace left out.
    assert out.splitlines() == [f"pod/{row[1]}" for row in EXAMPLE_ROWS]


def test_no_headers_drops_the_header_only(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "audit", "--cluster-file", str(EXAMPLE), "--no-headers")
    assert status == 1
    assert rows(out) == EXAMPLE_ROWS
    assert err == "4 of 6 running pods with a RuntimeClass are misplaced.\n"
