"""Pod admission of the shipped overlays on kube-apiserver 1.36 itself: both ways, the same pods.

The table of pods and classes (tests/support/pod_cases.py) is admitted on a real
kube-apiserver (RuntimeClass admission off, as predicate mode runs it), once with each
overlay installed as shipped (the admission policies, evaluated by the API server's own
CEL, reading the table the extender's leader writes through the RBAC and the policy
the overlay grants it) and once the webhook way (the overlay's copy for an API server
without MutatingAdmissionPolicy: the extender's pod webhook, with its self-managed
certificate, called by the API server through the webhook Service). Each pod is created
with ``dryRun=All``: the whole admission chain, nothing stored, so the same pod goes
through both ways. The pods must come out equal field for field and as
``EXPECTED`` says, the refusals with the same message after each mechanism's own words.

Then what no emulation can say: with every extender replica stopped the policies
still admit every pod as before (the webhook way refuses them all);
``check-pod-admission`` proves the policies run, and catches them inert on a server
with the MutatingAdmissionPolicy feature gate off; and the window the table opens (a
class created or changed while no replica runs) is seen by the check, the gauge and
the audit, and closed when a replica is back.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import trustme

from extender.admission.pod_table import API_VERSION, PLURAL, table
from extender.cluster.objects import runtime_class_from_api
from tests.support.control_plane import Assets, ControlPlane
from tests.support.install import Installed, install
from tests.support.manifests import render, render_webhook_way
from tests.support.pod_cases import (
    CLASSES,
    EXPECTED,
    GVISOR_OVERHEAD,
    NAMESPACE_OBJECTS,
    PODS_TABLE,
    SCHEDULER,
    SETUPS,
    STAMPED,
    TABLE,
    Admitted,
    PodCase,
    Setup,
    admitted_as_it_came,
    agrees_with_the_labeller,
    injector_configuration,
    injector_patch,
    marked_admitted,
    refusal_message,
    spec_of,
)
from tests.support.ports import free_port

Manifest = dict[str, Any]
AUDIT = "components/audit-running-pods"
# The projected token volume's name ends in five random characters.
_TOKEN_VOLUME = re.compile(r"^kube-api-access-[a-z0-9]{5}$")


# --- the cluster ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(plane: ControlPlane) -> ControlPlane:
    """The classes and namespaces of the table, each with its ``default`` ServiceAccount
    (kube-system's too: no controller-manager makes it)."""
    for namespace in NAMESPACE_OBJECTS:
        plane.ensure_namespace(namespace["metadata"]["name"], labels=namespace["metadata"].get("labels"))
    plane.apply_all(CLASSES)
    return plane


def admit(plane: ControlPlane, pod: Manifest, *, dry_run: bool = True) -> Admitted:
    """The pod as the API server would store it, or its refusal (status, message)."""
    namespace = pod["metadata"]["namespace"]
    answer = plane.client.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods", pod, query={"dryRun": "All"} if dry_run else None
    )
    if not answer.ok:
        return Admitted(answer.status, None, refusal_message(answer.body))
    stored = json.loads(json.dumps(answer.body))
    for key in STAMPED:
        stored["metadata"].pop(key, None)
    spec = stored["spec"]
    for volume in spec.get("volumes", []):
        if _TOKEN_VOLUME.match(volume["name"]):
            volume["name"] = "kube-api-access"
    for container in spec.get("containers", []):
        for mount in container.get("volumeMounts", []):
            if _TOKEN_VOLUME.match(mount["name"]):
                mount["name"] = "kube-api-access"
    return Admitted(answer.status, stored, "")


def eventually(
    condition: Callable[[], bool],
    *,
    timeout: float = 60.0,
    what: str,
    last: Callable[[], object] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f": {last()}" if last else ""))
        time.sleep(0.1)


def table_data(plane: ControlPlane) -> dict[str, Any] | None:
    """The table's entries as the API server holds them (None: no table)."""
    answer = plane.client.request("GET", f"/apis/{API_VERSION}/{PLURAL}/{TABLE}")
    return dict((answer.body.get("spec") or {}).get("runtimeClasses") or {}) if answer.ok else None


def wanted_table(plane: ControlPlane, setup: Setup) -> dict[str, Any]:
    classes = plane.client.get("/apis/node.k8s.io/v1/runtimeclasses")["items"]
    return table((runtime_class_from_api(rc) for rc in classes), setup.rules())


# A pod whose overhead its class refuses: the refusal's words say which way admitted it.
_PROBE = PodCase("probe", "gvisor", overhead={"cpu": "1"}).manifest()


def admitted_by(plane: ControlPlane) -> str:
    """Which way refused the probe: "policies", "webhook", or "" (it was admitted)."""
    answer = plane.client.request("POST", "/api/v1/namespaces/apps/pods", _PROBE, query={"dryRun": "All"})
    message = "" if answer.ok else answer.message
    if "ValidatingAdmissionPolicy" in message:
        return "policies"
    return "webhook" if "admission webhook" in message else message


@contextmanager
def installed(
    plane: ControlPlane, setup: Setup, way: str, tmp: Path, *components: str
) -> Iterator[Installed]:
    """The setup's overlay installed ``way`` (policies or webhook), its extender running
    and pod admission working; uninstalled after."""
    docs = (
        render(setup.overlay, *components)
        if way == "policies"
        else render_webhook_way(setup.overlay, *components)
    )
    flags = []
    if setup.policy_text is not None:
        path = tmp / f"policy-{way}.yaml"
        path.write_text(setup.policy_text, encoding="utf-8")
        flags.append(f"--policy-file={path}")
    done = install(plane, docs, extra_flags=flags)
    try:
        if way == "policies":
            eventually(lambda: table_data(plane) == wanted_table(plane, setup), what="the table written")
        eventually(
            lambda: admitted_by(plane) == way,
            what=f"pods admitted by the {way}",
            last=lambda: admitted_by(plane),
        )
        yield done
    finally:
        done.uninstall()
        eventually(lambda: admitted_by(plane) == "", what="no pod admission left")


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.id)
def test_every_pod_of_the_table_comes_out_the_same_both_ways(
    cluster: ControlPlane, setup: Setup, tmp_path: Path
) -> None:
    cases = [case for case in PODS_TABLE if not case.large_only or setup.label_nodes]
    with installed(cluster, setup, "policies", tmp_path):
        by_policy = {case.id: admit(cluster, case.manifest()) for case in cases}
    with installed(cluster, setup, "webhook", tmp_path):
        by_webhook = {case.id: admit(cluster, case.manifest()) for case in cases}
    for case in cases:
        assert by_policy[case.id] == marked_admitted(by_webhook[case.id]), case.id
        EXPECTED[case.id](setup, by_webhook[case.id])
        agrees_with_the_labeller(setup, case, by_policy[case.id])


def test_with_every_replica_stopped_the_policies_admit_every_pod_as_before(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    setup = SETUPS[1]
    cases = list(PODS_TABLE)
    with installed(cluster, setup, "policies", tmp_path) as done:
        up = {case.id: admit(cluster, case.manifest()) for case in cases}
        done.stop_extenders()
        for case in cases:
            assert admit(cluster, case.manifest()) == up[case.id], case.id
    with installed(cluster, setup, "webhook", tmp_path) as done:
        done.stop_extenders()
        for case in cases:
            if case.runtime_class and case.namespace == "apps":
                refused = admit(cluster, case.manifest())
                assert refused.status == 500, case.id
                assert 'failed calling webhook "pods.runtimeclass-extender.dev"' in refused.message


def as_it_came(plane: ControlPlane, pod: Manifest) -> Admitted:
    """``pod`` as the API server admits it without pod admission of ours: created in the
    namespace every binding and the webhook leave out, said of its own namespace."""
    namespace = pod["metadata"]["namespace"]
    elsewhere = json.loads(json.dumps(pod))
    elsewhere["metadata"]["namespace"] = "opted-out"
    got = admit(plane, elsewhere)
    if got.pod is not None:
        got.pod["metadata"]["namespace"] = namespace
    return got


def test_while_the_table_is_missing_every_pod_is_admitted_as_it_came(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    """The table deleted while no replica runs: the mutating policy is skipped (the API
    server looks a binding's param up before its match conditions, so with
    ``parameterNotFoundAction: Deny`` it would refuse every pod of the namespace),
    nothing marks a pod for the guard, and every pod is admitted as it came, as without
    pod admission of ours: a pod of a class without its routing, overhead, label
    requirement and tolerations (the audit reports such a pod once it runs:
    ``overhead-mismatch``, ``selector-mismatch``; check-pod-admission says the table is
    missing). A replica back creates the table again and the policies admit every pod
    as before."""
    setup = SETUPS[1]
    cases = list(PODS_TABLE)
    with installed(cluster, setup, "policies", tmp_path) as done:
        up = {case.id: admit(cluster, case.manifest()) for case in cases}
        done.stop_extenders()
        assert cluster.client.request("DELETE", f"/apis/{API_VERSION}/{PLURAL}/{TABLE}").ok
        eventually(lambda: admitted_by(cluster) == "", what="the policies skipped")
        for case in cases:
            got = admit(cluster, case.manifest())
            if admitted_as_it_came(case):
                assert got.status == 201 and got == as_it_came(cluster, case.manifest()), (case.id, got)
            else:
                assert got == up[case.id], case.id
        result = check_pod_admission(cluster, "--namespace", "apps")
        assert result.returncode == 1, result.stdout + result.stderr
        gvisor = next(line for line in result.stdout.splitlines() if line.startswith("gvisor "))
        assert f"the PodAdmissionTable {TABLE} is missing" in gvisor, result.stdout
        done.start_extenders()
        eventually(lambda: table_data(cluster) == wanted_table(cluster, setup), what="the table written again")
        eventually(lambda: admitted_by(cluster) == "policies", what="the policies back")
        for case in cases:
            assert admit(cluster, case.manifest()) == up[case.id], case.id


def check_pod_admission(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "extender",
            "check-pod-admission",
            "--kubeconfig",
            str(plane.kubeconfig),
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.parametrize("setup", SETUPS[:2], ids=lambda s: s.id)
def test_check_pod_admission_proves_the_policies_run(
    cluster: ControlPlane, setup: Setup, tmp_path: Path
) -> None:
    with installed(cluster, setup, "policies", tmp_path):
        result = check_pod_admission(cluster, "--namespace", "apps")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CLASSES)} RuntimeClasses: every probe pod admitted as it should be." in result.stderr
    # Predicate mode's API server: the RuntimeClass admission plugin off, and found so.
    assert "The API server does not run the RuntimeClass admission plugin." in result.stderr


def test_check_pod_admission_catches_policies_served_but_not_run(assets: Assets, tmp_path: Path) -> None:
    """With the feature gate off, kube-apiserver 1.36 serves MutatingAdmissionPolicy and
    accepts the policies, and runs none of them (the validating ones run: GA since
    1.30): pods of a class are admitted as they came, unrouted, and the check says so,
    class by class, and why (the table is current)."""
    flags = {
        "--disable-admission-plugins": "RuntimeClass",
        "--feature-gates": "MutatingAdmissionPolicy=false",
    }
    with ControlPlane(assets, apiserver_flags=flags) as inert:
        inert.ensure_namespace("apps")
        inert.apply_all(CLASSES)
        done = install(inert, render("overlays/predicate-mode"))
        eventually(lambda: table_data(inert) == wanted_table(inert, SETUPS[0]), what="the table written")
        result = check_pod_admission(inert, "--namespace", "apps")
        done.stop_extenders()
    assert result.returncode == 1, result.stdout + result.stderr
    gvisor = next(line for line in result.stdout.splitlines() if line.startswith("gvisor "))
    assert "differs: schedulerName default-scheduler, want runtimeclass-scheduler" in gvisor, gvisor
    assert "no pod admission of ours ran for this pod in namespace apps" in gvisor, gvisor
    assert "feature gate off" in gvisor


# --- the window: classes that change while no replica runs -----------------------------


def test_the_window_while_no_replica_runs_is_seen_and_closed(cluster: ControlPlane, tmp_path: Path) -> None:
    """A class created and one changed while every replica is stopped: their pods get
    what the table last said (routing alone for the new one, the old overhead for the
    changed one), check-pod-admission says which classes differ, and once a replica is
    back the leader rewrites the table at once, the gauge is 0 again and the audit
    names each pod admitted in the window with the wrong overhead."""
    setup = SETUPS[1]
    cluster.add_ready_node("window-node", labels={"sandbox.gke.io/runtime": "gvisor"})
    with installed(cluster, setup, "policies", tmp_path, AUDIT) as done:
        done.stop_extenders()
        late = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "late"},
            "handler": "runsc",
            "overhead": {"podFixed": {"cpu": "100m"}},
        }
        cluster.apply(late)
        cluster.client.patch(
            "/apis/node.k8s.io/v1/runtimeclasses/gvisor",
            {"overhead": {"podFixed": {"cpu": "500m", "memory": "64Mi"}}},
        )
        try:
            window = {}
            for name in ("late", "gvisor"):
                pod = PodCase(f"window-{name}", name).manifest()
                got = admit(cluster, pod, dry_run=False)
                window[name] = spec_of(got)
                cluster.client.create(
                    f"/api/v1/namespaces/apps/pods/window-{name}/binding",
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": f"window-{name}"},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": "window-node"},
                    },
                )
            # Routed, and nothing else for the new class; the old overhead for the other.
            assert window["late"]["schedulerName"] == SCHEDULER and "overhead" not in window["late"]
            assert window["gvisor"]["overhead"] == GVISOR_OVERHEAD
            result = check_pod_admission(cluster, "--namespace", "apps")
            assert result.returncode == 1
            differing = {line.split()[0]: line for line in result.stdout.splitlines() if "differs" in line}
            assert sorted(differing) == ["gvisor", "late"]
            assert "its entry in the PodAdmissionTable runtimeclass-extender is missing" in differing["late"]
            assert "its entry in the PodAdmissionTable runtimeclass-extender is stale" in differing["gvisor"]
            done.start_extenders()
            extender = done.extender
            eventually(
                lambda: table_data(cluster) == wanted_table(cluster, setup), what="the table rewritten"
            )
            eventually(
                lambda: "runtimeclass_extender_pod_admission_table_stale_entries 0.0" in extender.metrics(),
                what="the gauge at 0",
            )
            assert check_pod_admission(cluster, "--namespace", "apps").returncode == 0
            # Written at the start of the term, and said.
            assert extender.process is not None
            records = [
                json.loads(line)
                for line in extender.process.log.read_text().splitlines()
                if line.startswith("{")
            ]
            (started,) = [r for r in records if r["msg"] == "keeping the pod admission table"]
            assert started["stale"] == 2
            eventually(
                lambda: all(
                    f'runtimeclass_extender_misplaced_pods{{problem="overhead-mismatch",runtime_class="{name}"}} 1.0'
                    in extender.metrics()
                    for name in ("late", "gvisor")
                ),
                what="the audit naming both pods",
            )
        finally:
            for name in ("late", "gvisor"):
                cluster.client.delete(f"/api/v1/namespaces/apps/pods/window-{name}")
            cluster.delete(late)
            cluster.apply(next(rc for rc in CLASSES if rc["metadata"]["name"] == "gvisor"))


# --- a webhook that sets runtimeClassName after pod admission ---------------------------


@contextmanager
def injector(pki: trustme.CA) -> Iterator[Manifest]:
    """A webhook, as kata's injector, that sets runtimeClassName gvisor on pods labelled
    inject-runtimeclass; named to be called after the extender's. Its configuration."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            pod = review["request"]["object"]
            response: Manifest = {"uid": review["request"]["uid"], "allowed": True}
            if patch := injector_patch(pod):
                response |= {
                    "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                }
            body = json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            return None

    server = HTTPServer(("127.0.0.1", free_port()), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    pki.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield injector_configuration(f"https://127.0.0.1:{server.server_address[1]}/inject", pki.cert_pem.bytes())
    finally:
        server.shutdown()


def test_a_class_set_by_a_later_webhook_gets_nothing_from_pod_admission(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    """What docs/pod-webhook.md says such a pod gets, on the real chain: neither the
    policies nor the webhook were invoked for it (it named no class at first), and the
    API server evaluates again only what it invoked. Left unrouted, both ways admit it
    to default-scheduler as it came; routed by the injector itself, it is admitted the
    same both ways."""
    setup = SETUPS[1]
    unrouted = PodCase("injected", None, labels={"inject-runtimeclass": "gvisor"}).manifest()
    routed = PodCase(
        "injected-routed", None, labels={"inject-runtimeclass": "gvisor", "inject-scheduler": SCHEDULER}
    ).manifest()
    got = {}
    with injector(trustme.CA()) as configuration:
        cluster.apply(configuration)
        try:
            for way in ("policies", "webhook"):
                with installed(cluster, setup, way, tmp_path):
                    got[way] = admit(cluster, unrouted)
                    got[way, "routed"] = admit(cluster, routed)
        finally:
            cluster.delete(configuration)
    assert got["policies"] == got["webhook"]
    spec = spec_of(got["webhook"])
    assert spec["runtimeClassName"] == "gvisor"
    assert (spec["schedulerName"], spec.get("overhead"), spec.get("nodeSelector")) == (
        "default-scheduler",
        None,
        None,
    )
    assert got["policies", "routed"] == got["webhook", "routed"]
    spec = spec_of(got["policies", "routed"])
    assert (spec["runtimeClassName"], spec["schedulerName"], spec.get("overhead")) == ("gvisor", SCHEDULER, None)
