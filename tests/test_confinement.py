"""Every write the extender's identity could make, against an API server enforcing what the overlays ship.

The test API server (tests/support/apiserver) authorizes with the RBAC of a rendered
overlay and admits with its ValidatingAdmissionPolicies, evaluated as kube-apiserver
evaluates them (plugin/pkg/auth/authorizer/rbac; staging/src/k8s.io/apiserver/pkg/
admission/plugin/policy/validating). Requests are sent as the extender's ServiceAccount
(``system:serviceaccount:<namespace>:runtimeclass-extender``), as its container's token
authenticates it, for the default install and for one into another namespace
(``namespace: other`` in a kustomization of one's own). Each write outside the
extender's job must be refused (403 by RBAC, 422 by a policy), with a dry run refused
alike (what docs/permissions.md tells an operator to try); each write of its job must
go through; and the actors themselves, run as that ServiceAccount, must do their work
with no request refused.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.settings import DEFAULT_STARTUP_TAINT
from extender.tasks import stop as stop_task
from tests.support.apiserver import (
    EVENTS,
    NODES,
    PODS,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_pod,
    make_runtime_class,
    rbac,
)
from tests.support.apiserver.client import send_as
from tests.support.manifests import PREDICATE_LABELS, render
from tests.support.pod_cases import TABLES
from tests.support.replicas import FAST_REQUEUE, SCHED, replica_set
from tests.support.waiting import eventually

PREFIX = "runtimeclass.node-restriction.kubernetes.io/"
OTHER_TAINT = {"key": "sandbox", "value": "gvisor", "effect": "NoSchedule"}
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
NAMESPACES = ("runtimeclass-extender", "other")


@dataclass(frozen=True)
class Install:
    server: FakeApiServer
    namespace: str
    token: str

    async def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        dry_run: bool = False,
    ) -> tuple[int, dict[str, Any]]:
        params = {"dryRun": "All"} if dry_run else None
        answer = await send_as(
            self.server, self.token, method, path, body, content_type=content_type, params=params
        )
        return answer.status, orjson.loads(answer.body or b"{}")


@pytest.fixture(params=NAMESPACES)
async def install(request: pytest.FixtureRequest, fake_apiserver: FakeApiServer) -> AsyncIterator[Install]:
    """Predicate mode with the node labels with the pod webhook beside its policies (the chart's
    podAdmission both: every writer of the extender on) applied, in the default
    namespace or another, and a cluster to write to."""
    namespace: str = request.param
    docs = render(
        PREDICATE_LABELS,
        "components/pod-webhook",
        namespace=None if namespace == NAMESPACES[0] else namespace,
    )
    fake_apiserver.add(NODES, make_node("node-1", labels={"zone": "a", "sandbox": "gvisor"}))
    fake_apiserver.modify(
        NODES,
        "node-1",
        {"metadata": {"annotations": {"csi.volume.kubernetes.io/nodeid": "{}"}}},
    )
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    fake_apiserver.add(PODS, make_pod("web", namespace="apps", runtime_class="gvisor", scheduler_name=SCHED))
    fake_apiserver.apply(docs)
    fake_apiserver.add(
        TABLES, {"metadata": {"name": "runtimeclass-extender"}, "spec": {"runtimeClasses": {}}}
    )
    user = rbac.service_account(namespace, "runtimeclass-extender")
    yield Install(fake_apiserver, namespace, fake_apiserver.token_for(user))


TABLE_COLLECTION = TABLES.collection_path()
TABLE_PATH = f"{TABLE_COLLECTION}/runtimeclass-extender"


def _webhook_path(kind: str) -> str:
    return f"/apis/admissionregistration.k8s.io/v1/{kind}/runtimeclass-extender"


def _first_webhook(server: FakeApiServer, kind: str) -> dict[str, Any]:
    (obj,) = [o for o in server.objects(kind) if o["metadata"]["name"] == "runtimeclass-extender"]
    return copy.deepcopy(obj["webhooks"][0])


# (what, method, path, body, content type) -> the status the API server answers.
def refused_writes(install: Install) -> list[tuple[str, str, str, Any, str, int]]:
    ns = install.namespace
    node = "/api/v1/nodes/node-1"
    pod = "/api/v1/namespaces/apps/pods/web"
    validating = _first_webhook(install.server, "validatingwebhookconfigurations")
    mutating = _first_webhook(install.server, "mutatingwebhookconfigurations")
    evil_rules = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]
    return [
        # Nodes: only labels under the prefix.
        ("node annotation", "PATCH", node, {"metadata": {"annotations": {"x": "y"}}}, MERGE, 422),
        ("node finalizer", "PATCH", node, {"metadata": {"finalizers": ["example.com/block"]}}, MERGE, 422),
        (
            "node ownerReference",
            "PATCH",
            node,
            {
                "metadata": {
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "x"}]
                }
            },
            MERGE,
            422,
        ),
        ("node label outside the prefix", "PATCH", node, {"metadata": {"labels": {"zone": "b"}}}, MERGE, 422),
        ("node label removed", "PATCH", node, {"metadata": {"labels": {"zone": None}}}, MERGE, 422),
        (
            "node taint",
            "PATCH",
            node,
            {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}},
            MERGE,
            422,
        ),
        ("node status", "PATCH", node + "/status", {"status": {"phase": "x"}}, MERGE, 403),
        ("node deleted", "DELETE", node, None, "application/json", 403),
        # Pods: only the two requeue annotations.
        (
            "pod image",
            "PATCH",
            pod,
            {"spec": {"containers": [{"name": "c", "image": "registry.example/evil"}]}},
            STRATEGIC,
            422,
        ),
        ("pod annotation", "PATCH", pod, {"metadata": {"annotations": {"x": "y"}}}, MERGE, 422),
        ("pod label", "PATCH", pod, {"metadata": {"labels": {"app": "x"}}}, MERGE, 422),
        ("pod status", "PATCH", pod + "/status", {"status": {"phase": "Failed"}}, MERGE, 403),
        ("pod deleted", "DELETE", pod, None, "application/json", 403),
        (
            "pod created",
            "POST",
            "/api/v1/namespaces/apps/pods",
            make_pod("evil", namespace="apps"),
            "application/json",
            403,
        ),
        (
            "pod bound",
            "POST",
            pod + "/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "web"},
                "target": {"kind": "Node", "name": "node-1"},
            },
            "application/json",
            403,
        ),
        # Webhook configurations: only clientConfig.caBundle of its own webhooks.
        (
            "webhook failurePolicy",
            "PATCH",
            _webhook_path("validatingwebhookconfigurations"),
            {
                "webhooks": [
                    {
                        "name": validating["name"],
                        "failurePolicy": "Fail" if validating["failurePolicy"] == "Ignore" else "Ignore",
                    }
                ]
            },
            STRATEGIC,
            422,
        ),
        (
            "webhook rules",
            "PATCH",
            _webhook_path("mutatingwebhookconfigurations"),
            {"webhooks": [{"name": mutating["name"], "rules": evil_rules}]},
            STRATEGIC,
            422,
        ),
        (
            "webhook namespaceSelector",
            "PATCH",
            _webhook_path("mutatingwebhookconfigurations"),
            {"webhooks": [{"name": mutating["name"], "namespaceSelector": {"matchExpressions": []}}]},
            STRATEGIC,
            422,
        ),
        (
            "webhook pointed elsewhere",
            "PATCH",
            _webhook_path("validatingwebhookconfigurations"),
            {
                "webhooks": [
                    {
                        "name": validating["name"],
                        "clientConfig": {"service": {"name": "evil", "namespace": ns, "port": 443}},
                    }
                ]
            },
            STRATEGIC,
            422,
        ),
        (
            "another webhook configuration",
            "PATCH",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/someone-else",
            {"metadata": {"labels": {"x": "y"}}},
            MERGE,
            403,
        ),
        (
            "webhook configuration deleted",
            "DELETE",
            _webhook_path("validatingwebhookconfigurations"),
            None,
            "application/json",
            403,
        ),
        # Secrets: only its certificate Secret.
        (
            "a token Secret for the scheduler's identity",
            "POST",
            f"/api/v1/namespaces/{ns}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "scheduler-token",
                    "annotations": {"kubernetes.io/service-account.name": "runtimeclass-scheduler"},
                },
                "type": "kubernetes.io/service-account-token",
            },
            "application/json",
            422,
        ),
        (
            "another Secret read",
            "GET",
            f"/api/v1/namespaces/{ns}/secrets/runtimeclass-extender-token",
            None,
            "application/json",
            403,
        ),
        (
            "a Secret in another namespace",
            "POST",
            "/api/v1/namespaces/kube-system/secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "type": "Opaque"},
            "application/json",
            403,
        ),
        # Leases: only its own.
        (
            "the scheduler's Lease created first",
            "POST",
            f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "runtimeclass-scheduler"},
                "spec": {},
            },
            "application/json",
            422,
        ),
        # Events: only the labeller's Warnings about pods.
        (
            "an event of another controller",
            "POST",
            "/apis/events.k8s.io/v1/namespaces/apps/events",
            {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "fake.1"},
                "eventTime": "2026-11-25T10:00:00.000000Z",
                "reportingController": "kubelet",
                "reportingInstance": "x",
                "action": "Killing",
                "reason": "Killing",
                "type": "Normal",
                "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "apps", "name": "web"},
            },
            "application/json",
            422,
        ),
        # The pod admission table: only its entries, only that one.
        (
            "another PodAdmissionTable",
            "POST",
            TABLE_COLLECTION,
            {
                "apiVersion": TABLES.api_version,
                "kind": TABLES.kind,
                "metadata": {"name": "another"},
                "spec": {},
            },
            "application/json",
            422,
        ),
        ("the table's labels", "PATCH", TABLE_PATH, {"metadata": {"labels": {"x": "y"}}}, MERGE, 422),
        ("the table deleted", "DELETE", TABLE_PATH, None, "application/json", 403),
        (
            "a ConfigMap",
            "POST",
            f"/api/v1/namespaces/{ns}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
            "application/json",
            403,
        ),
        # Anything else: not granted at all.
        (
            "a RuntimeClass changed",
            "PATCH",
            "/apis/node.k8s.io/v1/runtimeclasses/gvisor",
            {"handler": "x"},
            MERGE,
            403,
        ),
    ]


async def test_every_write_outside_the_job_is_refused_in_any_namespace(install: Install) -> None:
    for what, method, path, body, content_type, status in refused_writes(install):
        for dry_run in (True, False):
            if method == "GET" and dry_run:
                continue
            got, answer = await install.send(method, path, body, content_type=content_type, dry_run=dry_run)
            assert got == status, (what, dry_run, got, answer.get("message"))
            assert answer["kind"] == "Status" and answer["reason"] == (
                "Forbidden" if status == 403 else "Invalid"
            ), what
    # Nothing changed on the server.
    node = install.server.get(NODES, "node-1")
    assert node is not None
    assert node["metadata"]["labels"] == {
        "kubernetes.io/hostname": "node-1",
        "zone": "a",
        "sandbox": "gvisor",
    }
    assert node["metadata"]["annotations"] == {"csi.volume.kubernetes.io/nodeid": "{}"}
    assert not install.server.objects(EVENTS)


async def test_every_write_of_the_job_goes_through_in_any_namespace(install: Install) -> None:
    ns = install.namespace
    node, pod = "/api/v1/nodes/node-1", "/api/v1/namespaces/apps/pods/web"
    uid = install.server.get(PODS, "web", namespace="apps")["metadata"]["uid"]  # type: ignore[index]
    validating = _first_webhook(install.server, "validatingwebhookconfigurations")
    # A startup taint on the node, as a node group's new node registers with it
    # (docs/autoscaling.md); the labeller removes exactly that one.
    startup = {"key": DEFAULT_STARTUP_TAINT, "effect": "NoSchedule"}
    install.server.modify(NODES, "node-1", {"spec": {"taints": [startup, OTHER_TAINT]}})
    allowed = [
        ("PATCH", node, {"spec": {"taints": [OTHER_TAINT]}}, MERGE),
        ("PATCH", node, {"metadata": {"labels": {PREFIX + "gvisor": "true"}}}, MERGE),
        ("PATCH", node, {"metadata": {"labels": {PREFIX + "gvisor": None}}}, MERGE),
        (
            "PATCH",
            pod,
            {
                "metadata": {
                    "uid": uid,
                    "annotations": {
                        "runtimeclass-extender.dev/requeued-at": "2026-11-25T10:00:00.000001Z",
                        "runtimeclass-extender.dev/requeued-for": "0123456789abcdef",
                    },
                }
            },
            MERGE,
        ),
        (
            "PATCH",
            _webhook_path("validatingwebhookconfigurations"),
            {"webhooks": [{"name": validating["name"], "clientConfig": {"caBundle": "Q0E="}}]},
            STRATEGIC,
        ),
        (
            "POST",
            f"/api/v1/namespaces/{ns}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "runtimeclass-extender-webhook-certificate",
                    "labels": {"app.kubernetes.io/managed-by": "runtimeclass-extender"},
                },
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": "", "tls.key": ""},
            },
            "application/json",
        ),
        ("PATCH", TABLE_PATH, {"spec": {"runtimeClasses": {"gvisor": {"overhead": {"cpu": "1"}}}}}, MERGE),
        (
            "POST",
            f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "runtimeclass-extender"},
                "spec": {},
            },
            "application/json",
        ),
        (
            "POST",
            "/apis/events.k8s.io/v1/namespaces/apps/events",
            {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "web.runtimeclass-0123456789abcdef"},
                "eventTime": "2026-11-25T10:00:00.000000Z",
                "reportingController": "runtimeclass-extender.dev/node-labeller",
                "reportingInstance": "x",
                "action": "Scheduling",
                "reason": "RuntimeClassFitsNoNode",
                "type": "Warning",
                "note": "n",
                "regarding": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "namespace": "apps",
                    "name": "web",
                    "uid": uid,
                },
            },
            "application/json",
        ),
    ]
    for method, path, body, content_type in allowed:
        got, answer = await install.send(method, path, body, content_type=content_type)
        assert got in (200, 201), (method, path, got, answer.get("message"))


async def test_the_actors_do_their_work_as_the_extenders_identity(install: Install, tmp_path: Path) -> None:
    """The labeller, its events, the requeuer and the pod admission table's keeper, run as
    the ServiceAccount against the shipped RBAC and policies: labels land, events are
    written, pods are nudged, the table is kept (created again once deleted), and the API
    server refuses none of their requests."""
    server = install.server
    # A new node of a node group, registered with the startup taint beside its own.
    startup = {"key": DEFAULT_STARTUP_TAINT, "effect": "NoSchedule"}
    server.add(NODES, make_node("node-2", labels={"sandbox": "runc"}, taints=[OTHER_TAINT, startup]))
    server.add(RUNTIME_CLASSES, make_runtime_class("kata", node_selector={"sandbox": "kata"}))
    server.add(PODS, make_pod("kata-pod", namespace="apps", runtime_class="kata", scheduler_name=SCHED))
    user = rbac.service_account(install.namespace, "runtimeclass-extender")
    async with replica_set(
        server,
        tmp_path,
        requeue=FAST_REQUEUE,
        events=True,
        user=user,
        lease_namespace=install.namespace,
    ) as start:
        from extender.labeller.labeller import LabelOptions
        from extender.podtable.keeper import TableOptions

        replica = await start(
            "a",
            label=LabelOptions(rate=1000.0, burst=100, request_timeout=2.0),
            table=TableOptions(name="runtimeclass-extender", namespace=install.namespace),
        )
        await eventually(lambda: replica.leading, what="leads")
        await eventually(
            lambda: (
                set(
                    ((server.get(TABLES, "runtimeclass-extender") or {}).get("spec") or {}).get(
                        "runtimeClasses"
                    )
                    or {}
                )
                == {"gvisor", "kata"}
            ),
            what="the table kept",
        )
        server.delete(TABLES, "runtimeclass-extender")
        await eventually(
            lambda: server.get(TABLES, "runtimeclass-extender") is not None, what="created again"
        )
        await eventually(
            lambda: (
                (server.get(NODES, "node-1") or {})["metadata"]["labels"].get(PREFIX + "gvisor") == "true"
            ),
            what="labelled",
        )
        await eventually(
            lambda: (server.get(NODES, "node-2") or {})["spec"].get("taints") == [OTHER_TAINT],
            what="the startup taint removed, the other kept",
        )
        await eventually(lambda: len(server.objects(EVENTS)) == 1, what="the kata pod's event")
        server.modify(RUNTIME_CLASSES, "gvisor", {"handler": "runsc-debug"})
        await eventually(
            lambda: (
                "runtimeclass-extender.dev/requeued-at"
                in ((server.get(PODS, "web", namespace="apps") or {})["metadata"].get("annotations") or {})
            ),
            what="nudged",
        )
    mine = [(request, status) for request, status in server.answers if request.user == user]
    assert mine, "the actors ran as the ServiceAccount"
    refused = [(r.verb, r.path, status) for r, status in mine if status in (401, 403, 422)]
    assert refused == []


async def test_the_certificate_keeper_does_its_work_as_the_extenders_identity(
    install: Install, tmp_path: Path
) -> None:
    """The self-managed webhook certificate, kept as the ServiceAccount against the
    shipped RBAC and policies: the Secret created, both caBundles set, the pair served
    once trusted, and nothing refused."""
    from dataclasses import replace

    from extender.certificates.keeper import utc_now
    from extender.leader.runner import LeaderRunner
    from tests.support.webhook_certificates import OPTIONS, ca_bundles, start_keeper

    user = rbac.service_account(install.namespace, "runtimeclass-extender")
    keeper = await start_keeper(
        install.server,
        tmp_path,
        "keeper",
        user=user,
        clock=utc_now,
        options=replace(OPTIONS, namespace=install.namespace),
        endpoint_slice=False,
    )
    task = asyncio.create_task(LeaderRunner([keeper.keeper], None).run())
    try:
        await eventually(lambda: all(ca_bundles(install.server).values()), what="both caBundles set")
        await eventually(lambda: keeper.keeper.trust().trusted, what="the pair served and trusted")
    finally:
        await stop_task(task)
        await keeper.stop()
    mine = [(request, status) for request, status in install.server.answers if request.user == user]
    assert any(r.verb == "post" and r.path.endswith("/secrets") for r, _ in mine)
    refused = [(r.verb, r.path, status) for r, status in mine if status in (401, 403, 422)]
    assert refused == []
