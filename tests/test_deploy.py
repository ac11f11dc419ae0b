"""deploy/ and the Dockerfile: every kustomization renders, and the pieces agree.

The manifests are rendered with ``kubectl kustomize`` exactly as ``kubectl apply -k``
would, then checked for the invariants a reader cannot see at a glance: the
scheduler's extender URL reaches the sidecar's flags and probes, the extender's RBAC
is read-only on Nodes and RuntimeClasses (plus, where --requeue-pending-pods is on,
a separate role to list/watch/patch pods; with the audit component, one to list/watch
them; with the webhooks' self-managed certificates, one Secret and the two webhook
configurations by name), the profile name matches the sample workload, each mode's
plugin set, the TLS files are mounted where the configuration says, and every overlay
is a complete install: both webhooks, with no CRD (cert-manager stays an opt-in). The
monitoring component, opt-in too, renders on its own and beside an overlay, which it
leaves as it was: its PodMonitor scrapes the extender's metrics port.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import cel
import pytest
import yaml

from extender.admission import WEBHOOK_LABEL
from extender.audit.auditor import scheduled_pod_resource
from extender.cli import build_parser
from extender.cluster.objects import runtime_class_from_api
from extender.cluster.state import ClusterState
from extender.http.admission import PATH as ADMISSION_PATH
from extender.http.admission import POD_PATH
from extender.http.admission_listener import create_admission_app
from extender.http.app import create_app
from extender.http.probe_listener import create_probe_app
from extender.http.tls import admission_tls_files
from extender.policy_file import load_policy
from extender.settings import ServeSettings, resolve_serve
from tests.support.docs import fenced_blocks
from tests.support.manifests import OVERLAYS, PREDICATE_LABELS, one, render, render_webhook_way
from tests.support.paths import DOCS, MONITORING, REPO

DEPLOY = REPO / "deploy"
# Predicate mode without the node labels, which add node writes (tested on their own).
KUSTOMIZATIONS = ["base", "overlays/predicate-mode", "overlays/tls"]
PROFILE = "runtimeclass-scheduler"
EXTENDER_SA = "runtimeclass-extender"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"

# (apiVersion, kind) a rendering may contain.
EXPECTED_KINDS = {
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("apps/v1", "Deployment"),
    ("policy/v1", "PodDisruptionBudget"),
    # Every overlay carries the RuntimeClass webhook and its Service
    # (components/admission-webhook), and the webhook way the pod webhook
    # (components/pod-webhook); all built-in kinds: a bare API server accepts them.
    ("v1", "Service"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    # What confines each write RBAC grants whole (every component that writes carries
    # one; GA since Kubernetes 1.30), and what refuses a pod's overhead that is not its
    # class's (components/pod-admission-policy).
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    # Pod admission in the API server (components/pod-admission-policy; GA and on by
    # default since Kubernetes 1.36).
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"),
    # The kind of the table those policies read (components/pod-admission-policy/crd.yaml).
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
}

# JSON field names of KubeSchedulerConfiguration v1 (staging/src/k8s.io/kube-scheduler/
# config/v1/types.go and component-base's LeaderElectionConfiguration). kube-scheduler
# decodes its configuration strictly: an unknown or misspelt field stops it at start.
SCHEDULER_CONFIG_FIELDS = {
    "apiVersion",
    "kind",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "healthzBindAddress",
    "metricsBindAddress",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "delayCacheUntilActive",
}
LEADER_ELECTION_FIELDS = {
    "leaderElect",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "resourceLock",
    "resourceName",
    "resourceNamespace",
}
PROFILE_FIELDS = {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}
EXTENDER_FIELDS = {
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "weight",
    "bindVerb",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
}
EXTENDER_TLS_FIELDS = {
    "insecure",
    "serverName",
    "certFile",
    "keyFile",
    "caFile",
    "certData",
    "keyData",
    "caData",
}

# The only access the extender may have: (apiGroup, resource) -> allowed verbs.
EXTENDER_ALLOWED = {("", "nodes"), ("node.k8s.io", "runtimeclasses")}
READ_VERBS = {"get", "list", "watch"}
# --requeue-pending-pods: a separate ClusterRole, only where the flag is on.
REQUEUE_ROLE = "runtimeclass-extender-requeue"
REQUEUE_COMPONENT = DEPLOY / "components" / "requeue-pending-pods"
REQUEUE_GRANTS = {("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "patch")}
# --leader-elect: a Role on the extender's own Lease (tested on its own, in
# test_leader_election_wherever_an_acting_part_is_on).
LEASE_ROLE = "runtimeclass-extender-leader-election"
LEADER_COMPONENT = DEPLOY / "components" / "leader-election"
# --webhook-certificate-secret: a Role on the one Secret (and create in the namespace), a
# ClusterRole on the two webhook configurations by name (test_webhook_certificate_rbac_*).
CERT_ROLE = "runtimeclass-extender-webhook-certificate"
CA_BUNDLE_ROLE = "runtimeclass-extender-webhook-ca-bundle"
WEBHOOK_CERT_ROLES = frozenset({CERT_ROLE, CA_BUNDLE_ROLE})
# --pod-admission-table: a ClusterRole on the one PodAdmissionTable (and create), in
# every overlay with the pod admission policies (test_pod_admission_table_rbac_*).
PROBE_ROLE = "runtimeclass-extender-pod-admission"
TABLE_ROLE = "runtimeclass-extender-pod-admission-table"
# get on cluster-autoscaler's status ConfigMap (components/autoscaler-status).
AUTOSCALER_STATUS_ROLE = "runtimeclass-extender-autoscaler-status"
TABLE = "runtimeclass-extender"

Manifest = dict[str, Any]


# --- rendering ------------------------------------------------------------------------


def _render(kustomization: str) -> tuple[Manifest, ...]:
    return render(kustomization)


def _load_file(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _one(docs: tuple[Manifest, ...] | list[Manifest], kind: str, name: str | None = None) -> Manifest:
    return one(docs, kind, name)


def _deployment(docs: tuple[Manifest, ...]) -> Manifest:
    return _one(docs, "Deployment")


def _container(docs: tuple[Manifest, ...], name: str) -> Manifest:
    containers = _deployment(docs)["spec"]["template"]["spec"]["containers"]
    found = [c for c in containers if c["name"] == name]
    assert len(found) == 1, f"no container {name}"
    return found[0]


def _flags(container: Manifest) -> dict[str, str]:
    """--name=value flags of a container (the form deploy/ uses)."""
    flags: dict[str, str] = {}
    for arg in [*container.get("command", []), *container.get("args", [])]:
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            flags[name] = value
    return flags


def _mounted_path(docs: tuple[Manifest, ...], container: Manifest, path: str) -> Manifest:
    """The pod volume under which ``path`` lies in ``container``; fails if none."""
    volumes = {v["name"]: v for v in _deployment(docs)["spec"]["template"]["spec"]["volumes"]}
    target = PurePosixPath(path)
    for mount in container.get("volumeMounts", []):
        if target.is_relative_to(PurePosixPath(mount["mountPath"])):
            return volumes[mount["name"]]
    raise AssertionError(f"{path} is not under any volume mount of container {container['name']}")


def _scheduler_config(docs: tuple[Manifest, ...]) -> Manifest:
    """The KubeSchedulerConfiguration the kube-scheduler container actually reads."""
    scheduler = _container(docs, "kube-scheduler")
    config_path = PurePosixPath(_flags(scheduler)["config"])
    volume = _mounted_path(docs, scheduler, str(config_path))
    assert "configMap" in volume, "the scheduler configuration should come from a ConfigMap"
    config_map = _one(docs, "ConfigMap", volume["configMap"]["name"])
    config: Manifest = yaml.safe_load(config_map["data"][config_path.name])
    return config


def _scheduler_lease_namespace(docs: tuple[Manifest, ...]) -> str:
    """Where kube-scheduler keeps its Lease: a leader-election flag overrides --config
    (ApplyLeaderElectionTo, cmd/kube-scheduler/app/options/options.go), and
    ``$(VAR)`` in a command expands from the container's environment, here the pod's
    own namespace from the downward API."""
    container = _container(docs, "kube-scheduler")
    flags = [a for a in container["command"] if a.startswith("--leader-elect-resource-namespace=")]
    if not flags:
        return str(_scheduler_config(docs)["leaderElection"].get("resourceNamespace", "kube-system"))
    (flag,) = flags
    value = flag.split("=", 1)[1]
    assert value == "$(POD_NAMESPACE)", value
    (env,) = [e for e in container["env"] if e["name"] == "POD_NAMESPACE"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    return str(_deployment(docs)["metadata"]["namespace"])


def _extender_stanza(docs: tuple[Manifest, ...]) -> Manifest:
    extenders = _scheduler_config(docs)["extenders"]
    assert len(extenders) == 1
    stanza: Manifest = extenders[0]
    return stanza


def _profile(docs: tuple[Manifest, ...]) -> Manifest:
    profiles = _scheduler_config(docs)["profiles"]
    assert [p["schedulerName"] for p in profiles] == [PROFILE]
    profile: Manifest = profiles[0]
    return profile


def _rules_for(
    docs: list[Manifest] | tuple[Manifest, ...],
    namespace: str,
    sa: str,
    *,
    builtin_roles: bool = False,
    skip_roles: frozenset[str] = frozenset(),
) -> Iterator[Manifest]:
    """Every rule granted to ServiceAccount ``namespace/sa`` by roles defined in ``docs``.

    A binding to a role deploy/ does not define (a bootstrap role such as
    system:kube-scheduler) fails, unless ``builtin_roles`` allows it; its rules are
    then not listed. Bindings to roles named in ``skip_roles`` are left out.
    """
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}
    for binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        subjects = binding.get("subjects", [])
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == namespace
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        if ref["name"] in skip_roles:
            continue
        role_namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_namespace, ref["name"]))
        if role is None and builtin_roles:
            continue
        assert role is not None, (
            f"{binding['metadata']['name']} binds {ref['name']}, which deploy/ does not define"
        )
        yield from role["rules"]


def _assert_read_only_nodes_and_runtimeclasses(rules: list[Manifest]) -> None:
    assert rules, "the extender is granted nothing"
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        assert set(rule["verbs"]) <= READ_VERBS, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) in EXTENDER_ALLOWED, rule
    granted = {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    needed = {(g, r, v) for g, r in EXTENDER_ALLOWED for v in READ_VERBS}
    assert granted == needed


# --- every kustomization ------------------------------------------------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_renders_with_expected_kinds(kustomization: str) -> None:
    docs = _render(kustomization)
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    assert kinds <= EXPECTED_KINDS, kinds - EXPECTED_KINDS
    for doc in docs:
        assert doc["metadata"]["name"]
    config = _scheduler_config(docs)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_scheduler_config_uses_only_v1_fields(kustomization: str) -> None:
    config = _scheduler_config(_render(kustomization))
    assert set(config) <= SCHEDULER_CONFIG_FIELDS
    assert set(config["leaderElection"]) <= LEADER_ELECTION_FIELDS
    for profile in config["profiles"]:
        assert set(profile) <= PROFILE_FIELDS
    for extender in config["extenders"]:
        assert set(extender) <= EXTENDER_FIELDS
        assert set(extender.get("tlsConfig", {})) <= EXTENDER_TLS_FIELDS


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_extender_url_matches_sidecar_flags_and_probes(kustomization: str) -> None:
    docs = _render(kustomization)
    stanza = _extender_stanza(docs)
    assert stanza["filterVerb"] == "filter"
    assert stanza["nodeCacheCapable"] is True
    assert stanza["ignorable"] is False
    assert stanza["httpTimeout"]

    extender = _container(docs, "extender")
    args = extender["args"]
    assert args[0] == "serve"
    flags = _flags(extender)
    port = int(flags["port"])
    url = urlsplit(stanza["urlPrefix"])
    https = bool(stanza.get("enableHTTPS"))
    assert url.scheme == ("https" if https else "http")
    assert url.hostname == "127.0.0.1"  # the sidecar, on the pod's loopback
    assert url.port == port
    # The scheduler posts to urlPrefix + "/" + filterVerb; the app serves that path.
    filter_path = url.path.rstrip("/") + "/" + stanza["filterVerb"]
    routes = {
        (route.method, route.resource.canonical)
        for route in create_app(state=ClusterState(), policy=load_policy()).router.routes()
        if route.resource is not None
    }
    assert ("POST", filter_path) in routes
    for path in ("/healthz", "/readyz", "/metrics"):
        assert ("GET", path) in routes
    # /filter on the pod's loopback only: the scheduler beside it is its one caller.
    assert flags["host"] == "127.0.0.1" == url.hostname
    assert ("tls-cert-file" in flags) == https
    assert ("client-ca-file" in flags) == https

    # Probes and scrapes come to the pod IP: a port of their own on every address,
    # plain HTTP (the kubelet presents no client certificate), serving no /filter.
    settings = _serve_settings(extender)
    probe_port = settings.probe_port
    assert probe_port is not None and probe_port != port
    assert settings.probe_host == "0.0.0.0"
    probe_routes = {
        (route.method, route.resource.canonical)
        for route in create_probe_app(create_app(state=ClusterState(), policy=load_policy())).router.routes()
        if route.resource is not None
    }
    assert {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")} <= probe_routes
    assert ("POST", filter_path) not in probe_routes
    ports = {p["name"]: p["containerPort"] for p in extender.get("ports", [])}
    assert ports["http"] == probe_port  # the port a PodMonitor scrapes (docs/metrics.md)
    assert port not in ports.values()  # loopback: not reachable on the pod IP anyway
    liveness, readiness = extender["livenessProbe"], extender["readinessProbe"]
    assert liveness["httpGet"] == {"path": "/healthz", "port": probe_port}
    assert readiness["httpGet"] == {"path": "/readyz", "port": probe_port}
    if https:
        # The scheduler's client certificate and the CA are mounted in the extender too.
        tls = stanza["tlsConfig"]
        for path in (tls["certFile"], tls["keyFile"], tls["caFile"]):
            _mounted_path(docs, extender, path)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_extender_rbac_is_read_only_nodes_and_runtimeclasses(kustomization: str) -> None:
    docs = _render(kustomization)
    namespace = _deployment(docs)["metadata"]["namespace"]
    # The requeue role is checked on its own (test_requeue_rbac_only_where_the_flag_is_on).
    rules = _rules_for(
        docs,
        namespace,
        EXTENDER_SA,
        skip_roles=frozenset({REQUEUE_ROLE, LEASE_ROLE, AUTOSCALER_STATUS_ROLE})
        | WEBHOOK_CERT_ROLES
        | {TABLE_ROLE, PROBE_ROLE},
    )
    _assert_read_only_nodes_and_runtimeclasses(list(rules))
    # The sidecar runs as that ServiceAccount: its token is mounted at the in-cluster
    # path, which keeps the ServiceAccount admission plugin from mounting the pod's
    # (the scheduler's) token there.
    extender = _container(docs, "extender")
    volume = _mounted_path(docs, extender, TOKEN_PATH + "/token")
    mount = next(m for m in extender["volumeMounts"] if m["mountPath"] == TOKEN_PATH)
    assert mount.get("readOnly") is True
    secret = _one(docs, "Secret", volume["secret"]["secretName"])
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["namespace"] == namespace
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == EXTENDER_SA
    # ... and the scheduler container does not see the extender's token.
    scheduler = _container(docs, "kube-scheduler")
    assert all(m["mountPath"] != TOKEN_PATH for m in scheduler.get("volumeMounts", []))


@pytest.mark.parametrize(
    ("kustomization", "requeue"),
    [
        ("base", False),
        ("overlays/predicate-mode", True),
        ("overlays/tls", True),
    ],
)
def test_requeue_rbac_only_where_the_flag_is_on(kustomization: str, requeue: bool) -> None:
    docs = _render(kustomization)
    namespace = _deployment(docs)["metadata"]["namespace"]
    extender = _container(docs, "extender")
    assert ("--requeue-pending-pods" in extender["args"]) == requeue
    roles = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == REQUEUE_ROLE]
    assert bool(roles) == requeue
    if not requeue:
        # Read-only install: nothing may write, or even read, pods, but the dry-run
        # creates of the RuntimeClass admission plugin's probe, in its own namespace
        # (test_pod_admission_table_rbac_is_least_privilege).
        all_rules = list(_rules_for(docs, namespace, EXTENDER_SA, skip_roles=frozenset({PROBE_ROLE})))
        assert all("pods" not in rule["resources"] for rule in all_rules)
        return
    # The pods it nudges are those of the profile this deployment's scheduler runs.
    assert _flags(extender)["requeue-scheduler-names"] == _profile(docs)["schedulerName"]
    everything = list(
        _rules_for(
            docs,
            namespace,
            EXTENDER_SA,
            skip_roles=frozenset({LEASE_ROLE, AUTOSCALER_STATUS_ROLE})
            | WEBHOOK_CERT_ROLES
            | {TABLE_ROLE, PROBE_ROLE},
        )
    )
    requeue_rules = [r for r in everything if r not in _one(docs, "ClusterRole", EXTENDER_SA)["rules"]]
    assert requeue_rules == _one(docs, "ClusterRole", REQUEUE_ROLE)["rules"]
    granted = {
        (g, r, v)
        for rule in requeue_rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert granted == REQUEUE_GRANTS
    assert all(set(rule) <= {"apiGroups", "resources", "verbs"} for rule in requeue_rules)
    # The plain manifest (kubectl apply -f) is what the component installs.
    plain = _load_file(REQUEUE_COMPONENT / "rbac.yaml")
    assert _one(plain, "ClusterRole", REQUEUE_ROLE)["rules"] == roles[0]["rules"]
    binding = _one(docs, "ClusterRoleBinding", REQUEUE_ROLE)
    assert binding["subjects"] == _one(plain, "ClusterRoleBinding", REQUEUE_ROLE)["subjects"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": EXTENDER_SA, "namespace": namespace}]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_scheduler_rbac_and_leader_election(kustomization: str) -> None:
    docs = _render(kustomization)
    deployment = _deployment(docs)
    namespace = deployment["metadata"]["namespace"]
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert sa != EXTENDER_SA
    _one(docs, "ServiceAccount", sa)
    bound = {
        (b["kind"], b["metadata"].get("namespace"), b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in docs
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s["name"] == sa and s.get("namespace") == namespace for s in b["subjects"])
    }
    assert ("ClusterRoleBinding", None, "ClusterRole", "system:kube-scheduler") in bound
    assert ("ClusterRoleBinding", None, "ClusterRole", "system:volume-scheduler") in bound
    # The authentication ConfigMap, by name: a ClusterRole, so that an install into
    # another namespace (which moves every RoleBinding) keeps it.
    assert ("ClusterRoleBinding", None, "ClusterRole", "runtimeclass-scheduler-auth-reader") in bound
    assert _one(docs, "ClusterRole", "runtimeclass-scheduler-auth-reader")["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["extension-apiserver-authentication"],
            "verbs": ["get", "list", "watch"],
        }
    ]

    election = _scheduler_config(docs)["leaderElection"]
    assert election["leaderElect"] is True
    assert election["resourceLock"] == "leases"
    # Distinct from the default scheduler's Lease (kube-system/kube-scheduler).
    assert election["resourceName"] != "kube-scheduler"
    lease_rules = list(_rules_for(docs, namespace, sa, builtin_roles=True))
    assert any(
        "leases" in r["resources"]
        and {"get", "update"} <= set(r["verbs"])
        and r.get("resourceNames") == [election["resourceName"]]
        for r in lease_rules
    )
    lease_role = next(
        d for d in docs if d["kind"] == "Role" and any("leases" in r["resources"] for r in d.get("rules", []))
    )
    assert lease_role["metadata"]["namespace"] == _scheduler_lease_namespace(docs) == namespace


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_pod_security(kustomization: str) -> None:
    docs = _render(kustomization)
    pod = _deployment(docs)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["capabilities"]["drop"] == ["ALL"], container["name"]
        assert container["resources"]["requests"]["cpu"], container["name"]
        assert container["resources"]["requests"]["memory"], container["name"]
        assert "livenessProbe" in container and "readinessProbe" in container, container["name"]
    scheduler = _container(docs, "kube-scheduler")
    assert scheduler["image"] == "registry.k8s.io/kube-scheduler:v1.36.2"
    assert scheduler["command"][0] == "kube-scheduler"


@pytest.mark.parametrize(
    ("kustomization", "taint_filter_disabled"),
    [
        ("base", True),
        (PREDICATE_LABELS, False),
        ("overlays/predicate-mode", True),
        ("overlays/tls", True),
    ],
)
def test_mode_plugin_sets(kustomization: str, taint_filter_disabled: bool) -> None:
    profile = _profile(_render(kustomization))
    if taint_filter_disabled:
        # Only the TaintToleration *filter*: its scoring stays.
        assert profile["plugins"] == {"filter": {"disabled": [{"name": "TaintToleration"}]}}
    else:
        assert "plugins" not in profile  # in-tree plugins untouched


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_profile_sends_every_node_to_the_extender(kustomization: str) -> None:
    """kube-scheduler's sampling (pkg/scheduler/schedule_one.go, numFeasibleNodesToFind)
    would hide a class's few nodes from the extender: every shipped profile turns it off."""
    assert _profile(_render(kustomization))["percentageOfNodesToScore"] == 100


def _documented_scheduler_configs() -> Iterator[tuple[str, Manifest]]:
    """Every YAML block of the docs that configures a scheduler profile with our extender."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for n, block in enumerate(text.split("```yaml")[1:]):
            for doc in yaml.safe_load_all(block.split("```")[0]):
                if isinstance(doc, dict) and "profiles" in doc:
                    yield f"{page.relative_to(REPO)} yaml block {n + 1}", doc


def test_documented_profiles_send_every_node_to_the_extender() -> None:
    found = list(_documented_scheduler_configs())
    assert found, "the docs show at least one scheduler profile"
    for where, config in found:
        for profile in config["profiles"]:
            assert profile.get("percentageOfNodesToScore") == 100, where


def test_tls_overlay_mounts_every_tls_file() -> None:
    docs = _render("overlays/tls")
    stanza = _extender_stanza(docs)
    assert stanza["enableHTTPS"] is True
    tls = stanza["tlsConfig"]
    assert "insecure" not in tls
    scheduler = _container(docs, "kube-scheduler")
    extender = _container(docs, "extender")
    secrets = set()
    for path in (tls["certFile"], tls["keyFile"], tls["caFile"]):
        secrets.add(_mounted_path(docs, scheduler, path)["secret"]["secretName"])
    flags = _flags(extender)
    for setting in ("tls-cert-file", "tls-key-file", "client-ca-file"):
        secrets.add(_mounted_path(docs, extender, flags[setting])["secret"]["secretName"])
    # The extender trusts the CA the scheduler uses to verify it: one Secret, one CA.
    assert flags["client-ca-file"] == tls["caFile"]
    assert secrets == {"runtimeclass-extender-tls"}


def test_overlays_keep_flags_other_overlays_add() -> None:
    """The TLS overlay appends to the extender's args rather than replacing them."""
    base = _container(_render("overlays/predicate-mode"), "extender")["args"]
    tls = _container(_render("overlays/tls"), "extender")["args"]
    assert tls[: len(base)] == base


# --- plain manifests ----------------------------------------------------------------


def test_rbac_manifest_matches_the_base() -> None:
    plain = _load_file(DEPLOY / "rbac.yaml")
    kinds = {(d["apiVersion"], d["kind"]) for d in plain}
    assert kinds <= EXPECTED_KINDS
    namespace = _one(plain, "ServiceAccount", EXTENDER_SA)["metadata"]["namespace"]
    _assert_read_only_nodes_and_runtimeclasses(list(_rules_for(plain, namespace, EXTENDER_SA)))
    base = _render("base")
    assert _one(plain, "ClusterRole", EXTENDER_SA)["rules"] == _one(base, "ClusterRole", EXTENDER_SA)["rules"]
    plain_binding = _one(plain, "ClusterRoleBinding", EXTENDER_SA)
    base_binding = _one(base, "ClusterRoleBinding", EXTENDER_SA)
    assert plain_binding["roleRef"] == base_binding["roleRef"]
    assert plain_binding["subjects"] == base_binding["subjects"]


def test_example_runtimeclasses_parse() -> None:
    docs = _load_file(DEPLOY / "examples" / "runtimeclasses.yaml")
    assert docs
    for doc in docs:
        assert (doc["apiVersion"], doc["kind"]) == ("node.k8s.io/v1", "RuntimeClass")
        view = runtime_class_from_api(doc)
        assert view.selector_error is None


def test_sample_workload_names_an_example_class_and_no_scheduler() -> None:
    """The same workload in both modes: pod admission routes it to the profile in
    predicate mode (tests/real/test_sample_workload.py places it in each mode)."""
    classes = {d["metadata"]["name"] for d in _load_file(DEPLOY / "examples" / "runtimeclasses.yaml")}
    workloads = _load_file(DEPLOY / "examples" / "workload.yaml")
    assert workloads
    for kustomization in KUSTOMIZATIONS:
        assert _profile(_render(kustomization))["schedulerName"] == PROFILE
    for workload in workloads:
        assert (workload["apiVersion"], workload["kind"]) == ("apps/v1", "Deployment")
        pod = workload["spec"]["template"]["spec"]
        assert "schedulerName" not in pod
        assert pod["runtimeClassName"] in classes


# --- Dockerfile ---------------------------------------------------------------------


def _dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions per stage, as (INSTRUCTION, arguments); continuation lines joined."""
    stages: list[list[tuple[str, str]]] = []
    logical = ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        instruction, _, arguments = logical.partition(" ")
        logical = ""
        if instruction.upper() == "FROM":
            stages.append([])
        assert stages, "Dockerfile must start with FROM"
        stages[-1].append((instruction.upper(), arguments.strip()))
    return stages


def _last(stage: list[tuple[str, str]], instruction: str) -> str:
    values = [arguments for name, arguments in stage if name == instruction]
    assert values, f"final stage has no {instruction}"
    return values[-1]


def _console_scripts() -> dict[str, str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    scripts: dict[str, str] = pyproject["project"]["scripts"]
    return scripts


def _installed_script(name: str) -> Path:
    script = Path(sys.executable).parent / name
    if not script.exists():
        pytest.skip(f"console script {name} is not installed beside {sys.executable} (pip install -e .)")
    return script


def test_dockerfile_is_multi_stage_on_slim_python_311() -> None:
    stages = _dockerfile_stages()
    assert len(stages) >= 2
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"
    for stage in stages:
        image = stage[0][1].split()[0]
        # A 3.11 patch release, pinned (tests/test_image_lock.py checks the exact form).
        assert image.startswith("python:3.11.") and "-slim" in image, image
    final = stages[-1]
    # No build tools in the final image: no compilers installed, no wheels built.
    for instruction, arguments in final:
        if instruction == "RUN":
            assert "apt-get install" not in arguments
            assert "pip wheel" not in arguments and "pip install" not in arguments
        if instruction == "COPY":
            assert arguments.startswith("--from="), "the final stage takes only the built environment"


def test_dockerfile_user_is_not_root() -> None:
    user = _last(_dockerfile_stages()[-1], "USER")
    name = user.split(":")[0]
    assert name.isdigit(), "numeric, so runAsNonRoot can verify it"
    assert int(name) != 0
    deployment = _deployment(_render("base"))
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(name)


def test_dockerfile_build_context_has_what_it_copies() -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    build = _dockerfile_stages()[0]
    for instruction, arguments in build:
        if instruction != "COPY" or arguments.startswith("--from="):
            continue
        *sources, _ = shlex.split(arguments)
        for source in sources:
            assert (REPO / source).exists(), source
            # .dockerignore excludes everything, then re-includes what the build needs.
            assert f"!{source.rstrip('/')}" in ignore or f"!{source.rstrip('/')}/" in ignore, source


def test_dockerfile_entrypoint_runs() -> None:
    final = _dockerfile_stages()[-1]
    entrypoint = json.loads(_last(final, "ENTRYPOINT"))
    command = json.loads(_last(final, "CMD"))
    assert isinstance(entrypoint, list) and isinstance(command, list), (
        "exec form, so signals reach the process"
    )
    assert entrypoint[0] in _console_scripts()
    script = _installed_script(entrypoint[0])
    for args in ([*entrypoint[1:], "--help"], [*entrypoint[1:], *command, "--help"]):
        result = subprocess.run([str(script), *args], capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        assert "usage: runtimeclass-extender" in result.stdout
    # The image's default command is what the Deployment's sidecar runs.
    sidecar = _container(_render("base"), "extender")
    assert "command" not in sidecar, "the sidecar must keep the image's ENTRYPOINT"
    assert sidecar["args"][0] == command[0]
    serve_help = subprocess.run(
        [str(script), "serve", "--help"], capture_output=True, text=True, check=False
    ).stdout
    for flag in _flags(sidecar):
        assert f"--{flag}" in serve_help, flag


# --- the admission webhook component ------------------------------------------------

WEBHOOK_COMPONENT = "components/admission-webhook"
WEBHOOK_CERT_MANAGER = "components/admission-webhook/cert-manager"
# Every overlay includes the component: one `kubectl apply -k`.
WEBHOOK_OVERLAYS = ["overlays/predicate-mode", "overlays/tls"]
# How an overlay admits pods: as shipped, by policies in the API server
# (components/pod-admission-policy); or its copy for an API server without
# MutatingAdmissionPolicy, by the pod webhook (docs/pod-webhook.md).
WAYS = ["policy", "webhook"]


def _render_way(overlay: str, way: str) -> tuple[Manifest, ...]:
    return render(overlay) if way == "policy" else render_webhook_way(overlay)


CERT_SECRET = "runtimeclass-extender-webhook-certificate"
WEBHOOK_KINDS = {
    ("v1", "Service"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
}
CERT_MANAGER_KINDS = {("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "Issuer")}


@cache
def _render_with(overlay: str, *components: str) -> tuple[Manifest, ...]:
    """``overlay`` plus ``components``, as a user's kustomization would list them."""
    return render(overlay, *components)


def _webhook(docs: tuple[Manifest, ...]) -> Manifest:
    hooks = _one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert len(hooks) == 1
    hook: Manifest = hooks[0]
    return hook


def _serve_settings(container: Manifest) -> ServeSettings:
    """The container's args as ``serve`` parses and resolves them: fails on a flag or
    value it does not accept."""
    try:
        namespace = build_parser().parse_args(container["args"])
    except SystemExit:
        raise AssertionError(f"serve does not accept {container['args']}") from None
    assert namespace.command == "serve"
    return resolve_serve(namespace, environ={})


def _container_port(container: Manifest, target: int | str) -> int:
    """A Service targetPort (number or port name) as the container's port number."""
    ports = container.get("ports", [])
    if isinstance(target, int):
        assert target in [p["containerPort"] for p in ports], f"the container does not open {target}"
        return target
    named = [p["containerPort"] for p in ports if p.get("name") == target]
    assert len(named) == 1, f"the container has no port named {target!r}"
    port: int = named[0]
    return port


@pytest.mark.parametrize("overlay", WEBHOOK_OVERLAYS)
def test_webhook_reaches_the_listener_the_extender_opens(overlay: str) -> None:
    docs = _render(overlay)
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    assert WEBHOOK_KINDS <= kinds <= EXPECTED_KINDS, kinds - EXPECTED_KINDS
    reference = _webhook(docs)["clientConfig"]["service"]
    service = _one(docs, "Service", reference["name"])
    assert service["metadata"]["namespace"] == reference["namespace"]
    deployment = _deployment(docs)
    assert service["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    # The Service picks the extender's pods.
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    # clientConfig.service.port (443 when absent) -> the Service port -> the container
    # port -> the port --admission-port opens.
    matching = [p for p in service["spec"]["ports"] if p["port"] == reference.get("port", 443)]
    assert len(matching) == 1, "the webhook's port is not a port of the Service"
    extender = _container(docs, "extender")
    target = _container_port(extender, matching[0].get("targetPort", matching[0]["port"]))
    settings = _serve_settings(extender)
    assert settings.admission_port == target
    # The API server comes to the pod IP, not to the loopback /filter listens on.
    assert settings.admission_host == "0.0.0.0"
    # The path is the one the admission listener serves.
    assert reference["path"] == ADMISSION_PATH
    admission_routes = {
        (route.method, route.resource.canonical)
        for route in create_admission_app(
            create_app(state=ClusterState(), policy=load_policy())
        ).router.routes()
        if route.resource is not None
    }
    assert ("POST", reference["path"]) in admission_routes


def test_webhook_policy_and_rules() -> None:
    hook = _webhook(_render("overlays/predicate-mode"))
    # The API server requires a fully qualified name (at least three segments).
    assert len(hook["name"].split(".")) >= 3
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["rules"] == [
        {
            "apiGroups": ["node.k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["runtimeclasses"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Cluster",
        }
    ]
    # The extender's leader (or cert-manager) patches caBundle in; the manifest leaves
    # it out, so a later `kubectl apply` does not take it back.
    assert "caBundle" not in hook["clientConfig"]
    assert "url" not in hook["clientConfig"]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("overlay", WEBHOOK_OVERLAYS)
def test_webhook_certificates_are_self_managed_in_every_overlay(overlay: str, way: str) -> None:
    docs = _render_way(overlay, way)
    extender = _container(docs, "extender")
    settings = _serve_settings(extender)
    # No files: the extender keeps its own CA and pair in one Secret (no cert-manager,
    # nothing to create by hand), preferred to the main pair even where there is one.
    assert admission_tls_files(settings) is None
    assert settings.webhook_certificate_secret == CERT_SECRET
    assert all(
        "webhook-tls" not in json.dumps(v) for v in _deployment(docs)["spec"]["template"]["spec"]["volumes"]
    )
    # The names it certifies and patches are those the render defines.
    service = _one(docs, "Service")
    namespace = _deployment(docs)["metadata"]["namespace"]
    assert settings.webhook_service == service["metadata"]["name"]
    assert service["metadata"]["namespace"] == namespace
    env = _extender_env(extender, docs)
    assert env["POD_NAMESPACE"] == namespace  # the Secret's namespace (own_namespace)
    assert (
        settings.webhook_validating_configuration
        == _one(docs, "ValidatingWebhookConfiguration")["metadata"]["name"]
    )
    hooks = [_webhook(docs)]
    if way == "webhook":
        assert (
            settings.webhook_mutating_configuration
            == _one(docs, "MutatingWebhookConfiguration")["metadata"]["name"]
        )
        hooks.append(_pod_webhook(docs))
    else:
        # No pod webhook, and no caBundle of one to keep.
        assert settings.webhook_mutating_configuration is None
        assert not [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    for hook in hooks:
        reference = hook["clientConfig"]["service"]
        assert (reference["name"], reference["namespace"]) == (settings.webhook_service, namespace)
        assert "caBundle" not in hook["clientConfig"]
    # No client certificates on the webhook's listener, even where the main one wants them.
    assert (settings.client_ca_file is not None) == (overlay == "overlays/tls")


def _grants(role: Manifest) -> set[tuple[str, str, str, tuple[str, ...]]]:
    """(apiGroup, resource, verb, resourceNames) of every rule of ``role``."""
    return {
        (g, r, v, tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("overlay", [*WEBHOOK_OVERLAYS, PREDICATE_LABELS])
def test_pod_admission_table_rbac_is_least_privilege(overlay: str, way: str) -> None:
    """Where the policies admit pods, the extender keeps their table: the one
    PodAdmissionTable by name, create (which RBAC cannot narrow by name), and a policy
    confining what it writes; the webhook way has none of it."""
    docs = _render_way(overlay, way)
    namespace = _deployment(docs)["metadata"]["namespace"]
    settings = _serve_settings(_container(docs, "extender"))
    roles = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == TABLE_ROLE]
    probes = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == PROBE_ROLE]
    if way == "webhook":
        assert settings.pod_admission_table is None and roles == [] and probes == []
        assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"]
        return
    assert settings.pod_admission_table == TABLE
    (role,) = roles
    granted = _grants(role)
    group = "runtimeclass-extender.dev"
    assert granted == {
        (group, "podadmissiontables", "create", ()),
        *{(group, "podadmissiontables", verb, (TABLE,)) for verb in ("get", "list", "watch", "patch")},
    }
    binding = _one(docs, "ClusterRoleBinding", TABLE_ROLE)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": EXTENDER_SA, "namespace": namespace}]
    # In its own namespace alone: its Namespace object (the list of classes the
    # RuntimeClass admission plugin constrains fully, an annotation), and pods, created
    # as dry runs, to find out whether the API server runs that plugin (both confined
    # by the policies below).
    (probe,) = probes
    assert probe["metadata"]["namespace"] == namespace
    assert _grants(probe) == {
        ("", "namespaces", "get", ()),
        ("", "namespaces", "patch", ()),
        ("", "pods", "create", ()),
    }
    binding = _one(docs, "RoleBinding", PROBE_ROLE)
    assert binding["metadata"]["namespace"] == namespace
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": EXTENDER_SA, "namespace": namespace}]
    for name in ("runtimeclass-extender-namespace-annotation", "runtimeclass-extender-plugin-probe"):
        confining = _one(docs, "ValidatingAdmissionPolicy", name)
        assert confining["spec"]["matchConditions"][0]["name"] == "only-the-extender"
    crd = _one(docs, "CustomResourceDefinition", "podadmissiontables.runtimeclass-extender.dev")
    assert crd["spec"]["scope"] == "Cluster" and crd["spec"]["group"] == group
    # The mutating policy reads that object, by name; the guard reads none.
    mutating = _one(docs, "MutatingAdmissionPolicyBinding", "runtimeclass-extender-pod-admission")
    assert mutating["spec"]["paramRef"]["name"] == TABLE
    guard = _one(docs, "ValidatingAdmissionPolicyBinding", "runtimeclass-extender-pod-admission-guard")
    assert "paramRef" not in guard["spec"]
    policy = _one(docs, "ValidatingAdmissionPolicy", TABLE_ROLE)
    assert policy["spec"]["matchConditions"][0]["name"] == "only-the-extender"
    assert f"request.name == '{TABLE}'" in str(policy["spec"]["validations"])


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("overlay", [*WEBHOOK_OVERLAYS, PREDICATE_LABELS])
def test_webhook_certificate_rbac_is_least_privilege(overlay: str, way: str) -> None:
    """The Secret and the webhook configurations by name (the pod webhook's only where
    there is one: none where the API server's policies admit pods); create on Secrets and
    list on EndpointSlices only in the extender's namespace (a Role: RBAC cannot limit
    create by name, and slice names are generated)."""
    docs = _render_way(overlay, way)
    namespace = _deployment(docs)["metadata"]["namespace"]
    settings = _serve_settings(_container(docs, "extender"))
    role = _one(docs, "Role", CERT_ROLE)
    assert role["metadata"]["namespace"] == namespace
    granted = _grants(role)
    secret = (settings.webhook_certificate_secret,)
    assert granted == {
        ("", "secrets", "create", ()),
        *{("", "secrets", verb, secret) for verb in ("get", "list", "watch", "update")},
        # The webhook Service's slices, to ask each replica what it serves before a CA
        # leaves the caBundles: list only, in the namespace (slice names are generated).
        ("discovery.k8s.io", "endpointslices", "list", ()),
    }
    cluster_role = _one(docs, "ClusterRole", CA_BUNDLE_ROLE)
    kept = [("validatingwebhookconfigurations", settings.webhook_validating_configuration)]
    if settings.webhook_mutating_configuration is not None:
        kept.append(("mutatingwebhookconfigurations", settings.webhook_mutating_configuration))
    # A pod webhook exactly where a MutatingWebhookConfiguration is installed.
    assert len(kept) == 1 + len([d for d in docs if d["kind"] == "MutatingWebhookConfiguration"])
    assert (len(kept) == 2) == (way == "webhook")
    granted = {
        (g, r, v, name)
        for rule in cluster_role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
        for name in rule["resourceNames"]
    }
    assert all(rule.get("resourceNames") for rule in cluster_role["rules"])
    assert granted == {
        ("admissionregistration.k8s.io", resource, verb, name)
        for resource, name in kept
        for verb in ("get", "list", "watch", "patch")
    }
    assert len({name for _, name in kept}) == 1  # one name in resourceNames covers both kinds
    for kind, name in (("RoleBinding", CERT_ROLE), ("ClusterRoleBinding", CA_BUNDLE_ROLE)):
        binding = _one(docs, kind, name)
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": EXTENDER_SA, "namespace": namespace}
        ]
    rbac = (DEPLOY / WEBHOOK_COMPONENT / "rbac.yaml").read_text()
    assert "create cannot be restricted by name" in rbac
    assert "list EndpointSlices in that namespace" in rbac


def test_cert_manager_sub_components_mount_their_certificate_instead() -> None:
    """The opt-in alternative: the files from cert-manager's Secret win, and the RBAC
    of self-managed certificates is gone (the extender writes nothing then)."""
    for overlay in WEBHOOK_OVERLAYS:
        docs = _render_with(overlay, WEBHOOK_CERT_MANAGER, POD_WEBHOOK_CERT_MANAGER)
        extender = _container(docs, "extender")
        settings = _serve_settings(extender)
        files = admission_tls_files(settings)
        assert files is not None
        # Its own pair, from the Secret cert-manager writes.
        assert (files.cert_setting, files.key_setting) == (
            "admission-tls-cert-file",
            "admission-tls-key-file",
        )
        secrets = {
            _mounted_path(docs, extender, path)["secret"]["secretName"]
            for path in (files.cert_file, files.key_file)
        }
        assert secrets == {"runtimeclass-extender-webhook-tls"}
        assert files.client_ca_file is None
        names = {
            d["metadata"]["name"]
            for d in docs
            if d["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
        }
        assert not names & WEBHOOK_CERT_ROLES
        # The base install is unchanged by it otherwise.
        assert _scheduler_config(docs) == _scheduler_config(_render(overlay))


@pytest.mark.parametrize("overlay", ["base"])
def test_webhook_component_leaves_the_scheduler_path_alone(overlay: str) -> None:
    plain = _render(overlay)
    docs = _render_with(overlay, WEBHOOK_COMPONENT, POD_WEBHOOK_COMPONENT)
    assert _scheduler_config(docs) == _scheduler_config(plain)
    before, after = _container(plain, "extender"), _container(docs, "extender")
    # Appended, not replaced: the main listener's flags and probes are as they were.
    assert after["args"][: len(before["args"])] == before["args"]
    assert after["ports"][: len(before["ports"])] == before["ports"]
    assert after["livenessProbe"] == before["livenessProbe"]
    assert after["readinessProbe"] == before["readinessProbe"]
    assert _container(docs, "kube-scheduler") == _container(plain, "kube-scheduler")
    assert not {(d["apiVersion"], d["kind"]) for d in docs} & CERT_MANAGER_KINDS
    # ... and every overlay (the webhook way) carries exactly what the components add to
    # the base.
    for shipped in WEBHOOK_OVERLAYS:
        rendered = render_webhook_way(shipped)
        assert not {(d["apiVersion"], d["kind"]) for d in rendered} & CERT_MANAGER_KINDS
        assert _container(rendered, "kube-scheduler")["image"] == _container(plain, "kube-scheduler")["image"]
        for kind in ("Service", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            assert _one(rendered, kind) == _one(docs, kind)


def test_webhook_with_cert_manager_injects_the_ca_of_the_mounted_certificate() -> None:
    docs = _render_with("overlays/predicate-mode", WEBHOOK_CERT_MANAGER)
    webhook_config = _one(docs, "ValidatingWebhookConfiguration")
    certificate = _one(docs, "Certificate")
    namespace, name = certificate["metadata"]["namespace"], certificate["metadata"]["name"]
    assert (
        webhook_config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{namespace}/{name}"
    )
    # The certificate names the Service the webhook calls...
    service = _webhook(docs)["clientConfig"]["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    # ... is written to the Secret the extender reads its admission pair from ...
    extender = _container(docs, "extender")
    files = admission_tls_files(_serve_settings(extender))
    assert files is not None
    volume = _mounted_path(docs, extender, files.cert_file)
    assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    assert PurePosixPath(files.cert_file).name == "tls.crt"  # cert-manager's key names
    assert PurePosixPath(files.key_file).name == "tls.key"
    # ... in the extender's namespace, by an Issuer the render defines.
    assert namespace == _deployment(docs)["metadata"]["namespace"]
    issuer = certificate["spec"]["issuerRef"]
    found = _one(docs, issuer.get("kind", "Issuer"), issuer["name"])
    assert found["metadata"]["namespace"] == namespace


# --- deploy/components/audit-running-pods (opt-in: no overlay includes it) --------------

AUDIT_ROLE = "runtimeclass-extender-audit"
AUDIT_COMPONENT = DEPLOY / "components" / "audit-running-pods"


def _informer_grants() -> set[tuple[str, str, str]]:
    """What the audit reads: its informer LISTs and WATCHes one core collection."""
    parts = scheduled_pod_resource().path.strip("/").split("/")
    assert parts[:2] == ["api", "v1"] and len(parts) == 3, "a core, cluster-wide collection"
    return {("", parts[2], "list"), ("", parts[2], "watch")}


@pytest.mark.parametrize("overlay", ["base", "overlays/predicate-mode"])
def test_audit_component_adds_the_flag_and_only_list_watch_pods(overlay: str) -> None:
    docs = _render_with(overlay, "components/audit-running-pods")
    namespace = _deployment(docs)["metadata"]["namespace"]
    args = _container(docs, "extender")["args"]
    # Appended: the flags the overlay sets survive.
    assert args == [*_container(_render(overlay), "extender")["args"], "--audit-running-pods"]
    # serve's real parser accepts the arguments and turns the feature on.
    settings = resolve_serve(build_parser().parse_args(args), environ={})
    assert settings.audit_running_pods and settings.cluster_file is None
    role = _one(docs, "ClusterRole", AUDIT_ROLE)
    granted = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert granted == _informer_grants()
    assert all(set(rule) <= {"apiGroups", "resources", "verbs"} for rule in role["rules"])
    binding = _one(docs, "ClusterRoleBinding", AUDIT_ROLE)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": AUDIT_ROLE,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": EXTENDER_SA, "namespace": namespace}]
    # Everything else the extender may do is unchanged.
    others = _rules_for(
        docs,
        namespace,
        EXTENDER_SA,
        skip_roles=frozenset({REQUEUE_ROLE, AUDIT_ROLE, LEASE_ROLE, AUTOSCALER_STATUS_ROLE, PROBE_ROLE})
        | WEBHOOK_CERT_ROLES
        | {TABLE_ROLE},
    )
    _assert_read_only_nodes_and_runtimeclasses(list(others))
    # The plain manifest (kubectl apply -f) is what the component installs.
    plain = _load_file(AUDIT_COMPONENT / "rbac.yaml")
    assert _one(plain, "ClusterRole", AUDIT_ROLE)["rules"] == role["rules"]
    assert _one(plain, "ClusterRoleBinding", AUDIT_ROLE)["subjects"] == binding["subjects"]


# --- deploy/components/autoscaler-status ----------------------------------------------


@pytest.mark.parametrize("kustomization", [*KUSTOMIZATIONS, PREDICATE_LABELS])
def test_the_autoscaler_status_is_read_by_name_only_where_rules_are_not_in_pods(kustomization: str) -> None:
    """get on ConfigMaps named cluster-autoscaler-status, nothing else; where label-nodes
    is off (with it, every class's label is in its pods: nothing to warn about)."""
    docs = _render(kustomization)
    namespace = _deployment(docs)["metadata"]["namespace"]
    settings = _serve_settings(_container(docs, "extender"))
    roles = [
        d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == AUTOSCALER_STATUS_ROLE
    ]
    if kustomization == "base" or settings.label_nodes:
        assert roles == [], kustomization
        return
    (role,) = roles
    _, name = settings.cluster_autoscaler_status.split("/")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name], "verbs": ["get"]}
    ]
    binding = _one(docs, "ClusterRoleBinding", AUTOSCALER_STATUS_ROLE)
    assert binding["roleRef"]["name"] == AUTOSCALER_STATUS_ROLE
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": EXTENDER_SA, "namespace": namespace}]
    # Whether the API server merges the classes' selectors the extender finds out itself,
    # with a dry-run pod in its own namespace (every overlay keeps the pod admission table).
    probe = _one(docs, "Role", PROBE_ROLE)
    assert probe["metadata"]["namespace"] == namespace
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]} in probe["rules"]


# --- the overlays the docs show ---------------------------------------------------------


def _docs_overlays() -> list[tuple[str, str]]:
    """Every ``# my-overlay/kustomization.yaml`` the docs show, with its page."""
    return [
        (path.name, block)
        for path in sorted(DOCS.glob("*.md"))
        for block in fenced_blocks(path.read_text(encoding="utf-8"), "yaml")
        if block.startswith("# my-overlay/kustomization.yaml\n")
    ]


def test_the_docs_show_overlays_of_your_own() -> None:
    assert {page for page, _ in _docs_overlays()} >= {"install.md", "admission-webhook.md"}


KUSTOMIZATION_KEYS = {"resources", "components", "patches", "images", "configMapGenerator", "replacements"}


def test_every_kustomize_snippet_is_an_overlay_of_your_own_on_a_shipped_overlay() -> None:
    """A snippet the reader adds "to an overlay" cannot be rendered and can break one (a
    component an overlay lists already registers its objects twice), so every YAML block
    of the docs that holds kustomization keys is a whole ``# my-overlay/kustomization.yaml``
    on the overlay its page names (deploy/overlays/<name>, or deploy/base with the
    components it lists), which test_docs_overlay_renders_with_kubectl renders."""
    # The shipped overlays, or the base they share (predicate mode the pod webhook's way).
    overlays = {f"../deploy/overlays/{path.name}" for path in (DEPLOY / "overlays").iterdir()} | {
        "../deploy/base"
    }
    found = []
    for path in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        for block in fenced_blocks(path.read_text(encoding="utf-8"), "yaml"):
            for doc in yaml.safe_load_all(block):
                if not isinstance(doc, dict) or doc.get("kind") not in (None, "Kustomization"):
                    continue
                if not KUSTOMIZATION_KEYS & set(doc):
                    continue
                found.append(path.name)
                assert block.startswith("# my-overlay/kustomization.yaml\n"), f"{path.name}: {block[:200]}"
                assert [r for r in doc.get("resources", []) if r in overlays], (
                    f"{path.name}: {doc.get('resources')}"
                )
    assert len(found) >= 6, found


@pytest.mark.parametrize(
    ("page", "kustomization"), _docs_overlays(), ids=lambda v: v if v.endswith(".md") else ""
)
def test_docs_overlay_renders_with_kubectl(page: str, kustomization: str) -> None:
    """Each overlay of one's own the docs show, placed next to deploy/ as they say,
    renders with ``kubectl kustomize`` (what ``kubectl apply -k`` applies); an ``images``
    entry reaches the extender container."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: cannot render the kustomizations (kubectl kustomize)")
    with tempfile.TemporaryDirectory(dir=REPO) as directory:
        (Path(directory) / "kustomization.yaml").write_text(kustomization)
        result = subprocess.run(
            [kubectl, "kustomize", directory], capture_output=True, text=True, check=False
        )
    assert result.returncode == 0, f"{page}: kubectl kustomize failed:\n{result.stderr}"
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
    images = {
        c["name"]: c["image"] for c in _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    }
    wanted = yaml.safe_load(kustomization).get("images")
    if wanted:
        assert images["extender"] == f"{wanted[0]['newName']}:{wanted[0]['newTag']}"
    # kube-scheduler runs in predicate mode; the default-scheduler mode runs the extender alone.
    if "overlays/default-scheduler" in kustomization:
        assert set(images) == {"extender"}
    else:
        assert images["kube-scheduler"].startswith("registry.k8s.io/kube-scheduler:")


# --- deploy/components/pod-webhook (after admission-webhook, whose listener it shares) ----

POD_WEBHOOK_COMPONENT = "components/pod-webhook"
POD_WEBHOOK_CERT_MANAGER = "components/pod-webhook/cert-manager"
POD_WEBHOOK_KINDS = WEBHOOK_KINDS | {("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")}


def _pod_webhooks(docs: tuple[Manifest, ...]) -> list[Manifest]:
    """The pod webhook's hooks, where there is one."""
    return [hook for d in docs if d["kind"] == "MutatingWebhookConfiguration" for hook in d["webhooks"]]


def _pod_webhook(docs: tuple[Manifest, ...]) -> Manifest:
    hooks = _one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert len(hooks) == 1
    hook: Manifest = hooks[0]
    return hook


def _extender_env(container: Manifest, docs: tuple[Manifest, ...]) -> dict[str, str]:
    """The container's environment as the kubelet would set it (downward API included)."""
    metadata = _deployment(docs)["metadata"]
    # The downward API fields the manifests use, as the kubelet fills them for a pod of it.
    fields = {"metadata.namespace": metadata["namespace"], "metadata.name": f"{metadata['name']}-0"}
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            assert set(entry["valueFrom"]) == {"fieldRef"}, entry
            env[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


@pytest.mark.parametrize("overlay", [*WEBHOOK_OVERLAYS, PREDICATE_LABELS])
def test_pod_webhook_reaches_the_pod_path_on_the_shared_listener(overlay: str) -> None:
    docs = render_webhook_way(overlay)
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    assert POD_WEBHOOK_KINDS <= kinds <= EXPECTED_KINDS, kinds - EXPECTED_KINDS
    pods, runtimeclasses = _pod_webhook(docs), _webhook(docs)
    # The same Service, port and (by cert-manager or by hand) CA as the RuntimeClass webhook.
    reference = pods["clientConfig"]["service"]
    assert {k: v for k, v in reference.items() if k != "path"} == {
        k: v for k, v in runtimeclasses["clientConfig"]["service"].items() if k != "path"
    }
    service = _one(docs, "Service", reference["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == reference.get("port", 443)]
    extender = _container(docs, "extender")
    settings = _serve_settings(extender)
    assert settings.admission_port == _container_port(extender, port.get("targetPort", port["port"]))
    # The path is one the extender serves, on that listener and on the main one.
    assert reference["path"] == POD_PATH
    main = create_app(state=ClusterState(), policy=load_policy())
    for app in (main, create_admission_app(main)):
        routes = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None}
        assert ("POST", POD_PATH) in routes


def test_pod_webhook_policy_rules_and_selectors() -> None:
    docs = render_webhook_way("overlays/predicate-mode")
    hook = _pod_webhook(docs)
    assert len(hook["name"].split(".")) >= 3
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "operations": ["CREATE"],
            "scope": "Namespaced",
        }
    ]
    # Only pods that name a RuntimeClass are sent (CEL, admissionregistration/v1).
    (condition,) = hook["matchConditions"]
    assert (
        condition["expression"] == 'has(object.spec.runtimeClassName) && object.spec.runtimeClassName != ""'
    )
    assert hook["failurePolicy"] == "Fail"
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert "caBundle" not in hook["clientConfig"] and "url" not in hook["clientConfig"]
    # Not sent: the opt-out label, kube-system, and the extender's own namespace.
    expressions = hook["namespaceSelector"]["matchExpressions"]
    assert {"key": WEBHOOK_LABEL, "operator": "NotIn", "values": ["ignore"]} in expressions
    (names,) = [e for e in expressions if e["key"] == "kubernetes.io/metadata.name"]
    assert names["operator"] == "NotIn"
    assert set(names["values"]) == {"kube-system", _deployment(docs)["metadata"]["namespace"]}
    assert "objectSelector" not in hook  # the pod label opts out of routing only: the webhook reads it


@pytest.mark.parametrize("overlay", [*WEBHOOK_OVERLAYS, PREDICATE_LABELS])
def test_pod_webhook_routes_to_the_profile_and_knows_its_namespace(overlay: str) -> None:
    docs = render_webhook_way(overlay)
    extender = _container(docs, "extender")
    namespace = build_parser().parse_args(extender["args"])
    settings = resolve_serve(namespace, environ=_extender_env(extender, docs))
    # Routed to the profile that uses the extender, never to a name no scheduler answers.
    assert settings.route_pods_to_scheduler == _profile(docs)["schedulerName"] == PROFILE
    assert settings.namespace == _deployment(docs)["metadata"]["namespace"]
    # Appended to what the base and the RuntimeClass webhook set; scheduler untouched.
    before = _container(_render_with("base", WEBHOOK_COMPONENT), "extender")
    after = _container(_render_with("base", WEBHOOK_COMPONENT, POD_WEBHOOK_COMPONENT), "extender")
    assert after["args"][: len(before["args"])] == before["args"]
    assert after["env"][: len(before["env"])] == before["env"]
    assert extender["args"][: len(before["args"])] == before["args"]
    assert _scheduler_config(docs) == _scheduler_config(_render(overlay))
    # The webhook's caBundle is kept with the RuntimeClass webhook's.
    assert (
        settings.webhook_mutating_configuration
        == _one(docs, "MutatingWebhookConfiguration")["metadata"]["name"]
    )
    # Container order survives (the other components patch the extender as container 0).
    assert [c["name"] for c in _deployment(docs)["spec"]["template"]["spec"]["containers"]] == [
        "extender",
        "kube-scheduler",
    ]


def test_pod_webhook_with_cert_manager_gets_the_shared_certificates_ca() -> None:
    """The pod webhook's caBundle from the shared Certificate (the webhook way); where the
    policies admit pods there is no pod webhook, and only the RuntimeClass webhook gets it."""
    docs = render_webhook_way("overlays/predicate-mode", WEBHOOK_CERT_MANAGER, POD_WEBHOOK_CERT_MANAGER)
    certificate = _one(docs, "Certificate")
    expected = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        assert _one(docs, kind)["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == expected
    service = _pod_webhook(docs)["clientConfig"]["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    docs = _render_with(PREDICATE_LABELS, WEBHOOK_CERT_MANAGER)
    assert not [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    certificate = _one(docs, "Certificate")
    expected = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    assert (
        _one(docs, "ValidatingWebhookConfiguration")["metadata"]["annotations"][
            "cert-manager.io/inject-ca-from"
        ]
        == expected
    )


# --- high availability (docs/high-availability.md) ----------------------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_two_replicas_spread_with_a_disruption_budget(kustomization: str) -> None:
    docs = _render(kustomization)
    deployment = _deployment(docs)
    assert deployment["spec"]["replicas"] == 2
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    # A one-node cluster still runs both replicas.
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway" and spread["maxSkew"] == 1
    assert spread["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    pdb = _one(docs, "PodDisruptionBudget")
    assert pdb["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": spread["labelSelector"]["matchLabels"]},
    }
    # The scheduler elects its own leader (only one replica schedules).
    assert _scheduler_config(docs)["leaderElection"]["leaderElect"] is True
    # The extender's election identity is its pod's name (downward API).
    env = {
        e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        for e in _container(docs, "extender")["env"]
    }
    # The pod webhook's own namespace setting (components/pod-webhook), where it is on.
    pod_webhook = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    if pod_webhook:
        assert env.pop("RUNTIMECLASS_EXTENDER_NAMESPACE") == "metadata.namespace"
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}


@pytest.mark.parametrize(
    ("kustomization", "components"),
    [
        ("base", ()),
        (PREDICATE_LABELS, ()),
        ("overlays/predicate-mode", ()),
        ("overlays/tls", ()),
        ("overlays/predicate-mode", ("components/audit-running-pods",)),
        ("base", ("components/audit-running-pods", "components/leader-election")),
    ],
)
def test_leader_election_wherever_an_acting_part_is_on(
    kustomization: str, components: tuple[str, ...]
) -> None:
    docs = _render_with(kustomization, *components) if components else _render(kustomization)
    namespace = _deployment(docs)["metadata"]["namespace"]
    args = _container(docs, "extender")["args"]
    settings = resolve_serve(build_parser().parse_args(args), environ={})
    # The webhooks' self-managed certificates act too: the leader renews and patches.
    acting = (
        settings.requeue_pending_pods
        or settings.audit_running_pods
        or (settings.webhook_certificate_secret is not None and admission_tls_files(settings) is None)
    )
    assert settings.leader_elect == acting
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == LEASE_ROLE]
    assert bool(roles) == acting
    if not acting:
        return
    # kube-scheduler's durations, and a Lease of its own, apart from the scheduler's.
    assert (
        settings.leader_elect_lease_duration,
        settings.leader_elect_renew_deadline,
        settings.leader_elect_retry_period,
    ) == (15.0, 10.0, 2.0)
    election = _scheduler_config(docs)["leaderElection"]
    # Both Leases in the pod's own namespace, whatever the install's: the extender's by
    # default (POD_NAMESPACE), the scheduler's by its flag.
    assert settings.leader_elect_lease_namespace is None
    assert _extender_env(_container(docs, "extender"), docs)["POD_NAMESPACE"] == namespace
    assert _scheduler_lease_namespace(docs) == namespace
    assert settings.leader_elect_lease_name != election["resourceName"]
    # get/update on that one Lease; create cannot be limited by name in RBAC.
    (role,) = roles
    assert role["metadata"]["namespace"] == namespace
    granted = _grants(role)
    name = (settings.leader_elect_lease_name,)
    assert granted == {
        ("coordination.k8s.io", "leases", "create", ()),
        ("coordination.k8s.io", "leases", "get", name),
        ("coordination.k8s.io", "leases", "update", name),
    }
    binding = _one(docs, "RoleBinding", LEASE_ROLE)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": EXTENDER_SA, "namespace": namespace}]
    plain = _load_file(LEADER_COMPONENT / "rbac.yaml")
    assert _one(plain, "Role", LEASE_ROLE)["rules"] == role["rules"]


def test_predicate_mode_with_node_labels_labels_nodes_and_keeps_the_adaptive_sample() -> None:
    """Predicate mode with components/label-nodes (docs/large-clusters.md): the profile samples as
    kube-scheduler does by default, since pods require their class's derived label and
    the in-tree NodeAffinity filter narrows before the sample is counted; the extender
    labels nodes, routes pods and requires the label of them; its writes to nodes are
    kept to the label prefix by a ValidatingAdmissionPolicy."""
    docs = _render(PREDICATE_LABELS)
    profile = _profile(docs)
    assert "percentageOfNodesToScore" not in profile
    # The in-tree plugins untouched: pods carry their class's NoSchedule tolerations
    # here, and the TaintToleration filter's queueing hints retry a pod when a node's
    # taint goes (the startup taint of an autoscaled node).
    assert "plugins" not in profile
    extender = _container(docs, "extender")
    args = extender["args"]
    assert "--label-nodes" in args and "--leader-elect" in args
    # Pods are routed and required the label by the API server's policies, from the
    # table the extender keeps (with --label-nodes it names each class's label).
    assert "--pod-admission-table=runtimeclass-extender" in args
    assert (
        "runtimeclass-scheduler"
        in _one(docs, "MutatingAdmissionPolicy", "runtimeclass-extender-pod-admission")["spec"]["mutations"][
            0
        ]["jsonPatch"]["expression"]
    )
    assert not [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    settings = _serve_settings(extender)
    assert (
        settings.label_nodes and settings.node_label_prefix == "runtimeclass.node-restriction.kubernetes.io"
    )
    kinds = {doc["kind"] for doc in docs}
    assert {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    } <= kinds
    policy = _one(docs, "ValidatingAdmissionPolicy", "runtimeclass-extender-node-labels")
    prefix = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "prefix")
    assert prefix == f"'{settings.node_label_prefix}/'"
    (condition,) = policy["spec"]["matchConditions"]
    sa = _one(docs, "ServiceAccount", "runtimeclass-extender")
    # The policy applies to the extender's own requests, in whatever namespace it runs
    # (tests/deploy/test_admission_policies.py evaluates every policy in full).
    for namespace in (sa["metadata"]["namespace"], "other"):
        user = {"userInfo": {"username": f"system:serviceaccount:{namespace}:{sa['metadata']['name']}"}}
        assert cel.evaluate(condition["expression"], {"request": user}) is True
    binding = _one(docs, "ValidatingAdmissionPolicyBinding", "runtimeclass-extender-node-labels")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    role = next(
        doc
        for doc in docs
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "runtimeclass-extender-node-labels"
    )
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ]


# --- another install namespace --------------------------------------------------------

# Where the default install's namespace may still be named once an overlay of the
# user's own sets another: the pod webhook's exclusion of it by name (a fallback; the
# Namespace's label is what excludes the install's own namespace).
_DEFAULT_NAMESPACE = "runtimeclass-extender"


def _namespace_references(doc: Manifest) -> Iterator[str]:
    """Every namespace a manifest names: its own, its subjects', its webhooks' Service's."""
    if "namespace" in doc["metadata"]:
        yield doc["metadata"]["namespace"]
    for subject in doc.get("subjects", []):
        if "namespace" in subject:
            yield subject["namespace"]
    for hook in doc.get("webhooks", []):
        service = hook["clientConfig"].get("service")
        if service is not None:
            yield service["namespace"]


_CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "CustomResourceDefinition",
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_overlay_installs_into_another_namespace(overlay: str) -> None:
    """The most common customisation, a kustomization with ``namespace: other`` around a
    shipped overlay, moves everything that depends on the namespace: every object and
    ServiceAccount subject, the webhooks' Service, both Leases (the extender's defaults
    to POD_NAMESPACE; kube-scheduler's comes from its flag), the Namespace object with
    the label that keeps the pod webhook away from it, and the admission policies,
    whose user match is namespace-independent."""
    docs = render(overlay, namespace="other")
    for doc in docs:
        references = set(_namespace_references(doc))
        if doc["kind"] in _CLUSTER_SCOPED:
            # kustomize stamps a namespace on kinds it does not know to be cluster-scoped
            # (the policies); the API server ignores it.
            references.discard(doc["metadata"].get("namespace", ""))
        assert references <= {"other"}, (doc["kind"], doc["metadata"]["name"], references)
    (namespace,) = [d for d in docs if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "other"
    assert namespace["metadata"]["labels"][WEBHOOK_LABEL] == "ignore"
    extender = _container(docs, "extender")
    settings = _serve_settings(extender)
    assert settings.leader_elect_lease_namespace is None  # POD_NAMESPACE: the pod's
    assert _extender_env(extender, docs)["POD_NAMESPACE"] == "other"
    # kube-scheduler's, where one runs (the default-scheduler placement has none).
    if overlay != "overlays/default-scheduler":
        assert _scheduler_lease_namespace(docs) == "other"
    else:
        assert not [d for d in docs if d["kind"] == "ConfigMap" and "scheduler" in d["metadata"]["name"]]
    user = {"userInfo": {"username": "system:serviceaccount:other:runtimeclass-extender"}}
    # The policies that confine the extender's writes (the pod admission policies admit
    # everyone's pods: their namespaces are below).
    policies = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy"
        and d["spec"]["matchConditions"][0]["name"] == "only-the-extender"
    ]
    assert policies
    for policy in policies:
        for condition in policy["spec"]["matchConditions"]:
            assert cel.evaluate(condition["expression"], {"request": user}) is True, policy["metadata"][
                "name"
            ]
    # Pod admission, by policies, leaves out the opted-out namespaces, the install's own
    # among them by its label.
    confining = {policy["metadata"]["name"] for policy in policies}
    selectors = [
        d["spec"]["matchResources"]["namespaceSelector"]
        for d in docs
        if d["kind"].endswith("AdmissionPolicyBinding")
        and "matchResources" in d["spec"]
        and d["spec"]["policyName"] not in confining
    ]
    selectors += [hook["namespaceSelector"] for hook in _pod_webhooks(docs)]
    # The mutating policy and the guard (and the default-scheduler placement's own guard).
    assert len(selectors) == (3 if overlay == "overlays/default-scheduler" else 2)
    for namespace_selector in selectors:
        selector = {e["key"]: e for e in namespace_selector["matchExpressions"]}
        assert selector[WEBHOOK_LABEL] == {"key": WEBHOOK_LABEL, "operator": "NotIn", "values": ["ignore"]}
        assert _DEFAULT_NAMESPACE in selector["kubernetes.io/metadata.name"]["values"]


# --- deploy/components/monitoring (opt-in: no overlay includes it) ----------------------

MONITORING_COMPONENT = "components/monitoring"
SHIPPED_OVERLAYS = [*WEBHOOK_OVERLAYS, PREDICATE_LABELS]
DASHBOARD_CONFIGMAP = "runtimeclass-extender-dashboard"


def _monitoring_resources(docs: tuple[Manifest, ...] | list[Manifest]) -> list[Manifest]:
    return [
        d
        for d in docs
        if d["apiVersion"].startswith("monitoring.coreos.com/")
        or (d["kind"] == "ConfigMap" and d["metadata"]["name"] == DASHBOARD_CONFIGMAP)
    ]


def test_monitoring_component_renders_on_its_own() -> None:
    """The PodMonitor, the PrometheusRule as its file holds it, and the dashboard as a
    ConfigMap Grafana's sidecar loads: labelled grafana_dashboard "1", a stable name, the
    committed JSON as it is."""
    docs = _render(MONITORING_COMPONENT)
    assert sorted((d["apiVersion"], d["kind"]) for d in docs) == [
        ("monitoring.coreos.com/v1", "PodMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("v1", "ConfigMap"),
    ]
    assert all(d["metadata"]["namespace"] == "runtimeclass-extender" for d in docs)
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "runtimeclass-extender" for d in docs)
    rule = _one(docs, "PrometheusRule")
    (shipped,) = _load_file(MONITORING / "prometheusrule.yaml")
    assert rule["spec"] == shipped["spec"] and rule["metadata"]["name"] == shipped["metadata"]["name"]
    config_map = _one(docs, "ConfigMap", DASHBOARD_CONFIGMAP)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    (key,) = config_map["data"]
    assert key.endswith(".json")
    assert config_map["data"][key] == (MONITORING / "dashboard.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("overlay", SHIPPED_OVERLAYS)
def test_no_shipped_overlay_includes_the_monitoring_component(overlay: str) -> None:
    """Opt-in: the CRDs it needs are not in every cluster."""
    assert _monitoring_resources(_render(overlay)) == []


@pytest.mark.parametrize("overlay", ["overlays/predicate-mode", PREDICATE_LABELS])
def test_monitoring_component_adds_its_resources_and_changes_nothing_else(overlay: str) -> None:
    plain = _render(overlay)
    docs = _render_with(overlay, MONITORING_COMPONENT)
    added = _monitoring_resources(docs)
    assert [d for d in docs if d not in added] == list(plain)
    assert sorted(d["kind"] for d in added) == ["ConfigMap", "PodMonitor", "PrometheusRule"]


@pytest.mark.parametrize("overlay", ["overlays/predicate-mode", "overlays/tls"])
def test_pod_monitor_scrapes_the_extenders_metrics(overlay: str) -> None:
    """The PodMonitor picks the scheduler's pods in their namespace, scrapes the extender
    container's port `http`, which is the probe listener serving /metrics, and names the
    job as the alerts expect."""
    docs = _render_with(overlay, MONITORING_COMPONENT)
    monitor = _one(docs, "PodMonitor")
    deployment = _deployment(docs)
    assert monitor["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert monitor["spec"].get("namespaceSelector") is None  # its own namespace
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    extender = _container(docs, "extender")
    port = _container_port(extender, endpoint["port"])
    assert port == _serve_settings(extender).probe_port
    assert endpoint.get("scheme", "http") == "http"
    probe_routes = {
        (route.method, route.resource.canonical)
        for route in create_probe_app(create_app(state=ClusterState(), policy=load_policy())).router.routes()
        if route.resource is not None
    }
    assert ("GET", endpoint["path"]) in probe_routes and endpoint["path"] == "/metrics"
    # No other container exposes a port of that name.
    named = [
        c["name"]
        for c in deployment["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports", [])
        if p.get("name") == endpoint["port"]
    ]
    assert named == ["extender"]
    # The job is the value of the pod label jobLabel names: the job RuntimeClassExtenderDown watches.
    job = pod_labels[monitor["spec"]["jobLabel"]]
    (down,) = [
        r
        for r in _one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
        if r.get("alert") == "RuntimeClassExtenderDown"
    ]
    assert f'up{{job="{job}"}}' in down["expr"]


def test_the_documented_monitoring_overlay_labels_what_prometheus_selects() -> None:
    """docs/metrics.md's overlay (rendered by test_docs_overlay_renders_with_kubectl):
    its patch puts the release label on the PodMonitor and the PrometheusRule only."""
    (kustomization,) = [block for page, block in _docs_overlays() if page == "metrics.md"]
    with tempfile.TemporaryDirectory(dir=REPO) as directory:
        (Path(directory) / "kustomization.yaml").write_text(kustomization)
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            pytest.skip("kubectl is not installed: cannot render the kustomizations (kubectl kustomize)")
        result = subprocess.run(
            [kubectl, "kustomize", directory], capture_output=True, text=True, check=False
        )
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
    labelled = {d["kind"] for d in docs if "release" in d["metadata"].get("labels", {})}
    assert labelled == {"PodMonitor", "PrometheusRule"}
    assert len(_monitoring_resources(docs)) == 3


# --- the kubeadm configuration the docs show ----------------------------------------------

# kubeadm.k8s.io/v1beta4 (cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go): a control plane
# component's extraArgs is a list of Arg {name, value} (v1beta3's map is refused), and
# extraVolumes a list of HostPathMount.
HOST_PATH_MOUNT = {"name", "hostPath", "mountPath", "readOnly", "pathType"}
PATH_TYPES = {"", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"}


def _kubeadm_configurations() -> list[tuple[str, Manifest]]:
    return [
        (path.name, doc)
        for path in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
        for block in fenced_blocks(path.read_text(encoding="utf-8"), "yaml")
        for doc in yaml.safe_load_all(block)
        if isinstance(doc, dict) and doc.get("kind") == "ClusterConfiguration"
    ]


def test_the_docs_kubeadm_configuration_is_v1beta4() -> None:
    configurations = _kubeadm_configurations()
    assert len(configurations) >= 2, configurations
    for page, doc in configurations:
        assert doc["apiVersion"] == "kubeadm.k8s.io/v1beta4", page
        for component in ("apiServer", "controllerManager", "scheduler"):
            spec = doc.get(component) or {}
            assert set(spec) <= {"extraArgs", "extraVolumes", "extraEnvs"}, (page, component)
            for arg in spec.get("extraArgs", []):
                assert set(arg) == {"name", "value"} and all(isinstance(v, str) for v in arg.values()), (page, arg)
            for volume in spec.get("extraVolumes", []):
                assert {"name", "hostPath", "mountPath"} <= set(volume) <= HOST_PATH_MOUNT, (page, volume)
                assert volume.get("pathType", "") in PATH_TYPES, (page, volume)
        # kube-scheduler's --config names a file it mounts.
        scheduler = doc.get("scheduler") or {}
        configs = [a["value"] for a in scheduler.get("extraArgs", []) if a["name"] == "config"]
        mounted = {v["mountPath"] for v in scheduler.get("extraVolumes", [])}
        assert set(configs) <= mounted, page
