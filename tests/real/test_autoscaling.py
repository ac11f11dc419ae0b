"""cluster-autoscaler, kube-scheduler 1.36 and the extender on a real control plane (docs/autoscaling.md).

The scene of issue 43, as an operator meets it: two node
groups, ``gvisor`` (its nodes labelled ``runtime/gvisor: "true"``, which RuntimeClass
``gvisor`` selects) and ``plain``; two plain nodes with room; one gvisor node too full;
one pod of class gvisor that needs a new node. cluster-autoscaler runs with the kwok
provider (it makes Node objects from the groups' templates: tests/support/autoscaler.py),
kube-scheduler with the install's own configuration and identity, the extender as the
install's ServiceAccount. A node the autoscaler makes arrives as a cloud node does: its
kubelet cannot set the derived label (a policy strips it from every Node created), it
registers not Ready, and the node controller's part (Ready, the not-ready taint gone) is
played here.

Every case asserts what the real autoscaler did (its log's scale-up plans, the Node
objects it made or tainted, its status ConfigMap) and where the real scheduler bound
the pod:

- predicate mode with the node labels (what the docs recommend), templates from configuration (scale from
  zero, the template labelled as ``node-template`` says) and from the group's live node:
  the gvisor group grows by one, no other group, and the pod binds to the new node;
- predicate mode: the autoscaler cannot see the class's rules and adds nothing (the pod
  "can be scheduled" on a plain node the extender rejects); the refusal the operator
  sees before: the extender's warning, gauge and ``/readyz``, and ``check``;
- scale-down in both modes and in-tree: the gvisor node running the class's only pod is
  kept (in predicate mode by the annotations pod admission gives the pod; a pod opted out
  of pod admission shows what happens without them: its node is tainted for deletion);
- the registration gap: a labeller behind on its writes, the startup taint on the
  group's nodes: one scale-up, not one per scan (bench/autoscaler_gap_bench.py measures
  the gap and what happens without the taint);
- in-tree Kubernetes (the RuntimeClass admission plugin merging the class's selector
  and toleration, kube-scheduler alone), both template sources: the baseline every mode
  is held to.

The gvisor group's nodes are tainted, as GKE Sandbox taints its pool, and the class
tolerates the taint: its pods never say so themselves.

Bound pods stay Pending (no kubelet): binding is ``spec.nodeName``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.settings import DEFAULT_STARTUP_TAINT
from tests.support.autoscaler import (
    GROUP_LABEL,
    Autoscaler,
    Registration,
    autoscaling,
    group_member,
    node_of,
    restricted_label_stripping,
    scheduler_configuration,
    start_scheduler,
    template,
)
from tests.support.control_plane import Assets, ControlPlane, Process
from tests.support.helm import refusal
from tests.support.helm import template as helm_template
from tests.support.install import Installed, install
from tests.support.manifests import PREDICATE_LABELS, render
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("cluster_autoscaler")

Json = dict[str, Any]
SELECTOR = {"runtime/gvisor": "true"}
LABEL = "runtimeclass.node-restriction.kubernetes.io/gvisor"
TABLE = "/apis/runtimeclass-extender.dev/v1alpha1/podadmissiontables/runtimeclass-extender"
# The label kata-deploy sets on a node once kata is installed there.
KATA_RUNTIME = "katacontainers.io/kata-runtime"
TOBEDELETED = "ToBeDeletedByClusterAutoscaler"
STARTUP = {"key": DEFAULT_STARTUP_TAINT, "effect": "NoSchedule"}
# The gvisor group's nodes are tainted, as GKE Sandbox taints its pool; the class
# tolerates the taint (its pods need not).
SANDBOX = {"key": "sandbox", "value": "gvisor", "effect": "NoSchedule"}
GVISOR = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "gvisor"},
    "handler": "runsc",
    "scheduling": {
        "nodeSelector": SELECTOR,
        "tolerations": [{"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"}],
    },
}
# Within this long of the autoscaler's start, the pod is bound (the goal of issue 43).
BOUND_WITHIN = 60.0




@pytest.fixture(scope="module")
def cloud(plane: ControlPlane) -> ControlPlane:
    """Predicate mode's API server (RuntimeClass admission off), the class, and kubelets
    that cannot set node-restriction labels."""
    plane.apply_all(restricted_label_stripping())
    plane.apply(GVISOR)
    return plane


@pytest.fixture(scope="module")
def in_tree(assets: Assets) -> Iterator[ControlPlane]:
    """An API server as Kubernetes ships it: RuntimeClass admission on."""
    with ControlPlane(assets) as control_plane:
        control_plane.apply(GVISOR)
        yield control_plane


# --- one scene per test ------------------------------------------------------------------


@dataclass
class Scene:
    plane: ControlPlane
    namespace: str
    installed: Installed | None = None
    scheduler: Process | None = None
    registration: Registration | None = None
    nodes: list[str] = field(default_factory=list)

    def node(
        self, name: str, *, labels: dict[str, str] | None = None, cpu: str = "8", used: str = ""
    ) -> None:
        """A node of no group (the plain nodes with room, a full gvisor node)."""
        taints = [SANDBOX] if labels == SELECTOR else []
        self.plane.add_ready_node(
            name, labels={"kubernetes.io/os": "linux", **(labels or {})}, taints=taints, cpu=cpu
        )
        self.nodes.append(name)
        if used:
            self.filler(name, used)

    def member(self, name: str, group: str, *, labels: dict[str, str] | None = None, cpu: str = "4") -> None:
        """A live node of a group, Ready for ten minutes (not one the autoscaler made)."""
        if self.registration is not None:
            self.registration.existing.add(name)
        taints = [SANDBOX] if labels == SELECTOR else []
        group_member(self.plane, name, group, labels=labels, taints=taints, cpu=cpu)
        self.nodes.append(name)

    def filler(self, node: str, cpu: str) -> None:
        """A pod bound to ``node`` that takes ``cpu`` of it (no class: nothing admits it)."""
        self.plane.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"filler-{node}", "namespace": self.namespace},
                "spec": {"nodeName": node, "containers": [_container(cpu)]},
            }
        )

    def pod(
        self,
        name: str,
        *,
        cpu: str = "1",
        labels: dict[str, str] | None = None,
        owner: Json | None = None,
        **spec: Any,
    ) -> None:
        metadata: Json = {"name": name, "namespace": self.namespace, "labels": labels or {}}
        if owner is not None:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ]
        self.plane.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": {"runtimeClassName": "gvisor", "containers": [_container(cpu)], **spec},
            }
        )

    def replica_set(self, name: str) -> Json:
        """A ReplicaSet to own a pod (no controller-manager runs it): cluster-autoscaler
        moves only pods a controller would recreate."""
        return self.plane.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"runtimeClassName": "gvisor", "containers": [_container("100m")]},
                    },
                },
            }
        )

    def unschedulable(self, name: str) -> str:
        """Until kube-scheduler has found no node for the pod: its message."""

        def condition() -> str:
            pod = self.plane.client.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                    return str(c.get("message", ""))
            return ""

        return str(wait_for(condition, timeout=60, what=f"{name} unschedulable"))

    def bound(self, name: str, scaler: Autoscaler, *, within: float = BOUND_WITHIN) -> tuple[str, float]:
        """The node the pod is bound to, and when, in seconds after the autoscaler started."""
        node = wait_for(
            lambda: node_of(self.plane, self.namespace, name),
            timeout=within - (time.monotonic() - scaler.started),
            what=f"{name} bound",
            last=lambda: self._why_not_bound(scaler, name),
        )
        return str(node), time.monotonic() - scaler.started

    def _why_not_bound(self, scaler: Autoscaler, name: str) -> str:
        """What a timeout needs to say: the autoscaler's plans, each node it made (labels,
        taints), why kube-scheduler last found the pod unschedulable, and the last lines
        of kube-scheduler and of the extender."""
        plans = "\n".join(scaler.lines("Final scale-up plan")[-3:]) or scaler.log()[-2000:]
        made = []
        for node in self.plane.client.get("/api/v1/nodes")["items"]:
            if node["metadata"]["name"] in self.nodes:
                continue
            taints = [t["key"] for t in node["spec"].get("taints") or []]
            made.append(f"{node['metadata']['name']}: labels {node['metadata'].get('labels')}, taints {taints}")
        pod = self.plane.client.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
        conditions = [c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"]
        unschedulable = [f"{c.get('lastTransitionTime')}: {c.get('message')}" for c in conditions]
        scheduler = self.scheduler.tail(20) if self.scheduler is not None else ""
        extender = ""
        if self.installed is not None and self.installed.extender.process is not None:
            extender = self.installed.extender.process.tail(40)
        return (
            f"{plans}\nnodes made: {made}\nPodScheduled: {unschedulable}\n"
            f"kube-scheduler:\n{scheduler}\nextender:\n{extender}"
        )

    def close(self) -> None:
        if self.registration is not None:
            self.registration.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
            self.plane.processes.remove(self.scheduler)
        pods = self.plane.client.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        for pod in pods:
            # Bound pods have no kubelet to confirm a graceful deletion: at once.
            self.plane.client.request(
                "DELETE",
                f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}",
                query={"gracePeriodSeconds": "0"},
            )
        for node in self.plane.client.get("/api/v1/nodes")["items"]:
            self.plane.client.request("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
        if self.installed is not None:
            self.installed.uninstall()
            # The CRD's deletion finishes in the API server's own time: the next install
            # creates it anew.
            crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podadmissiontables.runtimeclass-extender.dev"
            wait_for(
                lambda: self.plane.client.request("GET", crd).status == 404, timeout=60, what="the CRD gone"
            )


def _container(cpu: str) -> Json:
    return {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}


def namespace_of(test: str) -> str:
    """A namespace name of the test's own (a DNS label: at most 63 characters, starting
    and ending with one alphanumeric): a long test's name, its parameters too, cut and
    told apart by a hash of the whole."""
    name = re.sub(r"[^a-z0-9]+", "-", test.lower()).strip("-")
    if len(name) > 50:
        name = name[:41].strip("-") + "-" + hashlib.sha256(test.encode()).hexdigest()[:8]
    return "t-" + name


@contextlib.contextmanager
def scene(
    plane: ControlPlane,
    request: pytest.FixtureRequest,
    setup: str | Sequence[Json] | None,
    *,
    extra_flags: Sequence[str] = (),
    startup_taint: str | None = DEFAULT_STARTUP_TAINT,
    ready_after: float = 0.0,
    late_labels: dict[str, str] | None = None,
    late_after: float = 0.0,
) -> Iterator[Scene]:
    """A namespace of the test's own; ``setup`` (an overlay, or rendered objects: the
    chart's) installed with its extender and its kube-scheduler (None: kube-scheduler
    alone, as Kubernetes ships it); nodes made by the autoscaler registered as a kubelet
    would. Everything removed after."""
    namespace = namespace_of(request.node.name)
    plane.ensure_namespace(namespace)
    current = Scene(plane, namespace)
    try:
        docs = None if setup is None else render(setup) if isinstance(setup, str) else tuple(setup)
        if docs is not None:
            current.installed = install(plane, docs, extra_flags=extra_flags)
            _wait_for_the_table(plane, namespace, default_scheduler=not _second_scheduler(docs))
        if docs is None or not _second_scheduler(docs):
            # Kubernetes' own scheduler (in-tree, or the default-scheduler placement).
            current.scheduler = default_scheduler(plane, namespace)
        else:
            assert current.installed is not None
            current.scheduler = start_scheduler(
                plane,
                scheduler_configuration(docs),
                namespace=current.installed.namespace,
                extender_port=current.installed.extender.port,
            )
        current.registration = Registration(
            plane,
            startup_taint=startup_taint,
            ready_after=ready_after,
            late_labels=dict(late_labels or {}),
            late_after=late_after,
        ).start()
        yield current
    finally:
        current.close()


def _second_scheduler(docs: Sequence[Json]) -> bool:
    """The install runs a kube-scheduler of its own (all but the default-scheduler placement)."""
    return any(d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("runtimeclass-scheduler-config") for d in docs)


def default_scheduler(plane: ControlPlane, namespace: str) -> Process:
    """kube-scheduler as Kubernetes ships it: its default profile, as kube-scheduler."""
    scheduler = start_scheduler(
        plane,
        {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"},
        namespace=namespace,
        service_account="kube-scheduler",
    )
    _bind_cluster_role(plane, namespace, "kube-scheduler", "system:kube-scheduler")
    _bind_cluster_role(plane, namespace, "kube-scheduler", "system:volume-scheduler")
    return scheduler


def _bind_cluster_role(plane: ControlPlane, namespace: str, service_account: str, role: str) -> None:
    plane.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{namespace}-{role.replace(':', '-')}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        }
    )


def _wait_for_the_table(plane: ControlPlane, namespace: str, *, default_scheduler: bool = False) -> None:
    """Pods of a class are routed (with the default-scheduler placement: admitted, with
    the class's label requirement) once the leader has written the pod admission table
    and the API server's policies have seen it: until then they are admitted as they
    came, unrouted, or refused (docs/pod-webhook.md, "While the table is missing")."""
    path = "/apis/runtimeclass-extender.dev/v1alpha1/podadmissiontables/runtimeclass-extender"
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {"runtimeClassName": "gvisor", "containers": [_container("1m")]},
    }

    def admitted() -> bool:
        answer = plane.client.request("GET", path)
        if not (answer.ok and "gvisor" in ((answer.body.get("spec") or {}).get("runtimeClasses") or {})):
            return False
        pods = f"/api/v1/namespaces/{namespace}/pods"
        admitted = plane.client.request("POST", pods, probe, query={"dryRun": "All"})
        if default_scheduler:
            return admitted.ok and LABEL in (admitted.body["spec"].get("nodeSelector") or {})
        return admitted.ok and admitted.body["spec"].get("schedulerName") == "runtimeclass-scheduler"

    wait_for(admitted, timeout=60, what="the pod admission table")


def template_labels(plane: ControlPlane, *labels: str) -> dict[str, str]:
    """What ``node-template`` says the group's template needs: the operator's step, on the
    live cluster (its classes, and what the extender found out of the RuntimeClass
    admission plugin: off here, so the class's selector is in no pod)."""
    wait_for(lambda: plane.client.request("GET", TABLE).ok, what="the pod admission table")
    argv = ["node-template", f"--kubeconfig={plane.kubeconfig}", "-o", "json"]
    for label in labels:
        argv += ["--label", label]
    result = subprocess.run(
        [sys.executable, "-m", "extender", *argv], capture_output=True, text=True, check=True
    )
    needed: dict[str, str] = json.loads(result.stdout)["labels"]
    return needed


def made_nodes(plane: ControlPlane, group: str) -> list[Json]:
    return [
        n
        for n in plane.client.get("/api/v1/nodes")["items"]
        if n["metadata"]["name"].startswith(group + "-")
        and (n["metadata"].get("labels") or {}).get(GROUP_LABEL)
    ]


def taint_keys(plane: ControlPlane, node: str) -> list[str]:
    answer = plane.client.request("GET", f"/api/v1/nodes/{node}")
    return [t["key"] for t in (answer.body.get("spec") or {}).get("taints") or []] if answer.ok else []


# --- predicate mode with the node labels: the right group, and the pod binds there ---------------------------


def test_large_cluster_mode_scales_the_gvisor_group_from_zero_with_the_label_in_its_template(
    cloud: ControlPlane, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # The chart as docs/autoscaling.md installs it on an autoscaled cluster.
    chart = helm_template({"mode": "predicate", "labelNodes.enabled": "true", "nodeAutoscaling.enabled": "true"})
    with scene(cloud, request, chart) as s:
        s.node("plain-a")
        s.node("plain-b")
        s.node("gvisor-full", labels=SELECTOR, cpu="2", used="1800m")
        s.pod("sandboxed-0")
        message = s.unschedulable("sandboxed-0")
        assert "didn't match Pod's node affinity/selector" in message
        # The template as the docs tell: the group's own labels, and what node-template adds.
        needed = template_labels(cloud, "runtime/gvisor=true", "kubernetes.io/os=linux")
        assert needed == {LABEL: "true"}
        gvisor = template("gvisor", labels={**SELECTOR, **needed}, taints=[STARTUP, SANDBOX])
        with autoscaling(cloud, [gvisor, template("plain")]) as scaler:
            node, seconds = s.bound("sandboxed-0", scaler)
            assert node.startswith("gvisor-") and node != "gvisor-full"
            assert scaler.scale_ups() == [("gvisor", 0, 1)]
            # Its status says so too: one gvisor node, no plain one.
            wait_for(lambda: scaler.targets() == {"gvisor": 1, "plain": 0}, timeout=30, what="the status")
            # The node arrived as a cloud node does, without the label; the labeller put it
            # on and took the startup taint off in one write.
            (arrival,) = s.registration.made()  # type: ignore[union-attr]
            assert LABEL not in arrival.labels and DEFAULT_STARTUP_TAINT in arrival.taints
            assert taint_keys(cloud, node) == ["sandbox"]
            # Pod admission gave the pod its class's toleration, as the in-tree plugin would:
            # the autoscaler reads the pod's own tolerations against the group's taint.
            pod = cloud.client.get(f"/api/v1/namespaces/{s.namespace}/pods/sandboxed-0")["spec"]
            assert {"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"} in pod[
                "tolerations"
            ]
            print(f"node labels, scale from zero: gvisor 0->1, {node} bound {seconds:.1f} s after start")


@pytest.mark.parametrize("overlay", [PREDICATE_LABELS, "overlays/default-scheduler"])
def test_the_gvisor_group_grows_from_its_live_node_in_either_large_cluster_placement(
    cloud: ControlPlane, request: pytest.FixtureRequest, overlay: str
) -> None:
    with scene(cloud, request, overlay) as s:
        s.node("plain-a")
        s.node("plain-b")
        s.member("gvisor-live", "gvisor", labels=SELECTOR, cpu="2")
        s.filler("gvisor-live", "1800m")
        wait_for(
            lambda: LABEL in cloud.client.get("/api/v1/nodes/gvisor-live")["metadata"]["labels"],
            timeout=30,
            what="the live node labelled",
        )
        s.pod("sandboxed-0")
        s.unschedulable("sandboxed-0")
        # The configured template has no derived label: the autoscaler copies the live node.
        gvisor = template("gvisor", labels=SELECTOR, cpu="2", taints=[STARTUP, SANDBOX])
        with autoscaling(cloud, [gvisor, template("plain")]) as scaler:
            node, seconds = s.bound("sandboxed-0", scaler)
            assert node.startswith("gvisor-") and node != "gvisor-live"
            assert scaler.scale_ups() == [("gvisor", 1, 2)]
            wait_for(lambda: scaler.targets() == {"gvisor": 2, "plain": 0}, timeout=30, what="the status")
            placement = overlay.removeprefix("overlays/")
            print(f"{placement}, live template: gvisor 1->2, {node} bound {seconds:.1f} s after start")


# --- the default-scheduler placement: the same, with no second scheduler --------------------


def test_the_default_scheduler_placement_scales_the_gvisor_group_from_zero(
    cloud: ControlPlane, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The chart with the default-scheduler placement, as docs/autoscaling.md installs it:
    the cluster's own kube-scheduler places the pod, by the label requirement and
    toleration pod admission gave it; the autoscaler grows the right group."""
    chart = helm_template(
        {
            "mode": "default-scheduler",
            "nodeAutoscaling.enabled": "true",
        }
    )
    assert not [d for d in chart if d["kind"] == "ConfigMap" and "scheduler" in d["metadata"]["name"]]
    with scene(cloud, request, chart) as s:
        s.node("plain-a")
        s.node("plain-b")
        s.node("gvisor-full", labels=SELECTOR, cpu="2", used="1800m")
        s.pod("sandboxed-0")
        assert "didn't match Pod's node affinity/selector" in s.unschedulable("sandboxed-0")
        admitted = cloud.client.get(f"/api/v1/namespaces/{s.namespace}/pods/sandboxed-0")
        assert admitted["spec"]["schedulerName"] == "default-scheduler"
        assert admitted["spec"]["nodeSelector"] == {LABEL: "true"}
        needed = template_labels(cloud, "runtime/gvisor=true", "kubernetes.io/os=linux")
        gvisor = template("gvisor", labels={**SELECTOR, **needed}, taints=[STARTUP, SANDBOX])
        with autoscaling(cloud, [gvisor, template("plain")]) as scaler:
            node, seconds = s.bound("sandboxed-0", scaler)
            assert node.startswith("gvisor-") and node != "gvisor-full"
            assert scaler.scale_ups() == [("gvisor", 0, 1)]
            wait_for(lambda: scaler.targets() == {"gvisor": 1, "plain": 0}, timeout=30, what="the status")
            assert taint_keys(cloud, node) == ["sandbox"]
            print(f"default-scheduler, scale from zero: gvisor 0->1, {node} bound {seconds:.1f} s after start")


def test_predicate_mode_is_refused_where_cluster_autoscaler_runs_and_it_adds_no_node(
    cloud: ControlPlane, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # The chart refuses the combination outright.
    assert "- nodeAutoscaling.enabled=true in predicate mode needs labelNodes.enabled=true" in refusal(
        {"mode": "predicate", "nodeAutoscaling.enabled": "true"}
    )
    gvisor = template("gvisor", labels=SELECTOR, taints=[STARTUP, SANDBOX])
    # cluster-autoscaler runs first (its status ConfigMap written): the extender's first look finds it.
    with autoscaling(cloud, [gvisor, template("plain")]) as scaler:
        wait_for(scaler.status, timeout=30, what="cluster-autoscaler's status ConfigMap")
        with scene(cloud, request, "overlays/predicate-mode") as s:
            assert s.installed is not None
            extender = s.installed.extender
            warning = "cannot see the node rules of RuntimeClass gvisor"
            wait_for(
                lambda: warning in (extender.process.log.read_text() if extender.process else ""),
                timeout=30,
                what="the extender's warning",
            )
            with urllib.request.urlopen(
                f"http://127.0.0.1:{extender.probe_port}/readyz", timeout=5
            ) as answer:
                readyz = json.loads(answer.read())
            assert any(
                w.startswith("cluster-autoscaler (ConfigMap kube-system/cluster-autoscaler-status) runs")
                and warning in w
                for w in readyz["warnings"]
            ), readyz
            assert (
                'runtimeclass_extender_autoscaler_unseen_runtimeclasses{autoscaler="cluster-autoscaler"} 1.0'
                in extender.metrics()
            )
            # check, on the live cluster, as the operator runs it before applying a class.
            classes = tmp_path / "gvisor.yaml"
            classes.write_text(yaml.safe_dump(GVISOR))
            checked = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "extender",
                    "check",
                    str(classes),
                    f"--kubeconfig={cloud.kubeconfig}",
                    "--warnings-as-errors",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            assert checked.returncode == 1, checked.stderr
            assert (
                "Warning: cluster-autoscaler (ConfigMap kube-system/cluster-autoscaler-status) runs"
                in checked.stderr
            )
            # What the refusal spares the operator: by kube-scheduler's own filters the pod
            # fits a plain node (which the extender rejects), so the autoscaler adds nothing.
            s.node("plain-a")
            s.node("plain-b")
            s.node("gvisor-full", labels=SELECTOR, cpu="2", used="1800m")
            s.pod("sandboxed-0")
            assert "didn't match RuntimeClass" in s.unschedulable("sandboxed-0")
            seen = wait_for(
                lambda: [
                    line
                    for line in scaler.lines("marked as unschedulable can be scheduled")
                    if re.search(r"\b[1-9]\d* pods marked as unschedulable can be scheduled", line)
                ],
                timeout=30,
                what="the autoscaler's judgement of the pod",
                last=lambda: scaler.log()[-3000:],
            )
            print("predicate mode:", seen[-1])
            # kube-scheduler's own filters pass a plain node, which only the extender rejects.
            assert scaler.lines("sandboxed-0 can be moved to plain-")
            assert scaler.scale_ups() == []
            assert node_of(cloud, s.namespace, "sandboxed-0") == ""


# --- scale-down: the node a RuntimeClass pod needs is never removed -------------------------

SCALE_DOWN = {
    "--scale-down-enabled": "true",
    "--scale-down-unneeded-time": "10s",
    "--scale-down-delay-after-add": "0s",
    "--max-graceful-termination-sec": "5",
}


@pytest.mark.parametrize("overlay", ["overlays/predicate-mode", PREDICATE_LABELS, "overlays/default-scheduler"])
def test_scale_down_never_removes_the_node_a_runtimeclass_pod_needs(
    cloud: ControlPlane, request: pytest.FixtureRequest, overlay: str
) -> None:
    _scale_down_keeps_the_node(cloud, request, overlay)


def test_scale_down_never_removes_the_node_a_runtimeclass_pod_needs_in_tree(
    in_tree: ControlPlane, request: pytest.FixtureRequest
) -> None:
    _scale_down_keeps_the_node(in_tree, request, "in-tree")


def _scale_down_keeps_the_node(cloud: ControlPlane, request: pytest.FixtureRequest, overlay: str) -> None:
    predicate = overlay.endswith("predicate-mode")
    with scene(cloud, request, None if overlay == "in-tree" else overlay) as s:
        s.node("plain-a")
        s.node("plain-b")
        s.member("gvisor-keep", "gvisor", labels=SELECTOR)
        if overlay.endswith(("label-nodes", "default-scheduler")):
            wait_for(
                lambda: LABEL in cloud.client.get("/api/v1/nodes/gvisor-keep")["metadata"]["labels"],
                timeout=30,
                what="the node labelled",
            )
        s.pod("sandboxed-0", cpu="100m", labels={"app": "sandboxed"}, owner=s.replica_set("sandboxed"))
        wait_for(
            lambda: node_of(cloud, s.namespace, "sandboxed-0") == "gvisor-keep", timeout=60, what="bound"
        )
        admitted = cloud.client.get(f"/api/v1/namespaces/{s.namespace}/pods/sandboxed-0")["metadata"]
        if predicate:
            # The autoscaler cannot see where the pod may run: pod admission says not to move it.
            assert admitted["annotations"] == {
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                "karpenter.sh/do-not-disrupt": "true",
            }
            # The control: a pod opted out of pod admission, as every pod was before, on a
            # second gvisor node. The autoscaler moves it "to a plain node" and removes its node.
            s.member("gvisor-spare", "gvisor", labels=SELECTOR)
            s.pod(
                "opted-out-0",
                cpu="100m",
                labels={"app": "opted-out", "runtimeclass-extender.dev/webhook": "ignore"},
                owner=s.replica_set("opted-out"),
                nodeName="gvisor-spare",
            )
        elif overlay.endswith("default-scheduler"):
            # The label requirement shows the autoscaler where it may run, so no annotation
            # keeps it from moving the pod; the mark says pod admission admitted it.
            assert "annotations" not in admitted
            assert admitted["labels"] == {"app": "sandboxed", "runtimeclass-extender.dev/admitted": "true"}
        else:
            # The autoscaler sees where the pod may run: the label (with the node labels), or
            # the class's selector the in-tree plugin merged.
            assert "annotations" not in admitted
        gvisor = template("gvisor", labels=SELECTOR, taints=[STARTUP, SANDBOX])
        with autoscaling(cloud, [gvisor, template("plain")], **SCALE_DOWN) as scaler:
            if predicate:
                wait_for(
                    lambda: (
                        TOBEDELETED in taint_keys(cloud, "gvisor-spare")
                        or cloud.client.request("GET", "/api/v1/nodes/gvisor-spare").status == 404
                    ),
                    timeout=60,
                    what="the control node removed",
                    last=lambda: scaler.log()[-3000:],
                )
                assert any(
                    "opted-out-0 can be moved to plain-" in line for line in scaler.lines("can be moved to")
                )
            # Several scans past the unneeded time: the node stays, untainted.
            wait_for(
                lambda: time.monotonic() - scaler.started > 30,
                timeout=40,
                what="30 s of scale-down scans",
            )
            assert TOBEDELETED not in taint_keys(cloud, "gvisor-keep")
            assert node_of(cloud, s.namespace, "sandboxed-0") == "gvisor-keep"
            # The autoscaler's own words for why it keeps the node.
            why = (
                "Node gvisor-keep cannot be removed: pod annotated as not safe to evict present: sandboxed-0"
                if predicate
                else "Node gvisor-keep is not suitable for removal: can reschedule only 0 out of 1 pods"
            )
            assert scaler.lines(why), scaler.lines("gvisor-keep")[-5:]


# --- the registration gap: the startup taint ------------------------------------------------


def test_a_new_node_waiting_for_its_label_behind_a_busy_labeller_asks_for_no_second_node(
    cloud: ControlPlane, request: pytest.FixtureRequest
) -> None:
    """The labeller is busy (40 nodes of another class to label, 1 write a second after a
    burst of 20): a new gvisor node waits tens of seconds for its label, Ready all along.
    Registered with the startup taint, it counts as starting for the autoscaler: one
    scale-up, and the pod binds once the label lands (bench/autoscaler_gap_bench.py shows
    the scale-ups without the taint)."""
    kata = {**GVISOR, "metadata": {"name": "kata"}, "scheduling": {"nodeSelector": {"runtime/kata": "true"}}}
    cloud.apply(kata)
    try:
        with scene(cloud, request, PREDICATE_LABELS, extra_flags=["--label-nodes-rate=1"]) as s:
            for i in range(40):
                # Cordoned: nothing is scheduled there, only their labels are written.
                cloud.apply(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": f"kata-{i}", "labels": {"runtime/kata": "true"}},
                        "spec": {"unschedulable": True},
                    }
                )
            s.node("plain-a")
            s.pod("sandboxed-0")
            s.unschedulable("sandboxed-0")
            gvisor = template("gvisor", labels={**SELECTOR, LABEL: "true"}, taints=[STARTUP, SANDBOX])
            with autoscaling(cloud, [gvisor, template("plain")]) as scaler:
                node, seconds = s.bound("sandboxed-0", scaler, within=90)
                assert scaler.scale_ups() == [("gvisor", 0, 1)]
                (arrival,) = s.registration.made()  # type: ignore[union-attr]
                assert arrival.ready is not None and arrival.labelled is not None
                gap = arrival.labelled - arrival.ready
                # The gap was there, longer than the autoscaler's scan interval.
                assert gap > 10, gap
                assert scaler.lines(f"Overriding status of node {node}, which seems to have startup taint")
                print(f"registration gap {gap:.1f} s: one scale-up, {node} bound {seconds:.1f} s after start")
    finally:
        cloud.delete(kata)


def test_a_new_node_keeps_its_startup_taint_until_a_label_set_20_s_after_registration(
    cloud: ControlPlane, request: pytest.FixtureRequest
) -> None:
    """kata's class reads katacontainers.io/kata-runtime, which kata-deploy sets once its
    DaemonSet pod has run on the node: 20 s after it registers, here. The node fits no
    class until then. It lost the startup taint at its first reconcile, and the
    autoscaler, seeing a ready node the pod cannot use, added another. With
    startup-taint-grace the node keeps the taint while the pod waits: one scale-up, the
    taint gone in the write that labels the node, and the pod bound there."""
    kata_label = "runtimeclass.node-restriction.kubernetes.io/kata"
    kata = {**GVISOR, "metadata": {"name": "kata"}, "scheduling": {"nodeSelector": {KATA_RUNTIME: "true"}}}
    cloud.apply(kata)
    try:
        with scene(
            cloud,
            request,
            PREDICATE_LABELS,
            extra_flags=["--startup-taint-grace=90"],
            late_labels={KATA_RUNTIME: "true"},
            late_after=20.0,
        ) as s:
            s.node("plain-a")
            s.pod("kata-0", runtimeClassName="kata")
            s.unschedulable("kata-0")
            # The template as node-template says: the derived label (the autoscaler reads
            # it there), not the late one, which the node gets from kata-deploy.
            group = template("kata", labels={kata_label: "true"}, taints=[STARTUP])
            with autoscaling(cloud, [group, template("plain")]) as scaler:
                node, seconds = s.bound("kata-0", scaler, within=120)
                assert node.startswith("kata-")
                assert scaler.scale_ups() == [("kata", 0, 1)]
                (arrival,) = s.registration.made()  # type: ignore[union-attr]
                assert arrival.untainted is not None and arrival.untainted - arrival.seen >= 20.0
                assert arrival.labelled is not None and arrival.labelled == arrival.untainted
                print(f"late label: one scale-up, taint kept {arrival.untainted - arrival.seen:.1f} s, bound {seconds:.1f} s")
    finally:
        cloud.delete(kata)


# --- in-tree Kubernetes: the baseline ------------------------------------------------------


@pytest.mark.parametrize("source", ["configuration", "live node"])
def test_in_tree_kubernetes_scales_the_gvisor_group_from_either_template(
    in_tree: ControlPlane, request: pytest.FixtureRequest, source: str
) -> None:
    """RuntimeClass admission merges the class's selector into the pod; kube-scheduler
    alone places it: what every mode is held to."""
    with scene(in_tree, request, None) as s:
        s.node("plain-a")
        s.node("plain-b")
        if source == "live node":
            s.member("gvisor-live", "gvisor", labels=SELECTOR, cpu="2")
            s.filler("gvisor-live", "1800m")
        else:
            s.node("gvisor-full", labels=SELECTOR, cpu="2", used="1800m")
        s.pod("sandboxed-0")
        admitted = in_tree.client.get(f"/api/v1/namespaces/{s.namespace}/pods/sandboxed-0")["spec"]
        assert admitted["nodeSelector"] == SELECTOR and admitted["schedulerName"] == "default-scheduler"
        s.unschedulable("sandboxed-0")
        gvisor = template("gvisor", labels=SELECTOR, cpu="2", taints=[SANDBOX])
        with autoscaling(in_tree, [gvisor, template("plain")]) as scaler:
            node, seconds = s.bound("sandboxed-0", scaler)
            expected = ("gvisor", 1, 2) if source == "live node" else ("gvisor", 0, 1)
            assert node.startswith("gvisor-") and scaler.scale_ups() == [expected]
            print(
                f"in-tree, {source}: gvisor {expected[1]}->{expected[2]}, {node} bound {seconds:.1f} s after start"
            )


# --- the node policy lets the extender remove the startup taint, and nothing else ----------

NODE_SPEC_FIELDS = {
    "podCIDR",
    "podCIDRs",
    "providerID",
    "unschedulable",
    "taints",
    "configSource",
    "externalID",
}
SPEC_REFUSED = "node spec may not change, but for removing the startup taint"


def test_the_node_policy_allows_removing_the_startup_taint_and_no_other_spec_change(
    cloud: ControlPlane,
) -> None:
    # The policy compares NodeSpec field by field: every field this API server has.
    openapi = cloud.client.get("/openapi/v3/api/v1")
    assert (
        set(openapi["components"]["schemas"]["io.k8s.api.core.v1.NodeSpec"]["properties"]) == NODE_SPEC_FIELDS
    )
    done = install(cloud, render(PREDICATE_LABELS), start=False)
    try:
        extender = cloud.client_as(done.namespace, "runtimeclass-extender")
        cloud.add_ready_node("tainted", taints=[STARTUP, SANDBOX])

        def patch(body: Json) -> tuple[int, str]:
            answer = extender.request(
                "PATCH", "/api/v1/nodes/tainted", body, content_type="application/merge-patch+json"
            )
            return answer.status, answer.message

        # The policy is enforced a moment after it is created: until an annotation is refused.
        wait_for(
            lambda: (
                extender.request(
                    "PATCH",
                    "/api/v1/nodes/tainted",
                    {"metadata": {"annotations": {"x": "y"}}},
                    query={"dryRun": "All"},
                    content_type="application/merge-patch+json",
                ).status
                == 422
            ),
            timeout=30,
            what="the node policy enforced",
        )
        refused = [
            {"spec": {"taints": None}},  # both taints
            {"spec": {"taints": [STARTUP]}},  # the other taint
            {"spec": {"taints": [STARTUP, SANDBOX, {"key": "x", "effect": "NoSchedule"}]}},  # one added
            {"spec": {"taints": [SANDBOX], "unschedulable": True}},  # the startup taint, and more
        ]
        for body in refused:
            status, message = patch(body)
            assert status == 422 and message.endswith(SPEC_REFUSED), (body, status, message)
        assert taint_keys(cloud, "tainted") == [DEFAULT_STARTUP_TAINT, "sandbox"]
        assert patch({"metadata": {"labels": {LABEL: "true"}}, "spec": {"taints": [SANDBOX]}})[0] == 200
        assert taint_keys(cloud, "tainted") == ["sandbox"]
    finally:
        done.uninstall()
        cloud.client.request("DELETE", "/api/v1/nodes/tainted")
