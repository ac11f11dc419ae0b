"""The default-scheduler mode on kube-apiserver and kube-scheduler 1.36 (docs/large-clusters.md).

The chart installed with ``mode=default-scheduler`` (its extender run as
its own ServiceAccount, tests/support/install.py), and kube-scheduler as Kubernetes
ships it: its default profile, no extender, no second scheduler. What an operator gets:

- pods of a class bound to the class's nodes by the default scheduler, by the label
  requirement and toleration pod admission gave them, their schedulerName untouched;
- a class edited to another pool moves its pending pods there (the labeller moves the
  labels; kube-scheduler's NodeAffinity hint retries the pods);
- a pending pod told why, naming its class: ``RuntimeClassFitsNoNode`` while the class
  fits no node, ``RuntimeClassNodesUnavailable`` while its nodes have no room;
- a pod of a class not in the pod admission table refused (created while no replica
  ran), and admitted once a replica has written the class's entry; a pod admitted from
  the table never reaching the guard (its admitted label); and a pod created
  right after the install (the chart's pods ready, as ``helm install --wait`` waits
  for) admitted with its requirement.

Bound pods stay Pending (no kubelet): binding is ``spec.nodeName``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.autoscaler import start_default_scheduler
from tests.support.control_plane import ControlPlane, Process
from tests.support.helm import template as helm_template
from tests.support.install import Installed, install
from tests.support.pods import class_pod, dry_run
from tests.support.pods import node_of as bound_to
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("kube_scheduler")

Json = dict[str, Any]
LABEL = "runtimeclass.node-restriction.kubernetes.io/gvisor"
SELECTOR = {"runtime/gvisor": "true"}
SANDBOX = {"key": "sandbox", "value": "gvisor", "effect": "NoSchedule"}
GVISOR: Json = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "gvisor"},
    "handler": "runsc",
    "scheduling": {
        "nodeSelector": SELECTOR,
        "tolerations": [{"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"}],
    },
}
NAMESPACE = "sandboxes"
CHART_VALUES = {"mode": "default-scheduler"}
REFUSED = "pod rejected: RuntimeClass {name} is not in the pod admission table runtimeclass-extender yet"




@pytest.fixture(scope="module")
def scheduler(plane: ControlPlane) -> Iterator[Process]:
    """kube-scheduler as Kubernetes ships it, beside predicate mode's API server."""
    process = start_default_scheduler(plane)
    try:
        yield process
    finally:
        process.stop()
        plane.processes.remove(process)


@pytest.fixture
def installed(plane: ControlPlane, scheduler: Process) -> Iterator[Installed]:
    """The chart with the default-scheduler placement, installed for the test alone;
    returns once every replica is ready (what helm install --wait waits for)."""
    plane.apply(GVISOR)
    plane.ensure_namespace(NAMESPACE)
    done = install(plane, helm_template(CHART_VALUES))
    try:
        # After an earlier test's install the API server reads the new table a few
        # seconds late (new_plane says why); its guard refuses the class's pods until then.
        wait_for(
            lambda: admit(plane, pod("probe-0")).ok,
            what="the API server's admission reading the new table",
            last=lambda: admit(plane, pod("probe-0")).message,
        )
        yield done
    finally:
        done.uninstall()


admit = dry_run


def pod(name: str, *, runtime_class: str = "gvisor", cpu: str = "100m") -> Json:
    return class_pod(name, NAMESPACE, runtime_class, cpu=cpu)


def get_pod(plane: ControlPlane, name: str) -> Json:
    return plane.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")


def node_of(plane: ControlPlane, name: str) -> str:
    return bound_to(plane, NAMESPACE, name)


def events_of(plane: ControlPlane, name: str) -> list[Json]:
    listed = plane.client.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
    return [e for e in listed["items"] if e["regarding"]["name"] == name]


@contextlib.contextmanager
def nodes(plane: ControlPlane, names: dict[str, dict[str, str]], *, cpu: str = "2") -> Iterator[None]:
    """Nodes (Ready, no not-ready taint), the gvisor ones tainted as GKE Sandbox taints
    its pool; deleted after."""
    for name, labels in names.items():
        taints = [SANDBOX] if labels.get("runtime/gvisor") else []
        plane.add_ready_node(name, labels=labels, taints=taints, cpu=cpu)
    try:
        yield
    finally:
        for name in names:
            plane.client.request("DELETE", f"/api/v1/nodes/{name}")


def labelled(plane: ControlPlane, node: str) -> bool:
    return LABEL in (plane.client.get(f"/api/v1/nodes/{node}")["metadata"].get("labels") or {})


def delete_pods(plane: ControlPlane, *names: str) -> None:
    for name in names:
        plane.client.request(
            "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", query={"gracePeriodSeconds": "0"}
        )


def test_pods_of_a_class_are_bound_to_its_nodes_by_the_default_scheduler(
    plane: ControlPlane, installed: Installed
) -> None:
    with nodes(plane, {"gvisor-a": SELECTOR, "gvisor-b": SELECTOR, "plain-a": {}, "plain-b": {}}):
        wait_for(lambda: labelled(plane, "gvisor-a") and labelled(plane, "gvisor-b"), what="the pool labelled")
        assert not labelled(plane, "plain-a")
        names = [f"sandboxed-{i}" for i in range(6)]
        for name in names:
            plane.apply(pod(name))
        try:
            bound = {name: wait_for(lambda n=name: node_of(plane, n), what=f"{name} bound") for name in names}
            assert set(bound.values()) <= {"gvisor-a", "gvisor-b"}, bound
            spec = get_pod(plane, names[0])["spec"]
            # Not routed: the default scheduler placed it, by what admission gave it.
            assert spec["schedulerName"] == "default-scheduler"
            assert spec["nodeSelector"] == {LABEL: "true"}
            assert {"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"} in spec[
                "tolerations"
            ]
            metadata = get_pod(plane, names[0])["metadata"]
            assert metadata["labels"]["runtimeclass-extender.dev/admitted"] == "true"
            assert "annotations" not in metadata
        finally:
            delete_pods(plane, *names)


def test_a_class_edited_to_another_pool_moves_its_pending_pods_and_each_pending_pod_hears_why(
    plane: ControlPlane, installed: Installed
) -> None:
    """The class selects a pool with no node: its pods pend, and say so naming it. Its
    pool is edited to one with nodes: the labeller moves the label, and kube-scheduler
    places the pending pods there (NodeAffinity's queueing hint: a node gained a label
    the pod requires). A pod its class's nodes have no room for says that too."""
    elsewhere = {"runtime/gvisor": "elsewhere"}
    plane.apply({**GVISOR, "scheduling": {**GVISOR["scheduling"], "nodeSelector": elsewhere}})
    try:
        with nodes(plane, {"gvisor-c": SELECTOR, "plain-c": {}}):
            wait_for(lambda: not labelled(plane, "gvisor-c"), what="no node labelled for the empty pool")
            plane.apply(pod("waiting-0"))
            event = wait_for(
                lambda: [e for e in events_of(plane, "waiting-0") if e["reason"] == "RuntimeClassFitsNoNode"],
                what="the pending pod's event",
            )[0]
            assert event["note"].startswith('RuntimeClass "gvisor": 0 of ')
            assert node_of(plane, "waiting-0") == ""
            plane.apply(GVISOR)  # the pool with nodes
            assert wait_for(lambda: node_of(plane, "waiting-0"), what="the pod moved to the new pool") == "gvisor-c"
            # A pod no node of its class has room for (the node has 2 CPUs).
            plane.apply(pod("too-big", cpu="3"))
            event = wait_for(
                lambda: [e for e in events_of(plane, "too-big") if e["reason"] == "RuntimeClassNodesUnavailable"],
                what="the event of a pod no node of its class has room for",
            )[0]
            assert event["note"].startswith(
                'RuntimeClass "gvisor": 1 of 2 nodes can run it, and kube-scheduler found none of them can take '
                "the pod (kube-scheduler: 0/2 nodes are available: "
            ), event["note"]
            assert "Insufficient cpu" in event["note"]
            assert event["reportingController"] == "runtimeclass-extender.dev/node-labeller"
    finally:
        delete_pods(plane, "waiting-0", "too-big")
        plane.apply(GVISOR)


def test_a_pod_of_a_class_not_in_the_table_is_refused_until_a_replica_writes_its_entry(
    plane: ControlPlane, installed: Installed
) -> None:
    """A class created while no replica runs has no entry: its pod would get no node
    requirement and could land on a node that cannot run it. The placement's guard
    refuses it with words that say why (its controller retries); once a replica is
    back and writes the entry, the same pod is admitted with its requirement."""
    installed.stop_extenders()
    kata: Json = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "kata"},
        "handler": "kata",
        "scheduling": {"nodeSelector": {"runtime/kata": "true"}},
    }
    plane.apply(kata)
    try:
        refused = plane.client.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod("kata-0", runtime_class="kata"))
        assert refused.status == 403 and REFUSED.format(name="kata") in refused.message, refused.message
        # A pod of a class in the table is admitted meanwhile, from the table.
        admitted = admit(plane, pod("gvisor-0"))
        assert admitted.ok and admitted.body["spec"]["nodeSelector"] == {LABEL: "true"}
        installed.start_extenders()

        def admitted_now() -> Json | None:
            answer = admit(plane, pod("kata-0", runtime_class="kata"))
            return answer.body if answer.ok else None

        body = wait_for(admitted_now, what="the kata pod admitted once the entry is written")
        assert body["spec"]["nodeSelector"] == {"runtimeclass.node-restriction.kubernetes.io/kata": "true"}
    finally:
        plane.delete(kata)


GUARD = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/runtimeclass-extender-pod-admission-required"


def test_a_pod_pod_admission_admitted_never_reaches_the_guard(plane: ControlPlane, installed: Installed) -> None:
    """The mutating policy labels each pod it admits (runtimeclass-extender.dev/admitted),
    and the guard's binding selects only pods without that label, which kube-apiserver
    matches before it evaluates anything: an admitted pod costs the API server nothing
    of the guard. Shown with a guard made to refuse every pod that reaches it: a pod of
    a class the table holds is still admitted, while one of a class it does not hold
    hears the edited guard."""
    installed.stop_extenders()
    kata: Json = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"}, "handler": "kata"}
    plane.apply(kata)
    guard = plane.client.get(GUARD)
    edited = {**guard, "spec": {**guard["spec"], "validations": [{"expression": "false", "message": "reached the guard"}]}}
    assert plane.client.request("PUT", GUARD, edited).ok
    try:
        wait_for(
            lambda: "reached the guard" in admit(plane, pod("kata-0", runtime_class="kata")).message,
            what="the API server evaluating the edited guard",
        )
        admitted = admit(plane, pod("gvisor-0"))
        assert admitted.ok, admitted.message
        assert admitted.body["metadata"]["labels"] == {"runtimeclass-extender.dev/admitted": "true"}
        assert admitted.body["spec"]["nodeSelector"] == {LABEL: "true"}
    finally:
        plane.client.request("PUT", GUARD, {**plane.client.get(GUARD), "spec": guard["spec"]})
        plane.delete(kata)
        installed.start_extenders()


def test_a_pod_created_right_after_the_install_is_admitted_with_its_requirement(new_plane: ControlPlane) -> None:
    """The install's pods ready (what helm install --wait and kubectl rollout status
    wait for: /readyz only once the table exists), a pod of a class created at once is
    admitted with its label requirement, never unconstrained. A first install, as on a
    new cluster (new_plane says why)."""
    plane = new_plane
    plane.apply(GVISOR)
    plane.ensure_namespace(NAMESPACE)
    done = install(plane, helm_template(CHART_VALUES))
    try:
        answer = admit(plane, pod("first-0"))
        assert answer.ok, answer.message
        assert answer.body["spec"]["nodeSelector"] == {LABEL: "true"}
        assert answer.body["spec"]["schedulerName"] == "default-scheduler"
    finally:
        done.uninstall()


def test_before_the_table_exists_a_pod_of_a_class_is_refused_and_one_of_none_admitted(new_plane: ControlPlane) -> None:
    """A GitOps tool that applies the install and a workload at once: the policies are
    there, the table not yet (no replica has started). A pod of a class is refused,
    with words that say why, and its controller retries; a pod that names no class is
    admitted as ever. A first install, as on a new cluster (new_plane says why)."""
    plane = new_plane
    plane.apply(GVISOR)
    plane.ensure_namespace(NAMESPACE)
    done = install(plane, helm_template(CHART_VALUES), start=False)
    try:
        def refused_by_the_guard() -> Any:
            answer = admit(plane, pod("early-0"))
            return answer if answer.status == 403 and REFUSED.format(name="gvisor") in answer.message else None

        # The policies are enforced a moment after they are created, and for a moment
        # more the mutating policy refuses every pod it matches, its param kind "not yet
        # synced to use for admission" (kube-apiserver 1.36.2); then the guard's words.
        answer = wait_for(
            refused_by_the_guard,
            timeout=30,
            what="the pod refused by the guard",
            last=lambda: admit(plane, pod("early-0")).message,
        )
        assert answer.status == 403
        plain = pod("plain-0")
        del plain["spec"]["runtimeClassName"]
        assert admit(plane, plain).ok
    finally:
        done.uninstall()
