"""Moving between the two modes and back, by each documented path, on kube-apiserver 1.36.2.

docs/upgrading.md, "Moving between the modes": with ``kubectl apply -k`` (here ``kubectl
apply`` of the rendered overlay, then the page's clean-up commands, run as written) and
with ``helm upgrade`` (the real helm, against the real API server, the page's commands
as written but for ``--wait``: no kubelet runs the pods here), each with the
RuntimeClass admission plugin on (as every managed cluster runs it) and off (predicate
mode's API server). The Deployments the tools apply cannot run here (no kubelet): the
extender replicas are run beside, with each Deployment's flags, old and new overlapping
as a rolling update has them (the new one up, then the old one stopped).

Throughout each move, pods of two classes are created as dry runs, one every few tens
of milliseconds: a gVisor class whose rules are its ``scheduling.nodeSelector`` and a
toleration, and a Kata class selected by the node-selector-term annotation. None may be
refused, and each must be admitted constrained to its class's nodes: routed to
``runtimeclass-scheduler`` (whose extender judges every node), or requiring the class's
derived node label, or (the gVisor class) carrying its selector and toleration.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from tests.support.control_plane import PREDICATE_MODE, Assets, ControlPlane
from tests.support.helm import CHART, NAMESPACE, RELEASE, helm
from tests.support.helm import template as helm_template
from tests.support.install import LOCAL_FLAGS, Extender, extender_container
from tests.support.manifests import PREDICATE_LABELS, render
from tests.support.pods import GVISOR, GVISOR_SELECTOR, GVISOR_TOLERATION, KATA, class_pod, dry_run
from tests.support.waiting import wait_for

Json = dict[str, Any]
WORKLOADS = "workloads"
PREFIX = "runtimeclass.node-restriction.kubernetes.io"
CLASSES: list[Json] = [GVISOR, KATA]
TABLE = "/apis/runtimeclass-extender.dev/v1alpha1/podadmissiontables/runtimeclass-extender"
GUARD = "runtimeclass-extender-pod-admission-required"


@pytest.fixture(params=["plugin-on", "plugin-off"])
def plane(request: pytest.FixtureRequest, assets: Assets) -> Iterator[ControlPlane]:
    """A control plane of the test's own (a move leaves the namespace of one path's
    install in a state the other's would not start from)."""
    flags = {} if request.param == "plugin-on" else PREDICATE_MODE
    with ControlPlane(assets, apiserver_flags=flags) as control_plane:
        control_plane.ensure_namespace(WORKLOADS)
        for runtime_class in CLASSES:
            control_plane.apply(runtime_class)
        yield control_plane


def pod(runtime_class: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"{runtime_class}-", "namespace": WORKLOADS},
        "spec": {"runtimeClassName": runtime_class, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


def constrained(runtime_class: str, admitted: Json) -> bool:
    """Held to the class's nodes: routed to the scheduler whose extender judges every
    node, requiring the class's derived label, or (gVisor) showing its rules."""
    spec = admitted["spec"]
    selector = spec.get("nodeSelector") or {}
    if spec.get("schedulerName") == "runtimeclass-scheduler":
        return True
    if selector.get(f"{PREFIX}/{runtime_class}") == "true":
        return True
    shows = all(selector.get(k) == v for k, v in GVISOR_SELECTOR.items())
    return runtime_class == "gvisor" and shows and GVISOR_TOLERATION in (spec.get("tolerations") or [])


@dataclass
class PodStream:
    """Pods of both classes created as dry runs, one after another, until stopped."""

    plane: ControlPlane
    answers: list[tuple[str, int, Json, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> PodStream:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            for runtime_class in ("gvisor", "kata"):
                answer = self.plane.client.request(
                    "POST", f"/api/v1/namespaces/{WORKLOADS}/pods", pod(runtime_class), query={"dryRun": "All"}
                )
                self.answers.append((runtime_class, answer.status, answer.body if answer.ok else {}, answer.message))
            time.sleep(0.02)

    def check(self) -> None:
        refused = [(c, status, message) for c, status, _, message in self.answers if status != 201]
        assert refused == [], refused[:3]
        loose = [(c, body["spec"]) for c, _, body, _ in self.answers if not constrained(c, body)]
        assert loose == [], loose[:3]
        assert len(self.answers) > 20, len(self.answers)


def replica(plane: ControlPlane, docs: tuple[Json, ...], name: str) -> Extender:
    """One replica of the extender with the Deployment's flags in ``docs``, started."""
    container = extender_container(docs)
    flags = [a for a in container["args"][1:] if a.split("=", 1)[0] not in LOCAL_FLAGS]
    return Extender(plane, NAMESPACE, flags, {"PYTHONUNBUFFERED": "1", "PATH": os.environ.get("PATH", "")}, name=name).start()


def table_says(plane: ControlPlane, *, label_nodes: bool) -> bool:
    answer = plane.client.request("GET", TABLE)
    spec = answer.body.get("spec") or {} if answer.ok else {}
    return bool(spec.get("labelNodes")) == label_nodes and set(spec.get("runtimeClasses") or {}) >= {"gvisor", "kata"}


def kubectl_apply(plane: ControlPlane, docs: tuple[Json, ...]) -> None:
    """``kubectl apply`` of an overlay as rendered (what ``kubectl apply -k`` sends)."""
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def documented(plane: ControlPlane, heading: str, marker: str) -> list[str]:
    """The shell commands under ``marker`` in docs/upgrading.md's ``heading``, with
    kubectl pointed at this control plane."""
    text = (CHART.parents[2] / "docs" / "upgrading.md").read_text(encoding="utf-8")
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    block = section.split(marker, 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    joined = block.replace("\\\n", " ")
    kubectl = f"{plane.assets.kubectl} --kubeconfig={plane.kubeconfig}"
    return [line.strip().replace("kubectl ", f"{kubectl} ") for line in joined.splitlines() if line.strip()]


def run_documented(plane: ControlPlane, marker: str, *, only: str = "") -> None:
    """Run the commands under ``marker`` (those that hold ``only``), from the repository,
    ``helm`` pointed at this control plane and without ``--wait``."""
    for command in documented(plane, "Moving between the modes", marker):
        if only not in command or command.startswith("#"):
            continue
        if command.startswith("helm "):
            command = f"{helm()} {command[5:]} --kubeconfig={plane.kubeconfig}".replace(" --wait", "")
        result = subprocess.run(
            command, shell=True, capture_output=True, text=True, check=False, timeout=300, cwd=CHART.parents[2]
        )
        assert result.returncode == 0, f"{command}\n{result.stderr}"


def guard_installed(plane: ControlPlane) -> bool:
    return plane.client.request(
        "GET", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{GUARD}"
    ).ok


@pytest.mark.parametrize("predicate", ["overlays/predicate-mode", PREDICATE_LABELS])
def test_with_kubectl_apply_no_pod_is_refused_or_left_unconstrained_either_way(
    plane: ControlPlane, predicate: str
) -> None:
    """From predicate mode, without the node labels and with them (whose leader's table
    says labelNodes until the new leader writes), to the default-scheduler mode and back."""
    large, placed = render(predicate), render("overlays/default-scheduler")
    kubectl_apply(plane, large)
    old = replica(plane, large, "old")
    try:
        wait_for(lambda: table_says(plane, label_nodes=predicate == PREDICATE_LABELS), what="predicate mode's table")
        with PodStream(plane) as to_default:
            kubectl_apply(plane, placed)
            new = replica(plane, placed, "new")
            old.stop()
            wait_for(lambda: new.metrics().count("pod_admission_table_stale_entries 0.0"), what="the new leader's table")
        to_default.check()
        run_documented(plane, "- to the default-scheduler mode:")
        with PodStream(plane) as back:
            kubectl_apply(plane, large)
            old = replica(plane, large, "old")
            new.stop()
            wait_for(lambda: old.metrics().count("pod_admission_table_stale_entries 0.0"), what="the old leader's table")
        back.check()
        # Left behind, inert, and named; then deleted as the page says.
        assert guard_installed(plane)
        check = subprocess.run(
            [
                sys.executable,
                "-m",
                "extender",
                "check-pod-admission",
                "--kubeconfig",
                str(plane.kubeconfig),
                "-n",
                WORKLOADS,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            cwd=CHART.parents[2],
        )
        assert "the default-scheduler placement's guard" in check.stderr, check.stdout + check.stderr
        run_documented(plane, "- back to predicate mode:")
        assert not guard_installed(plane)
    finally:
        old.stop()


def test_a_pod_predicate_modes_policy_admits_passes_the_default_scheduler_modes_guard(plane: ControlPlane) -> None:
    """The moment of a move, either way, when the API server holds predicate mode's
    mutating policy and the default-scheduler mode's guard at once (separate objects,
    each taken up when the API server's informer for its kind sees it), made to last:
    predicate mode installed, then the guard and the Namespace's placement label alone.
    A pod of a class in the table passes (the policy marks it admitted in every mode); a
    pod of a class the table lacks is refused, as the guard is there to."""
    predicate, placed = render("overlays/predicate-mode"), render("overlays/default-scheduler")
    kubectl_apply(plane, predicate)
    leader = replica(plane, predicate, "predicate")
    try:
        wait_for(lambda: table_says(plane, label_nodes=False), what="predicate mode's table")
    finally:
        leader.stop()
    # Created with no replica running: not in the table.
    plane.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "late"}, "handler": "late"})
    guard = tuple(d for d in placed if d["metadata"]["name"] == GUARD or d["kind"] == "Namespace")
    assert sorted(d["kind"] for d in guard) == ["Namespace", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    kubectl_apply(plane, guard)

    def late_refused() -> bool:
        answer = dry_run(plane, class_pod("late", WORKLOADS, "late"))
        return answer.status == 403 and GUARD in answer.message and "is not in the pod admission table" in answer.message

    wait_for(late_refused, what="the guard in force")
    for runtime_class in ("gvisor", "kata"):
        answer = dry_run(plane, class_pod(runtime_class, WORKLOADS, runtime_class))
        assert answer.status == 201, answer.message
        assert answer.body["metadata"]["labels"] == {"runtimeclass-extender.dev/admitted": "true"}, runtime_class
        assert answer.body["spec"]["schedulerName"] == "runtimeclass-scheduler", runtime_class


def test_with_helm_upgrade_no_pod_is_refused_or_left_unconstrained_either_way(plane: ControlPlane) -> None:
    values = {"mode": "predicate"}
    upgrade(plane, values)
    large = helm_template(values)
    old = replica(plane, large, "old")
    try:
        wait_for(lambda: table_says(plane, label_nodes=False), what="predicate mode's table")
        with PodStream(plane) as to_default:
            run_documented(plane, "**With the chart**", only="--set mode=default-scheduler")
            new = replica(plane, helm_template({"mode": "default-scheduler"}), "new")
            old.stop()
            wait_for(lambda: new.metrics().count("pod_admission_table_stale_entries 0.0"), what="the new leader's table")
        to_default.check()
        assert guard_installed(plane)
        with PodStream(plane) as back:
            run_documented(plane, "**With the chart**", only="--set mode=predicate")
            old = replica(plane, large, "old")
            new.stop()
            wait_for(lambda: old.metrics().count("pod_admission_table_stale_entries 0.0"), what="the old leader's table")
        back.check()
        # helm upgrade deletes what the release no longer renders.
        assert not guard_installed(plane)
    finally:
        old.stop()


def upgrade(plane: ControlPlane, values: dict[str, str]) -> None:
    """``helm upgrade --install`` as the page runs it (without --wait: no kubelet runs the
    Deployment here)."""
    sets = [flag for key, value in values.items() for flag in ("--set", f"{key}={value}")]
    result = subprocess.run(
        [helm(), "upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "--kubeconfig", str(plane.kubeconfig), *sets],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
