"""Scheduling throughput of RuntimeClass pods on a real kube-scheduler, each way of running the project.

    .venv/bin/python bench/scheduling_bench.py                          # 5,000 nodes, 1,000 pods, 3 rounds
    .venv/bin/python bench/scheduling_bench.py --nodes 15000 --json scheduling.json
    .venv/bin/python bench/scheduling_bench.py --scheduler-qps 1000     # kube-scheduler's client unthrottled
    .venv/bin/python bench/scheduling_bench.py --arms alone node-labels --rounds 5
    .venv/bin/python bench/scheduling_bench.py --quick                  # 300 nodes, 100 pods, burst 50, 1 round
    .venv/bin/python bench/scheduling_bench.py --arms alone policy-floor managed managed-term

How fast do pods of a RuntimeClass get scheduled in each way of running the project,
against kube-scheduler alone doing what in-tree Kubernetes does? Needs the control plane
binaries with kube-scheduler (``KUBEBUILDER_ASSETS``: docs/development.md, "The real
control plane"). Every arm runs on a control plane of its own, started fresh
(tests/support/control_plane.py), and everything it started is stopped when the arm
ends; the arms take turns round after round (``--rounds``), the order rotated each round.

The cluster, the same in every arm: ``--nodes`` nodes, Ready, each with cpu 32, memory
128Gi and room for 110 pods; half of them in the class's pool (``pool: gvisor``, tainted
``sandbox=gvisor:NoSchedule`` as GKE Sandbox taints its pool), the other half plain. The
RuntimeClass ``gvisor``: handler runsc, ``scheduling.nodeSelector: {pool: gvisor}`` and
the toleration of the pool's taint. Pods of class gvisor, in a namespace of their own,
requesting 10m of cpu and 16Mi of memory.

- ``alone``: kube-scheduler with its default profile (``default-scheduler``), on an API
  server as Kubernetes ships it (the RuntimeClass admission plugin on); the pods carry
  what that plugin merges into them (the class's ``nodeSelector`` and toleration). No
  admission policy, no extender.
- ``floor``: the node labels' scheduler profile (components/label-nodes,
  ``runtimeclass-scheduler``: the adaptive sample, the in-tree TaintToleration filter) calling a do-nothing
  extender: a small aiohttp and orjson server in a process of its own that passes every
  node it is sent (names mode), the floor of any extender. The pods carry the derived
  label requirement (``runtimeclass.node-restriction.kubernetes.io/gvisor: "true"``),
  the toleration and ``schedulerName: runtimeclass-scheduler``; the bench puts the label
  on the pool's nodes itself. API server as predicate mode runs it.
- ``node-labels``: predicate mode with the node labels (``deploy/overlays/predicate-mode``
  and ``components/label-nodes``) installed as shipped
  (tests/support/install.py: its admission policies, the pod admission table, its
  extender run as its own ServiceAccount with ``--label-nodes``), its kube-scheduler
  with the overlay's configuration calling that extender, on an API server as predicate
  mode runs it (``--disable-admission-plugins=RuntimeClass``). Pods are created plain
  (only ``runtimeClassName``); the policies route them and add the label requirement and
  the toleration. Pods are created once the labeller has labelled the whole pool and
  the policies admit pods from the table.
- ``default-scheduler``: ``deploy/overlays/default-scheduler`` installed the same way
  (pods given the label requirement and the tolerations by the policies, not routed; the
  extender runs for its labels), and kube-scheduler with its plain default profile, no
  extender. Skipped, saying so, where the overlay does not exist. Its API server as
  predicate mode runs it (the plugin off: the policies give every pod its requirement).
- ``policy-floor``: ``alone`` with one do-nothing ValidatingAdmissionPolicy bound to every
  pod (its match condition false): the floor of any admission policy on kube-apiserver
  1.36, which converts the pod for a bound policy's match conditions.
- ``managed``: the default-scheduler overlay as a managed cluster runs it: its API server
  runs the RuntimeClass admission plugin, which merges the class's selector and
  toleration into each pod; the mutating policy is not invoked for such a pod (its
  match conditions turn it away) and the guard lets it pass: every pod must come out as
  the plugin made it, unrouted and unmarked.
- ``managed-term``: the same, the class's pool selected by the node-selector-term
  annotation instead (``pool In [gvisor]``), which the plugin cannot merge: the policies
  give each pod the derived label requirement (the plugin its toleration).

kube-scheduler runs with each arm's configuration as shipped, so its API client keeps
kube-scheduler's default limit of 50 requests a second (burst 100), which paces its
binds (one POST each) in every arm alike. ``--scheduler-qps Q`` lifts it (qps Q, burst
2Q) in every arm, to see what the scheduling itself costs.

Measured per arm and round, after one warm-up pod is bound:

- throughput: ``--pods`` pods created by ``--threads`` clients as fast as the API server
  takes them; pods bound / (last bind - first create), pods/s. A bind is when a watch of
  the namespace's bound pods (``spec.nodeName`` set) sees it. Beside it the rate the pods
  were created at: where the two are close, the creation paced the scheduling;
- burst: ``--burst`` more pods created at once by the same clients; each pod's latency
  from just before its create request to when the watch sees it bound, p50 and p99;
- the two halves apart: ``--backlog`` pods created while kube-scheduler is stopped
  (SIGSTOP), their creation rate (pod admission with the cores to itself), then bound
  once it goes on (SIGCONT), pods/s from its first bind of them to its last (scheduling
  alone: where the throughput above is paced by creation, this says what the
  scheduling of the same pods costs);
- beside them, the CPU seconds each process used over the throughput pods and the
  burst, and kube-apiserver's own account of the time its admission took
  (``apiserver_admission_step_admission_duration_seconds``, by step, per pod).

Every pod must be bound to a node of the pool, and every pod that pod admission should
have admitted must carry what it gives (routed or not, the label, the toleration): an arm
that places or admits a pod wrongly is reported as failed, with what went wrong. Setup
is timed too (the nodes, and the install until the labels are on the pool). Numbers on a
shared machine: read the ratios to ``alone`` within a round, not absolute figures.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import json
import os
import re
import signal
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local import cpu_model, do_nothing_policy

from extender.cluster.class_labels import label_key
from extender.settings import DEFAULT_NODE_LABEL_PREFIX
from tests.support.autoscaler import scheduler_configuration, start_scheduler
from tests.support.control_plane import ApiError, Assets, ControlPlane, Process, find_assets
from tests.support.install import Installed, install
from tests.support.manifests import DEPLOY, PREDICATE_LABELS, render
from tests.support.ports import free_port

Json = dict[str, Any]
ARMS = ("alone", "floor", "node-labels", "default-scheduler", "policy-floor", "managed", "managed-term")
NAMESPACE = "sched-bench"
CLASS = "gvisor"
POOL = {"pool": "gvisor"}
LABEL = label_key(DEFAULT_NODE_LABEL_PREFIX, CLASS)
TAINT = {"key": "sandbox", "value": "gvisor", "effect": "NoSchedule"}
TOLERATION = {"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"}
SCHEDULER = "runtimeclass-scheduler"
DEFAULT_SCHEDULER = "default-scheduler"
DEFAULT_PROFILE: Json = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
DEFAULT_SCHEDULER_OVERLAY = "overlays/default-scheduler"
TABLE = "/apis/runtimeclass-extender.dev/v1alpha1/podadmissiontables/runtimeclass-extender"
RESOURCES = {"cpu": "32", "memory": "128Gi", "pods": "110"}
PREDICATE_MODE = {"--disable-admission-plugins": "RuntimeClass"}
RUNTIME_CLASS: Json = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": CLASS},
    "handler": "runsc",
    "scheduling": {"nodeSelector": dict(POOL), "tolerations": [dict(TOLERATION)]},
}
# The same pool by the node-selector-term annotation, which the RuntimeClass admission
# plugin cannot merge (its toleration it can).
TERM_CLASS: Json = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {
        "name": CLASS,
        "annotations": {
            "runtimeclass-extender.dev/node-selector-term": json.dumps(
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gvisor"]}]}
            )
        },
    },
    "handler": "runsc",
    "scheduling": {"tolerations": [dict(TOLERATION)]},
}


class ArmFailed(Exception):
    """The arm could not be measured, or placed or admitted a pod wrongly."""


# ----- the cluster ---------------------------------------------------------------------


def pool_node(index: int) -> str:
    return f"gvisor-{index:05d}"


def plain_node(index: int) -> str:
    return f"plain-{index:05d}"


def create_nodes(plane: ControlPlane, count: int, *, labelled: bool, threads: int) -> tuple[set[str], float]:
    """``count`` Ready nodes, half in the pool (tainted; with the derived label when
    ``labelled``), by ``threads`` clients: the pool's names and the seconds it took. Two
    requests a node: the Node with its status (kept on create), then its taints without
    the not-ready one the API server adds (no node controller here: as ``add_ready_node``)."""
    pool = {pool_node(i) for i in range((count + 1) // 2)}
    names = sorted(pool) + [plain_node(i) for i in range(count // 2)]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "ready",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }

    def create(name: str) -> None:
        in_pool = name in pool
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        if in_pool:
            labels |= POOL | ({LABEL: "true"} if labelled else {})
        taints = [TAINT] if in_pool else []
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"capacity": RESOURCES, "allocatable": RESOURCES, "conditions": [condition]},
        }
        plane.client.create("/api/v1/nodes", node)
        plane.client.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}})

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as workers:
        list(workers.map(create, names))
    seconds = time.perf_counter() - started
    sample = plane.client.get(f"/api/v1/nodes/{pool_node(0)}")
    assert [t["key"] for t in sample["spec"].get("taints") or []] == [TAINT["key"]], sample["spec"]
    assert sample["status"]["allocatable"]["pods"] == RESOURCES["pods"], sample["status"]
    return pool, seconds


def bind_cluster_role(plane: ControlPlane, namespace: str, service_account: str, role: str) -> None:
    plane.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{namespace}-{service_account}-{role.replace(':', '-')}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        }
    )


def in_tree_scheduler(
    plane: ControlPlane, configuration: Json, *, extender_port: int | None = None
) -> Process:
    """kube-scheduler as a cluster runs its own: the ServiceAccount kube-system/kube-scheduler
    with the bootstrap roles system:kube-scheduler and system:volume-scheduler."""
    plane.ensure_namespace("kube-system")
    for role in ("system:kube-scheduler", "system:volume-scheduler"):
        bind_cluster_role(plane, "kube-system", "kube-scheduler", role)
    return start_scheduler(
        plane,
        configuration,
        namespace="kube-system",
        service_account="kube-scheduler",
        extender_port=extender_port,
    )


def with_client_limit(configuration: Json, qps: float | None) -> Json:
    """The configuration, with kube-scheduler's API client limit at ``qps`` (burst twice
    that) when given; as it is (kube-scheduler's default, 50 and 100) otherwise."""
    config: Json = json.loads(json.dumps(configuration))
    if qps:
        config["clientConnection"] = {
            **(config.get("clientConnection") or {}),
            "qps": qps,
            "burst": int(2 * qps),
        }
    return config


# ----- the do-nothing extender ---------------------------------------------------------


def floor_extender_main(port: int) -> int:
    """``/filter`` passing every node it was sent (names mode), ``/readyz``: the floor of
    any extender (aiohttp and orjson, as the extender serves)."""
    import asyncio

    from aiohttp import web

    calls = 0

    async def filter_nodes(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        arguments = orjson.loads(await request.read())
        answer: Json = {
            "NodeNames": arguments.get("NodeNames") or [],
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def ready(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ready"})

    async def answered(_request: web.Request) -> web.Response:
        return web.json_response({"calls": calls})

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/filter", filter_nodes)
    app.router.add_get("/readyz", ready)
    app.router.add_get("/calls", answered)
    asyncio.run(web._run_app(app, host="127.0.0.1", port=port, access_log=None, print=None))
    return 0


def start_floor_extender(plane: ControlPlane) -> int:
    """The do-nothing extender in a process of its own, stopped with the control plane."""
    port = free_port()
    process = plane.spawn("floor-extender", [sys.executable, __file__, "--floor-extender", str(port)])
    wait_for(lambda: _answers(f"http://127.0.0.1:{port}/readyz"), 30, "the floor extender ready", process)
    return port


def floor_calls(port: int) -> int:
    """The /filter calls the do-nothing extender answered."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/calls", timeout=5) as answer:
        return int(json.loads(answer.read())["calls"])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


# ----- the install's extender: labels and the table ------------------------------------


def metric(text: str, name: str) -> float:
    """One sample of the extender's /metrics (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def extender_filter_calls(installed: Installed) -> float:
    """The /filter calls the install's extender answered with a decision."""
    return metric(installed.extender.metrics(), 'runtimeclass_extender_filter_requests_total{outcome="ok"}')


def wait_labelled(plane: ControlPlane, installed: Installed, pool: set[str], timeout: float) -> None:
    """Until the labeller has put the derived label on every pool node (its counter first,
    then one list to check) and on no other node."""
    extender = installed.extender
    wait_for(
        lambda: metric(extender.metrics(), "runtimeclass_extender_node_labels_added_total") >= len(pool),
        timeout,
        "the pool labelled",
        extender.process,
    )
    labelled = plane.client.get("/api/v1/nodes", labelSelector=f"{LABEL}=true")["items"]
    names = {n["metadata"]["name"] for n in labelled}
    if names != pool:
        raise ArmFailed(
            f"the derived label is on {len(names & pool)} of {len(pool)} pool nodes and on "
            f"{len(names - pool)} others"
        )


def wait_admitting(
    plane: ControlPlane,
    scheduler: str,
    timeout: float,
    process: Process | None,
    fault: Callable[[Json, str], str],
) -> None:
    """Until the pod admission table has the class and the policies admit a pod of it
    from the table (a dry run) as ``fault`` wants it: routed to ``scheduler`` (or left
    to the default one), the label requirement and the toleration given; or left as the
    RuntimeClass admission plugin made it."""
    probe = pod_body("probe", "plain")

    def admitting() -> bool:
        answer = plane.client.request("GET", TABLE)
        if not (answer.ok and CLASS in ((answer.body.get("spec") or {}).get("runtimeClasses") or {})):
            return False
        created = plane.client.request(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", probe, query={"dryRun": "All"}
        )
        return created.ok and not fault(created.body, scheduler)

    wait_for(admitting, timeout, "the pod admission table, and the policies admitting from it", process)


def admission_fault(pod: Json, scheduler: str) -> str:
    """What a pod admitted by the policies lacks ("" when nothing)."""
    spec = pod["spec"]
    if spec.get("schedulerName") != scheduler:
        return f"schedulerName {spec.get('schedulerName')!r}, not {scheduler!r}"
    if (spec.get("nodeSelector") or {}).get(LABEL) != "true":
        return f"nodeSelector {spec.get('nodeSelector')}: no {LABEL}"
    if not any(t.get("key") == TAINT["key"] for t in spec.get("tolerations") or []):
        return f"tolerations {spec.get('tolerations')}: none for {TAINT['key']}"
    return ""


def plugin_fault(pod: Json, scheduler: str) -> str:
    """What a pod the RuntimeClass admission plugin constrained fully lacks, or carries of
    pod admission's ("" when as it should be: the class's selector and toleration, not
    routed, no requirement, no mark)."""
    spec = pod["spec"]
    if spec.get("schedulerName") != scheduler:
        return f"schedulerName {spec.get('schedulerName')!r}, not {scheduler!r}"
    if spec.get("nodeSelector") != POOL:
        return f"nodeSelector {spec.get('nodeSelector')}, not {POOL}"
    if not any(t.get("key") == TAINT["key"] for t in spec.get("tolerations") or []):
        return f"tolerations {spec.get('tolerations')}: none for {TAINT['key']}"
    if "runtimeclass-extender.dev/admitted" in (pod["metadata"].get("labels") or {}):
        return "marked admitted: the mutating policy was invoked"
    return ""


# ----- pods ----------------------------------------------------------------------------


def pod_body(name: str, shape: str) -> bytes:
    """A pod of class gvisor: ``plain`` (for pod admission to complete), ``in-tree`` (what
    the RuntimeClass admission plugin merges), ``derived`` (what predicate mode with the node labels's
    admission gives)."""
    spec: Json = {
        "runtimeClassName": CLASS,
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }
        ],
    }
    if shape == "in-tree":
        spec |= {"nodeSelector": dict(POOL), "tolerations": [dict(TOLERATION)]}
    elif shape == "derived":
        spec |= {
            "nodeSelector": {LABEL: "true"},
            "tolerations": [dict(TOLERATION)],
            "schedulerName": SCHEDULER,
        }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }
    return json.dumps(pod).encode()


class Binds:
    """A watch of the namespace's bound pods (``spec.nodeName`` set: a pod appears in it
    when bound): when each was first seen bound, and to which node."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.at: dict[str, float] = {}
        self.node: dict[str, str] = {}
        self.relists = 0
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._watching = threading.Event()
        self._thread = threading.Thread(target=self._run, name="binds", daemon=True)
        self._connection: http.client.HTTPSConnection | None = None

    def start(self) -> Binds:
        """Once the first watch is connected: no bind after this waits for a connection."""
        self._thread.start()
        if not self._watching.wait(30):
            self.stop()
            raise ArmFailed("the watch of bound pods did not connect in 30 s")
        return self

    def stop(self) -> None:
        self._stop.set()
        connection = self._connection
        if connection is not None:
            with contextlib.suppress(OSError):
                if connection.sock is not None:
                    connection.sock.shutdown(2)
        self._thread.join(10)

    def wait(self, names: Sequence[str], timeout: float) -> list[str]:
        """Until every pod of ``names`` is bound or ``timeout`` passes: those still not."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                missing = [n for n in names if n not in self.at]
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                self._changed.wait(min(left, 1.0))

    def _list(self) -> str:
        """The bound pods now (a pod bound while no watch ran is counted bound now)."""
        listed = self.plane.client.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods", fieldSelector="spec.nodeName!="
        )
        now = time.perf_counter()
        for pod in listed["items"]:
            self._seen(pod["metadata"]["name"], pod["spec"]["nodeName"], now)
        return str(listed["metadata"]["resourceVersion"])

    def _seen(self, name: str, node: str, at: float) -> None:
        with self._changed:
            if name not in self.at:
                self.at[name] = at
                self.node[name] = node
                self._changed.notify_all()

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list()
                    self.relists += 1
                version = self._watch(version)
            except (OSError, http.client.HTTPException, ValueError, ApiError):
                if self._stop.is_set():
                    return
                time.sleep(0.2)

    def _watch(self, version: str) -> str:
        """One watch from ``version``: the version to go on from ("" to list again)."""
        plane = self.plane
        connection = http.client.HTTPSConnection("127.0.0.1", plane.port, context=plane.context, timeout=90)
        self._connection = connection
        try:
            connection.request(
                "GET",
                f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=60"
                f"&fieldSelector=spec.nodeName%21%3D&resourceVersion={version}",
            )
            response = connection.getresponse()
            if response.status != 200:
                response.read()
                return ""
            self._watching.set()
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    return version
                event = orjson.loads(line)
                now = time.perf_counter()
                kind, pod = event["type"], event["object"]
                if kind == "ERROR":  # 410 Gone: the version is too old, list again
                    return ""
                version = pod["metadata"].get("resourceVersion", version)
                if kind in ("ADDED", "MODIFIED") and pod.get("spec", {}).get("nodeName"):
                    self._seen(pod["metadata"]["name"], pod["spec"]["nodeName"], now)
            return version
        finally:
            self._connection = None
            connection.close()


@dataclass
class Created:
    """Pods created: when each create request was sent, and the rate."""

    sent: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def create_pods(
    plane: ControlPlane,
    names: Sequence[str],
    shape: str,
    threads: int,
    check: Callable[[Json], str] | None,
) -> Created:
    """``names`` created by ``threads`` clients as fast as the API server takes them;
    each created pod checked by ``check`` (what admission should have given)."""
    bodies = {name: pod_body(name, shape) for name in names}
    created = Created()
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    faults: list[str] = []

    def create(name: str) -> None:
        sent = time.perf_counter()
        answer = plane.client.request("POST", path, bodies[name])
        if answer.status != 201:
            raise ArmFailed(f"create {name}: {answer.status} {answer.message}")
        created.sent[name] = sent
        fault = check(answer.body) if check is not None else ""
        if fault:
            faults.append(f"{name}: {fault}")

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as workers:
        list(workers.map(create, names))
    created.seconds = time.perf_counter() - started
    if faults:
        raise ArmFailed(f"{len(faults)} pods admitted wrongly, e.g. {faults[0]}")
    return created


def percentile(ordered: Sequence[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def wait_for(
    condition: Callable[[], object], timeout: float, what: str, process: Process | None = None
) -> None:
    """Poll ``condition`` until true, failing the arm after ``timeout`` (or if ``process``,
    which it waits on, exited: with its last lines)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.popen.poll() is not None:
            raise ArmFailed(f"{process.name} exited while waiting for {what}:\n{process.tail(20)}")
        if time.monotonic() > deadline:
            tail = f"\n{process.name}:\n{process.tail(20)}" if process is not None else ""
            raise ArmFailed(f"timed out after {timeout:.0f} s waiting for {what}{tail}")
        time.sleep(0.2)


# ----- one arm -------------------------------------------------------------------------


@dataclass
class Arm:
    """What one arm runs (see the module doc)."""

    name: str
    shape: str  # the pods as created: pod_body
    scheduler_name: str  # the scheduler the admitted pods name
    overlay: str | None = None  # installed with its extender
    extender: str = "none"  # "floor", "install", "none": what kube-scheduler calls
    labelled: bool = False  # the bench puts the derived label on the pool's nodes itself
    apiserver_flags: Mapping[str, str] = field(default_factory=dict)
    runtime_class: Json = field(default_factory=lambda: RUNTIME_CLASS)
    # What each admitted pod must carry ("table": pod admission's, from the table;
    # "plugin": the class's selector and toleration the plugin merged, unrouted).
    admitted: str = "table"
    # Objects applied before the pods (the do-nothing policy).
    extra: list[Json] = field(default_factory=list)


def arm_of(name: str) -> Arm | str:
    """The arm, or why it cannot run here."""
    if name == "alone":
        return Arm(name, "in-tree", DEFAULT_SCHEDULER)
    if name == "floor":
        return Arm(
            name, "derived", SCHEDULER, extender="floor", labelled=True, apiserver_flags=PREDICATE_MODE
        )
    if name == "node-labels":
        return Arm(
            name,
            "plain",
            SCHEDULER,
            overlay=PREDICATE_LABELS,
            extender="install",
            apiserver_flags=PREDICATE_MODE,
        )
    if name == "policy-floor":
        return Arm(name, "in-tree", DEFAULT_SCHEDULER, extra=do_nothing_policy())
    if not (DEPLOY / DEFAULT_SCHEDULER_OVERLAY).is_dir():
        return f"skipped: deploy/{DEFAULT_SCHEDULER_OVERLAY} does not exist (another change adds it)"
    if name == "default-scheduler":
        # As measured before: the RuntimeClass admission plugin off, so the policies
        # give every pod its requirement.
        return Arm(name, "plain", DEFAULT_SCHEDULER, overlay=DEFAULT_SCHEDULER_OVERLAY, apiserver_flags=PREDICATE_MODE)
    if name == "managed":
        # As managed clusters run it: the plugin on, a class whose rules are its
        # selector: the plugin merges everything, pod admission adds nothing.
        return Arm(name, "plain", DEFAULT_SCHEDULER, overlay=DEFAULT_SCHEDULER_OVERLAY, admitted="plugin")
    return Arm(name, "plain", DEFAULT_SCHEDULER, overlay=DEFAULT_SCHEDULER_OVERLAY, runtime_class=TERM_CLASS)


def run_arm(assets: Assets, arm: Arm, args: argparse.Namespace) -> Json:
    """One arm on a control plane of its own (stopped, with all it started, at the end)."""
    result: Json = {"arm": arm.name}
    with ControlPlane(assets, apiserver_flags=arm.apiserver_flags) as plane:
        plane.apply(arm.runtime_class)
        plane.ensure_namespace(NAMESPACE)
        plane.apply_all(arm.extra)
        pool, result["nodes_s"] = create_nodes(
            plane, args.nodes, labelled=arm.labelled, threads=args.setup_threads
        )
        started = time.perf_counter()
        check: Callable[[Json], str] | None = None
        # The /filter calls kube-scheduler made, where it calls an extender.
        calls: Callable[[], float] | None = None
        if arm.overlay is not None:
            docs = render(arm.overlay)
            installed = install(plane, docs)
            timeout = len(pool) / 100 * 3 + 120  # the labeller writes 100 nodes a second
            wait_labelled(plane, installed, pool, timeout)
            fault = admission_fault if arm.admitted == "table" else plugin_fault
            wait_admitting(plane, arm.scheduler_name, 120, installed.extender.process, fault)
            check = functools.partial(fault, scheduler=arm.scheduler_name)
            if arm.extender == "install":
                configuration = with_client_limit(scheduler_configuration(docs), args.scheduler_qps)
                scheduler = start_scheduler(
                    plane, configuration, namespace=installed.namespace, extender_port=installed.extender.port
                )
                calls = functools.partial(extender_filter_calls, installed)
            else:
                scheduler = in_tree_scheduler(plane, with_client_limit(DEFAULT_PROFILE, args.scheduler_qps))
        elif arm.extender == "floor":
            port = start_floor_extender(plane)
            configuration = scheduler_configuration(render(PREDICATE_LABELS))
            scheduler = in_tree_scheduler(
                plane, with_client_limit(configuration, args.scheduler_qps), extender_port=port
            )
            calls = functools.partial(floor_calls, port)
        else:
            scheduler = in_tree_scheduler(plane, with_client_limit(DEFAULT_PROFILE, args.scheduler_qps))
        binds = Binds(plane).start()
        try:
            create_pods(plane, ["warm-up"], arm.shape, 1, check)
            if binds.wait(["warm-up"], args.timeout):
                raise ArmFailed(unbound(plane, ["warm-up"], scheduler))
            result["ready_s"] = time.perf_counter() - started

            names = [f"pod-{i:05d}" for i in range(args.pods)]
            before = cpu_seconds(plane)
            admitting = admission_seconds(plane)
            created = create_pods(plane, names, arm.shape, args.threads, check)
            missing = binds.wait(names, args.timeout)
            if missing:
                raise ArmFailed(unbound(plane, missing, scheduler))
            first = min(created.sent.values())
            result["created_per_s"] = len(names) / created.seconds
            result["bound_per_s"] = len(names) / (max(binds.at[n] for n in names) - first)

            burst = [f"burst-{i:05d}" for i in range(args.burst)]
            sent = create_pods(plane, burst, arm.shape, args.threads, check).sent
            missing = binds.wait(burst, args.timeout)
            if missing:
                raise ArmFailed(unbound(plane, missing, scheduler))
            after = cpu_seconds(plane)
            result["cpu_s"] = {name: round(after[name] - before.get(name, 0.0), 2) for name in after}
            admitted = admission_seconds(plane)
            result["admission_ms"] = {
                step: round((admitted[step] - admitting.get(step, 0.0)) * 1e3 / (len(names) + len(burst)), 3)
                for step in admitted
            }
            latencies = sorted(binds.at[n] - sent[n] for n in burst)
            result["burst_p50_ms"] = percentile(latencies, 0.50) * 1e3
            result["burst_p99_ms"] = percentile(latencies, 0.99) * 1e3
            if args.backlog:
                result |= backlog(plane, scheduler, binds, arm, args, check)

            elsewhere = {n: node for n, node in binds.node.items() if node not in pool}
            if elsewhere:
                name, node = next(iter(sorted(elsewhere.items())))
                raise ArmFailed(f"{len(elsewhere)} pods bound outside the pool, e.g. {name} to {node}")
            result["bound"] = len(binds.node)
            if calls is not None:
                # One call a pod at least: a profile that never called its extender
                # would measure kube-scheduler alone.
                result["filter_calls"] = int(calls())
                if result["filter_calls"] < result["bound"]:
                    raise ArmFailed(
                        f"{result['filter_calls']} /filter calls for {result['bound']} pods bound"
                    )
            if binds.relists > 1:
                result["relists"] = binds.relists - 1
        finally:
            binds.stop()
    return result


def backlog(
    plane: ControlPlane,
    scheduler: Process,
    binds: Binds,
    arm: Arm,
    args: argparse.Namespace,
    check: Callable[[Json], str] | None,
) -> Json:
    """The two halves of the throughput apart: ``--backlog`` pods created while
    kube-scheduler is stopped (SIGSTOP: pod creation and admission with the cores to
    themselves), then bound once it goes on (SIGCONT: scheduling alone, from its first
    bind of them to its last, so its catching up on the watch is not counted)."""
    names = [f"backlog-{i:05d}" for i in range(args.backlog)]
    os.kill(scheduler.popen.pid, signal.SIGSTOP)
    try:
        created = create_pods(plane, names, arm.shape, args.threads, check)
    finally:
        os.kill(scheduler.popen.pid, signal.SIGCONT)
    missing = binds.wait(names, args.timeout)
    if missing:
        raise ArmFailed(unbound(plane, missing, scheduler))
    times = sorted(binds.at[n] for n in names)
    return {
        "backlog_created_per_s": len(names) / created.seconds,
        "backlog_bound_per_s": (len(names) - 1) / (times[-1] - times[0]) if len(names) > 1 else 0.0,
    }


# kube-apiserver's own account of its admission work (staging/src/k8s.io/apiserver/pkg/
# admission/metrics/metrics.go): seconds summed over requests, by step (admit: the
# mutating plugins, policies and webhooks; validate: the validating ones).
ADMISSION_STEP = re.compile(
    r'^apiserver_admission_step_admission_duration_seconds_sum\{[^}]*operation="CREATE"[^}]*type="(\w+)"[^}]*\} (\S+)$',
    re.MULTILINE,
)


def admission_seconds(plane: ControlPlane) -> dict[str, float]:
    """Seconds kube-apiserver has spent in admission of creates so far, by step: wall
    time, so on shared cores it counts waiting too (ResourceQuota's queue above all)."""
    answer = plane.client.request("GET", "/metrics")
    found: dict[str, float] = {}
    for step, seconds in ADMISSION_STEP.findall(answer.body.get("message", "")):
        found[step] = found.get(step, 0.0) + float(seconds)
    return found


def cpu_seconds(plane: ControlPlane) -> dict[str, float]:
    """CPU seconds (user and system) each process of the plane has used so far: who paid
    for the pods, on a machine where they all share the cores (``/proc/PID/stat``)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for process in plane.processes:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{process.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
            found[process.name] = (int(fields[11]) + int(fields[12])) / tick
    own = os.times()
    found["bench"] = own.user + own.system  # its clients and the watch of binds
    return found


def unbound(plane: ControlPlane, missing: Sequence[str], scheduler: Process) -> str:
    """Why pods did not bind: how many, kube-scheduler's last word on one, its last lines."""
    pod = plane.client.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{missing[0]}").body
    conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"]
    why = conditions[0].get("message", "") if conditions else "no PodScheduled condition"
    return (
        f"{len(missing)} pods not bound, e.g. {missing[0]} ({why})\n{scheduler.name}:\n{scheduler.tail(15)}"
    )


# ----- rounds and the report -----------------------------------------------------------


def run(args: argparse.Namespace) -> list[Json]:
    assets = find_assets()
    if assets is None or assets.binary("kube-scheduler") is None:
        raise SystemExit("needs KUBEBUILDER_ASSETS with kube-apiserver, etcd, kubectl and kube-scheduler")
    arms: list[Arm] = []
    for name in args.arms:
        found = arm_of(name)
        if isinstance(found, str):
            print(f"{name}: {found}", flush=True)
        else:
            arms.append(found)
    results: list[Json] = []
    for round_ in range(args.rounds):
        turn = round_ % len(arms) if arms else 0
        for arm in arms[turn:] + arms[:turn]:
            try:
                result = run_arm(assets, arm, args)
            except (ArmFailed, AssertionError, RuntimeError, OSError) as exc:
                result = {"arm": arm.name, "error": str(exc)}
            result["round"] = round_ + 1
            results.append(result)
            print(
                json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}),
                flush=True,
            )
            if args.json:
                Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    return results


FULL = {"nodes": 5000, "pods": 1000, "burst": 500, "rounds": 3, "backlog": 1000}
QUICK = {"nodes": 300, "pods": 100, "burst": 50, "rounds": 1, "backlog": 100}
BACKLOG = ("backlog_created_per_s", "backlog_bound_per_s")
MEASURES = ("nodes_s", "ready_s", "created_per_s", "bound_per_s", "burst_p50_ms", "burst_p99_ms", *BACKLOG)
RATIOS = ("bound_per_s", "burst_p50_ms", "burst_p99_ms", *BACKLOG)


def ratios(results: Sequence[Json]) -> None:
    """Each result's measures over ``alone``'s of the same round (where both were measured)."""
    alone = {r["round"]: r for r in results if r["arm"] == "alone" and "error" not in r}
    for r in results:
        base = alone.get(r["round"])
        if base is not None and "error" not in r and r["arm"] != "alone":
            r["vs_alone"] = {m: r[m] / base[m] for m in RATIOS if m in r and base.get(m)}


def summary(results: Sequence[Json], names: Sequence[str]) -> dict[str, Json]:
    """Per arm: the medians of its rounds' measures and of its ratios to ``alone``."""
    found: dict[str, Json] = {}
    for name in names:
        good = [r for r in results if r["arm"] == name and "error" not in r]
        failed = [r for r in results if r["arm"] == name and "error" in r]
        if not good and not failed:
            continue
        entry: Json = {"rounds": len(good), "failed": len(failed)}
        if good:
            entry |= {m: statistics.median(r[m] for r in good) for m in MEASURES if all(m in r for r in good)}
            with_ratio = [r["vs_alone"] for r in good if "vs_alone" in r]
            if with_ratio:
                entry["vs_alone"] = {
                    m: statistics.median(v[m] for v in with_ratio)
                    for m in RATIOS
                    if all(m in v for v in with_ratio)
                }
        found[name] = entry
    return found


def report(results: Sequence[Json], medians: Mapping[str, Json], args: argparse.Namespace) -> None:
    limit = f"qps {args.scheduler_qps:g}" if args.scheduler_qps else "kube-scheduler's default client limit"
    print()
    print(
        f"# kube-scheduler 1.36.2 ({cpu_model()}, {os.cpu_count()} CPUs): {args.nodes} nodes "
        f"({(args.nodes + 1) // 2} in the pool), {args.pods} pods by {args.threads} threads, burst {args.burst}; "
        f"{args.rounds} rounds; {limit}"
    )
    print(_header("round"))
    for r in results:
        if "error" in r:
            print(f"{r['arm']:18} {r['round']:>6}  FAILED: {r['error'].splitlines()[0]}")
            continue
        print(_row(r["arm"], str(r["round"]), r))
    print("\nCPU seconds each process used over the throughput pods and the burst:")
    for r in results:
        if "cpu_s" in r:
            used = ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(r["cpu_s"].items()))
            print(f"{r['arm']:18} {r['round']:>6}  {used}")
    print(
        "\nkube-apiserver's admission of creates (the pod, its binding, its event), ms a pod, "
        "wall time, by step:"
    )
    for r in results:
        if "admission_ms" in r:
            steps = ", ".join(f"{step} {ms:.2f}" for step, ms in sorted(r["admission_ms"].items()))
            print(f"{r['arm']:18} {r['round']:>6}  {steps}")
    if any("backlog_bound_per_s" in r for r in results):
        print(
            f"\nthe halves apart: {args.backlog} pods created while kube-scheduler was stopped, "
            "then bound once it went on (pods/s; vs alone):"
        )
        print(f"{'arm':18} {'round':>6} {'created/s':>10} {'bound/s':>8}  vs alone: created/s, bound/s")
        for r in results:
            if "backlog_bound_per_s" in r:
                print(_backlog_row(r["arm"], str(r["round"]), r))
    print("\nmedians of the rounds:")
    print(_header("rounds"))
    for name, m in medians.items():
        if m["rounds"]:
            failed = f"  ({m['failed']} rounds failed)" if m["failed"] else ""
            print(_row(name, f"{m['rounds']}", m) + failed)
        else:
            print(f"{name:18} {'':>6}  every round failed")
    backlogs = {name: m for name, m in medians.items() if "backlog_bound_per_s" in m}
    if backlogs:
        print("\nthe halves apart, medians of the rounds:")
        print(f"{'arm':18} {'rounds':>6} {'created/s':>10} {'bound/s':>8}  vs alone: created/s, bound/s")
        for name, m in backlogs.items():
            print(_backlog_row(name, f"{m['rounds']}", m))


def _header(rounds: str) -> str:
    """The columns: setup (the nodes; the install until the first pod bound), the rates,
    the burst's latency, and the ratios to ``alone`` of the same round."""
    return (
        f"{'arm':18} {rounds:>6} {'nodes s':>8} {'ready s':>8} {'created/s':>10} {'bound/s':>8} "
        f"{'p50 ms':>8} {'p99 ms':>8}  vs alone: bound/s, p50, p99"
    )


def _row(name: str, round_: str, m: Mapping[str, Any]) -> str:
    vs = m.get("vs_alone")
    ratio = f"{vs['bound_per_s']:.2f}x, {vs['burst_p50_ms']:.2f}x, {vs['burst_p99_ms']:.2f}x" if vs else ""
    return (
        f"{name:18} {round_:>6} {m['nodes_s']:8.1f} {m['ready_s']:8.1f} {m['created_per_s']:10.1f} "
        f"{m['bound_per_s']:8.1f} {m['burst_p50_ms']:8.0f} {m['burst_p99_ms']:8.0f}  {ratio}"
    )


def _backlog_row(name: str, round_: str, m: Mapping[str, Any]) -> str:
    vs = m.get("vs_alone") or {}
    ratio = (
        f"{vs['backlog_created_per_s']:.2f}x, {vs['backlog_bound_per_s']:.2f}x"
        if all(k in vs for k in BACKLOG)
        else ""
    )
    return (
        f"{name:18} {round_:>6} {m['backlog_created_per_s']:10.1f} {m['backlog_bound_per_s']:8.1f}  {ratio}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--floor-extender"]:
        return floor_extender_main(int(argv[1]))
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, help="nodes, half of them in the class's pool (5000)")
    parser.add_argument("--pods", type=int, help="pods for the throughput (1000)")
    parser.add_argument("--burst", type=int, help="pods created at once for the latency (500)")
    parser.add_argument("--rounds", type=int, help="rounds of every arm (3)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--threads", type=int, default=8, help="clients creating the pods")
    parser.add_argument("--setup-threads", type=int, default=16, help="clients creating the nodes")
    parser.add_argument(
        "--scheduler-qps", type=float, help="kube-scheduler's API client limit (burst twice it); default 50"
    )
    parser.add_argument(
        "--backlog",
        type=int,
        help="pods created while kube-scheduler is stopped, then bound: the two halves apart (1000; 0: none)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a phase's binds")
    parser.add_argument(
        "--quick", action="store_true", help="300 nodes, 100 pods, burst 50, 1 round (where not given)"
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.nodes < 2 or args.pods < 1 or args.burst < 1 or args.rounds < 1 or args.threads < 1 or args.backlog < 0:
        parser.error("--nodes at least 2; --pods, --burst, --rounds and --threads at least 1; --backlog at least 0")
    results = run(args)
    ratios(results)
    medians = summary(results, args.arms)
    report(results, medians, args)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "results": results, "medians": medians}, indent=2)
        )
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
