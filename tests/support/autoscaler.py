"""kube-scheduler and cluster-autoscaler beside a real control plane, for the autoscaling tests.

**kube-scheduler** runs with a KubeSchedulerConfiguration of the install (the scheduler
ConfigMap an overlay or the chart renders), as its own identity (the
``runtimeclass-scheduler`` ServiceAccount and the RBAC the install ships), with the
extender's ``urlPrefix`` pointed at the locally run extender's loopback port and its
own leader election off (one replica).

**cluster-autoscaler** runs with the kwok cloud provider (a build with ``-tags kwok``,
found beside kube-scheduler in ``KUBEBUILDER_ASSETS``), which creates and deletes Node
objects itself from node-group templates: no cloud. Its configuration is two ConfigMaps in its namespace,
``kwok-provider-config`` and ``kwok-provider-templates`` (key ``templates``: a ``List``
of Nodes), read at start (cluster-autoscaler/cloudprovider/kwok/kwok_config.go,
kwok_helpers.go). What matters here:

- A group's name is a template's annotation ``cluster-autoscaler.kwok.nodegroup/name``
  when it has one (else its group label plus a timestamp): the templates here name
  theirs, so that a node made by the test can be a *live* member of a group
  (``group_member``: that annotation, ``spec.providerID: kwok:<name>``, and
  ``kwok.x-k8s.io/node: fake`` so that the provider may delete it). The autoscaler
  builds a group's template from a ready live member when there is one, and from the
  provider's template only when the group has none (scale from zero).
- A node it makes is the provider's template with a new name
  (``<group>-<5 characters>``): its labels, taints and status (``Ready``). It decides
  by simulating kube-scheduler's in-tree plugins, never extenders, and writes its
  status to the ConfigMap ``cluster-autoscaler-status`` and its decisions to its log
  (``Final scale-up plan: [{gvisor 0->1 (max: 5)}]``).

**What a kubelet and the node controllers would do**, done here: a node the autoscaler
makes registers through no kubelet, so ``Registration`` stands in for what happens
around a cloud node's registration:

- the kubelet cannot set labels under ``node-restriction.kubernetes.io/``
  (NodeRestriction, plugin/pkg/admission/noderestriction/admission.go): a
  MutatingAdmissionPolicy strips them from every Node the autoscaler creates, while
  the group's template keeps them (as an ASG tag or a Cluster API annotation keeps
  them for the autoscaler's simulation);
- the node lifecycle controller removes the ``node.kubernetes.io/not-ready`` taint
  the API server gives every new node (TaintNodesByCondition) once the node is
  Ready: a watcher here removes it (``ready_after`` seconds after the node appears),
  guarded by the node's resourceVersion so that it never undoes another writer.

Bound pods stay Pending (no kubelet): a test asserts ``spec.nodeName``.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.support.control_plane import ApiError, ControlPlane, Process
from tests.support.ports import free_port

Json = dict[str, Any]

GROUP_LABEL = "kwok-nodegroup"
GROUP_NAME = "cluster-autoscaler.kwok.nodegroup/name"
KWOK_MANAGED = "kwok.x-k8s.io/node"
NOT_READY = "node.kubernetes.io/not-ready"
STATUS_CONFIGMAP = "cluster-autoscaler-status"
# "Final scale-up plan: [{gvisor 0->1 (max: 5)}]" (core/scaleup/orchestrator).
_PLAN = re.compile(r"Final scale-up plan: \[(.*?)\]")
_PLAN_ITEM = re.compile(r"\{(\S+) (\d+)->(\d+) \(max: \d+\)\}")


def _resources(cpu: str, memory: str, pods: str = "110") -> Json:
    return {"cpu": cpu, "memory": memory, "pods": pods}


def status_configmap(namespace: str = "kube-system") -> Json:
    """A ConfigMap as cluster-autoscaler keeps its status while it runs (what the
    extender looks for), for tests without the autoscaler itself."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": STATUS_CONFIGMAP, "namespace": namespace},
        "data": {"status": "autoscalerStatus: Running"},
    }


def template(
    group: str,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Json] = (),
    cpu: str = "4",
    memory: str = "16Gi",
    max_count: int = 5,
) -> Json:
    """A node group's template, as the kwok provider reads it (a Node, Ready, with
    capacity, naming its group)."""
    resources = _resources(cpu, memory)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"{group}-template",
            "annotations": {
                GROUP_NAME: group,
                "cluster-autoscaler.kwok.nodegroup/min-count": "0",
                "cluster-autoscaler.kwok.nodegroup/max-count": str(max_count),
            },
            "labels": {GROUP_LABEL: group, "kubernetes.io/os": "linux", **(labels or {})},
        },
        "spec": {"taints": list(taints)} if taints else {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            # As a kubelet registers a node: not Ready yet (Registration makes it Ready).
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "starting"}
            ],
        },
    }


def group_member(
    plane: ControlPlane,
    name: str,
    group: str,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Json] = (),
    cpu: str = "4",
    memory: str = "16Gi",
) -> Json:
    """A node that the kwok provider counts as a live member of ``group``, Ready for
    ten minutes (the autoscaler copies a group's template only from a node Ready for a
    minute at least: ``stabilizationDelay``, processors/nodeinfosprovider/
    mixed_nodeinfos_processor.go)."""
    plane.add_ready_node(
        name,
        labels={GROUP_LABEL: group, "kubernetes.io/os": "linux", **(labels or {})},
        taints=taints,
        cpu=cpu,
        memory=memory,
        ready_since=datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=10),
    )
    return plane.client.patch(
        f"/api/v1/nodes/{name}",
        {
            "metadata": {"annotations": {GROUP_NAME: group, KWOK_MANAGED: "fake"}},
            "spec": {"providerID": f"kwok:{name}"},
        },
    )


# ----- kube-scheduler ------------------------------------------------------------------


def scheduler_configuration(docs: Sequence[Json]) -> Json:
    """The KubeSchedulerConfiguration of an install (its scheduler ConfigMap)."""
    config_map = next(
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("runtimeclass-scheduler-config")
    )
    loaded: Json = yaml.safe_load(config_map["data"]["config.yaml"])
    return loaded


def start_scheduler(
    plane: ControlPlane,
    configuration: Json,
    *,
    namespace: str,
    extender_port: int | None = None,
    service_account: str = "runtimeclass-scheduler",
    name: str = "kube-scheduler",
) -> Process:
    """kube-scheduler with ``configuration`` as ``service_account`` of ``namespace``;
    every extender's urlPrefix pointed at ``extender_port`` on loopback. The
    configuration's other ``clientConnection`` settings (``qps``, ``burst``) are kept."""
    config = json.loads(json.dumps(configuration))
    kubeconfig = plane.service_account_kubeconfig(namespace, service_account)
    config["clientConnection"] = {**(config.get("clientConnection") or {}), "kubeconfig": str(kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    for extender in config.get("extenders") or []:
        assert extender_port is not None, "the configuration calls an extender: give its port"
        extender["urlPrefix"] = f"http://127.0.0.1:{extender_port}"
    path = plane.directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    binary = plane.assets.binary("kube-scheduler")
    assert binary is not None, "kube-scheduler is not in KUBEBUILDER_ASSETS"
    return plane.spawn(
        name,
        [
            str(binary),
            f"--config={path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={plane.directory / name}",
            "--v=2",
        ],
    )


def start_default_scheduler(plane: ControlPlane) -> Process:
    """kube-scheduler as Kubernetes ships it (its default profile, no extender), as the
    kube-scheduler user would run it: a ServiceAccount bound to the bootstrap roles."""
    scheduler = start_scheduler(
        plane,
        {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"},
        namespace="kube-system",
        service_account="kube-scheduler",
    )
    for role in ("system:kube-scheduler", "system:volume-scheduler"):
        plane.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"test-default-scheduler-{role.replace(':', '-')}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": "kube-scheduler", "namespace": "kube-system"}],
            }
        )
    return scheduler


# ----- registration: what the kubelet and the node lifecycle controller would do -------

STRIP_POLICY = "test-kubelet-cannot-set-restricted-labels"


def restricted_label_stripping(prefix: str = "node-restriction.kubernetes.io/") -> list[Json]:
    """A MutatingAdmissionPolicy (and binding) removing, from every Node created, the
    labels whose key contains ``prefix``: what a kubelet registering the node could not
    set (NodeRestriction's getForbiddenLabels)."""
    expression = (
        "has(object.metadata.labels) ? object.metadata.labels.filter(k, k.contains('" + prefix + "'))"
        ".map(k, JSONPatch{op: 'remove', path: '/metadata/labels/' + jsonpatch.escapeKey(k)}) : []"
    )
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": STRIP_POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["nodes"],
                            "operations": ["CREATE"],
                        }
                    ]
                },
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": STRIP_POLICY},
            "spec": {"policyName": STRIP_POLICY},
        },
    ]


@dataclass
class Arrival:
    """What happened to one node the autoscaler made, in seconds after it appeared."""

    name: str
    seen: float
    labels: dict[str, str]
    taints: list[str]
    ready: float | None = None
    labelled: float | None = None
    untainted: float | None = None


@dataclass
class Registration:
    """Watches Nodes (a real watch, as controllers do); for each node the autoscaler
    makes (``kwok.x-k8s.io/node`` and a name not in ``existing``), removes the not-ready
    taint ``ready_after`` seconds after it appears, puts ``late_labels`` on it
    ``late_after`` seconds after it appears (as kata-deploy labels a node once its
    DaemonSet pod has run there), and records when a label under ``label_prefix`` and
    the loss of ``startup_taint`` arrive."""

    plane: ControlPlane
    label_prefix: str = "runtimeclass.node-restriction.kubernetes.io/"
    startup_taint: str | None = None
    ready_after: float = 0.0
    late_labels: dict[str, str] = field(default_factory=dict)
    late_after: float = 0.0
    arrivals: dict[str, Arrival] = field(default_factory=dict)
    existing: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._due: dict[str, float] = {}
        self._labels_due: dict[str, float] = {}

    def start(self) -> Registration:
        nodes = self.plane.client.get("/api/v1/nodes")
        self.existing = {n["metadata"]["name"] for n in nodes["items"]}
        version = nodes["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(version,), daemon=True)
        self._thread.start()
        threading.Thread(target=self._make_ready, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def made(self) -> list[Arrival]:
        with self._lock:
            return list(self.arrivals.values())

    def _run(self, version: str) -> None:
        while not self._stop.is_set():
            try:
                version = self._watch(version)
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.2)

    def _watch(self, version: str) -> str:
        plane = self.plane
        connection = http.client.HTTPSConnection("127.0.0.1", plane.port, context=plane.context, timeout=30)
        try:
            connection.request(
                "GET",
                f"/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion={version}&timeoutSeconds=25",
            )
            response = connection.getresponse()
            if response.status != 200:
                response.read()
                listed = plane.client.get("/api/v1/nodes")
                return str(listed["metadata"]["resourceVersion"])
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    return version
                event = json.loads(line)
                node = event["object"]
                version = node["metadata"].get("resourceVersion", version)
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._seen(node)
            return version
        finally:
            connection.close()

    def _seen(self, node: Json) -> None:
        meta = node["metadata"]
        name = meta["name"]
        if name in self.existing or (meta.get("annotations") or {}).get(KWOK_MANAGED) != "fake":
            return
        now = time.monotonic()
        labels = dict(meta.get("labels") or {})
        taints = [t["key"] for t in (node.get("spec") or {}).get("taints") or []]
        with self._lock:
            arrival = self.arrivals.get(name)
            if arrival is None:
                arrival = self.arrivals[name] = Arrival(name, now, labels, taints)
                self._due[name] = now + self.ready_after
                if self.late_labels:
                    self._labels_due[name] = now + self.late_after
            if arrival.labelled is None and any(k.startswith(self.label_prefix) for k in labels):
                arrival.labelled = now
            if self.startup_taint and arrival.untainted is None and self.startup_taint not in taints:
                arrival.untainted = now

    def _make_ready(self) -> None:
        """The node lifecycle controller's part: the not-ready taint goes once Ready."""
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                due = [name for name, at in self._due.items() if at <= now]
            for name in due:
                if self._untaint(name):
                    with self._lock:
                        self._due.pop(name, None)
                        self.arrivals[name].ready = time.monotonic()
            with self._lock:
                late = [name for name, at in self._labels_due.items() if at <= now]
            for name in late:
                self.plane.client.request(
                    "PATCH",
                    f"/api/v1/nodes/{name}",
                    {"metadata": {"labels": self.late_labels}},
                    content_type="application/merge-patch+json",
                )
                with self._lock:
                    self._labels_due.pop(name, None)
            time.sleep(0.05)

    def _untaint(self, name: str) -> bool:
        """The kubelet reports Ready (since now), then the not-ready taint goes."""
        client = self.plane.client
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}
        answer = client.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"conditions": [{**ready, "lastHeartbeatTime": now, "lastTransitionTime": now}]}},
            content_type="application/merge-patch+json",
        )
        if answer.status == 404:
            return True
        for _ in range(20):
            answer = client.request("GET", f"/api/v1/nodes/{name}")
            if answer.status == 404:
                return True
            node = answer.body
            taints = (node.get("spec") or {}).get("taints") or []
            kept = [t for t in taints if t["key"] != NOT_READY]
            if len(kept) == len(taints):
                return True
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": kept or None},
            }
            answer = client.request(
                "PATCH", f"/api/v1/nodes/{name}", patch, content_type="application/merge-patch+json"
            )
            if answer.ok:
                return True
            if answer.status != 409:
                raise ApiError(f"untaint {name}: {answer.status} {answer.message}")
        return False


# ----- cluster-autoscaler --------------------------------------------------------------


@dataclass
class Autoscaler:
    """cluster-autoscaler with the kwok provider (see the module doc), started with
    ``templates`` in ``namespace``; ``flags`` added to (or replacing) the defaults."""

    plane: ControlPlane
    templates: Sequence[Json]
    namespace: str = "kube-system"
    flags: Mapping[str, str] = field(default_factory=dict)
    process: Process | None = None
    started: float = 0.0

    def start(self) -> Autoscaler:
        plane = self.plane
        plane.ensure_namespace(self.namespace)
        config = {
            "apiVersion": "v1alpha1",
            "readNodesFrom": "configmap",
            "nodegroups": {"fromNodeLabelKey": GROUP_LABEL},
            "nodes": {"skipTaint": True},
            "configmap": {"name": "kwok-provider-templates"},
        }
        templates = {"apiVersion": "v1", "kind": "List", "items": list(self.templates)}
        for name, key, value in (
            ("kwok-provider-config", "config", config),
            ("kwok-provider-templates", "templates", templates),
        ):
            plane.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": self.namespace},
                    "data": {key: yaml.safe_dump(value)},
                }
            )
        binary = plane.assets.binary("cluster-autoscaler")
        assert binary is not None, "cluster-autoscaler is not in KUBEBUILDER_ASSETS"
        flags = {
            "--cloud-provider": "kwok",
            "--kubeconfig": str(plane.kubeconfig),
            "--namespace": self.namespace,
            "--leader-elect": "false",
            "--address": f"127.0.0.1:{free_port()}",
            "--scan-interval": "5s",
            "--scale-down-enabled": "false",
            "--expander": "random",
            "--v": "4",
        }
        flags.update(self.flags)
        self.started = time.monotonic()
        self.process = plane.spawn(
            "cluster-autoscaler",
            [str(binary), *(f"{k}={v}" for k, v in flags.items())],
            env={
                "POD_NAMESPACE": self.namespace,
                "KWOK_PROVIDER_MODE": "local",
                "KUBECONFIG": str(plane.kubeconfig),
            },
        )
        return self

    def stop(self) -> None:
        """SIGTERM: the provider deletes every node it made (Cleanup)."""
        if self.process is not None:
            self.process.stop(timeout=30)
            self.plane.processes.remove(self.process)
            self.process = None

    def log(self) -> str:
        assert self.process is not None
        return self.process.log.read_text(errors="replace")

    def lines(self, needle: str) -> list[str]:
        return [line for line in self.log().splitlines() if needle in line]

    def scale_ups(self) -> list[tuple[str, int, int]]:
        """Every scale-up it decided, in order: (group, from, to)."""
        plans = []
        for match in _PLAN.finditer(self.log()):
            plans += [(g, int(a), int(b)) for g, a, b in _PLAN_ITEM.findall(match.group(1))]
        return plans

    def status(self) -> str:
        answer = self.plane.client.request(
            "GET", f"/api/v1/namespaces/{self.namespace}/configmaps/{STATUS_CONFIGMAP}"
        )
        return str((answer.body.get("data") or {}).get("status", "")) if answer.ok else ""

    def targets(self) -> dict[str, int]:
        """Each node group's target size, as its status ConfigMap says
        (``nodeGroups[].health.cloudProviderTarget``)."""
        status = yaml.safe_load(self.status() or "{}") or {}
        return {g["name"]: int(g["health"]["cloudProviderTarget"]) for g in status.get("nodeGroups") or []}

    def assert_running(self) -> None:
        assert self.process is not None
        if self.process.popen.poll() is not None:
            raise AssertionError(f"cluster-autoscaler exited:\n{self.process.tail(60)}")


@contextlib.contextmanager
def autoscaling(plane: ControlPlane, templates: Sequence[Json], **flags: str) -> Iterator[Autoscaler]:
    """cluster-autoscaler running for the block, stopped (its nodes deleted) after."""
    scaler = Autoscaler(plane, templates, flags=flags).start()
    try:
        yield scaler
    finally:
        scaler.stop()


def node_of(plane: ControlPlane, namespace: str, pod: str) -> str:
    """The node a pod is bound to ("" while pending)."""
    return str(plane.client.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")["spec"].get("nodeName") or "")
