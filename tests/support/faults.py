"""A fake API server, a real extender watching it, and a checker for every filter answer.

Shared by tests/cluster/test_watch_faults.py and bench/soak.py. Everything runs on one asyncio loop:

- ``FakeApiServer`` holds the true cluster; ``churn`` changes it at random (nodes come
  and go, labels and taints change, RuntimeClasses change their selector and
  tolerations, classes are deleted and re-created);
- the production ``ClusterWatch`` keeps a ``ClusterState`` in step with it, and the
  production app (``create_app``) answers ``/filter`` from that state;
- ``ObservedStates`` (tests/support/reference_model.py) records every state the stores pass
  through, and a middleware, innermost around the filter handler, checks each answer
  against the reference evaluated on the states visible during that call. Nothing
  else could legitimately have been used, so any other answer is a contradiction of
  what the extender had observed;
- ``converged`` compares the stores with the server's objects.

The node lookup (direct GETs for unknown names) is not attached: with it an answer may
depend on the server rather than on the store, which is a different property (its own
tests cover it).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from extender.cluster.state import ClusterState
from extender.cluster.watch import ClusterWatch
from extender.http.app import create_app
from extender.kube.reflector import ReflectorOptions
from extender.policy_file import load_policy
from policies.registry import Policy
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.reference_model import (
    ObservedStates,
    difference,
    expected_answer,
    matches_some_state,
    server_snapshot,
    snapshot_of,
)
from tests.support.reflectors import fast_reflector

FAST = fast_reflector(
    page_size=3, watch_timeout=5.0, idle_timeout=1.0, backoff_max=0.3, backoff_reset_after=5.0
)

POOLS = ("general", "gvisor", "kata", "gpu")
TAINTS: dict[str, list[dict[str, str]]] = {
    "general": [],
    "gvisor": [{"key": "sandbox", "value": "gvisor", "effect": "NoSchedule"}],
    "kata": [{"key": "kata", "value": "true", "effect": "NoSchedule"}],
    "gpu": [{"key": "gpu", "value": "4", "effect": "NoSchedule"}],
}
EXTRA_TAINTS = [
    {"key": "node.kubernetes.io/unreachable", "value": "", "effect": "NoExecute"},
    {"key": "maintenance", "value": "3", "effect": "NoExecute"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
]
CLASSES = ("gvisor", "kata", "gpu", "runc")
POD_TOLERATIONS: list[list[dict[str, str]]] = [
    [],
    [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}],
    [{"key": "maintenance", "operator": "Lt", "value": "5", "effect": "NoExecute"}],
    [{"operator": "Exists"}],
]


def random_node(rng: random.Random, name: str) -> dict[str, Any]:
    pool = rng.choice(POOLS)
    taints = [*TAINTS[pool]]
    if rng.random() < 0.2:
        taints.append(rng.choice(EXTRA_TAINTS))
    return make_node(name, labels={"pool": pool, "zone": rng.choice("abc")}, taints=taints)


def random_class(rng: random.Random, name: str) -> dict[str, Any]:
    if name == "runc":
        return make_runtime_class("runc")
    selector = {"pool": name} if rng.random() < 0.85 else {"pool": name, "zone": rng.choice("abc")}
    tolerations = [
        {"key": t["key"], "operator": "Equal", "value": t["value"], "effect": t["effect"]}
        for t in TAINTS[name]
    ]
    if rng.random() < 0.2:
        tolerations = []
    if rng.random() < 0.2:
        tolerations.append({"key": "maintenance", "operator": "Exists", "effect": "NoExecute"})
    return make_runtime_class(name, node_selector=selector, tolerations=tolerations)


def seed_cluster(server: FakeApiServer, rng: random.Random, nodes: int = 12) -> None:
    for i in range(nodes):
        server.add(NODES, random_node(rng, f"node-{i}"))
    for name in CLASSES:
        server.add(RUNTIME_CLASSES, random_class(rng, name))


def churn(server: FakeApiServer, rng: random.Random, *, max_nodes: int = 20) -> str:
    """One random change to the server's objects; returns what it did."""
    nodes = [o["metadata"]["name"] for o in server.objects(NODES)]
    classes = [o["metadata"]["name"] for o in server.objects(RUNTIME_CLASSES)]
    roll = rng.random()
    if roll < 0.15 and len(nodes) < max_nodes:
        name = f"node-{rng.randrange(10_000)}"
        if name not in nodes:
            server.add(NODES, random_node(rng, name))
        return "add-node"
    if roll < 0.25 and len(nodes) > 2:
        server.delete(NODES, rng.choice(nodes))
        return "delete-node"
    if roll < 0.75 and nodes:
        fresh = random_node(rng, "x")
        server.modify(
            NODES,
            rng.choice(nodes),
            lambda o: (
                o["metadata"].__setitem__(
                    "labels", {**o["metadata"]["labels"], **fresh["metadata"]["labels"]}
                ),
                o["spec"].__setitem__("taints", fresh["spec"].get("taints", [])),
            ),
        )
        return "modify-node"
    if roll < 0.9:
        name = rng.choice(CLASSES)
        fresh = random_class(rng, name)
        if name in classes:
            server.modify(
                RUNTIME_CLASSES, name, lambda o: o.__setitem__("scheduling", fresh.get("scheduling"))
            )
        else:
            server.add(RUNTIME_CLASSES, fresh)
        return "modify-class"
    if classes:
        server.delete(RUNTIME_CLASSES, rng.choice(classes))
        return "delete-class"
    return "nothing"


def random_request(rng: random.Random, server: FakeApiServer) -> dict[str, Any]:
    nodes = server.objects(NODES)
    spec: dict[str, Any] = {"tolerations": rng.choice(POD_TOLERATIONS)}
    class_name = rng.choice([None, *CLASSES, "missing"])
    if class_name is not None:
        spec["runtimeClassName"] = class_name
    pod = {"metadata": {"name": f"p{rng.randrange(1000)}", "namespace": "default"}, "spec": spec}
    if rng.random() < 0.8:
        names = [o["metadata"]["name"] for o in nodes]
        rng.shuffle(names)
        roll = rng.random()
        if roll < 0.3:
            # Every node the server has, as kube-scheduler names them with
            # percentageOfNodesToScore: 100 (the extender's prebuilt whole-cluster answer).
            return {"Pod": pod, "NodeNames": names, "Nodes": None}
        if roll < 0.55:
            # The class's pool, or a sample of it: what kube-scheduler's own filters leave
            # once RuntimeClass admission has put the class's nodeSelector on the pod
            # (often every name passes: the extender's answer is then the request).
            pool = {o["metadata"]["name"] for o in nodes if o["metadata"]["labels"].get("pool") == class_name}
            names = [name for name in names if name in pool]
            names = names[: rng.randrange(len(names) + 1)] if rng.random() < 0.5 else names
            return {"Pod": pod, "NodeNames": names, "Nodes": None}
        names = names[: rng.randrange(len(names) + 1)] + (["ghost"] if rng.random() < 0.2 else [])
        return {"Pod": pod, "NodeNames": names, "Nodes": None}
    items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in nodes]
    rng.shuffle(items)
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}


@dataclass
class Checks:
    """The tally of checked answers."""

    answers: int = 0
    exact: int = 0  # no state change during the call: one candidate answer
    not_synced: int = 0
    mismatches: list[str] = field(default_factory=list)


@dataclass
class Harness:
    server: FakeApiServer
    state: ClusterState
    watch: ClusterWatch
    app: web.Application
    observed: ObservedStates
    checks: Checks

    def store_snapshot_equals_server(self) -> bool:
        mine = snapshot_of(self.state)
        truth = server_snapshot(self.server.objects(NODES), self.server.objects(RUNTIME_CLASSES))
        return (
            mine.nodes_synced
            and mine.classes_synced
            and dict(mine.nodes) == dict(truth.nodes)
            and dict(mine.classes) == dict(truth.classes)
        )

    async def converged(self, *, timeout: float = 20.0) -> None:
        """Wait (bounded) until the stores hold exactly the server's objects."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.store_snapshot_equals_server():
            if loop.time() > deadline:
                mine = snapshot_of(self.state)
                truth = server_snapshot(self.server.objects(NODES), self.server.objects(RUNTIME_CLASSES))
                raise AssertionError(
                    f"stores did not converge: extender nodes {sorted(mine.nodes)} classes {sorted(mine.classes)}; "
                    f"server nodes {sorted(truth.nodes)} classes {sorted(truth.classes)}"
                )
            await asyncio.sleep(0.01)


def build_harness(
    api: Any, server: FakeApiServer, options: ReflectorOptions = FAST, *, policy: Policy | None = None
) -> Harness:
    """The production watch and app over ``api``, with every /filter answer checked.

    ``policy`` defaults to the bundled one, which is what the reference models.
    """
    state = ClusterState()
    observed = ObservedStates(lambda: snapshot_of(state))
    state.nodes.add_listener(observed.record)
    state.runtime_classes.add_listener(observed.record)
    checks = Checks()
    app = create_app(state=state, policy=policy or load_policy())

    @web.middleware
    async def check_answer(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path != "/filter":
            return await handler(request)
        before = observed.mark()
        response = await handler(request)
        after = observed.mark()
        assert isinstance(response, web.Response) and isinstance(response.body, bytes)
        answer = orjson.loads(response.body)
        asked = orjson.loads(await request.read())
        window = observed.window(before, after)
        checks.answers += 1
        checks.exact += all(state == window[0] for state in window)
        checks.not_synced += answer.get("Error") == "cluster state not synced"
        if response.status != 200 or not matches_some_state(answer, asked, window):
            pod = asked.get("Pod", {})
            checks.mismatches.append(
                f"status {response.status} for pod {pod.get('spec')} against {len(window)} state(s); "
                f"versus the newest: {difference(answer, expected_answer(asked, window[-1]))}; "
                f"class {window[-1].classes.get(pod.get('spec', {}).get('runtimeClassName', ''))}"
            )
        return response

    # Innermost, right around the handler: the states it brackets are the handler's own.
    app.middlewares.append(check_answer)
    watch = ClusterWatch(api, state, options=options)
    return Harness(server, state, watch, app, observed, checks)


async def filter_calls(
    post: Callable[[dict[str, Any]], Awaitable[int]],
    harness: Harness,
    rng: random.Random,
    stop: asyncio.Event,
    *,
    pause: float = 0.002,
) -> None:
    """Filter calls one after another until ``stop``; the middleware checks each."""
    while not stop.is_set():
        status = await post(random_request(rng, harness.server))
        if status != 200:
            harness.checks.mismatches.append(f"HTTP status {status}")
        if not harness.observed.states or len(harness.observed.states) > 1000:
            harness.observed.trim()  # calls are sequential: nothing is in flight here
        await asyncio.sleep(pause)
