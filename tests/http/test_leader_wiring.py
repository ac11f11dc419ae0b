"""``serve --leader-elect`` wiring: the election runs beside the app, /readyz names the
holder, the leader gauge reads 1 on the leader, and without the flag nothing of it
exists (no Lease request, no gauge, no readyz field)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from extender.cli import main
from extender.cluster.state import ClusterState
from extender.http.actors import ActorOptions, leader_actors
from extender.http.probe_listener import create_probe_app
from extender.http.wiring import build_app
from extender.labeller.events import EventOptions
from extender.labeller.labeller import LabelOptions
from extender.leader.controller import Controller
from extender.leader.limits import WriteLimiter
from extender.policy_file import load_policy
from extender.requeue.requeuer import RequeueOptions
from extender.settings import SettingsError, default_serve_settings
from tests.support.apiserver import (
    LEASES,
    NODES,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_runtime_class,
)
from tests.support.apps import ClientFactory
from tests.support.paths import REPO
from tests.support.pod_cases import TABLES
from tests.support.ports import free_port
from tests.support.waiting import eventually

GAUGE = "runtimeclass_extender_leader"


async def _acting_app(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, **settings: Any
) -> web.Application:
    """``serve``'s app over one node and one class, the requeuer and the audit on (and
    ``settings``), with the tests' short election durations."""
    monkeypatch.setenv("POD_NAME", "extender-0")
    fake_apiserver.add(NODES, make_node("n1"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    app, _ = await build_app(
        default_serve_settings(
            kubeconfig=str(fake_kubeconfig),
            requeue_pending_pods=True,
            audit_running_pods=True,
            leader_elect_lease_namespace="runtimeclass-extender",
            leader_elect_lease_duration=1.0,
            leader_elect_renew_deadline=0.6,
            leader_elect_retry_period=0.1,
            **settings,
        )
    )
    return app


@pytest.mark.parametrize("enabled", [False, True], ids=["flag-off", "flag-on"])
async def test_leader_election_only_with_the_flag(
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    aiohttp_client: ClientFactory,
    monkeypatch: pytest.MonkeyPatch,
    enabled: bool,
) -> None:
    app = await _acting_app(fake_apiserver, fake_kubeconfig, monkeypatch, leader_elect=enabled)
    client = await aiohttp_client(app)

    async def ready() -> bool:
        return (await client.get("/readyz")).status == 200

    await eventually(ready, what="ready")
    if enabled:

        async def leading() -> bool:
            body = await (await client.get("/readyz")).json()
            return bool(body["leader"]["leading"])

        await eventually(leading, what="leading")
        body = await (await client.get("/readyz")).json()
        leader = body["leader"]
        assert leader["identity"].startswith("extender-0_") and leader["holder"] == leader["identity"]
        assert leader["lease"] == "runtimeclass-extender/runtimeclass-extender"
        lease = fake_apiserver.get(LEASES, "runtimeclass-extender", namespace="runtimeclass-extender")
        assert lease is not None and lease["spec"]["holderIdentity"] == leader["identity"]
        assert f"{GAUGE} 1.0" in await (await client.get("/metrics")).text()
    else:
        body = await (await client.get("/readyz")).json()
        assert "leader" not in body
        assert GAUGE not in await (await client.get("/metrics")).text()
        assert not [r for r in fake_apiserver.requests if "/leases" in r.path]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"leader_elect_lease_duration": 10.0}, "must be greater than --leader-elect-renew-deadline"),
        ({"leader_elect_renew_deadline": 2.0}, "must be greater than 1.2 x --leader-elect-retry-period"),
        # Accepted by client-go's checks, yet two leaders could act at once: a leader
        # that last renewed at t may act until t + 9 + 12, a follower takes over at t + 15.
        (
            {
                "leader_elect_lease_duration": 15.0,
                "leader_elect_renew_deadline": 12.0,
                "leader_elect_retry_period": 9.0,
            },
            r"renew-deadline plus --leader-elect-retry-period must be less than --leader-elect-lease-duration",
        ),
        (
            {
                "leader_elect_lease_duration": 15.0,
                "leader_elect_renew_deadline": 10.0,
                "leader_elect_retry_period": 5.0,
            },
            r"\(got 10 \+ 5 >= 15\)",
        ),
    ],
)
def test_durations_are_checked_as_the_election_needs_them(overrides: dict[str, float], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        default_serve_settings(**overrides)


def test_kube_schedulers_durations_and_the_fast_ones_of_the_tests_are_accepted() -> None:
    default_serve_settings(
        leader_elect_lease_duration=15.0, leader_elect_renew_deadline=10.0, leader_elect_retry_period=2.0
    )
    default_serve_settings(
        leader_elect_lease_duration=1.0, leader_elect_renew_deadline=0.6, leader_elect_retry_period=0.1
    )


def test_leader_elect_needs_a_live_cluster(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    assert main(["serve", "--port", "0", "--cluster-file", str(cluster), "--leader-elect"]) == 2
    err = capsys.readouterr().err
    assert "--leader-elect needs a live cluster" in err and "Traceback" not in err


async def test_two_serve_processes_one_leader_and_a_sigterm_hands_over(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path
) -> None:
    """Two real ``serve`` processes on one host: distinct identities, one leader; the
    leader's SIGTERM releases the Lease and the other takes it over."""
    fake_apiserver.add(NODES, make_node("n1"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTIMECLASS_EXTENDER_")}
    env.pop("POD_NAME", None)
    processes: list[tuple[asyncio.subprocess.Process, int]] = []
    try:
        for _ in range(2):
            port = free_port()
            argv = [
                "serve",
                "--host=127.0.0.1",
                f"--port={port}",
                f"--kubeconfig={fake_kubeconfig}",
                "--requeue-pending-pods",
                "--leader-elect",
                "--leader-elect-lease-namespace=runtimeclass-extender",
                "--leader-elect-lease-duration=1",
                "--leader-elect-renew-deadline=0.6",
                "--leader-elect-retry-period=0.1",
            ]
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "extender", *argv, cwd=REPO, env=env, stderr=asyncio.subprocess.PIPE
            )
            processes.append((process, port))
        async with aiohttp.ClientSession() as session:

            async def leader_field(port: int) -> dict[str, Any] | None:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as resp:
                        body = await resp.json()
                except (aiohttp.ClientError, ValueError):
                    return None
                leader = body.get("leader")
                return leader if isinstance(leader, dict) else None

            async def views() -> list[dict[str, Any] | None]:
                return [await leader_field(port) for _, port in processes]

            async def one_leader_both_agree() -> bool:
                seen = await views()
                if any(v is None for v in seen):
                    return False
                leading = [v for v in seen if v and v["leading"]]
                return len(leading) == 1 and all(v and v["holder"] == leading[0]["identity"] for v in seen)

            await eventually(one_leader_both_agree, timeout=30, what="one leader both agree on")
            first, second = await views()
            assert first and second and first["identity"] != second["identity"]
            hostname = socket.gethostname()
            assert first["identity"].startswith(hostname + "_") and second["identity"].startswith(
                hostname + "_"
            )
            index = 0 if first["leading"] else 1
            leader_process, _ = processes[index]
            old = (first, second)[index]["identity"]
            leader_process.terminate()
            assert await leader_process.wait() == 0
            _, other_port = processes[1 - index]

            async def taken_over() -> bool:
                view = await leader_field(other_port)
                return bool(view and view["leading"])

            await eventually(taken_over, timeout=10, what="the other process leads")
            lease = fake_apiserver.get(LEASES, "runtimeclass-extender", namespace="runtimeclass-extender")
            assert lease is not None and lease["spec"]["holderIdentity"] not in ("", old)
            _, err = await leader_process.communicate()
            # serve's shutdown order: the acting parts stop, then the Lease is released
            # while the API client is still open.
            assert b"stopped leading: shutting down" in err and b"released=True" in err
    finally:
        for process, _ in processes:
            if process.returncode is None:
                process.terminate()
                await process.communicate()


@pytest.mark.parametrize("enabled", [False, True], ids=["flag-off", "flag-on"])
async def test_healthz_stays_healthy_once_every_actor_has_started_its_term(
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    aiohttp_client: ClientFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    enabled: bool,
) -> None:
    """The kubelet restarts the container (and the ``/filter`` it serves) when
    ``/healthz`` fails: an actor whose work for the term is done (the auditor logs its
    summary and has nothing more to do until a transition) must not read as a task that
    ended, with or without an election."""
    app = await _acting_app(
        fake_apiserver, fake_kubeconfig, monkeypatch, leader_elect=enabled, label_nodes=True
    )
    client = await aiohttp_client(app)

    async def audit_summed_up() -> bool:
        return any(r.getMessage().startswith("audited running pods") for r in caplog.records)

    with caplog.at_level("INFO"):
        await eventually(audit_summed_up, what="the auditor's summary of its term")
        # Past the auditor's return: the runner has seen it, if it is going to.
        await asyncio.sleep(0.2)
        response = await client.get("/healthz")
        assert response.status == 200, await response.text()
    assert not [r for r in caplog.records if r.getMessage() == "background task ended"]


def test_the_actors_over_one_api_client_share_its_write_limiter() -> None:
    """A 429 is the API server's answer to the client: every actor's writes pause
    (each queue had a pause of its own). Each keeps its own rate."""
    limiter = WriteLimiter()
    options = ActorOptions(requeue=RequeueOptions(), label=LabelOptions(), events=EventOptions())
    actors = leader_actors(object(), ClusterState(), load_policy(), options, gate=None, limiter=limiter)
    writers = [actor for actor in actors if isinstance(actor, Controller)]
    assert [w.name for w in writers] == ["requeuer", "node-labeller", "runtimeclass-events"]
    assert all(w.queue.limiter is limiter for w in writers)
    limiter.pause(5.0, cap=30.0)
    assert all(w.queue.limiter.paused_for > 4.0 for w in writers)


async def test_without_the_table_kind_the_leader_labels_nodes_and_readiness_names_the_crd(
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    aiohttp_client: ClientFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An upgrade that skipped the PodAdmissionTable CRD: its LIST answers 404. Every
    replica logged "cannot reach the API server" and never campaigned (no label, no
    event, no certificate). Now the missing kind is said once with what installs it,
    the leader does the work that does not need it (the labels), and the pod's
    readiness says which CRD is missing until it is installed; then the table is
    written and the pod is ready."""
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("kata", node_selector={"sandbox": "kata"}))
    fake_apiserver.add(NODES, make_node("k1", labels={"sandbox": "kata"}))
    app = await _acting_app(
        fake_apiserver, fake_kubeconfig, monkeypatch, leader_elect=True, label_nodes=True,
        pod_admission_table="runtimeclass-extender",
    )
    client = await aiohttp_client(app)
    probes = await aiohttp_client(create_probe_app(app))

    def labelled() -> bool:
        node = fake_apiserver.get(NODES, "k1") or {}
        return "runtimeclass.node-restriction.kubernetes.io/kata" in (node["metadata"].get("labels") or {})

    with caplog.at_level("INFO"):
        await eventually(labelled, what="the derived label, with the table's kind missing")
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and r.__dict__.get("kind") == "podadmissiontables"]
    assert [r.getMessage() for r in warnings] == [
        "the API server does not serve this resource; the work that needs it waits for it"
    ]
    assert "podadmissiontables.runtimeclass-extender.dev" in warnings[0].__dict__["hint"]
    response = await probes.get("/readyz")
    body = await response.json()
    assert response.status == 503 and not body["podAdmissionTable"]["ready"]
    assert "CustomResourceDefinition podadmissiontables.runtimeclass-extender.dev" in body["podAdmissionTable"]["reason"]
    assert body["notServed"] == [body["podAdmissionTable"]["reason"]]
    # kube-scheduler's /readyz on the main listener reports it, and stays ready.
    assert (await client.get("/readyz")).status == 200

    fake_apiserver.register(TABLES)  # the CRD installed

    async def ready() -> bool:
        return (await probes.get("/readyz")).status == 200

    await eventually(ready, what="ready once the table is written", timeout=30.0)
    assert fake_apiserver.get(TABLES, "runtimeclass-extender") is not None
