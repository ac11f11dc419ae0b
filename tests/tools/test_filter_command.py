"""``runtimeclass-extender filter REQUEST --cluster-file PATH [--policy-file PATH]``:
one filter request answered offline, the response JSON on stdout, exit status 2 with a
one-line message (no traceback) on bad input.

Requests run against tests/data/capture-cluster.yaml (see test_http_filter.py for the
nodes and classes it holds).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_aiohttp import AiohttpClient

from extender.cli import main
from tests.support.apps import AppFactory
from tests.support.paths import REPO
from tests.support.reference_model import normalise

CLUSTER = REPO / "tests" / "data" / "capture-cluster.yaml"

MISMATCH = "node(s) didn't match RuntimeClass"
UNTOLERATED = "node(s) had untolerated taint(s)"
ALL_NODES = ["gvisor-1", "gvisor-fail-1", "gvisor-unres-1", "plain-1", "plain-fail-1", "plain-unres-1"]


def pod(runtime_class: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


GVISOR_BY_NAMES = {"Pod": pod("gvisor"), "Nodes": None, "NodeNames": ALL_NODES}
GVISOR_BY_NAMES_ANSWER = {
    "Nodes": None,
    "NodeNames": ["gvisor-1", "gvisor-fail-1", "gvisor-unres-1"],
    "FailedNodes": {},
    "FailedAndUnresolvableNodes": dict.fromkeys(["plain-1", "plain-fail-1", "plain-unres-1"], MISMATCH),
    "Error": "",
}


def write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_prints_the_response_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = write(tmp_path, "request.json", GVISOR_BY_NAMES)
    status, out, err = run(capsys, "filter", request, "--cluster-file", CLUSTER)
    assert (status, err) == (0, "")
    assert json.loads(out) == GVISOR_BY_NAMES_ANSWER


def test_reads_standard_input(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    body = json.dumps({"Pod": pod(None), "Nodes": None, "NodeNames": ["plain-1", "gvisor-1"]}).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))
    status, out, _ = run(capsys, "filter", "-", "--cluster-file", CLUSTER)
    assert status == 0
    assert json.loads(out) == {
        "Nodes": None,
        "NodeNames": ["plain-1"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {"gvisor-1": UNTOLERATED},
        "Error": "",
    }


def test_full_nodes_request_echoes_node_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labelled = {"metadata": {"name": "x", "labels": {"runtime/gvisor": "true"}}, "status": {"images": []}}
    plain = {"metadata": {"name": "y"}, "spec": {}}
    request = write(
        tmp_path,
        "request.json",
        {"Pod": pod("gvisor"), "Nodes": {"items": [labelled, plain]}, "NodeNames": None},
    )
    status, out, _ = run(capsys, "filter", request, "--cluster-file", CLUSTER)
    assert status == 0
    assert json.loads(out) == {
        "Nodes": {"metadata": {}, "items": [labelled]},
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {"y": MISMATCH},
        "Error": "",
    }


def test_policy_file_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write(
        tmp_path,
        "policy.yaml",
        "apiVersion: runtimeclass-extender.dev/v1alpha1\nkind: Policy\npredicates:\n"
        "- name: RuntimeClassExists\n- name: RuntimeClassNodeSelector\n- name: TaintToleration\n  enabled: false\n",
    )
    request = write(
        tmp_path, "request.json", {"Pod": pod(None), "Nodes": None, "NodeNames": ["plain-1", "gvisor-1"]}
    )
    status, out, _ = run(capsys, "filter", request, "--cluster-file", CLUSTER, "--policy-file", policy)
    assert status == 0
    # With the taint predicate off, the tainted node passes too.
    assert sorted(json.loads(out)["NodeNames"]) == ["gvisor-1", "plain-1"]  # in any order


async def test_same_answer_as_http(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], aiohttp_client: AiohttpClient, make_app: AppFactory
) -> None:
    body = json.dumps({"Pod": pod("runc"), "Nodes": None, "NodeNames": [*ALL_NODES, "ghost"]})
    client = await aiohttp_client(make_app(cluster_file=CLUSTER))
    response = await client.post("/filter", data=body, headers={"Content-Type": "application/json"})
    over_http = await response.json()
    status, out, _ = run(capsys, "filter", write(tmp_path, "request.json", body), "--cluster-file", CLUSTER)
    assert status == 0
    # The same answer; its passing names in any order (docs/reference.md, POST /filter):
    # normalise compares them sorted, so a name listed twice would still differ.
    assert normalise(json.loads(out)) == normalise(over_http)
    assert over_http["FailedNodes"] == {"ghost": "node(s) unknown to the RuntimeClass extender"}


BAD_INPUT = [
    pytest.param(b"{not json", "malformed ExtenderArgs", id="malformed-json"),
    pytest.param(b"\xff\xfe", "malformed ExtenderArgs", id="not-utf8"),
    pytest.param(
        json.dumps({"Pod": pod(None), "Nodes": None, "NodeNames": "plain-1"}).encode(),
        "NodeNames",
        id="wrong-shape-names-the-field",
    ),
    pytest.param(
        json.dumps({"Pod": pod(None), "Nodes": None, "NodeNames": None}).encode(),
        "exactly one of Nodes and NodeNames",
        id="neither-nodes-nor-names",
    ),
    pytest.param(
        json.dumps(
            {"Pod": pod(None), "Nodes": {"items": [{"metadata": {"name": "n", "labels": {"a": 1}}}]}}
        ).encode(),
        "items[0].metadata.labels.a",
        id="malformed-node-object",
    ),
]


@pytest.mark.parametrize(("body", "message"), BAD_INPUT)
def test_bad_request_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, message: str
) -> None:
    request = write(tmp_path, "request.json", body)
    status, out, err = run(capsys, "filter", request, "--cluster-file", CLUSTER)
    assert status == 2
    assert out == ""
    assert err.startswith("runtimeclass-extender: error: ")
    assert str(request) in err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        pytest.param(
            lambda d: ["filter", d / "absent.json", "--cluster-file", CLUSTER],
            "no such file or directory",
            id="no-request-file",
        ),
        pytest.param(
            lambda d: ["filter", d / "request.json", "--cluster-file", d / "absent.yaml"],
            "no such file or directory",
            id="no-cluster-file",
        ),
        pytest.param(
            lambda d: ["filter", d / "request.json", "--cluster-file", d / "bad-cluster.yaml"],
            'document 0: pod/p: kind: Unsupported value: "Pod": supported values: "Node", "RuntimeClass"',
            id="bad-cluster-file",
        ),
        pytest.param(
            lambda d: [
                "filter",
                d / "request.json",
                "--cluster-file",
                CLUSTER,
                "--policy-file",
                d / "absent.yaml",
            ],
            "no such file or directory",
            id="no-policy-file",
        ),
        pytest.param(
            lambda d: [
                "filter",
                d / "request.json",
                "--cluster-file",
                CLUSTER,
                "--policy-file",
                d / "bad-cluster.yaml",
            ],
            "unknown field(s) metadata",
            id="bad-policy-file",
        ),
    ],
)
def test_unusable_files_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_args: Callable[[Path], list[Any]], message: str
) -> None:
    write(tmp_path, "request.json", GVISOR_BY_NAMES)
    write(tmp_path, "bad-cluster.yaml", "kind: Pod\nmetadata: {name: p}\n")
    status, out, err = run(capsys, *make_args(tmp_path))
    assert (status, out) == (2, "")
    assert err.startswith("runtimeclass-extender: error: ")
    assert message in err
    assert "Traceback" not in err


def test_cluster_file_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["filter", "request.json"])
    assert caught.value.code == 2
    assert "--cluster-file" in capsys.readouterr().err


def test_console_process_stdin_and_exit_status() -> None:
    command = [sys.executable, "-m", "extender", "filter", "-", "--cluster-file", str(CLUSTER)]
    good = subprocess.run(
        command, input=json.dumps(GVISOR_BY_NAMES).encode(), capture_output=True, check=False
    )
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout) == GVISOR_BY_NAMES_ANSWER

    bad = subprocess.run(command, input=b"{", capture_output=True, check=False)
    assert bad.returncode == 2
    assert bad.stdout == b""
    assert b"malformed ExtenderArgs" in bad.stderr
    assert b"Traceback" not in bad.stderr
