"""The default-scheduler placement as a managed cluster runs it: kube-apiserver 1.36.2 with its
RuntimeClass admission plugin on (GKE, EKS and AKS never turn it off), one kube-scheduler
as Kubernetes ships it, and the chart installed with install.md's command for the mode.

Two pools, as an operator of such a cluster has them:

- a GKE Sandbox-like gVisor pool: the class's rules are its own ``scheduling.nodeSelector``
  and a toleration for the pool's taint, with an overhead of 250m/64Mi. The plugin
  merges all of it into each pod, so pod admission adds nothing: the mutating policy is
  not invoked for its pods (its match conditions turn them away), and the placement's
  guard lets them pass unmarked, because the extender's namespace names the class (its
  annotation, which the leader writes);
- a Kata pool selected by the node-selector-term annotation, which the plugin cannot
  merge: its pods get the derived label requirement and the admitted mark, as with the
  plugin off.

And what used to go wrong there: an edit of the gVisor class's overhead, while the
extender runs and with every replica stopped, refuses no pod; ``check-pod-admission``
says ``ok``; before the leader's first write a pod of a class is still refused.

Bound pods stay Pending (no kubelet): binding is ``spec.nodeName``.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.autoscaler import start_default_scheduler
from tests.support.control_plane import Assets, ControlPlane, Process
from tests.support.helm import template as helm_template
from tests.support.install import Installed, install
from tests.support.pods import GVISOR, GVISOR_SELECTOR, GVISOR_TAINT, KATA, class_pod, dry_run
from tests.support.pods import node_of as bound_to
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("kube_scheduler")

Json = dict[str, Any]
NAMESPACE = "sandboxes"
EXTENDER_NAMESPACE = "runtimeclass-extender"
PREFIX = "runtimeclass.node-restriction.kubernetes.io"
# install.md's command for the default-scheduler mode, as values.
CHART_VALUES = {"mode": "default-scheduler"}
ADMITTED = "runtimeclass-extender.dev/admitted"
REFUSED = "pod rejected: RuntimeClass {name} is not in the pod admission table runtimeclass-extender yet"
MAP = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/runtimeclass-extender-pod-admission"
TABLE = "/apis/runtimeclass-extender.dev/v1alpha1/podadmissiontables/runtimeclass-extender"




@pytest.fixture(scope="module")
def managed(assets: Assets) -> Iterator[ControlPlane]:
    """kube-apiserver with its default admission chain: the RuntimeClass plugin on."""
    with ControlPlane(assets) as control_plane:
        control_plane.ensure_namespace(NAMESPACE)
        control_plane.apply(GVISOR)
        control_plane.apply(KATA)
        yield control_plane


@pytest.fixture(scope="module")
def scheduler(managed: ControlPlane) -> Iterator[Process]:
    process = start_default_scheduler(managed)
    try:
        yield process
    finally:
        process.stop()
        managed.processes.remove(process)


def ready_install(plane: ControlPlane) -> Installed:
    """The chart installed and its replica ready (what helm install --wait waits for),
    and the API server's admission reading the new table and namespace."""
    done = install(plane, helm_template(CHART_VALUES))
    wait_for(
        lambda: (plane.client.get(TABLE).get("spec") or {}).get("runtimeClassAdmissionPlugin")
        and "gvisor" in admitted_by_plugin(plane),
        what="the leader finding the plugin, and naming gvisor on its namespace",
    )
    wait_for(
        lambda: admit(plane, pod("probe-0", "kata")).ok and admit(plane, pod("probe-1", "gvisor")).ok,
        what="the API server's admission reading the new table",
        last=lambda: admit(plane, pod("probe-0", "kata")).message,
    )
    return done


@pytest.fixture
def installed(managed: ControlPlane, scheduler: Process) -> Iterator[Installed]:
    done = ready_install(managed)
    try:
        yield done
    finally:
        done.uninstall()


def admitted_by_plugin(plane: ControlPlane) -> list[str]:
    namespace = plane.client.get(f"/api/v1/namespaces/{EXTENDER_NAMESPACE}")
    value = (namespace["metadata"].get("annotations") or {}).get("runtimeclass-extender.dev/admitted-by-plugin")
    return [name for name in (value or "").split(",") if name]


def pod(name: str, runtime_class: str, *, cpu: str = "100m") -> Json:
    return class_pod(name, NAMESPACE, runtime_class, cpu=cpu)


admit = dry_run


@contextlib.contextmanager
def pools(plane: ControlPlane) -> Iterator[None]:
    """Two gVisor nodes (tainted, as GKE Sandbox taints its pool), two Kata nodes, two
    plain ones."""
    names = {
        "gvisor-a": (GVISOR_SELECTOR, [GVISOR_TAINT]),
        "gvisor-b": (GVISOR_SELECTOR, [GVISOR_TAINT]),
        "kata-a": ({"katacontainers.io/kata-runtime": "true"}, []),
        "kata-b": ({"katacontainers.io/kata-runtime": "true"}, []),
        "plain-a": ({}, []),
        "plain-b": ({}, []),
    }
    for name, (labels, taints) in names.items():
        plane.add_ready_node(name, labels=labels, taints=taints, cpu="2")
    try:
        yield
    finally:
        for name in names:
            plane.client.request("DELETE", f"/api/v1/nodes/{name}")


def node_of(plane: ControlPlane, name: str) -> str:
    return bound_to(plane, NAMESPACE, name)


def delete_pods(plane: ControlPlane, *names: str) -> None:
    for name in names:
        plane.client.request(
            "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", query={"gracePeriodSeconds": "0"}
        )


def test_pods_of_both_classes_are_bound_on_their_pools_and_a_gvisor_pod_is_left_as_the_plugin_made_it(
    managed: ControlPlane, installed: Installed
) -> None:
    with pools(managed):
        wait_for(
            lambda: all(
                f"{PREFIX}/kata" in (managed.client.get(f"/api/v1/nodes/{n}")["metadata"].get("labels") or {})
                for n in ("kata-a", "kata-b")
            ),
            what="the Kata pool labelled",
        )
        names = [f"gvisor-{i}" for i in range(5)] + [f"kata-{i}" for i in range(5)]
        for name in names:
            managed.apply(pod(name, name.split("-")[0]))
        try:
            bound = {name: wait_for(lambda n=name: node_of(managed, n), what=f"{name} bound") for name in names}
            assert all(node.startswith(name.split("-")[0] + "-") for name, node in bound.items()), bound
            gvisor = managed.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/gvisor-0")
            # The plugin's merge, and nothing of ours: no label requirement, no mark.
            assert gvisor["spec"]["nodeSelector"] == GVISOR_SELECTOR
            assert gvisor["spec"]["overhead"] == {"cpu": "250m", "memory": "64Mi"}
            assert ADMITTED not in (gvisor["metadata"].get("labels") or {})
            kata = managed.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/kata-0")
            assert kata["spec"]["nodeSelector"] == {f"{PREFIX}/kata": "true"}
            assert kata["metadata"]["labels"][ADMITTED] == "true"
        finally:
            delete_pods(managed, *names)


def test_no_mutation_is_invoked_for_a_pod_the_plugin_constrains_fully(
    managed: ControlPlane, installed: Installed
) -> None:
    """Shown with the mutating policy edited to label every pod it is invoked for (and
    mark it admitted, for the guard): a gVisor pod comes out without that label (the
    policy's match conditions turned it away before any mutation), a Kata pod with it."""
    installed.stop_extenders()
    policy = managed.client.get(MAP)
    edited = {
        **policy,
        "spec": {
            **policy["spec"],
            "mutations": [
                {
                    "patchType": "JSONPatch",
                    "jsonPatch": {
                        "expression": (
                            "[JSONPatch{op: 'add', path: '/metadata/labels', "
                            "value: {'invoked': 'true', 'runtimeclass-extender.dev/admitted': 'true'}}]"
                        )
                    },
                }
            ],
        },
    }
    assert managed.client.request("PUT", MAP, edited).ok
    try:
        wait_for(
            lambda: (admit(managed, pod("kata-0", "kata")).body.get("metadata", {}).get("labels") or {}).get(
                "invoked"
            ),
            what="the API server evaluating the edited policy",
            last=lambda: admit(managed, pod("kata-0", "kata")).message,
        )
        answer = admit(managed, pod("gvisor-0", "gvisor"))
        assert answer.ok, answer.message
        assert "invoked" not in (answer.body["metadata"].get("labels") or {})
    finally:
        restored = managed.client.get(MAP)
        managed.client.request("PUT", MAP, {**restored, "spec": policy["spec"]})
        installed.start_extenders()


def test_an_edit_of_the_overhead_refuses_no_pod_while_the_extender_runs_or_not(
    managed: ControlPlane, installed: Installed
) -> None:
    """The plugin sets and checks the overhead from the live class; the table, which a
    leader writes after the edit (or, with no replica running, never), is not asked."""
    edits = ({"cpu": "500m", "memory": "64Mi"}, {"cpu": "750m", "memory": "96Mi"})
    try:
        managed.apply({**GVISOR, "overhead": {"podFixed": edits[0]}})
        refused = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            answer = admit(managed, pod("edited", "gvisor"))
            if not answer.ok:
                refused.append(answer.message)
            time.sleep(0.25)
        assert refused == []
        installed.stop_extenders()
        managed.apply({**GVISOR, "overhead": {"podFixed": edits[1]}})
        time.sleep(1)  # the plugin's informer sees the edit; nothing of ours runs
        for i in range(3):
            answer = admit(managed, pod(f"edited-{i}", "gvisor"))
            assert answer.ok, answer.message
            assert answer.body["spec"]["overhead"] == edits[1]
    finally:
        managed.apply(GVISOR)
        installed.start_extenders()


def test_check_pod_admission_says_ok_and_that_the_plugin_runs(managed: ControlPlane, installed: Installed) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "extender", "check-pod-admission", "--kubeconfig", str(managed.kubeconfig), "-n", NAMESPACE],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every probe pod admitted as it should be" in result.stderr
    assert "The API server runs the RuntimeClass admission plugin." in result.stderr
    lines = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert lines["gvisor"][1:4] == ["default-scheduler", "cpu=250m,memory=64Mi", "(none)"]
    assert lines["kata"][1:3] == ["default-scheduler", "(none)"]
    assert lines["kata"][3] == f"{PREFIX}/kata=true"


def test_before_the_leaders_first_write_a_pod_of_a_class_is_refused_and_after_a_reinstall_too(
    assets: Assets,
) -> None:
    """On a new cluster with the plugin on: the policies there, no table and no list of
    classes yet (no replica has started): a pod of either class is refused, one of none
    admitted. Then the install, and an uninstall and install again on the same API
    server: its Namespace param is read afresh (kube-apiserver's own Namespace informer,
    which an uninstall does not stop): the list the first leader wrote is gone, and a
    gVisor pod is refused again until the new leader writes it."""
    with ControlPlane(assets) as plane:
        plane.ensure_namespace(NAMESPACE)
        plane.apply(GVISOR)
        plane.apply(KATA)
        first = install(plane, helm_template(CHART_VALUES), start=False)
        try:
            for name in ("gvisor", "kata"):
                wait_for(
                    lambda n=name: admit(plane, pod("early", n)).status == 403
                    and REFUSED.format(name=n) in admit(plane, pod("early", n)).message,
                    timeout=30,
                    what=f"a {name} pod refused by the guard",
                    last=lambda n=name: admit(plane, pod("early", n)).message,
                )
            plain = pod("plain", "gvisor")
            del plain["spec"]["runtimeClassName"]
            assert admit(plane, plain).ok
            first.start_extenders()
            wait_for(lambda: admit(plane, pod("late", "gvisor")).ok, what="gvisor admitted after the leader wrote")
        finally:
            first.uninstall()
        # What the first install's leader wrote, gone: a Namespace informer frozen at the
        # uninstall (what kubernetes/kubernetes#130887 does to a ConfigMap param) would
        # still show it, and let a gVisor pod pass before the new leader writes.
        plane.client.patch(
            f"/api/v1/namespaces/{EXTENDER_NAMESPACE}",
            {"metadata": {"annotations": {"runtimeclass-extender.dev/admitted-by-plugin": None}}},
        )
        again = install(plane, helm_template(CHART_VALUES), start=False)
        try:
            wait_for(
                lambda: REFUSED.format(name="gvisor") in admit(plane, pod("again", "gvisor")).message,
                timeout=30,
                what="a gvisor pod refused by the reinstalled guard",
                last=lambda: admit(plane, pod("again", "gvisor")).message,
            )
            again.start_extenders()
            answer = wait_for(
                lambda: (a := admit(plane, pod("again", "gvisor"))).ok and a,
                what="gvisor admitted once the new leader wrote",
            )
            assert ADMITTED not in (answer.body["metadata"].get("labels") or {})
        finally:
            again.uninstall()
