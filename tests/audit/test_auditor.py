"""The running-pod audit of ``serve --audit-running-pods`` against the test API server.

The production code runs unmodified over an ordinary kubeconfig: the cluster watch feeds
Nodes and RuntimeClasses, the auditor's own informer lists and watches running pods,
and the gauge is read from a registry as ``/metrics`` reads it. Each change is made on
the server; the assertions wait (bounded) until the process has seen that revision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from extender.audit.auditor import AuditedPods, AuditOptions, Auditor
from extender.audit.misplaced import PROBLEMS
from extender.cli import main
from extender.cluster.pod_views import ScheduledPod
from extender.cluster.state import ClusterState
from extender.cluster.watch import ClusterWatch
from extender.http.keys import STATE
from extender.http.wiring import build_app
from extender.kube import connect as kube
from extender.leader.runner import LeaderRunner
from extender.logs import TextFormatter
from extender.settings import default_serve_settings
from extender.tasks import stop as stop_task
from tests.support.apiserver import (
    NODES,
    PODS,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_pod,
    make_runtime_class,
)
from tests.support.apps import ClientFactory
from tests.support.docs import log_line_shape, page, shown_log_line
from tests.support.paths import REPO
from tests.support.reflectors import fast_reflector
from tests.support.waiting import eventually

FAST = fast_reflector(page_size=50)
GVISOR = {"runtime": "gvisor"}
MISPLACED = "runtimeclass_extender_misplaced_pods"
AUDITED = "runtimeclass_extender_audited_pods"
NOEXECUTE = {"key": "maintenance", "value": "now", "effect": "NoExecute"}
NOSCHEDULE = {"key": "draining", "value": "true", "effect": "NoSchedule"}


def running(
    name: str,
    node: str,
    runtime_class: str | None = "gvisor",
    *,
    phase: str = "Running",
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return make_pod(
        name, node_name=node, runtime_class=runtime_class, phase=phase, tolerations=tolerations or ()
    )


def seed(server: FakeApiServer) -> None:
    """Two gVisor nodes with a pod of the class each, and pods the audit must ignore."""
    server.add(NODES, make_node("gv-1", labels=GVISOR))
    server.add(NODES, make_node("gv-2", labels=GVISOR))
    server.add(NODES, make_node("plain-1"))
    server.add(RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc", node_selector=GVISOR))
    server.add(PODS, running("a", "gv-1"))
    server.add(PODS, running("b", "gv-2"))
    server.add(PODS, running("no-class", "plain-1", runtime_class=None))
    server.add(PODS, make_pod("pending", runtime_class="gvisor"))
    server.add(PODS, running("done", "gv-1", phase="Succeeded"))


class Running:
    """A cluster watch and an auditor over one test API server, as serve runs them."""

    def __init__(self, server: FakeApiServer, state: ClusterState, auditor: Auditor) -> None:
        self.server, self.state, self.auditor = server, state, auditor
        self.registry = CollectorRegistry()
        auditor.register_metrics(self.registry)

    def misplaced(self, runtime_class: str, problem: str) -> float | None:
        return self.registry.get_sample_value(MISPLACED, {"runtime_class": runtime_class, "problem": problem})

    def series(self) -> dict[tuple[str, str], float]:
        return {
            (s.labels["runtime_class"], s.labels["problem"]): s.value
            for family in self.registry.collect()
            if family.name == MISPLACED
            for s in family.samples
        }

    async def seen(self) -> None:
        """Every object on the server has reached this process at its current revision."""

        def current() -> bool:
            for resource, store in ((NODES, self.state.nodes), (RUNTIME_CLASSES, self.state.runtime_classes)):
                on_server = {
                    o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                    for o in self.server.objects(resource)
                }
                if {n: v.resource_version for n, v in store.items()} != on_server:
                    return False
            pods = {
                f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
                for o in self.server.objects(PODS)
                if o["spec"].get("nodeName")
                and o["spec"].get("runtimeClassName")
                and o["status"]["phase"] not in ("Succeeded", "Failed")
            }
            return {n: p.resource_version for n, p in self.auditor.pods.items()} == pods

        await eventually(current, what="the server's objects in the auditor")


Start = Callable[[FakeApiServer], Awaitable[Running]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    started: list[tuple[list[asyncio.Task[None]], Any]] = []

    async def run(server: FakeApiServer) -> Running:
        conn = await kube.connect(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        state = ClusterState()
        watch = ClusterWatch(conn.api, state, options=FAST)
        # Built before the watch starts, as serve does: the index hears the first LISTs.
        auditor = Auditor(conn.api, state, options=AuditOptions(reflector=FAST))
        result = Running(server, state, auditor)
        tasks = [asyncio.create_task(watch.run()), asyncio.create_task(LeaderRunner([auditor], None).run())]
        started.append((tasks, conn.api))
        await eventually(lambda: auditor.synced, what="sync")
        await server.wait_for_watchers(PODS, 1)
        await server.wait_for_watchers(NODES, 1)
        await server.wait_for_watchers(RUNTIME_CLASSES, 1)
        await result.seen()
        return result

    yield run
    for tasks, api in started:
        for task in reversed(tasks):
            await stop_task(task)
        await api.close()


# --- the gauge follows the cluster ----------------------------------------------------


async def test_gauge_follows_node_labels_and_taints(fake_apiserver: FakeApiServer, start: Start) -> None:
    seed(fake_apiserver)
    run = await start(fake_apiserver)
    # Only the two running pods of the class are held; every problem reads 0.
    assert sorted(run.auditor.pods) == ["default/a", "default/b"]
    assert run.registry.get_sample_value(AUDITED) == 2
    assert run.series() == {("gvisor", problem): 0 for problem in PROBLEMS}

    fake_apiserver.modify(NODES, "gv-1", {"metadata": {"labels": {"runtime": "runc"}}})
    await run.seen()
    assert run.misplaced("gvisor", "selector-mismatch") == 1
    fake_apiserver.modify(NODES, "gv-1", {"metadata": {"labels": {"runtime": "gvisor"}}})
    await run.seen()
    assert run.misplaced("gvisor", "selector-mismatch") == 0  # back to 0, not gone

    # A NoSchedule taint after binding: the pod may stay (only new pods are kept off).
    fake_apiserver.modify(NODES, "gv-2", {"spec": {"taints": [NOSCHEDULE]}})
    await run.seen()
    assert set(run.series().values()) == {0}
    fake_apiserver.modify(NODES, "gv-2", {"spec": {"taints": [NOSCHEDULE, NOEXECUTE]}})
    await run.seen()
    assert run.misplaced("gvisor", "noexecute-taint") == 1
    fake_apiserver.modify(NODES, "gv-2", {"spec": {"taints": None}})
    await run.seen()
    assert set(run.series().values()) == {0}

    fake_apiserver.delete(NODES, "gv-1")
    await run.seen()
    assert run.misplaced("gvisor", "node-not-found") == 1


async def test_gauge_follows_class_deletion_and_pods(fake_apiserver: FakeApiServer, start: Start) -> None:
    seed(fake_apiserver)
    run = await start(fake_apiserver)
    fake_apiserver.delete(RUNTIME_CLASSES, "gvisor")
    await run.seen()
    # The class is gone, but its pods run on: its series stay while they do.
    assert run.misplaced("gvisor", "runtimeclass-deleted") == 2
    assert run.misplaced("gvisor", "selector-mismatch") == 0

    # A pod that terminates leaves the watch; a deleted one too.
    fake_apiserver.modify(PODS, "a", {"status": {"phase": "Failed"}})
    await run.seen()
    assert run.misplaced("gvisor", "runtimeclass-deleted") == 1
    fake_apiserver.delete(PODS, "b")
    await run.seen()
    assert run.registry.get_sample_value(AUDITED) == 0
    # No class and no pod of it: nothing left to report under its name.
    assert run.series() == {}

    # A new pod of a class that reappears: counted again, and fitting.
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc", node_selector=GVISOR))
    fake_apiserver.add(PODS, running("c", "gv-2"))
    await run.seen()
    assert run.registry.get_sample_value(AUDITED) == 1
    assert run.series() == {("gvisor", problem): 0 for problem in PROBLEMS}


async def test_pods_own_noexecute_toleration_counts_and_the_classes_does_not(
    fake_apiserver: FakeApiServer, start: Start
) -> None:
    seed(fake_apiserver)
    tolerate = {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}
    fake_apiserver.put(
        RUNTIME_CLASSES,
        make_runtime_class("gvisor", handler="runsc", node_selector=GVISOR, tolerations=[tolerate]),
    )
    fake_apiserver.add(PODS, running("tolerant", "gv-1", tolerations=[tolerate]))
    fake_apiserver.add(
        PODS, running("for-an-hour", "gv-1", tolerations=[{**tolerate, "tolerationSeconds": 3600}])
    )
    fake_apiserver.add(PODS, running("zero", "gv-1", tolerations=[{**tolerate, "tolerationSeconds": 0}]))
    run = await start(fake_apiserver)
    fake_apiserver.modify(NODES, "gv-1", {"spec": {"taints": [NOEXECUTE]}})
    await run.seen()
    misplaced = {m.pod: m.problem for m in run.auditor.index.misplaced()}
    assert misplaced == {"a": "noexecute-taint", "zero": "noexecute-taint"}
    assert run.misplaced("gvisor", "noexecute-taint") == 2


# --- logging -------------------------------------------------------------------------


def audit_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "extender.audit" and r.levelno == level]


async def test_one_warning_per_newly_misplaced_pod_none_for_those_found_at_start(
    fake_apiserver: FakeApiServer, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="extender.audit")
    seed(fake_apiserver)
    # Misplaced before the extender starts: counted, summed up once, not warned about.
    fake_apiserver.add(PODS, running("old", "plain-1"))
    fake_apiserver.add(PODS, running("orphan", "gone-node"))
    run = await start(fake_apiserver)

    def summary() -> list[logging.LogRecord]:
        return [r for r in audit_records(caplog, logging.INFO) if r.getMessage().startswith("audited")]

    await eventually(lambda: bool(summary()), what="the sync summary")
    assert audit_records(caplog, logging.WARNING) == []
    assert [r.getMessage() for r in summary()] == ["audited running pods: 2 of 4 misplaced"]
    assert summary()[0].problems == "node-not-found,selector-mismatch"  # type: ignore[attr-defined]
    assert run.misplaced("gvisor", "selector-mismatch") == 1
    assert run.misplaced("gvisor", "node-not-found") == 1

    # gv-2's pods become misplaced: one warning each, with the pod and the problem.
    fake_apiserver.add(PODS, running("b2", "gv-2"))
    await run.seen()
    fake_apiserver.modify(NODES, "gv-2", {"metadata": {"labels": {"runtime": "kata"}}})
    await run.seen()
    warnings = audit_records(caplog, logging.WARNING)
    assert [(r.pod, r.problem, r.node) for r in warnings] == [  # type: ignore[attr-defined]
        ("default/b", "selector-mismatch", "gv-2"),
        ("default/b2", "selector-mismatch", "gv-2"),
    ]
    assert all(r.getMessage() == "running pod is misplaced" for r in warnings)
    # The line docs/audit.md shows has this line's shape.
    shown = log_line_shape(shown_log_line(page("audit.md"), "extender.audit"))
    assert log_line_shape(TextFormatter().format(warnings[0])) == shown
    assert "label runtime is 'kata', not 'gvisor'" in warnings[0].detail  # type: ignore[attr-defined]

    # Another mismatch of the same kind changes only the detail: no new line.
    fake_apiserver.modify(NODES, "gv-2", {"metadata": {"labels": {"runtime": "runc"}}})
    await run.seen()
    assert len(audit_records(caplog, logging.WARNING)) == 2
    # Another problem: an INFO line naming the previous one; fixed: an INFO line each.
    fake_apiserver.modify(
        NODES, "gv-2", {"spec": {"taints": [NOEXECUTE]}, "metadata": {"labels": {"runtime": "gvisor"}}}
    )
    await run.seen()
    fake_apiserver.modify(NODES, "gv-2", {"spec": {"taints": None}})
    await run.seen()
    fake_apiserver.delete(PODS, "orphan")
    await run.seen()
    infos = [(r.getMessage(), r.pod) for r in audit_records(caplog, logging.INFO) if hasattr(r, "pod")]
    assert infos == [
        ("misplaced pod has another problem now", "default/b"),
        ("misplaced pod has another problem now", "default/b2"),
        ("misplaced pod fits its node again", "default/b"),
        ("misplaced pod fits its node again", "default/b2"),
        ("misplaced pod is gone", "default/orphan"),
    ]
    assert len(audit_records(caplog, logging.WARNING)) == 2


# --- the store keeps only what the audit judges -------------------------------------


def test_store_keeps_only_audited_pods() -> None:
    store = AuditedPods()
    store.replace(
        [
            ScheduledPod("ns", "a", uid="1", runtime_class_name="gvisor", node_name="n1"),
            ScheduledPod("ns", "plain", uid="2", node_name="n1"),
        ]
    )
    assert list(store) == ["ns/a"] and store.synced
    store.upsert(ScheduledPod("ns", "plain2", uid="3", node_name="n1"))
    assert list(store) == ["ns/a"]
    # A held pod that stops being audited (terminated) is dropped, not kept stale.
    store.upsert(ScheduledPod("ns", "a", uid="1", runtime_class_name="gvisor", node_name="n1", terminal=True))
    assert list(store) == []


# --- serve wiring --------------------------------------------------------------------


def test_audit_needs_a_live_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = REPO / "deploy" / "examples" / "cluster.yaml"
    assert main(["serve", "--port", "0", "--cluster-file", str(cluster), "--audit-running-pods"]) == 2
    err = capsys.readouterr().err
    assert "--audit-running-pods needs a live cluster" in err and "Traceback" not in err


@pytest.mark.parametrize("enabled", [False, True], ids=["flag-off", "flag-on"])
async def test_metrics_endpoint_of_the_real_app(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path, aiohttp_client: ClientFactory, enabled: bool
) -> None:
    seed(fake_apiserver)
    fake_apiserver.modify(NODES, "gv-2", {"spec": {"taints": [NOEXECUTE]}})
    settings = default_serve_settings(kubeconfig=str(fake_kubeconfig), audit_running_pods=enabled)
    app, _ = await build_app(settings)
    client = await aiohttp_client(app)

    async def metrics() -> str:
        response = await client.get("/metrics")
        assert response.status == 200
        return await response.text()

    line = f'{MISPLACED}{{problem="noexecute-taint",runtime_class="gvisor"}} 1.0'
    if not enabled:
        await eventually(lambda: app[STATE].synced, what="sync")
        text = await metrics()
        assert MISPLACED not in text and AUDITED not in text
        assert not [r for r in fake_apiserver.requests if "/pods" in r.path]
        return

    async def shows_pod() -> bool:
        return line in await metrics()

    await eventually(shows_pod, what="the misplaced pod on /metrics")
    text = await metrics()
    assert f"{AUDITED} 2.0" in text
    assert f'{MISPLACED}{{problem="selector-mismatch",runtime_class="gvisor"}} 0.0' in text
    # The informer asks for running pods only.
    pod_requests = [r for r in fake_apiserver.requests if r.path == "/api/v1/pods"]
    assert pod_requests and all(
        r.query.get("fieldSelector") == "spec.nodeName!=,status.phase!=Failed,status.phase!=Succeeded"
        for r in pod_requests
    )
