"""Capture (file format, bounds, never in the way of a filter call) and replay (diffs, exit codes)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web
from pytest_aiohttp import AiohttpClient

from extender.capture.format import CAPTURE_API_VERSION, CAPTURE_KIND, state_fingerprint
from extender.capture.replay import compare
from extender.capture.writer import CaptureDir, CaptureWriter
from extender.cli import main
from extender.cluster.file_source import load_cluster_file
from extender.cluster.state import ClusterState
from extender.filtering import decide
from extender.http.wiring import attach_capture
from extender.policy_file import load_policy
from extender.protocol import ExtenderArgs
from policies.objects import NodeView
from tests.support.apps import AppFactory
from tests.support.paths import EXAMPLE_CLUSTER, EXAMPLES

FILTER_REQUEST = json.loads((EXAMPLES / "filter-request.json").read_text())
NODE_NAMES = FILTER_REQUEST["NodeNames"]


def names_request(
    runtime_class: str | None, names: list[str], tolerations: list[Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}], "tolerations": tolerations or []}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    return {
        "Pod": {"metadata": {"name": f"pod-{runtime_class}", "namespace": "default"}, "spec": spec},
        "Nodes": None,
        "NodeNames": names,
    }


def full_nodes_request(runtime_class: str, state_file: Path = EXAMPLE_CLUSTER) -> dict[str, Any]:
    items = [item for item in yaml.safe_load(state_file.read_text())["items"] if item["kind"] == "Node"]
    request = names_request(runtime_class, [])
    request["NodeNames"] = None
    request["Nodes"] = {"metadata": {}, "items": items}
    return request


def capture_app(make_app: AppFactory, directory: Path, **bounds: int) -> web.Application:
    app = make_app(cluster_file=EXAMPLE_CLUSTER)
    attach_capture(app, CaptureWriter(directory, **bounds))
    return app


async def post_all(client: Any, requests: list[dict[str, Any]]) -> list[bytes]:
    answers = []
    for request in requests:
        response = await client.post(
            "/filter", data=orjson.dumps(request), headers={"Content-Type": "application/json"}
        )
        assert response.status == 200
        answers.append(await response.read())
    return answers


async def capture(
    aiohttp_client: AiohttpClient,
    make_app: AppFactory,
    directory: Path,
    requests: list[dict[str, Any]],
    **bounds: int,
) -> list[bytes]:
    """Serve with capture on, post ``requests``, then shut down (which drains the writer)."""
    client = await aiohttp_client(capture_app(make_app, directory, **bounds))
    answers = await post_all(client, requests)
    await client.close()
    return answers


def files(directory: Path) -> list[Path]:
    return sorted(directory.glob("capture-*.json"))


# ----- capture --------------------------------------------------------------------------


async def test_capture_file_format_names_mode(
    aiohttp_client: AiohttpClient, make_app: AppFactory, tmp_path: Path
) -> None:
    request = names_request("gvisor", [*NODE_NAMES, "ghost"])
    (answer,) = await capture(aiohttp_client, make_app, tmp_path, [request])
    (path,) = files(tmp_path)
    record = json.loads(path.read_text())
    assert record["apiVersion"] == CAPTURE_API_VERSION and record["kind"] == CAPTURE_KIND
    assert set(record) == {
        "apiVersion",
        "kind",
        "time",
        "sequence",
        "extender",
        "request",
        "response",
        "state",
    }
    assert record["time"].endswith("Z") and record["sequence"] == 1
    assert record["extender"]["predicates"] == list(load_policy().names)
    assert record["request"] == request
    assert record["response"] == json.loads(answer)
    state = load_cluster_file(EXAMPLE_CLUSTER)
    captured = record["state"]
    assert captured["fingerprint"] == state_fingerprint(state.nodes, state.runtime_classes)
    assert captured["fingerprint"].startswith("sha256:")
    assert captured["nodeCount"] == len(state.nodes)
    assert captured["runtimeClassCount"] == len(state.runtime_classes)
    assert captured["runtimeClassName"] == "gvisor"
    assert captured["runtimeClass"]["handler"] == "runsc"
    assert captured["runtimeClass"]["nodeSelector"] == {"sandbox.gke.io/runtime": "gvisor"}
    # Exactly the nodes asked about; one the extender did not know is null.
    assert list(captured["nodes"]) == [*NODE_NAMES, "ghost"]
    assert captured["nodes"]["ghost"] is None
    gvisor_1 = captured["nodes"]["gvisor-1"]
    assert gvisor_1["labels"]["sandbox.gke.io/runtime"] == "gvisor"
    assert gvisor_1["taints"] == [
        {"key": "sandbox.gke.io/runtime", "effect": "NoSchedule", "value": "gvisor"}
    ]
    assert path.name.startswith("capture-") and path.name.endswith("-00000001.json")


async def test_capture_full_nodes_mode_and_missing_class(
    aiohttp_client: AiohttpClient, make_app: AppFactory, tmp_path: Path
) -> None:
    await capture(
        aiohttp_client, make_app, tmp_path, [full_nodes_request("gvisor"), names_request("nope", NODE_NAMES)]
    )
    first, second = (json.loads(p.read_text()) for p in files(tmp_path))
    assert first["state"]["nodes"] is None  # the nodes are in the request itself
    assert first["request"]["Nodes"]["items"][0]["metadata"]["name"]
    assert second["state"]["runtimeClassName"] == "nope"
    assert second["state"]["runtimeClass"] is None


async def test_capture_does_not_change_answers_and_skips_errors(
    aiohttp_client: AiohttpClient, make_app: AppFactory, tmp_path: Path
) -> None:
    requests = [names_request(rc, NODE_NAMES) for rc in ("gvisor", "runc", None)]
    plain = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    assert await capture(aiohttp_client, make_app, tmp_path, requests) == await post_all(plain, requests)
    assert len(files(tmp_path)) == 3

    # Not synced: answered with Error, nothing to replay, nothing captured.
    unsynced = make_app(state=ClusterState())
    attach_capture(unsynced, CaptureWriter(tmp_path / "unsynced"))
    client = await aiohttp_client(unsynced)
    (answer,) = await post_all(client, requests[:1])
    assert json.loads(answer)["Error"] == "cluster state not synced"
    await client.close()
    assert files(tmp_path / "unsynced") == []


async def test_capture_count_bound_removes_oldest(
    aiohttp_client: AiohttpClient, make_app: AppFactory, tmp_path: Path
) -> None:
    requests = [names_request("gvisor", [name]) for name in NODE_NAMES[:5]]
    await capture(aiohttp_client, make_app, tmp_path, requests, max_files=2)
    kept = files(tmp_path)
    assert [json.loads(p.read_text())["request"]["NodeNames"] for p in kept] == [
        [NODE_NAMES[3]],
        [NODE_NAMES[4]],
    ]
    assert not list(tmp_path.glob(".*.tmp"))


def test_capture_dir_size_bound_and_restart(tmp_path: Path) -> None:
    directory = CaptureDir(tmp_path, max_files=100, max_bytes=250)
    directory.scan()
    for i in range(4):
        directory.write(f"capture-2026-{i}.json", b"x" * 100)
    assert [p.name for p in files(tmp_path)] == ["capture-2026-2.json", "capture-2026-3.json"]
    assert directory.total_bytes == 200
    # A new process picks up what is there and keeps to the bounds across the restart.
    (tmp_path / "unrelated.txt").write_text("not a capture")
    again = CaptureDir(tmp_path, max_files=2, max_bytes=10_000)
    again.scan()
    assert again.total_bytes == 200
    again.write("capture-2026-4.json", b"y" * 10)
    assert [p.name for p in files(tmp_path)] == ["capture-2026-3.json", "capture-2026-4.json"]
    assert (tmp_path / "unrelated.txt").exists()


async def test_full_queue_drops_and_counts(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path, queue_size=2)
    state, policy = load_cluster_file(EXAMPLE_CLUSTER), load_policy()
    for _ in range(5):  # the writer task is not running: nothing drains the queue
        writer.submit(
            request=b"{}",
            response=b"{}",
            names=[],
            runtime_class_name=None,
            runtime_class=None,
            state=state,
            policy=policy,
        )
    assert writer.stats.dropped == 3
    task = asyncio.create_task(writer.run())
    await writer.close()
    await task
    assert writer.stats.written == 2
    assert len(files(tmp_path)) == 2


async def test_write_errors_are_counted_not_raised(tmp_path: Path) -> None:
    directory = tmp_path / "captures"
    writer = CaptureWriter(directory, max_bytes=10_000_000)
    task = asyncio.create_task(writer.run())
    state, policy = load_cluster_file(EXAMPLE_CLUSTER), load_policy()

    def submit() -> None:
        writer.submit(
            request=b"{}",
            response=b"{}",
            names=["runc-1"],
            runtime_class_name=None,
            runtime_class=None,
            state=state,
            policy=policy,
        )

    submit()
    while writer.stats.written + writer.stats.failed == 0:  # until the first write is done
        await asyncio.sleep(0.01)
    for path in directory.iterdir():
        path.unlink()
    directory.rmdir()
    directory.write_text("a file where the directory was")
    submit()
    await writer.close()
    await task
    assert writer.stats.written == 1
    assert writer.stats.failed == 1


@pytest.mark.parametrize(
    ("below", "why"),
    [("", "is a file: give a directory"), ("x", "a part of its path is a file, not a directory")],
)
def test_serve_rejects_unusable_capture_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], below: str, why: str
) -> None:
    """Said in words, as the commands say of a path they cannot read: no errno code."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = blocker / below if below else blocker
    status = main(["serve", "--cluster-file", str(EXAMPLE_CLUSTER), "--port", "0", "--capture-dir", str(path)])
    assert status == 2
    err = capsys.readouterr().err
    assert f"capture-dir: {path}: {why}\n" in err
    assert "Errno" not in err


# ----- replay ---------------------------------------------------------------------------


OLD = {
    "NodeNames": ["a", "b"],
    "FailedNodes": {"c": "transient"},
    "FailedAndUnresolvableNodes": {"d": "r1"},
    "Error": "",
}


@pytest.mark.parametrize(
    ("new", "changes"),
    [
        (OLD, []),
        # Order of names and Go-style lowerCamelCase keys do not matter.
        (
            {
                "nodeNames": ["b", "a"],
                "failedNodes": {"c": "transient"},
                "failedAndUnresolvableNodes": {"d": "r1"},
            },
            [],
        ),
        (
            {**OLD, "NodeNames": ["a"], "FailedAndUnresolvableNodes": {"d": "r1", "b": "r2"}},
            ['node b: passing -> FailedAndUnresolvableNodes "r2"'],
        ),
        (
            {**OLD, "FailedNodes": {}, "FailedAndUnresolvableNodes": {"d": "r1", "c": "transient"}},
            ['node c: FailedNodes "transient" -> FailedAndUnresolvableNodes "transient"'],
        ),
        (
            {**OLD, "FailedAndUnresolvableNodes": {"d": "r9"}},
            ['node d: FailedAndUnresolvableNodes "r1" -> FailedAndUnresolvableNodes "r9"'],
        ),
        ({**OLD, "FailedAndUnresolvableNodes": {}}, ['node d: FailedAndUnresolvableNodes "r1" -> absent']),
        (
            {
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": "cluster state not synced",
            },
            [
                "Error: '' -> 'cluster state not synced'",
                "node a: passing -> absent",
                "node b: passing -> absent",
                'node c: FailedNodes "transient" -> absent',
                'node d: FailedAndUnresolvableNodes "r1" -> absent',
            ],
        ),
    ],
)
def test_compare(new: dict[str, Any], changes: list[str]) -> None:
    assert compare(OLD, new) == changes


def test_compare_full_nodes_mode() -> None:
    old = {"Nodes": {"items": [{"metadata": {"name": "a"}}]}, "FailedAndUnresolvableNodes": {"b": "r"}}
    new = {"Nodes": {"items": [{"metadata": {"name": "b"}}]}, "FailedAndUnresolvableNodes": {"a": "r"}}
    assert compare(old, new) == [
        'node a: passing -> FailedAndUnresolvableNodes "r"',
        'node b: FailedAndUnresolvableNodes "r" -> passing',
    ]
    assert compare(old, old) == []


def replay(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["replay", *argv])
    out, err = capsys.readouterr()
    return status, out, err


REPLAY_REQUESTS = [
    names_request("gvisor", NODE_NAMES),
    names_request("runc", [*NODE_NAMES, "ghost"]),
    names_request("nope", NODE_NAMES[:2]),
    full_nodes_request("windows-hyperv"),
    names_request(None, NODE_NAMES, tolerations=[{"operator": "Exists"}]),
]


async def test_replay_against_captured_state_passes(
    aiohttp_client: AiohttpClient, make_app: AppFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await capture(aiohttp_client, make_app, tmp_path, REPLAY_REQUESTS)
    status, out, _ = replay(capsys, str(tmp_path))
    assert status == 0, out
    assert (
        out.strip()
        == f"replayed {len(REPLAY_REQUESTS)} capture(s) against the captured state: 5 unchanged, 0 changed"
    )
    # The same cluster as a file: unchanged too, and the state fingerprint matches.
    status, out, _ = replay(capsys, str(tmp_path), "--cluster-file", str(EXAMPLE_CLUSTER))
    assert status == 0, out
    assert "0 captured against a different state" in out


async def test_replay_detects_an_edited_cluster_file(
    aiohttp_client: AiohttpClient, make_app: AppFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    captures = tmp_path / "captures"
    await capture(aiohttp_client, make_app, captures, REPLAY_REQUESTS)
    # The operator narrows gvisor to nodes that also carry a new label only gvisor-2 has.
    edited = tmp_path / "cluster.yaml"
    text = EXAMPLE_CLUSTER.read_text()
    text = text.replace(
        "    name: gvisor-2\n    labels:\n",
        "    name: gvisor-2\n    labels:\n      example.com/pool: sandbox\n",
        1,
    )
    text = text.replace(
        "    nodeSelector:\n      sandbox.gke.io/runtime: gvisor\n    tolerations: &id001\n",
        "    nodeSelector:\n      sandbox.gke.io/runtime: gvisor\n      example.com/pool: sandbox\n    tolerations: &id001\n",
        1,
    )
    assert text != EXAMPLE_CLUSTER.read_text()
    edited.write_text(text)
    status, out, _ = replay(capsys, str(captures), "--cluster-file", str(edited))
    assert status == 1
    lines = out.splitlines()
    changed = [line for line in lines if line.startswith("CHANGED ")]
    assert len(changed) == 1
    assert "pod default/pod-gvisor  RuntimeClass gvisor" in changed[0]
    assert (
        '  node gvisor-1: passing -> FailedAndUnresolvableNodes "node(s) didn\'t match RuntimeClass"' in lines
    )
    assert lines[-1].startswith(
        f"replayed {len(REPLAY_REQUESTS)} capture(s) against cluster file {edited}: 4 unchanged, 1 changed"
    )
    assert f"({len(REPLAY_REQUESTS)} captured against a different state" in lines[-1]


async def test_replay_with_another_policy_against_captured_state(
    aiohttp_client: AiohttpClient, make_app: AppFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await capture(aiohttp_client, make_app, tmp_path / "c", [names_request("gvisor", NODE_NAMES)])
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: runtimeclass-extender.dev/v1alpha1\nkind: Policy\npredicates:\n- name: RuntimeClassExists\n"
    )
    status, out, _ = replay(capsys, str(tmp_path / "c"), "--policy-file", str(policy))
    assert status == 1
    assert '  node runc-1: FailedAndUnresolvableNodes "node(s) didn\'t match RuntimeClass" -> passing' in out


async def test_replay_against_a_running_extender(
    aiohttp_client: AiohttpClient, make_app: AppFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await capture(aiohttp_client, make_app, tmp_path, REPLAY_REQUESTS)
    same = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    url = str(same.server.make_url(""))
    status = await asyncio.to_thread(main, ["replay", str(tmp_path), "--url", url])
    out, _ = capsys.readouterr()
    assert status == 0, out
    assert f"against the extender at {url}: 5 unchanged" in out

    empty = await aiohttp_client(make_app(state=ClusterState()))  # not synced: every answer is an Error
    status = await asyncio.to_thread(main, ["replay", str(tmp_path), "--url", str(empty.server.make_url(""))])
    out, _ = capsys.readouterr()
    assert status == 1
    assert "  Error: '' -> 'cluster state not synced'" in out


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "/captures: no such file or directory"),
        ("empty", "no capture files (capture-*.json) in"),
        ("not-json", "not JSON"),
        ("wrong-kind", f"expected apiVersion {CAPTURE_API_VERSION} and kind {CAPTURE_KIND}"),
        ("bad-request", "malformed request: request.Pod: Field required"),
        ("bad-node", "state.nodes.n1.labels: expected an object"),
    ],
)
def test_replay_bad_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, message: str
) -> None:
    directory = tmp_path / "captures"
    good: dict[str, Any] = {
        "apiVersion": CAPTURE_API_VERSION,
        "kind": CAPTURE_KIND,
        "request": names_request("gvisor", ["n1"]),
        "response": {"NodeNames": ["n1"]},
        "state": {"runtimeClassName": "gvisor", "runtimeClass": None, "nodes": {"n1": {"name": "n1"}}},
    }
    if setup != "missing":
        directory.mkdir()
    content = {
        "not-json": b"{nope",
        "wrong-kind": orjson.dumps({**good, "kind": "Other"}),
        "bad-request": orjson.dumps({**good, "request": {"NodeNames": []}}),
        "bad-node": orjson.dumps(
            {**good, "state": {**good["state"], "nodes": {"n1": {"name": "n1", "labels": []}}}}
        ),
    }.get(setup)
    if content is not None:
        (directory / "capture-1.json").write_bytes(content)
    status, out, err = replay(capsys, str(directory))
    assert status == 2
    assert out == ""
    assert err.startswith("runtimeclass-extender: error: ")
    assert message in err
    assert "Traceback" not in err


async def test_nodes_looked_up_directly_are_captured_and_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Live mode: a node the watch has not delivered yet is fetched for the call itself.
    state, policy = load_cluster_file(EXAMPLE_CLUSTER), load_policy()
    fresh = NodeView("fresh-1", labels=MappingProxyType({"kubernetes.io/os": "linux"}))
    body = orjson.dumps(names_request("runc", ["runc-1", "fresh-1"]))
    args = ExtenderArgs.model_validate_json(body)
    decision = decide(args, state, policy, extra_nodes={"fresh-1": fresh})
    assert sorted(decision.result.NodeNames or ()) == ["fresh-1", "runc-1"]  # in any order
    writer = CaptureWriter(tmp_path)
    task = asyncio.create_task(writer.run())
    writer.submit_decision(body, decision.result.to_json(), args, decision, state, policy, {"fresh-1": fresh})
    await writer.close()
    await task
    (path,) = files(tmp_path)
    assert json.loads(path.read_text())["state"]["nodes"]["fresh-1"]["labels"] == {
        "kubernetes.io/os": "linux"
    }
    status, out, _ = replay(capsys, str(tmp_path))
    assert status == 0, out
