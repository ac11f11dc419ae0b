"""The pending-pod requeuer against the fake API server: who is patched, how, and how often.

The production code runs unmodified over an ordinary kubeconfig: the RuntimeClass
reflector feeds the state, the requeuer's own informer lists and watches unscheduled
pods, and nudges are real merge PATCHes the server applies. Waits are bounded polls;
the rate-limit tests substitute the limiter's clock and sleep, never assert wall time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from extender.cli import main
from extender.cluster.objects import ObjectError
from extender.cluster.pending_pods import REQUEUE_ANNOTATION, pending_pod_from_api
from extender.cluster.pod_views import pod_key
from extender.cluster.state import ClusterState
from extender.cluster.watch import ClusterWatch, runtime_class_resource
from extender.kube import connect as kube
from extender.kube.times import MICRO_TIME_FORMAT
from extender.leader.runner import LeaderRunner
from extender.logs import TextFormatter
from extender.requeue.metrics import RequeueMetrics
from extender.requeue.requeuer import RequeueOptions, Requeuer
from extender.settings import SERVE_SETTINGS
from extender.tasks import stop as stop_task
from tests.support.apiserver import PODS, RUNTIME_CLASSES, FakeApiServer, make_pod, make_runtime_class
from tests.support.docs import log_line_shape, page, shown_log_line
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.reflectors import fast_reflector
from tests.support.waiting import eventually

SCHED = "runtimeclass-scheduler"
FAST_REFLECTOR = fast_reflector(page_size=50)
FAST = RequeueOptions(
    scheduler_names=(SCHED,),
    window=0.2,
    rate=200.0,
    burst=20,
    retry_initial=0.02,
    retry_max=0.1,
    request_timeout=2.0,
    reflector=FAST_REFLECTOR,
)
PREFIX = "runtimeclass_extender_requeue_"


class Running:
    """A RuntimeClass watch and a requeuer over one fake API server, as serve runs them."""

    def __init__(self, server: FakeApiServer, state: ClusterState, requeuer: Requeuer) -> None:
        self.server, self.state, self.requeuer = server, state, requeuer
        self.registry = CollectorRegistry()
        requeuer.register_metrics(self.registry)

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(PREFIX + name, labels)
        return 0.0 if value is None else value

    async def synced(self) -> None:
        await eventually(lambda: self.state.runtime_classes.synced and self.requeuer.pods.synced, what="sync")
        await self.server.wait_for_watchers(PODS, 1)
        await self.server.wait_for_watchers(RUNTIME_CLASSES, 1)

    async def settled(self, class_name: str | None = None) -> None:
        """The latest class change has reached the requeuer and every nudge has ended."""
        if class_name is not None:
            await self.class_seen(class_name)
        # Nothing waiting or under way, and nothing in backoff either.
        await eventually(lambda: not self.requeuer.busy and not self.requeuer.queued, what="requeuer idle")

    async def class_seen(self, name: str) -> None:
        on_server = {o["metadata"]["name"]: o for o in self.server.objects(RUNTIME_CLASSES)}

        def seen() -> bool:
            view = self.state.runtime_classes.get(name)
            if name not in on_server:
                return view is None
            return (
                view is not None and view.resource_version == on_server[name]["metadata"]["resourceVersion"]
            )

        await eventually(seen, what=f"RuntimeClass {name} as on the server")


Start = Callable[..., Awaitable[Running]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    started: list[tuple[list[asyncio.Task[None]], Any]] = []

    async def run(
        server: FakeApiServer,
        options: RequeueOptions = FAST,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> Running:
        conn = await kube.connect(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        state = ClusterState()
        watch = ClusterWatch(conn.api, state, options=FAST_REFLECTOR, resources=(runtime_class_resource(),))
        extra: dict[str, Any] = {}
        if clock is not None:
            extra["clock"] = clock
        if sleep is not None:
            extra["sleep"] = sleep
        # Built before the watch starts, as serve does: it hears the first LIST.
        requeuer = Requeuer(conn.api, state, options=options, **extra)
        running = Running(server, state, requeuer)
        tasks = [asyncio.create_task(watch.run()), asyncio.create_task(LeaderRunner([requeuer], None).run())]
        started.append((tasks, conn.api))
        await running.synced()
        return running

    yield run
    for tasks, api in started:
        for task in reversed(tasks):
            await stop_task(task)
        await api.close()


def patches(server: FakeApiServer, name: str, namespace: str = "default") -> int:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    return sum(1 for r in server.requests if r.verb == "patch" and r.path == path)


def pod(server: FakeApiServer, name: str) -> dict[str, Any]:
    (found,) = [p for p in server.objects(PODS) if p["metadata"]["name"] == name]
    return found


def requeued_at(server: FakeApiServer, name: str) -> str | None:
    annotations = pod(server, name)["metadata"].get("annotations") or {}
    value = annotations.get(REQUEUE_ANNOTATION)
    return value if isinstance(value, str) else None


def without_nudge(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod minus what a nudge may change: its resourceVersion and our annotation."""
    metadata = dict(obj["metadata"])
    metadata.pop("resourceVersion")
    annotations = {
        k: v for k, v in (metadata.pop("annotations", None) or {}).items() if k != REQUEUE_ANNOTATION
    }
    if annotations:
        metadata["annotations"] = annotations
    return {**obj, "metadata": metadata}


def pending(name: str, runtime_class: str | None = "gvisor", **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("scheduler_name", SCHED)
    return make_pod(name, runtime_class=runtime_class, **kwargs)


# --- the nudge ----------------------------------------------------------------------


async def test_pending_pod_is_patched_once_when_its_class_is_created(
    fake_apiserver: FakeApiServer, start: Start
) -> None:
    fake_apiserver.add(PODS, pending("waiting"))
    running = await start(fake_apiserver)
    before = pod(fake_apiserver, "waiting")

    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc"))
    await eventually(lambda: requeued_at(fake_apiserver, "waiting") is not None, what="annotation")
    await running.settled("gvisor")

    after = pod(fake_apiserver, "waiting")
    assert patches(fake_apiserver, "waiting") == 1
    # One annotation, an RFC 3339 UTC time; nothing else on the pod changed.
    stamp = requeued_at(fake_apiserver, "waiting")
    assert stamp is not None and stamp.endswith("Z")
    moment = datetime.strptime(stamp, MICRO_TIME_FORMAT).replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - moment).total_seconds()) < 600
    assert without_nudge(after) == without_nudge(before)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert running.metric("nudges_sent_total") == 1
    assert running.metric("pending_pods") == 1

    # An edit scheduling does not read (a label) is no change: no second patch.
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"metadata": {"labels": {"team": "infra"}}})
    await running.settled("gvisor")
    assert patches(fake_apiserver, "waiting") == 1


async def test_only_unscheduled_pods_of_our_schedulers_naming_the_class_are_patched(
    fake_apiserver: FakeApiServer, start: Start
) -> None:
    fake_apiserver.add(PODS, pending("target"))
    fake_apiserver.add(PODS, pending("target", namespace="team-b"))
    fake_apiserver.add(PODS, pending("other-class", runtime_class="kata"))
    fake_apiserver.add(PODS, pending("no-class", runtime_class=None))
    fake_apiserver.add(PODS, pending("bound", node_name="node-1"))
    fake_apiserver.add(PODS, pending("other-scheduler", scheduler_name="default-scheduler"))
    running = await start(fake_apiserver)
    # The informer asked for unscheduled pods only, and holds no bound pod.
    pod_reads = [r for r in fake_apiserver.requests if r.path == "/api/v1/pods"]
    assert {r.verb for r in pod_reads} == {"list", "watch"}
    assert all(r.query.get("fieldSelector") == "spec.nodeName=" for r in pod_reads)
    assert "default/bound" not in running.requeuer.pods
    assert running.metric("pending_pods") == 3  # target x2, other-class

    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await eventually(lambda: patches(fake_apiserver, "target", "team-b") == 1, what="team-b/target patched")
    await running.settled("gvisor")
    assert patches(fake_apiserver, "target") == 1
    for name in ("other-class", "no-class", "bound", "other-scheduler"):
        assert patches(fake_apiserver, name) == 0, name
        assert requeued_at(fake_apiserver, name) is None, name
    assert running.metric("nudges_sent_total") == 2


async def test_a_burst_of_edits_yields_one_patch_per_pod(
    fake_apiserver: FakeApiServer, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.requeue")
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    for name in ("a", "b"):
        fake_apiserver.add(PODS, pending(name))
    running = await start(fake_apiserver, replace(FAST, window=0.5))
    # The class existed at start: the baseline, nothing to do.
    await running.settled("gvisor")
    assert patches(fake_apiserver, "a") == 0

    # Three edits in a row, well inside the window.
    for value in ("gvisor-1", "gvisor-2", "gvisor-3"):
        fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"sandbox": value}}})
    await eventually(lambda: patches(fake_apiserver, "b") == 1, what="b patched")
    await running.settled("gvisor")
    assert (patches(fake_apiserver, "a"), patches(fake_apiserver, "b")) == (1, 1)
    summaries = [r for r in caplog.records if r.getMessage().startswith("RuntimeClass updated")]
    assert len(summaries) == 1
    assert summaries[0].getMessage() == "RuntimeClass updated: requeued 2 pending pod(s)"
    assert summaries[0].__dict__["runtimeClass"] == "gvisor"
    # The line docs/requeue.md shows has this line's shape (its change is "added").
    shown = log_line_shape(shown_log_line(page("requeue.md"), "extender.requeue"))
    assert log_line_shape(TextFormatter().format(summaries[0]).replace(" updated", " added")) == shown

    # A later change is a new revision: one more patch each. Deleting the class too.
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"handler": "runsc"})
    await eventually(lambda: patches(fake_apiserver, "b") == 2, what="second round")
    await running.settled("gvisor")
    fake_apiserver.delete(RUNTIME_CLASSES, "gvisor")
    await eventually(lambda: patches(fake_apiserver, "b") == 3, what="third round")
    await running.settled("gvisor")
    assert (patches(fake_apiserver, "a"), patches(fake_apiserver, "b")) == (3, 3)
    assert any(r.getMessage() == "RuntimeClass deleted: requeued 2 pending pod(s)" for r in caplog.records)


async def test_changed_and_changed_back_within_the_window_is_no_change(
    fake_apiserver: FakeApiServer, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.requeue")
    fake_apiserver.add(PODS, pending("a"))
    running = await start(fake_apiserver, replace(FAST, window=0.5))
    classes = running.state.runtime_classes
    generation = classes.generation
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    fake_apiserver.delete(RUNTIME_CLASSES, "gvisor")
    await eventually(lambda: classes.generation >= generation + 2, what="both events")
    await running.settled()
    # The plan ran (the window closed) and found nothing to do.
    assert patches(fake_apiserver, "a") == 0
    assert not any(r.getMessage().startswith("RuntimeClass") for r in caplog.records)


# --- failures -----------------------------------------------------------------------


async def test_conflicts_throttling_and_server_errors_are_retried(
    fake_apiserver: FakeApiServer, start: Start
) -> None:
    fake_apiserver.add(PODS, pending("waiting"))
    running = await start(fake_apiserver)
    fake_apiserver.fail_next(1, 409, verbs={"patch"}, resource=PODS)
    fake_apiserver.fail_next(1, 503, verbs={"patch"}, resource=PODS)
    fake_apiserver.fail_next(1, 429, retry_after=1, verbs={"patch"}, resource=PODS)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await eventually(lambda: requeued_at(fake_apiserver, "waiting") is not None, what="annotation")
    await running.settled("gvisor")
    assert patches(fake_apiserver, "waiting") == 4
    assert running.metric("patch_retries_total") == 3
    assert running.metric("nudges_sent_total") == 1
    assert running.metric("nudges_failed_total", reason="retries_exhausted") == 0


async def test_a_pod_deleted_meanwhile_is_skipped_without_error(
    fake_apiserver: FakeApiServer, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    fake_apiserver.add(PODS, pending("gone"))
    fake_apiserver.add(PODS, pending("stays"))
    running = await start(fake_apiserver)
    # The informer does not hear of the deletion before the patch goes out.
    fake_apiserver.stall_watches(PODS)
    fake_apiserver.delete(PODS, "gone")
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await eventually(lambda: requeued_at(fake_apiserver, "stays") is not None, what="stays patched")
    await running.settled("gvisor")
    assert patches(fake_apiserver, "gone") == 1  # answered 404
    assert running.metric("nudges_skipped_total", reason="deleted") == 1
    assert running.metric("nudges_sent_total") == 1
    assert sum(running.metric("nudges_failed_total", reason=r) for r in ("forbidden", "rejected")) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("extender")]
    fake_apiserver.resume_watches()
    await eventually(lambda: "default/gone" not in running.requeuer.pods, what="informer caught up")


async def test_a_recreated_pod_is_not_patched_by_the_old_ones_nudge(
    fake_apiserver: FakeApiServer, start: Start
) -> None:
    fake_apiserver.add(PODS, pending("web"))
    running = await start(fake_apiserver, replace(FAST, max_attempts=1000))
    fake_apiserver.stall_watches(PODS)
    old_uid = pod(fake_apiserver, "web")["metadata"]["uid"]
    fake_apiserver.delete(PODS, "web")
    fake_apiserver.add(PODS, pending("web"))
    assert pod(fake_apiserver, "web")["metadata"]["uid"] != old_uid
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    # The uid guard refuses the old incarnation's patch (409), and the requeuer retries...
    await eventually(lambda: patches(fake_apiserver, "web") >= 2, what="conflict retried")
    assert requeued_at(fake_apiserver, "web") is None
    # ... until its informer sees the new uid, and it gives up on the old pod.
    fake_apiserver.resume_watches()
    await running.settled("gvisor")
    assert running.metric("nudges_skipped_total", reason="recreated") == 1
    assert requeued_at(fake_apiserver, "web") is None
    assert running.metric("nudges_sent_total") == 0


async def test_forbidden_is_counted_once_and_tried_again_once_allowed(
    fake_apiserver: FakeApiServer, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused nudge (403: the RBAC was missing for a while) is said once, then tried
    again with backoff, not dropped: the pod still needs it."""
    caplog.set_level(logging.DEBUG, logger="extender.requeue")
    fake_apiserver.add(PODS, pending("waiting"))
    running = await start(fake_apiserver)
    fake_apiserver.fail_next(2, 403, verbs={"patch"}, resource=PODS, message='pods "waiting" is forbidden')
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await eventually(lambda: requeued_at(fake_apiserver, "waiting") is not None, what="nudged once allowed")
    # The answer reaches the requeuer just after the server applied the patch.
    await eventually(lambda: running.metric("nudges_sent_total") == 1, what="counted")
    assert running.metric("nudges_failed_total", reason="forbidden") == 1
    assert patches(fake_apiserver, "waiting") == 3
    assert running.metric("patch_retries_total") == 2
    # One warning, with the hint docs/troubleshooting.md quotes; each retry of the
    # refusal's probe at DEBUG (the warning said it: no INFO line per retry).
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "extender.requeue"]
    assert [r.getMessage() for r in warnings] == [
        "cannot requeue pod: grant the requeue ClusterRole (patch pods); trying again with backoff"
    ]
    assert (warnings[0].__dict__["pod"], warnings[0].__dict__["status"]) == ("default/waiting", 403)
    assert "cannot requeue pod: grant the requeue ClusterRole (patch pods)" in page("troubleshooting.md")
    retries = [r for r in caplog.records if r.getMessage() == "requeue patch will be retried"]
    assert len(retries) == 2 and all(r.levelno == logging.DEBUG for r in retries)


async def test_a_nudge_that_keeps_failing_is_said_once_and_still_sent(
    fake_apiserver: FakeApiServer, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """Retryable failures (5xx) are said once, after max_attempts in a row, and the pod
    is still nudged once they end; its class change's line counts it as failed."""
    caplog.set_level(logging.INFO, logger="extender.requeue")
    fake_apiserver.add(PODS, pending("waiting"))
    running = await start(fake_apiserver, replace(FAST, max_attempts=2))
    fake_apiserver.fail_next(3, 503, verbs={"patch"}, resource=PODS)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await eventually(lambda: running.metric("nudges_sent_total") == 1, what="nudged in the end")
    await running.settled("gvisor")
    assert patches(fake_apiserver, "waiting") == 4
    assert running.metric("nudges_failed_total", reason="retries_exhausted") == 1
    assert running.metric("patch_retries_total") == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["requeueing pod keeps failing; trying again with backoff"]
    (summary,) = [r for r in caplog.records if r.getMessage().startswith("RuntimeClass added")]
    assert (summary.__dict__["requeued"], summary.__dict__["failed"]) == (0, 1)


# --- the rate limit -----------------------------------------------------------------


class FakeTime:
    """The rate limiter's clock and sleep: time passes only when the limiter sleeps."""

    def __init__(self, *, hold: bool = False) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.hold = hold
        self.release = asyncio.Event()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.hold:
            await self.release.wait()
            self.release.clear()
        self.now += seconds
        await asyncio.sleep(0)


async def test_patches_are_rate_limited(fake_apiserver: FakeApiServer, start: Start) -> None:
    names = [f"p{i}" for i in range(5)]
    for name in names:
        fake_apiserver.add(PODS, pending(name))
    fake_time = FakeTime()
    options = replace(FAST, rate=10.0, burst=2)
    running = await start(fake_apiserver, options, clock=fake_time.clock, sleep=fake_time.sleep)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await eventually(lambda: all(requeued_at(fake_apiserver, n) for n in names), what="all patched")
    await running.settled("gvisor")
    # Two at once (the burst), then one token every 1/rate seconds of limiter time.
    assert fake_time.sleeps == pytest.approx([0.1, 0.1, 0.1])
    order = [r.path.rsplit("/", 1)[1] for r in fake_apiserver.requests if r.verb == "patch"]
    assert order == names


async def test_retry_after_of_a_429_pauses_every_patch(fake_apiserver: FakeApiServer, start: Start) -> None:
    for name in ("a", "b"):
        fake_apiserver.add(PODS, pending(name))
    fake_time = FakeTime()
    options = replace(FAST, rate=100.0, burst=1, retry_max=30.0)
    running = await start(fake_apiserver, options, clock=fake_time.clock, sleep=fake_time.sleep)
    fake_apiserver.fail_next(1, 429, retry_after=1, verbs={"patch"}, resource=PODS)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await eventually(lambda: all(requeued_at(fake_apiserver, n) for n in ("a", "b")), what="both patched")
    await running.settled("gvisor")
    # "a" got the 429; "b" went out only after the server's Retry-After of 1 s.
    order = [r.path.rsplit("/", 1)[1] for r in fake_apiserver.requests if r.verb == "patch"]
    assert order == ["a", "b", "a"]
    assert fake_time.sleeps[0] == pytest.approx(1.0, abs=0.02)
    assert running.metric("patch_retries_total") == 1


async def test_a_pod_bound_while_waiting_for_its_turn_is_skipped(
    fake_apiserver: FakeApiServer, start: Start
) -> None:
    fake_apiserver.add(PODS, pending("first"))
    fake_apiserver.add(PODS, pending("second"))
    fake_time = FakeTime(hold=True)
    options = replace(FAST, rate=1.0, burst=1)
    running = await start(fake_apiserver, options, clock=fake_time.clock, sleep=fake_time.sleep)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await eventually(lambda: requeued_at(fake_apiserver, "first") is not None, what="first patched")
    await eventually(lambda: bool(fake_time.sleeps), what="second waiting for a token")
    # The scheduler binds it meanwhile: it leaves the spec.nodeName= watch.
    fake_apiserver.modify(PODS, "second", {"spec": {"nodeName": "node-1"}})
    await eventually(lambda: running.requeuer.pods.get("default/second") is None, what="informer")
    fake_time.release.set()
    await running.settled("gvisor")
    assert patches(fake_apiserver, "second") == 0
    assert running.metric("nudges_skipped_total", reason="not_pending") == 1
    assert running.metric("nudges_sent_total") == 1


# --- the informer's view of a pod ---------------------------------------------------


def test_pending_pod_keeps_identity_and_routing_only() -> None:
    obj = make_pod("p", namespace="ns", runtime_class="gvisor", scheduler_name=SCHED)
    obj["metadata"].update(uid="u-1", resourceVersion="42", labels={"app": "x"})
    view = pending_pod_from_api(obj)
    assert (view.name, view.uid, view.runtime_class_name, view.scheduler_name, view.resource_version) == (
        "ns/p",
        "u-1",
        "gvisor",
        SCHED,
        "42",
    )
    assert pod_key(obj) == view.name and view.schedulable
    terminating = make_pod("p", namespace="ns", runtime_class="gvisor")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not pending_pod_from_api(terminating).schedulable
    gated = make_pod("p", namespace="ns", runtime_class="gvisor")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    assert not pending_pod_from_api(gated).schedulable
    malformed: list[Any] = [{"metadata": {"name": "p"}}, {"metadata": {"name": "p", "namespace": 3}}, []]
    for bad in malformed:
        with pytest.raises(ObjectError):
            pending_pod_from_api(bad)


def test_every_requeue_metric_and_setting_is_in_its_docs_page() -> None:
    registry = CollectorRegistry()
    RequeueMetrics(registry, pending=lambda: 0, queued=lambda: 0)
    section = page("requeue.md")  # docs/requeue.md, "Requeueing pending pods"
    for family in registry.collect():
        name = family.name + "_total" if family.type == "counter" else family.name
        assert f"| `{name}` |" in section, name
        for sample in family.samples:
            for label in sample.labels.values():
                assert f"`{label}`" in section, label
    for setting in SERVE_SETTINGS:
        if setting.name.startswith("requeue-"):
            assert f"| `{setting.name}` |" in section, setting.name


# --- serve wiring -------------------------------------------------------------------


def test_requeue_needs_a_live_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = REPO / "deploy" / "examples" / "cluster.yaml"
    assert main(["serve", "--port", "0", "--cluster-file", str(cluster), "--requeue-pending-pods"]) == 2
    err = capsys.readouterr().err
    assert "--requeue-pending-pods needs a live cluster" in err and "Traceback" not in err


@pytest.mark.parametrize("enabled", [False, True], ids=["flag-off", "flag-on"])
async def test_serve_requeues_only_with_the_flag(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path, enabled: bool
) -> None:
    """The real ``serve`` process: with the flag off it never touches pods."""
    fake_apiserver.add(PODS, pending("waiting"))
    port = free_port()
    argv = ["serve", "--host", "127.0.0.1", "--port", str(port), "--kubeconfig", str(fake_kubeconfig)]
    if enabled:
        argv += ["--requeue-pending-pods", f"--requeue-scheduler-names=other,{SCHED}", "--requeue-window=0.1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTIMECLASS_EXTENDER_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "extender", *argv, cwd=REPO, env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with aiohttp.ClientSession() as session:

            async def get(path: str) -> tuple[int, str]:
                try:
                    async with session.get(f"http://127.0.0.1:{port}{path}") as resp:
                        return resp.status, await resp.text()
                except aiohttp.ClientError:
                    return 0, ""

            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while (await get("/readyz"))[0] != 200:
                assert process.returncode is None, "serve exited"
                assert loop.time() < deadline, "serve did not become ready"
                await asyncio.sleep(0.05)
            if enabled:
                await fake_apiserver.wait_for_watchers(PODS, 1, timeout=20)
            fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
            # The process has the class once its gauges list it.
            while 'runtime_class="gvisor"' not in (await get("/metrics"))[1]:
                assert loop.time() < deadline, "serve never saw the RuntimeClass"
                await asyncio.sleep(0.05)
            if enabled:
                while requeued_at(fake_apiserver, "waiting") is None:
                    assert loop.time() < deadline, "the pending pod was not patched"
                    await asyncio.sleep(0.05)
                metrics = (await get("/metrics"))[1]
                assert f"{PREFIX}nudges_sent_total 1.0" in metrics
            else:
                assert not [r for r in fake_apiserver.requests if "/pods" in r.path]
                assert requeued_at(fake_apiserver, "waiting") is None
                assert f"{PREFIX}nudges_sent_total" not in (await get("/metrics"))[1]
    finally:
        if process.returncode is None:
            process.terminate()
        _, err = await process.communicate()
    assert process.returncode == 0, err.decode(errors="replace")
