"""The fake API server's authentication and RBAC answer as kube-apiserver's do.

The decision tables run the pure functions of tests/support/apiserver/rbac.py (what
plugin/pkg/auth/authorizer/rbac and requestinfo.go decide); the HTTP tests show the
server wiring them in: every request authorized once RBAC manifests are loaded, the
shipped manifests allowing the extender's own requests and nothing else, and the 403
worded as kube-apiserver words it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.support.apiserver import LEASES, NODES, PODS, FakeApiServer, make_node, make_pod, rbac
from tests.support.apiserver.client import send_as
from tests.support.paths import REPO

EXTENDER_NS = "runtimeclass-extender"
EXTENDER = rbac.service_account(EXTENDER_NS, "runtimeclass-extender")
# The extender's manifests: its read-only identity, --label-nodes, leader election.
SHIPPED_RBAC = (
    "deploy/base/extender-rbac.yaml",
    "deploy/components/label-nodes/rbac.yaml",
    "deploy/components/leader-election/rbac.yaml",
)


def manifests(*paths: str) -> list[dict[str, Any]]:
    return [doc for path in paths for doc in yaml.safe_load_all((REPO / path).read_text()) if doc]


def cluster_role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": list(rules),
    }


def role(namespace: str, name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": list(rules),
    }


def binding(
    kind: str, name: str, role_kind: str, role_name: str, *subjects: dict[str, str], namespace: str = ""
) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace} if namespace else {"name": name}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": list(subjects),
    }


def rule(
    groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None
) -> dict[str, Any]:
    found: dict[str, Any] = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names is not None:
        found["resourceNames"] = names
    return found


def user(name: str) -> dict[str, str]:
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def group(name: str) -> dict[str, str]:
    return {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def sa(name: str, namespace: str | None = None) -> dict[str, str]:
    found = {"kind": "ServiceAccount", "name": name}
    if namespace is not None:
        found["namespace"] = namespace
    return found


# One set of roles and bindings for the decision table below.
MANIFESTS = [
    # "reader": read nodes; "leaser": one Lease by name, create any; "wild": * everything.
    cluster_role("reader", rule([""], ["nodes"], ["get", "list", "watch"])),
    cluster_role(
        "leaser",
        rule(["coordination.k8s.io"], ["leases"], ["create"]),
        rule(["coordination.k8s.io"], ["leases"], ["get", "update", "list", "watch"], ["lock"]),
    ),
    cluster_role("wild", rule(["*"], ["*"], ["*"])),
    cluster_role(
        "status-writer", rule([""], ["nodes/status"], ["patch"]), rule([""], ["*/status"], ["update"])
    ),
    cluster_role("pods-star", rule([""], ["pods/*"], ["create"])),
    role("team-a", "pod-reader", rule([""], ["pods"], ["get", "list"])),
    binding("ClusterRoleBinding", "reader", "ClusterRole", "reader", user("alice"), group("readers")),
    binding("ClusterRoleBinding", "leaser", "ClusterRole", "leaser", user("lease-holder")),
    binding("ClusterRoleBinding", "status-writer", "ClusterRole", "status-writer", user("kubelet-ish")),
    binding("ClusterRoleBinding", "pods-star", "ClusterRole", "pods-star", user("pod-star")),
    # A namespaced Role: only in team-a; a ServiceAccount subject without a namespace
    # means the binding's.
    binding("RoleBinding", "pod-reader", "Role", "pod-reader", user("bob"), sa("ci"), namespace="team-a"),
    # A ClusterRole granted in one namespace only.
    binding("RoleBinding", "wild-in-b", "ClusterRole", "wild", user("carol"), namespace="team-b"),
    # Every ServiceAccount of team-c, by group.
    binding(
        "ClusterRoleBinding", "team-c-read", "ClusterRole", "reader", group("system:serviceaccounts:team-c")
    ),
    # A ServiceAccount subject without a namespace in a ClusterRoleBinding matches nobody.
    binding("ClusterRoleBinding", "sa-no-ns", "ClusterRole", "wild", sa("ci")),
]


@pytest.fixture(scope="module")
def loaded() -> rbac.Rbac:
    found = rbac.Rbac()
    for manifest in MANIFESTS:
        found.add(manifest)
    return found


def ask(
    who: str,
    verb: str,
    resource: str,
    *,
    group_: str = "",
    subresource: str = "",
    namespace: str = "",
    name: str = "",
    groups: tuple[str, ...] = (),
) -> rbac.Attributes:
    return rbac.Attributes(
        rbac.user_info(who, groups), verb, group_, "v1", resource, subresource, namespace, name
    )


IN_COORDINATION = {"group_": "coordination.k8s.io"}

# (who, verb, resource, keyword arguments, allowed)
DECISIONS: list[tuple[str, str, str, dict[str, Any], bool]] = [
    # Verbs: exactly the ones listed.
    ("alice", "get", "nodes", {"name": "n1"}, True),
    ("alice", "list", "nodes", {}, True),
    ("alice", "watch", "nodes", {}, True),
    ("alice", "patch", "nodes", {"name": "n1"}, False),
    ("alice", "delete", "nodes", {"name": "n1"}, False),
    ("alice", "deletecollection", "nodes", {}, False),
    # The apiGroup is part of the match: nodes in another group are something else.
    ("alice", "get", "nodes", {"name": "n1", "group_": "example.dev"}, False),
    # By group membership.
    ("dave", "list", "nodes", {"groups": ("readers",)}, True),
    ("dave", "list", "nodes", {}, False),
    # A rule on "nodes" does not cover its subresources.
    ("alice", "get", "nodes", {"name": "n1", "subresource": "status"}, False),
    # "nodes/status" covers exactly that; "*/status" any resource's status.
    ("kubelet-ish", "patch", "nodes", {"name": "n1", "subresource": "status"}, True),
    ("kubelet-ish", "patch", "nodes", {"name": "n1"}, False),
    ("kubelet-ish", "update", "pods", {"name": "p", "namespace": "x", "subresource": "status"}, True),
    ("kubelet-ish", "update", "pods", {"name": "p", "namespace": "x", "subresource": "binding"}, False),
    # "pods/*" is not a wildcard in RBAC: only "*" and "*/<subresource>" are.
    ("pod-star", "create", "pods", {"name": "p", "namespace": "x", "subresource": "eviction"}, False),
    # "*" covers every resource and every subresource, in every group.
    ("carol", "create", "pods", {"name": "p", "namespace": "team-b", "subresource": "eviction"}, True),
    ("carol", "delete", "leases", {"name": "l", "namespace": "team-b", **IN_COORDINATION}, True),
    # resourceNames: the named object only...
    ("lease-holder", "get", "leases", {"name": "lock", "namespace": "ns", **IN_COORDINATION}, True),
    ("lease-holder", "update", "leases", {"name": "lock", "namespace": "ns", **IN_COORDINATION}, True),
    ("lease-holder", "get", "leases", {"name": "other", "namespace": "ns", **IN_COORDINATION}, False),
    # ...never a create (no name when it is authorized): the unnamed create rule does it.
    ("lease-holder", "create", "leases", {"namespace": "ns", **IN_COORDINATION}, True),
    # ...and a list or watch only with the name its fieldSelector pins.
    ("lease-holder", "list", "leases", {"namespace": "ns", **IN_COORDINATION}, False),
    ("lease-holder", "watch", "leases", {"namespace": "ns", "name": "lock", **IN_COORDINATION}, True),
    # A Role through a RoleBinding: in the binding's namespace only.
    ("bob", "get", "pods", {"name": "p", "namespace": "team-a"}, True),
    ("bob", "get", "pods", {"name": "p", "namespace": "team-b"}, False),
    ("bob", "list", "pods", {}, False),  # across all namespaces is the cluster scope
    (rbac.service_account("team-a", "ci"), "list", "pods", {"namespace": "team-a"}, True),
    (rbac.service_account("team-b", "ci"), "list", "pods", {"namespace": "team-a"}, False),
    # A ClusterRole through a RoleBinding: only in that namespace, never cluster-scoped.
    ("carol", "patch", "pods", {"name": "p", "namespace": "team-b"}, True),
    ("carol", "patch", "pods", {"name": "p", "namespace": "team-a"}, False),
    ("carol", "get", "nodes", {"name": "n1"}, False),
    # A ClusterRoleBinding: everywhere.
    ("alice", "list", "nodes", {"namespace": "anything"}, True),
    # A ServiceAccount subject needs a namespace where there is no binding namespace.
    (rbac.service_account("team-a", "ci"), "delete", "nodes", {"name": "n1"}, False),
    # A ServiceAccount's groups.
    (rbac.service_account("team-c", "any"), "watch", "nodes", {}, True),
    (rbac.service_account("team-d", "any"), "watch", "nodes", {}, False),
    # system:masters is allowed everything, RBAC or not.
    ("root", "delete", "secrets", {"name": "s", "namespace": "x", "groups": ("system:masters",)}, True),
    # Nobody else is allowed anything by default.
    ("mallory", "get", "nodes", {"name": "n1"}, False),
]


@pytest.mark.parametrize(
    ("who", "verb", "resource", "kwargs", "allowed"),
    DECISIONS,
    ids=[f"{d[0].rsplit(':', 1)[-1]}-{d[1]}-{d[2]}-{i}" for i, d in enumerate(DECISIONS)],
)
def test_the_rbac_decision_table(
    loaded: rbac.Rbac, who: str, verb: str, resource: str, kwargs: dict[str, Any], allowed: bool
) -> None:
    assert rbac.authorize(loaded, ask(who, verb, resource, **kwargs)).allowed is allowed


def test_an_allowed_request_names_what_allowed_it(loaded: rbac.Rbac) -> None:
    decision = rbac.authorize(loaded, ask("bob", "get", "pods", name="p", namespace="team-a"))
    assert decision == (
        True,
        'RBAC: allowed by RoleBinding "pod-reader/team-a" of Role "pod-reader" to User "bob"',
    )


def test_a_binding_to_a_missing_role_grants_nothing_and_is_the_reason() -> None:
    loaded = rbac.Rbac()
    loaded.add(binding("ClusterRoleBinding", "b", "ClusterRole", "missing", user("eve")))
    loaded.add(binding("RoleBinding", "rb", "Role", "gone", user("eve"), namespace="ns"))
    decision = rbac.authorize(loaded, ask("eve", "get", "pods", name="p", namespace="ns"))
    assert decision == (
        False,
        'RBAC: [clusterrole.rbac.authorization.k8s.io "missing" not found, '
        'role.rbac.authorization.k8s.io "gone" not found]',
    )


def test_aggregated_cluster_roles_are_refused_not_misread() -> None:
    aggregated = cluster_role("agg")
    aggregated["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}
    with pytest.raises(ValueError, match="aggregationRule"):
        rbac.Rbac().add(aggregated)


@pytest.mark.parametrize(
    ("method", "name", "watch", "verb"),
    [
        ("GET", "n1", False, "get"),
        ("GET", "", False, "list"),
        ("GET", "", True, "watch"),
        ("POST", "", False, "create"),
        ("POST", "p1", False, "create"),  # a subresource: pods/p1/eviction
        ("PUT", "n1", False, "update"),
        ("PATCH", "n1", False, "patch"),
        ("DELETE", "n1", False, "delete"),
        ("DELETE", "", False, "deletecollection"),
    ],
)
def test_http_methods_map_to_verbs_as_request_info_does(
    method: str, name: str, watch: bool, verb: str
) -> None:
    assert rbac.request_verb(method, name, watch=watch) == verb


@pytest.mark.parametrize(
    ("selector", "name"),
    [
        ("metadata.name=lock", "lock"),
        ("metadata.name==lock", "lock"),
        ("metadata.name!=lock", ""),
        ("spec.nodeName=n1,metadata.name=lock", "lock"),
        ("metadata.namespace=x", ""),
        ("metadata.name=a/b", ""),  # not a valid path segment
        ("metadata.name=..", ""),
        ("metadata.name=lock,nonsense", ""),  # does not parse: no name
        ("", ""),
    ],
)
def test_a_field_selector_on_the_name_names_the_request(selector: str, name: str) -> None:
    assert rbac.name_from_field_selector(selector) == name


def test_users_and_their_groups() -> None:
    assert rbac.user_info(EXTENDER) == rbac.UserInfo(
        EXTENDER, ("system:serviceaccounts", f"system:serviceaccounts:{EXTENDER_NS}", "system:authenticated")
    )
    assert rbac.user_info("alice", ["dev"]) == rbac.UserInfo("alice", ("dev", "system:authenticated"))
    assert (rbac.ADMIN.name, rbac.ADMIN.groups) == (
        "kubernetes-admin",
        ("system:masters", "system:authenticated"),
    )


@pytest.mark.parametrize(
    ("attributes", "message", "details"),
    [
        (
            ask(EXTENDER, "patch", "nodes", name="node-1", subresource="status"),
            f'nodes "node-1" is forbidden: User "{EXTENDER}" cannot patch resource "nodes/status" '
            'in API group "" at the cluster scope',
            {"name": "node-1", "kind": "nodes"},
        ),
        (
            ask(EXTENDER, "create", "leases", namespace="default", **IN_COORDINATION),
            f'leases.coordination.k8s.io is forbidden: User "{EXTENDER}" cannot create resource "leases" '
            'in API group "coordination.k8s.io" in the namespace "default"',
            {"group": "coordination.k8s.io", "kind": "leases"},
        ),
        (
            ask("a<b>&c", "list", "pods"),
            'pods is forbidden: User "a&lt;b&gt;&amp;c" cannot list resource "pods" in API group "" '
            "at the cluster scope",
            {"kind": "pods"},
        ),
    ],
    ids=["subresource-cluster", "create-namespaced", "sanitized"],
)
def test_the_forbidden_status_reads_as_kube_apiservers(
    attributes: rbac.Attributes, message: str, details: dict[str, str]
) -> None:
    assert rbac.forbidden_status(attributes) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }
    with_reason = rbac.forbidden_status(attributes, "RBAC: x")
    assert with_reason["message"] == message + ": RBAC: x"


# ----- over HTTP --------------------------------------------------------------------


async def send(
    server: FakeApiServer,
    method: str,
    path: str,
    token: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    params: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    answer = await send_as(server, token, method, path, body, content_type=content_type, params=params)
    return answer.status, answer.body


MERGE = "application/merge-patch+json"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{EXTENDER_NS}/leases"
LEASE = {"metadata": {"name": "runtimeclass-extender"}, "spec": {"holderIdentity": "a"}}
LABEL = {"metadata": {"labels": {"runtimeclass.node-restriction.kubernetes.io/gvisor": "true"}}}

# What the extender does with the shipped manifests loaded: (method, path, body,
# params, the answer), all allowed: the answer is whatever the request earns (the Lease
# exists already, so creating it is 409), never 403.
EXTENDERS_OWN: list[tuple[str, str, Any, dict[str, str], int]] = [
    ("GET", "/api/v1/nodes", None, {}, 200),
    ("GET", "/api/v1/nodes", None, {"watch": "1", "timeoutSeconds": "0"}, 200),
    ("GET", "/api/v1/nodes/node-1", None, {}, 200),
    ("GET", "/apis/node.k8s.io/v1/runtimeclasses", None, {}, 200),
    ("PATCH", "/api/v1/nodes/node-1", LABEL, {}, 200),
    ("GET", "/api/v1/pods", None, {"fieldSelector": "spec.nodeName="}, 200),
    ("POST", "/apis/events.k8s.io/v1/namespaces/default/events", {"metadata": {"name": "e1"}}, {}, 201),
    ("POST", LEASE_PATH, LEASE, {}, 409),
    ("GET", f"{LEASE_PATH}/runtimeclass-extender", None, {}, 200),
    ("PUT", f"{LEASE_PATH}/runtimeclass-extender", LEASE, {}, 200),
]
# ...and what it must never be able to do: (method, path, body, params, the 403 message
# after 'is forbidden: User "<extender>" cannot ').
OUTSIDE_ITS_JOB: list[tuple[str, str, Any, dict[str, str], str]] = [
    (
        "PUT",
        "/api/v1/nodes/node-1",
        make_node("node-1"),
        {},
        'update resource "nodes" in API group "" at the cluster scope',
    ),
    (
        "DELETE",
        "/api/v1/nodes/node-1",
        None,
        {},
        'delete resource "nodes" in API group "" at the cluster scope',
    ),
    (
        "PATCH",
        "/api/v1/nodes/node-1/status",
        {"status": {}},
        {},
        'patch resource "nodes/status" in API group "" at the cluster scope',
    ),
    (
        "POST",
        "/api/v1/nodes",
        make_node("node-2"),
        {},
        'create resource "nodes" in API group "" at the cluster scope',
    ),
    (
        "POST",
        "/api/v1/namespaces/default/pods",
        make_pod("p2"),
        {},
        'create resource "pods" in API group "" in the namespace "default"',
    ),
    (
        "PATCH",
        "/api/v1/namespaces/default/pods/p1",
        {"metadata": {"labels": {"a": "b"}}},
        {},
        'patch resource "pods" in API group "" in the namespace "default"',
    ),
    (
        "POST",
        "/api/v1/namespaces/default/pods/p1/eviction",
        {"metadata": {"name": "p1"}},
        {},
        'create resource "pods/eviction" in API group "" in the namespace "default"',
    ),
    (
        "POST",
        "/api/v1/namespaces/default/pods/p1/binding",
        {"target": {"name": "node-1"}},
        {},
        'create resource "pods/binding" in API group "" in the namespace "default"',
    ),
    (
        "GET",
        "/api/v1/namespaces/default/secrets",
        None,
        {},
        'list resource "secrets" in API group "" in the namespace "default"',
    ),
    (
        "GET",
        f"{LEASE_PATH}/runtimeclass-scheduler",
        None,
        {},
        f'get resource "leases" in API group "coordination.k8s.io" in the namespace "{EXTENDER_NS}"',
    ),
    (
        "GET",
        LEASE_PATH,
        None,
        {"fieldSelector": "metadata.name=runtimeclass-extender"},
        f'list resource "leases" in API group "coordination.k8s.io" in the namespace "{EXTENDER_NS}"',
    ),
    (
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        LEASE,
        {},
        'create resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"',
    ),
    (
        "DELETE",
        f"{LEASE_PATH}/runtimeclass-extender",
        None,
        {},
        f'delete resource "leases" in API group "coordination.k8s.io" in the namespace "{EXTENDER_NS}"',
    ),
    (
        "PATCH",
        "/apis/node.k8s.io/v1/runtimeclasses/gvisor",
        {"handler": "x"},
        {},
        'patch resource "runtimeclasses" in API group "node.k8s.io" at the cluster scope',
    ),
]


def content_type(method: str) -> str:
    return MERGE if method == "PATCH" else "application/json"


@pytest.fixture
async def shipped(fake_apiserver: FakeApiServer) -> FakeApiServer:
    fake_apiserver.add(NODES, make_node("node-1"))
    fake_apiserver.add(PODS, make_pod("p1"))
    fake_apiserver.add(
        LEASES, {"metadata": {"name": "runtimeclass-extender", "namespace": EXTENDER_NS}, "spec": {}}
    )
    ignored = fake_apiserver.apply(manifests(*SHIPPED_RBAC))
    assert [(d["kind"], d["metadata"]["name"]) for d in ignored] == [
        ("ServiceAccount", "runtimeclass-extender")
    ]
    return fake_apiserver


@pytest.mark.parametrize(
    ("method", "path", "body", "params", "answer"),
    EXTENDERS_OWN,
    ids=[f"{m} {p}" for m, p, *_ in EXTENDERS_OWN],
)
async def test_the_shipped_rbac_allows_the_extenders_own_requests(
    shipped: FakeApiServer, method: str, path: str, body: Any, params: dict[str, str], answer: int
) -> None:
    token = shipped.token_for(EXTENDER)
    status, text = await send(
        shipped, method, path, token, body, content_type=content_type(method), params=params
    )
    assert status == answer, text


@pytest.mark.parametrize(
    ("method", "path", "body", "params", "cannot"),
    OUTSIDE_ITS_JOB,
    ids=[f"{m} {p}" for m, p, *_ in OUTSIDE_ITS_JOB],
)
async def test_the_shipped_rbac_refuses_everything_else_as_kube_apiserver_does(
    shipped: FakeApiServer, method: str, path: str, body: Any, params: dict[str, str], cannot: str
) -> None:
    before = shipped.resource_version
    token = shipped.token_for(EXTENDER)
    status, answer = await send(
        shipped, method, path, token, body, content_type=content_type(method), params=params
    )
    assert status == 403
    refused = orjson.loads(answer)
    assert refused["reason"] == "Forbidden" and refused["code"] == 403
    assert refused["message"].endswith(f'is forbidden: User "{EXTENDER}" cannot {cannot}')
    assert shipped.resource_version == before


async def test_the_default_token_is_an_administrator_rbac_never_refuses(shipped: FakeApiServer) -> None:
    assert shipped.token is not None
    status, _ = await send(shipped, "DELETE", "/api/v1/nodes/node-1", shipped.token)
    assert status == 200
    assert shipped.get(NODES, "node-1") is None


async def test_without_rbac_manifests_every_user_may_do_anything(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.add(NODES, make_node("node-1"))
    assert fake_apiserver.rbac is None
    status, _ = await send(
        fake_apiserver, "DELETE", "/api/v1/nodes/node-1", fake_apiserver.token_for(EXTENDER)
    )
    assert status == 200


async def test_a_watch_needs_the_watch_verb(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.apply(
        [
            cluster_role("lister", rule([""], ["nodes"], ["list"])),
            binding("ClusterRoleBinding", "lister", "ClusterRole", "lister", user("lister")),
        ]
    )
    token = fake_apiserver.token_for("lister")
    assert (await send(fake_apiserver, "GET", "/api/v1/nodes", token))[0] == 200
    status, answer = await send(fake_apiserver, "GET", "/api/v1/nodes", token, params={"watch": "true"})
    assert status == 403
    assert orjson.loads(answer)["message"] == (
        'nodes is forbidden: User "lister" cannot watch resource "nodes" in API group "" at the cluster scope'
    )


async def test_groups_given_with_a_token_count(fake_apiserver: FakeApiServer, tmp_path: Path) -> None:
    fake_apiserver.apply(
        [
            cluster_role("reader", rule([""], ["nodes"], ["get", "list"])),
            binding("ClusterRoleBinding", "ops", "ClusterRole", "reader", group("ops")),
        ]
    )
    config = yaml.safe_load(
        fake_apiserver.write_kubeconfig(tmp_path / "k", user_name="olivia", groups=["ops"]).read_text()
    )
    token = config["users"][0]["user"]["token"]
    assert (await send(fake_apiserver, "GET", "/api/v1/nodes", token))[0] == 200
    assert fake_apiserver.user_info("olivia").groups == ("ops", "system:authenticated")
    assert (await send(fake_apiserver, "GET", "/api/v1/nodes", fake_apiserver.token_for("oscar")))[0] == 403


def test_apply_replaces_by_name_and_loads_nothing_when_one_manifest_fails(
    fake_apiserver: FakeApiServer,
) -> None:
    fake_apiserver.apply([cluster_role("r", rule([""], ["nodes"], ["get"]))])
    fake_apiserver.apply([cluster_role("r", rule([""], ["nodes"], ["list"]))])
    assert fake_apiserver.rbac is not None
    assert fake_apiserver.rbac.cluster_roles["r"]["rules"][0]["verbs"] == ["list"]
    aggregated = cluster_role("agg")
    aggregated["aggregationRule"] = {"clusterRoleSelectors": []}
    with pytest.raises(ValueError, match="aggregationRule"):
        fake_apiserver.apply([cluster_role("other"), aggregated])
    assert "other" not in fake_apiserver.rbac.cluster_roles
