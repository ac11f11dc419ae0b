"""docs/install.md's sample workload, placed by each mode's scheduler, on kube-apiserver and kube-scheduler 1.36.

Steps 4 and 5 of "Install into a cluster", as an operator of each mode runs them, on an
API server with its default admission chain (the RuntimeClass admission plugin on, as
every managed cluster and kubeadm run it): ``deploy/examples/runtimeclasses.yaml``
applied as shipped, the mode's overlay installed (its extender run as its own
ServiceAccount, tests/support/install.py) and its scheduler running: the cluster's own
kube-scheduler in the default-scheduler mode, the overlay's ``runtimeclass-scheduler``
profile calling the extender in predicate mode. The workload's pods are made as its
ReplicaSet would make them (no controller-manager runs here): from
``deploy/examples/workload.yaml``'s pod template, unchanged.

- With a gVisor node (labelled and tainted as the example class selects and tolerates)
  and two plain nodes, every pod is bound to the gVisor node.
- With none, every pod pends, and the events say why as the page shows them:
  kube-scheduler's ``FailedScheduling`` (the in-tree filter's words in the
  default-scheduler mode, and in predicate mode where the plugin runs; the extender's
  "didn't match RuntimeClass" in predicate mode where it does not, on a second API
  server run with ``--disable-admission-plugins=RuntimeClass``), and in the
  default-scheduler mode the extender's ``RuntimeClassFitsNoNode``, naming the class.

Bound pods stay Pending (no kubelet): binding is ``spec.nodeName``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.support.autoscaler import scheduler_configuration, start_default_scheduler, start_scheduler
from tests.support.control_plane import Assets, ControlPlane, Process
from tests.support.install import Installed, install
from tests.support.manifests import render
from tests.support.paths import DOCS, REPO
from tests.support.pods import GVISOR_TAINT
from tests.support.pods import node_of as bound_to
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("kube_scheduler")

Json = dict[str, Any]
EXAMPLES = REPO / "deploy" / "examples"
# Where the operator applies the workload (kubectl apply -f, its current namespace).
NAMESPACE = "apps"
GVISOR_LABELS = {"sandbox.gke.io/runtime": "gvisor"}
TABLE = "/apis/runtimeclass-extender.dev/v1alpha1/podadmissiontables/runtimeclass-extender"


def workload() -> Json:
    (deployment,) = [d for d in yaml.safe_load_all((EXAMPLES / "workload.yaml").read_text()) if d]
    return dict(deployment)


def runtime_classes() -> list[Json]:
    return [d for d in yaml.safe_load_all((EXAMPLES / "runtimeclasses.yaml").read_text()) if d]


def prepare(plane: ControlPlane) -> ControlPlane:
    """The example classes, and three plain nodes (the page's "0/3 nodes")."""
    for runtime_class in runtime_classes():
        plane.apply(runtime_class)
    plane.ensure_namespace(NAMESPACE)
    for index in (1, 2, 3):
        plane.add_ready_node(f"plain-{index}", labels={"kubernetes.io/os": "linux"})
    return plane


@pytest.fixture(scope="module")
def managed(assets: Assets) -> Iterator[ControlPlane]:
    """kube-apiserver with its default admission chain: the RuntimeClass plugin on."""
    with ControlPlane(assets) as control_plane:
        yield prepare(control_plane)


@pytest.fixture(scope="module")
def plugin_off(plane: ControlPlane) -> ControlPlane:
    """kube-apiserver with --disable-admission-plugins=RuntimeClass."""
    return prepare(plane)


def replica_pods(plane: ControlPlane, prefix: str) -> list[str]:
    """The workload's pods as its ReplicaSet makes them: its pod template, a generated
    name, in the namespace it is applied to."""
    deployment = workload()
    names = []
    for _ in range(deployment["spec"]["replicas"]):
        template = copy.deepcopy(deployment["spec"]["template"])
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template["metadata"], "generateName": f"{prefix}-"},
            "spec": template["spec"],
        }
        answer = plane.client.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", manifest)
        assert answer.ok, answer.message
        names.append(answer.body["metadata"]["name"])
    return names


def node_of(plane: ControlPlane, name: str) -> str:
    return bound_to(plane, NAMESPACE, name)


def messages(plane: ControlPlane, name: str, reason: str) -> list[str]:
    """The notes of ``reason`` events about the pod (core and events.k8s.io alike)."""
    found = []
    for path in (
        f"/api/v1/namespaces/{NAMESPACE}/events",
        f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events",
    ):
        for event in plane.client.get(path).get("items") or []:
            regarding = event.get("involvedObject") or event.get("regarding") or {}
            if regarding.get("name") == name and event.get("reason") == reason:
                found.append(str(event.get("message") or event.get("note") or ""))
    return found


def shown(reason: str) -> list[str]:
    """The messages install.md's step 5 shows for ``reason``, in the page's order, as its
    comment lines have them (up to a trailing " ...", which stands for the rest)."""
    text = (DOCS / "install.md").read_text(encoding="utf-8")
    section = text.split("**5. Read why a pod pends.**", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if re.search(rf"#.*\b{reason}\b\s+pod/", line)]
    assert lines, reason
    return [line.split("pod/", 1)[1].split(None, 1)[1].strip().removesuffix(" ...") for line in lines]


def ready(plane: ControlPlane, docs: tuple[Json, ...]) -> Installed:
    """The overlay installed and its replica ready, the table naming every class (what
    ``kubectl rollout status`` waits for), and the API server admitting from it."""
    done = install(plane, docs)
    wait_for(
        lambda: (
            set((plane.client.get(TABLE).get("spec") or {}).get("runtimeClasses") or {})
            >= {rc["metadata"]["name"] for rc in runtime_classes()}
        ),
        what="the table holding every example class",
    )
    return done


def place_and_pend(plane: ControlPlane, prefix: str) -> tuple[list[str], list[str]]:
    """The workload's pods with a gVisor node (bound there), then without one (pending)."""
    plane.add_ready_node(
        "gvisor-1", labels={"kubernetes.io/os": "linux", **GVISOR_LABELS}, taints=[GVISOR_TAINT]
    )
    try:
        placed = replica_pods(plane, f"{prefix}-placed")
        for name in placed:
            wait_for(lambda name=name: node_of(plane, name), timeout=60, what=f"{name} bound")
        assert {node_of(plane, name) for name in placed} == {"gvisor-1"}
    finally:
        plane.client.request("DELETE", "/api/v1/nodes/gvisor-1")
    pending = replica_pods(plane, f"{prefix}-pending")
    return placed, pending


def test_the_default_scheduler_mode_places_the_sample_workload(managed: ControlPlane) -> None:
    docs = render("overlays/default-scheduler")
    scheduler = start_default_scheduler(managed)
    done = ready(managed, docs)
    try:
        placed, pending = place_and_pend(managed, "ds")
        for name in placed:
            pod = managed.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
            assert pod["spec"]["schedulerName"] == "default-scheduler"
        failed = shown("FailedScheduling")[0]
        (fits_no_node,) = shown("RuntimeClassFitsNoNode")
        for name in pending:
            hears(managed, name, "FailedScheduling", lambda m: m.startswith(failed), what=failed)
            hears(managed, name, "RuntimeClassFitsNoNode", lambda m: m == fits_no_node, what=fits_no_node)
            assert node_of(managed, name) == ""
    finally:
        done.uninstall()
        scheduler.stop()
        managed.processes.remove(scheduler)
        _delete_pods(managed)


@pytest.fixture(scope="module", params=["managed", "plugin_off"])
def api_server(request: pytest.FixtureRequest) -> tuple[str, ControlPlane]:
    """Each API server, by its fixture's name (module-scoped, so started before the
    test's own leak check begins)."""
    return request.param, request.getfixturevalue(request.param)


def test_predicate_mode_places_the_sample_workload(api_server: tuple[str, ControlPlane]) -> None:
    which, plane = api_server
    docs = render("overlays/predicate-mode")
    done = ready(plane, docs)
    scheduler: Process = start_scheduler(
        plane, scheduler_configuration(docs), namespace=done.namespace, extender_port=done.extender.port
    )
    # The page's message where the plugin is off; where it runs, the in-tree filter's.
    failed = shown("FailedScheduling")[1]
    if which == "managed":
        failed = failed.replace("didn't match RuntimeClass", "didn't match Pod's node affinity/selector")
    try:
        placed, pending = place_and_pend(plane, "pm")
        for name in [*placed, *pending]:
            pod = plane.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
            assert pod["spec"]["schedulerName"] == "runtimeclass-scheduler"  # routed by pod admission
        for name in pending:
            hears(plane, name, "FailedScheduling", lambda m: m.startswith(failed), what=failed)
            assert node_of(plane, name) == ""
    finally:
        scheduler.stop()
        plane.processes.remove(scheduler)
        done.uninstall()
        _delete_pods(plane)


def hears(plane: ControlPlane, pod: str, reason: str, matches: Callable[[str], bool], *, what: str) -> None:
    """Wait until the pod has an event of ``reason`` whose message ``matches``."""
    wait_for(
        lambda: any(matches(m) for m in messages(plane, pod, reason)),
        timeout=60,
        what=f"{pod}: {what}",
        last=lambda: messages(plane, pod, reason),
    )


def _delete_pods(plane: ControlPlane) -> None:
    plane.client.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"gracePeriodSeconds": "0"})
