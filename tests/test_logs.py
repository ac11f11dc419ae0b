"""Logs: one line per event, text or JSON, extras included, no traces for client errors."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from extender.cluster.file_source import load_cluster_file
from extender.http.app import create_app
from extender.logs import setup_logging
from extender.policy_file import load_policy
from tests.support.paths import REPO

EXAMPLE_CLUSTER = REPO / "deploy" / "examples" / "cluster.yaml"
EXAMPLE_REQUEST = json.loads((REPO / "deploy" / "examples" / "filter-request.json").read_text())
# The nodes the example gVisor pod cannot use (it fits gvisor-1 and gvisor-2).
REJECTED = {"runc-1", "runc-2", "kata-1", "win-1"}


def _json_lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line]


def _app() -> Any:
    return create_app(state=load_cluster_file(EXAMPLE_CLUSTER), policy=load_policy())


def _gvisor_request() -> dict[str, Any]:
    body = json.loads(json.dumps(EXAMPLE_REQUEST))
    body["NodeNames"] = ["runc-1", "runc-2", "gvisor-1", "gvisor-2", "kata-1", "win-1"]
    return body


def test_json_format_is_one_object_per_line_with_extras(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info", "json")
    log = logging.getLogger("extender.test")
    log.info("loaded cluster file", extra={"path": "/tmp/cluster.yaml", "nodes": 6})
    log.debug("not at info")
    try:
        raise RuntimeError("a bug\nover two lines")
    except RuntimeError:
        log.exception("internal error", extra={"path": "/filter"})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2  # the traceback stays inside its event's line
    first, second = (json.loads(line) for line in lines)
    assert first["msg"] == "loaded cluster file"
    assert first["level"] == "info"
    assert first["logger"] == "extender.test"
    assert first["path"] == "/tmp/cluster.yaml"
    assert first["nodes"] == 6
    assert first["ts"].endswith("Z")
    assert second["level"] == "error"
    assert "RuntimeError: a bug" in second["exception"]


def test_text_format_puts_extras_on_the_event_line(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info", "text")
    log = logging.getLogger("extender.test")
    log.info("rejected request", extra={"status": 400, "error": "request.Pod: Field required"})
    # A value from a request cannot forge a second line.
    log.info("node rejected", extra={"node": "evil\n2026-01-01 INFO forged: line"})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert " INFO extender.test: rejected request " in lines[0]
    assert "status=400" in lines[0]
    assert "error=request.Pod: Field required" in lines[0]
    assert "node='evil\\n2026-01-01 INFO forged: line'" in lines[1]


@pytest.mark.parametrize("fmt", ["json", "text"])
async def test_bad_request_logs_one_line_without_traceback(
    fmt: str, aiohttp_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("info", fmt)
    client = await aiohttp_client(_app())
    capsys.readouterr()
    response = await client.post("/filter", data=b'{"Pod": 3}', headers={"Content-Type": "application/json"})
    assert response.status == 400
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, lines
    if fmt == "json":
        (entry,) = _json_lines(err)
        assert entry["msg"] == "rejected request"
        assert entry["status"] == 400
        assert entry["path"] == "/filter"
        assert entry["error"] == "malformed ExtenderArgs"
        assert "request.Pod" in entry["detail"]
    else:
        assert "rejected request" in lines[0] and "status=400" in lines[0]


async def test_other_client_errors_log_one_line_each(
    aiohttp_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("info", "json")
    client = await aiohttp_client(_app())
    capsys.readouterr()
    assert (await client.post("/filter", data=b"{}", headers={"Content-Type": "text/plain"})).status == 415
    assert (await client.get("/filter")).status == 405
    entries = _json_lines(capsys.readouterr().err)
    assert [(e["msg"], e["status"]) for e in entries] == [
        ("rejected request", 415),
        ("rejected request", 405),
    ]
    assert all("exception" not in e for e in entries)


async def test_info_level_logs_nothing_for_a_good_filter_call(
    aiohttp_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("info", "json")
    client = await aiohttp_client(_app())
    capsys.readouterr()
    assert (await client.post("/filter", json=_gvisor_request())).status == 200
    assert capsys.readouterr().err == ""


async def test_debug_level_logs_per_node_detail(
    aiohttp_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("debug", "json")
    client = await aiohttp_client(_app())
    capsys.readouterr()
    assert (await client.post("/filter", json=_gvisor_request())).status == 200
    entries = [e for e in _json_lines(capsys.readouterr().err) if e["logger"] == "extender.http"]
    summary = [e for e in entries if e["msg"] == "filter"]
    assert len(summary) == 1
    assert summary[0]["pod"] == "default/sandboxed-app"
    assert summary[0]["runtimeClass"] == "gvisor"
    assert summary[0]["rejected"] == len(REJECTED)
    per_node = {e["node"]: e for e in entries if e["msg"] == "node rejected"}
    assert set(per_node) == REJECTED
    for entry in per_node.values():
        assert entry["reason"] == "node(s) didn't match RuntimeClass"
        # The detail says which label: what the short, shared reason cannot.
        assert "sandbox.gke.io/runtime" in entry["detail"]
