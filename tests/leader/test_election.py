"""Leader election on a Lease (extender.leader.election) against the test API server.

Two (or three) electors over their own API connections compete for one Lease. Short
durations (lease 1 s, renew 0.6 s, retry 0.1 s) keep the hand-overs quick; every wait
is a bounded poll, never a sleep standing in for an assertion.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from extender.kube import connect as kube
from extender.kube.incluster import own_namespace
from extender.leader.election import LeaderElector, lease_spec, micro_time, record_of
from extender.leader.gate import ElectionOptions, LeaderGate, identity
from extender.tasks import stop as stop_task
from tests.support.apiserver import LEASES, FakeApiServer
from tests.support.proxy import TcpProxy
from tests.support.replicas import FAST_ELECTION
from tests.support.waiting import eventually

FAST = FAST_ELECTION


@dataclass
class Replica:
    name: str
    gate: LeaderGate
    elector: LeaderElector
    proxy: TcpProxy
    api: Any
    task: asyncio.Task[None]
    job: asyncio.Task[None]
    # What the gated job saw: ("start"|"stop", leading at that moment).
    events: list[tuple[str, bool]] = field(default_factory=list)


Start = Callable[..., Awaitable[Replica]]


@pytest.fixture
async def replicas(fake_apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[Start]:
    started: list[Replica] = []

    async def start(name: str, options: ElectionOptions = FAST) -> Replica:
        proxy = TcpProxy(fake_apiserver.host, fake_apiserver.port)
        await proxy.start()
        conn = await kube.connect(
            kubeconfig=str(proxy.write_kubeconfig(tmp_path / f"{name}.kubeconfig", fake_apiserver.token))
        )
        gate = LeaderGate(identity({"POD_NAME": name}), options)
        elector = LeaderElector(conn.api, gate)
        events: list[tuple[str, bool]] = []

        async def job() -> None:
            events.append(("start", gate.leading))
            try:
                await asyncio.Event().wait()
            finally:
                events.append(("stop", gate.leading))

        replica = Replica(
            name,
            gate,
            elector,
            proxy,
            conn.api,
            asyncio.create_task(elector.run()),
            asyncio.create_task(gate.while_leading(job)),
            events,
        )
        started.append(replica)
        return replica

    yield start
    for replica in started:
        await stop_task(replica.job)
        await stop_task(replica.task)
        await replica.proxy.stop()
        await replica.api.close()


async def leader_then_follower(replicas: Start) -> tuple[Replica, Replica]:
    """a starts alone and leads; b starts and sees a as the holder."""
    a = await replicas("a")
    await eventually(lambda: a.gate.leading, what="a leads")
    b = await replicas("b")
    await eventually(lambda: b.gate.holder == a.gate.identity, what="b sees a")
    return a, b


def lease(server: FakeApiServer) -> dict[str, Any]:
    obj = server.get(LEASES, "runtimeclass-extender", namespace=FAST.namespace)
    assert obj is not None
    return obj


def leaders(*replicas: Replica) -> list[Replica]:
    return [r for r in replicas if r.gate.leading]


async def test_one_of_two_leads_and_both_know_the_holder(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    a, b = await replicas("a"), await replicas("b")
    await eventually(lambda: len(leaders(a, b)) == 1, what="a leader")
    (leader,) = leaders(a, b)
    follower = b if leader is a else a
    await eventually(lambda: follower.gate.holder == leader.gate.identity, what="holder seen")
    spec = lease(fake_apiserver)["spec"]
    assert spec["holderIdentity"] == leader.gate.identity
    assert spec["leaseDurationSeconds"] == 1
    assert spec["renewTime"].endswith("Z") and spec["acquireTime"].endswith("Z")
    # Renewals go on; the follower never takes over a lease that is being renewed.
    renewed = spec["renewTime"]
    await eventually(lambda: lease(fake_apiserver)["spec"]["renewTime"] != renewed, what="a renewal")
    assert leaders(a, b) == [leader] and not follower.events
    assert leader.events == [("start", True)]
    assert leader.gate.details()["holder"] == leader.gate.identity


async def test_a_cancelled_leader_stops_acting_then_releases_and_the_other_takes_over(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    a, b = await leader_then_follower(replicas)
    transitions = lease(fake_apiserver)["spec"]["leaseTransitions"]
    await stop_task(a.task)
    # a's job ended before the release (it saw itself no longer leading)...
    assert a.events == [("start", True), ("stop", False)] and not a.gate.leading
    # ...and the release (no holder) lets b take over at its next retry, long before
    # the lease duration would have run out (that bound is the next test's).
    await eventually(lambda: b.gate.leading, what="b leads")
    spec = lease(fake_apiserver)["spec"]
    assert spec["holderIdentity"] == b.gate.identity
    # client-go: a release keeps the count, a new holder adds one.
    assert spec["leaseTransitions"] == transitions + 1


async def test_a_leader_cut_off_from_the_api_server_stops_within_the_renew_deadline(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    a, b = await leader_then_follower(replicas)
    loop = asyncio.get_running_loop()
    a.proxy.blackhole()  # requests hang: no answer, no error
    cut = loop.time()
    await eventually(lambda: not a.gate.leading, what="a stops leading")
    stopped = loop.time()
    await eventually(lambda: b.gate.leading, what="b takes over")
    taken = loop.time()
    # The order is the safety property: a had stopped acting before b could start.
    assert stopped < taken
    assert a.events == [("start", True), ("stop", False)]
    # b's job starts on its own task once the gate opens: waited for, not assumed.
    await eventually(lambda: b.events == [("start", True)], what="b's job started")
    assert stopped - cut < FAST.retry_period + FAST.renew_deadline + 0.5  # loose: a bound, not a timing
    a.proxy.restore()
    # a campaigns again, as a follower now.
    await eventually(lambda: a.gate.holder == b.gate.identity, what="a sees b")
    assert leaders(a, b) == [b]


async def test_an_unreachable_replica_never_leads_alone_and_three_settle_on_one(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    a, b, c = await replicas("a"), await replicas("b"), await replicas("c")
    await eventually(lambda: len(leaders(a, b, c)) == 1, what="one leader")
    for _ in range(2):
        (leader,) = leaders(a, b, c)
        leader.proxy.blackhole()
        await eventually(lambda leader=leader: not leader.gate.leading, what="the cut-off leader stops")
        await eventually(lambda: len(leaders(a, b, c)) == 1, what="a new leader")
        assert leaders(a, b, c) != [leader]
        leader.proxy.restore()
    # Every start of a job happened while leading, every stop after gate ended.
    for replica in (a, b, c):
        assert all(leading == (kind == "start") for kind, leading in replica.events), replica.events


def test_identity_is_the_pod_name_or_hostname_plus_a_uuid_per_process() -> None:
    one, two = identity({"POD_NAME": "sched-0"}), identity({"POD_NAME": "sched-0"})
    assert one.startswith("sched-0_") and two.startswith("sched-0_") and one != two
    assert identity({}, hostname="node-a").startswith("node-a_")


def test_own_namespace(tmp_path: Path) -> None:
    file = tmp_path / "namespace"
    file.write_text("runtimeclass-extender\n")
    assert own_namespace({"POD_NAMESPACE": "ns"}, str(file)) == "ns"
    assert own_namespace({}, str(file)) == "runtimeclass-extender"
    assert own_namespace({}, str(tmp_path / "missing")) == "default"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-24T23:05:45.123456Z", "2026-11-24T23:05:45.123456Z"),
        ("2026-11-24T23:05:45Z", "2026-11-24T23:05:45.000000Z"),
        ("2026-11-24T23:05:45.5+01:00", "2026-11-24T22:05:45.500000Z"),
    ],
)
def test_record_times_become_micro_time_in_utc(text: str, expected: str) -> None:
    assert micro_time(text) == expected


def test_lease_spec_rounds_a_fractional_duration_up_and_reads_back() -> None:
    record = record_of(
        {
            "spec": {
                "holderIdentity": "x_1",
                "leaseDurationSeconds": 2,
                "renewTime": "2026-01-01T00:00:00.000001Z",
            }
        }
    )
    assert (record.holder_identity, record.lease_duration, record.acquire_time) == ("x_1", "2", None)
    record.lease_duration = "1.5"
    spec = lease_spec(record, transitions=3)
    assert spec == {
        "holderIdentity": "x_1",
        "leaseDurationSeconds": 2,
        "leaseTransitions": 3,
        "renewTime": "2026-01-01T00:00:00.000001Z",
    }
    # An empty holder (a released Lease) reads as none: free to take.
    assert record_of({"spec": {"holderIdentity": ""}}).holder_identity is None


async def test_each_transition_is_one_log_line(
    fake_apiserver: FakeApiServer, replicas: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.leader")
    a, b = await leader_then_follower(replicas)
    await stop_task(a.task)
    await eventually(lambda: b.gate.leading, what="b leads")
    messages = [r.getMessage() for r in caplog.records if r.name == "extender.leader"]
    assert messages.count("started leading") == 2
    assert messages.count("stopped leading: shutting down") == 1
    assert messages.count("leader elected") == 1  # b saw a (its own term is "started leading")
