"""Faults of pod admission an operator would hit, on kube-apiserver and kube-scheduler 1.36.

- **The RuntimeClass admission plugin on** (the RuntimeClass admission plugin on): it sets and checks a
  pod's overhead from the live class, before the policies. A class whose overhead was
  edited while no replica ran used to make the policy refuse every pod of it against
  its stale table entry ("Pod's Overhead doesn't match"); now the table says the plugin
  runs, and the policy leaves the overhead to it.
- **A pod without what pod admission gives a pod of its class** (opted out, naming the
  RuntimeClass scheduler itself): the node labels' profile's in-tree TaintToleration
  filter keeps it off its class's tainted nodes, and it never reaches the extender for
  them. It hears why, naming its class and what it lacks.
- **The PodAdmissionTable CRD missing** (an upgrade that skipped it): the extender says
  which CRD, in its log and readiness, and does the work that does not need it (the
  labels); the API server refuses every pod the mutating policy's binding matches (its
  failurePolicy Fail), which troubleshooting says. Installing the CRD ends it.
- **A pod created right after the install** (the pods ready, as ``helm install --wait``
  and ``kubectl rollout status`` wait for): routed, as every later pod.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.autoscaler import scheduler_configuration, start_scheduler
from tests.support.control_plane import Assets, ControlPlane
from tests.support.helm import template as helm_template
from tests.support.install import install
from tests.support.manifests import PREDICATE_LABELS, render
from tests.support.waiting import wait_for

Json = dict[str, Any]
NAMESPACE = "workloads"
LABEL = "runtimeclass.node-restriction.kubernetes.io/gvisor"
SELECTOR = {"runtime/gvisor": "true"}
SANDBOX = {"key": "sandbox", "value": "gvisor", "effect": "NoSchedule"}
GVISOR: Json = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "gvisor"},
    "handler": "runsc",
    "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}},
    "scheduling": {
        "nodeSelector": SELECTOR,
        "tolerations": [{"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"}],
    },
}
CRD = "podadmissiontables.runtimeclass-extender.dev"
TABLE = "/apis/runtimeclass-extender.dev/v1alpha1/podadmissiontables/runtimeclass-extender"


def pod(name: str, **spec: Any) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, **spec.pop("metadata", {})},
        "spec": {
            "runtimeClassName": "gvisor",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            **spec,
        },
    }


def create(plane: ControlPlane, obj: Json, *, dry_run: bool = True) -> Any:
    return plane.client.request(
        "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", obj, query={"dryRun": "All"} if dry_run else None
    )


def readyz(port: int) -> tuple[int, Json]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def in_tree(assets: Assets) -> Iterator[ControlPlane]:
    """An API server as Kubernetes ships it: RuntimeClass admission on."""
    with ControlPlane(assets) as control_plane:
        control_plane.ensure_namespace(NAMESPACE)
        yield control_plane


def test_with_the_admission_plugin_on_a_stale_overhead_entry_refuses_no_pod(in_tree: ControlPlane) -> None:
    in_tree.apply(GVISOR)
    done = install(in_tree, render("overlays/predicate-mode"))
    try:
        wait_for(
            lambda: in_tree.client.request("GET", TABLE).body.get("spec", {}).get("runtimeClassAdmissionPlugin"),
            what="the table saying the plugin runs",
        )
        done.stop_extenders()
        # Edited while no replica runs: the table keeps the old overhead.
        edited = {**GVISOR, "overhead": {"podFixed": {"cpu": "500m", "memory": "128Mi"}}}
        in_tree.apply(edited)
        entry = in_tree.client.get(TABLE)["spec"]["runtimeClasses"]["gvisor"]
        assert entry["overhead"] == {"cpu": "250m", "memory": "64Mi"}
        answer = create(in_tree, pod("edited-0"))
        assert answer.ok, answer.message  # was: "Pod's Overhead doesn't match RuntimeClass's defined Overhead"
        assert answer.body["spec"]["overhead"] == {"cpu": "500m", "memory": "128Mi"}  # the plugin's, live
        assert answer.body["spec"]["schedulerName"] == "runtimeclass-scheduler"
    finally:
        done.uninstall()
        in_tree.apply(GVISOR)


def test_a_pod_without_its_classs_tolerations_hears_why_it_pends(plane: ControlPlane, assets: Assets) -> None:
    if assets.binary("kube-scheduler") is None:
        if os.environ.get("CI"):
            pytest.fail("kube-scheduler is not in KUBEBUILDER_ASSETS", pytrace=False)
        pytest.skip("kube-scheduler is not in KUBEBUILDER_ASSETS")
    plane.apply(GVISOR)
    plane.ensure_namespace(NAMESPACE)
    docs = render(PREDICATE_LABELS)
    done = install(plane, docs)
    scheduler = start_scheduler(
        plane, scheduler_configuration(docs), namespace=done.namespace, extender_port=done.extender.port
    )
    plane.add_ready_node("gvisor-t", labels=SELECTOR, taints=[SANDBOX])
    plane.add_ready_node("plain-t")
    try:
        wait_for(
            lambda: LABEL in plane.client.get("/api/v1/nodes/gvisor-t")["metadata"]["labels"],
            what="the class's node labelled",
        )
        # Opted out of pod admission, naming the RuntimeClass scheduler itself: no
        # requirement, no toleration.
        opted_out = pod(
            "opted-out-0",
            schedulerName="runtimeclass-scheduler",
            metadata={"labels": {"runtimeclass-extender.dev/webhook": "ignore"}},
        )
        assert create(plane, opted_out, dry_run=False).ok

        def event() -> list[Json]:
            listed = plane.client.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]
            return [
                e
                for e in listed
                if e["regarding"]["name"] == "opted-out-0"
                and e["reportingController"] == "runtimeclass-extender.dev/node-labeller"
            ]

        (found,) = wait_for(event, what="the pending pod's event", last=lambda: scheduler.tail(10))
        assert found["reason"] == "RuntimeClassNodesUnavailable"
        assert found["note"].startswith('RuntimeClass "gvisor": 1 of 2 nodes can run it')
        assert "untolerated taint" in found["note"]
        assert found["note"].endswith(
            f"the pod lacks what pod admission gives a pod of the class: its node label requirement ({LABEL}) "
            "and its tolerations (sandbox Equal gvisor:NoSchedule): it was admitted before its class was in "
            "the pod admission table, before the mode was on, or opted out (recreate it)"
        ), found["note"]
    finally:
        plane.client.request(
            "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/opted-out-0", query={"gracePeriodSeconds": "0"}
        )
        for node in ("gvisor-t", "plain-t"):
            plane.client.request("DELETE", f"/api/v1/nodes/{node}")
        scheduler.stop()
        plane.processes.remove(scheduler)
        done.uninstall()


def test_without_the_crd_the_leader_labels_nodes_and_says_which_crd_is_missing(new_plane: ControlPlane) -> None:
    """On an API server that never served the table's kind, as after an upgrade that
    skipped the CRD."""
    plane = new_plane
    plane.apply(GVISOR)
    plane.ensure_namespace(NAMESPACE)
    docs = [d for d in render(PREDICATE_LABELS) if d["kind"] != "CustomResourceDefinition"]
    done = install(plane, docs, start=False)
    plane.add_ready_node("gvisor-m", labels=SELECTOR, taints=[SANDBOX])
    try:
        for extender in done.extenders:
            extender.start(wait=False)
        extender = done.extender
        wait_for(
            lambda: LABEL in plane.client.get("/api/v1/nodes/gvisor-m")["metadata"]["labels"],
            what="the leader labelling nodes without the table's kind",
            last=lambda: extender.process.tail(20) if extender.process else "",
        )
        status, body = readyz(extender.probe_port)
        assert status == 503
        assert f"the PodAdmissionTable CustomResourceDefinition {CRD}" in body["podAdmissionTable"]["reason"]
        assert extender.process is not None
        assert "the API server does not serve this resource" in extender.process.log.read_text()
        # What the API server does meanwhile (seen on 1.36.2, troubleshooting.md): the
        # mutating policy's param kind cannot be resolved ("failed to find resource
        # referenced by paramKind" where it never served the kind, "... not yet synced
        # to use for admission" where it did before), and its failurePolicy Fail refuses
        # every pod its binding matches, one that names no class too.
        plain = pod("plain-m")
        del plain["spec"]["runtimeClassName"]
        answer = create(plane, plain)
        assert answer.status == 403 and "paramkind" in answer.message.lower(), answer.message
        # The CRD installed: the table is written, the pod is ready, pods are admitted.
        crd = next(d for d in render(PREDICATE_LABELS) if d["kind"] == "CustomResourceDefinition")
        plane.apply_all([crd])
        done.docs.append(crd)
        wait_for(lambda: readyz(extender.probe_port)[0] == 200, timeout=90, what="ready once the CRD is there")
        answer = wait_for(lambda: (a := create(plane, pod("routed-m"))).ok and a, what="pods admitted again")
        assert answer.body["spec"]["schedulerName"] == "runtimeclass-scheduler"
    finally:
        plane.client.request("DELETE", "/api/v1/nodes/gvisor-m")
        done.uninstall()


def test_a_pod_created_right_after_the_install_is_routed(new_plane: ControlPlane) -> None:
    """The chart's pods ready (install() returns once every replica's /readyz is 200,
    which now waits for the table): a pod of a class created at once is routed and
    given its requirement, not admitted unrouted for good. A first install, as on a new
    cluster (new_plane says why)."""
    plane = new_plane
    plane.apply(GVISOR)
    plane.ensure_namespace(NAMESPACE)
    done = install(plane, helm_template({"mode": "predicate", "labelNodes.enabled": "true"}))
    try:
        answer = create(plane, pod("first-0"))
        assert answer.ok, answer.message
        assert answer.body["spec"]["schedulerName"] == "runtimeclass-scheduler"
        assert answer.body["spec"]["nodeSelector"] == {LABEL: "true"}
    finally:
        done.uninstall()
