"""The chart and the overlays are one install: for every setup, ``helm template`` with
the setup's values renders the objects ``kubectl kustomize`` renders for its overlay
(plus the components an overlay of one's own adds), in the overlays' namespace and in
another, equal field for field (tests/support/helm.py says what is normalised, and
why). The payloads the chart reads from files/ are byte copies of deploy/'s.

One object differs on purpose: with monitoring, the dashboard's ConfigMap holds the
monitoring component's whole dashboard, and the chart's the dashboard of the features
the release turns on. There the chart's must be exactly the generator's dashboard of
those features (read from what the rendering installs), and with the component's in
its place the rest compares field for field (tests/support/monitoring.py,
``with_the_whole_dashboard``).

docs/development.md says how the two are kept equal.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.support.docs import fenced_blocks
from tests.support.helm import CHART, NAMESPACE, SERVER_1_36, differences, run_helm, template
from tests.support.manifests import DEPLOY, one, render, render_own, render_webhook_way
from tests.support.monitoring import (
    DASHBOARD_CONFIGMAP,
    DASHBOARD_KEY,
    generator,
    installed_dashboard,
    setup_features,
    with_the_whole_dashboard,
)
from tests.support.paths import DOCS

OTHER = "other"
SETUP_VALUES = CHART / "ci"
AUDIT = "components/audit-running-pods"
MONITORING = "components/monitoring"
CERT_MANAGER = ("components/admission-webhook/cert-manager", "components/pod-webhook/cert-manager")
LABEL_NODES = "components/label-nodes"
# Predicate mode's value; the chart's defaults are the default-scheduler mode.
PREDICATE = {"mode": "predicate"}
# What predicate mode's overlay lists besides its webhooks and pod admission.
PREDICATE_EXTRAS = ("components/autoscaler-status",)


@dataclass(frozen=True)
class Case:
    """A setup: the chart's values, and the overlay (with the components an overlay of
    one's own lists, in that order) that must render the same."""

    id: str
    overlay: str
    components: tuple[str, ...] = ()
    values: dict[str, str] = field(default_factory=dict)
    # A values file under the chart's ci/, as .ci/run lints it.
    file: str | None = None
    namespace: str | None = None
    # False where kustomize's order of the extender's flags follows the order the
    # overlay lists its components in, and the chart has one place for each flag.
    flag_order: bool = True
    # The API server the chart is rendered for (podAdmission auto): a 1.36 one, or ()
    # for one without MutatingAdmissionPolicy; and whether the overlay is its copy for
    # such a server (components/pod-webhook in place of the pod admission policies).
    api_versions: tuple[str, ...] = SERVER_1_36
    webhook_way: bool = False

    def chart(self) -> tuple[dict[str, object], ...]:
        files = [SETUP_VALUES / self.file] if self.file else []
        return template(
            self.values, files=files, namespace=self.namespace or NAMESPACE, api_versions=self.api_versions
        )

    def kustomize(self) -> tuple[dict[str, object], ...]:
        if self.webhook_way:
            return render_webhook_way(self.overlay, *self.components, namespace=self.namespace)
        return render(self.overlay, *self.components, namespace=self.namespace)


SHIPPED = [
    Case("predicate-mode", "overlays/predicate-mode", file="predicate-mode-values.yaml"),
    Case(
        "predicate-mode + node labels",
        "overlays/predicate-mode",
        (LABEL_NODES,),
        file="predicate-labels-values.yaml",
    ),
    Case("tls", "overlays/tls", file="tls-values.yaml"),
    Case("default-scheduler", "overlays/default-scheduler", file="default-scheduler-values.yaml"),
    # The chart's defaults: the default-scheduler mode, podAdmission auto on a 1.36 server.
    Case("the defaults", "overlays/default-scheduler"),
]
# The setups placed by runtimeclass-scheduler, each of which has a copy for an API server
# without MutatingAdmissionPolicy; the default-scheduler mode has none (the pod webhook
# has no such mode: the render refuses it, test_values.py).
WEBHOOK_WAY = [case for case in SHIPPED if case.overlay != "overlays/default-scheduler"]
PLACEMENT = "components/default-scheduler-placement"


def _default_scheduler_with(*opt_in: str) -> tuple[str, ...]:
    """overlays/default-scheduler's components with ``opt_in`` before the placement's, as
    an overlay of one's own on deploy/base lists them: the extender's flags then come in
    the chart's order. On top of overlays/default-scheduler (as docs/install.md's overlays
    of one's own are written) the same objects render, the flags in another order (the
    case "default-scheduler overlay + audit + cert-manager")."""
    directory = DEPLOY / "overlays" / "default-scheduler"
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    assert spec["resources"] == ["../../base"]
    *components, last = (str((directory / c).resolve().relative_to(DEPLOY)) for c in spec["components"])
    assert last == PLACEMENT
    return (*components, *opt_in, PLACEMENT)


IN_ANOTHER_NAMESPACE = [
    Case(f"{case.id} in {OTHER}", case.overlay, case.components, case.values, file=case.file, namespace=OTHER)
    for case in SHIPPED
]
WITH_COMPONENTS = [
    Case(
        "predicate-mode + audit",
        "overlays/predicate-mode",
        (AUDIT,),
        {**PREDICATE, "auditRunningPods.enabled": "true"},
    ),
    Case(
        "predicate-mode + node labels + audit in other",
        "overlays/predicate-mode",
        (LABEL_NODES, AUDIT),
        {**PREDICATE, "labelNodes.enabled": "true", "auditRunningPods.enabled": "true"},
        namespace=OTHER,
    ),
    Case(
        "predicate-mode + monitoring",
        "overlays/predicate-mode",
        (MONITORING,),
        {**PREDICATE, "monitoring.enabled": "true"},
    ),
    Case(
        "predicate-mode + node labels + monitoring in other",
        "overlays/predicate-mode",
        (LABEL_NODES, MONITORING),
        {**PREDICATE, "labelNodes.enabled": "true", "monitoring.enabled": "true"},
        namespace=OTHER,
    ),
    Case(
        "predicate-mode + cert-manager",
        "overlays/predicate-mode",
        CERT_MANAGER,
        {**PREDICATE, "certManager.enabled": "true"},
    ),
    Case(
        "predicate-mode + node labels + cert-manager",
        "overlays/predicate-mode",
        (LABEL_NODES, *CERT_MANAGER),
        {**PREDICATE, "labelNodes.enabled": "true", "certManager.enabled": "true"},
    ),
    Case(
        "tls + audit + cert-manager + monitoring",
        "overlays/tls",
        (AUDIT, *CERT_MANAGER, MONITORING),
        {
            **PREDICATE,
            "tls.enabled": "true",
            "auditRunningPods.enabled": "true",
            "certManager.enabled": "true",
            "monitoring.enabled": "true",
        },
    ),
    Case(
        "default-scheduler + monitoring in other",
        "overlays/default-scheduler",
        (MONITORING,),
        {"monitoring.enabled": "true"},
        namespace=OTHER,
    ),
    # The audit and cert-manager: overlays/default-scheduler's components on the base,
    # with them before the placement's (_default_scheduler_with says why).
    Case(
        "default-scheduler + audit in other",
        "base",
        _default_scheduler_with(AUDIT),
        {"mode": "default-scheduler", "auditRunningPods.enabled": "true"},
        namespace=OTHER,
    ),
    Case(
        "default-scheduler + cert-manager",
        "base",
        _default_scheduler_with(*CERT_MANAGER),
        {"certManager.enabled": "true"},
    ),
    Case(
        "default-scheduler overlay + audit + cert-manager",
        "overlays/default-scheduler",
        (AUDIT, *CERT_MANAGER),
        {"auditRunningPods.enabled": "true", "certManager.enabled": "true"},
        flag_order=False,
    ),
    Case(
        "default-scheduler + audit + cert-manager + monitoring",
        "base",
        (*_default_scheduler_with(AUDIT, *CERT_MANAGER), MONITORING),
        {
            "auditRunningPods.enabled": "true",
            "certManager.enabled": "true",
            "monitoring.enabled": "true",
        },
    ),
    # Parts left out: the base with only some components, as deploy/components' comments
    # describe overlays of one's own. Requeueing off: the overlay appends the requeue
    # flags after its own components' (leader election), the chart has them before: the
    # one such case compared with the flags in any order.
    Case(
        "predicate-mode without requeueing, then with it",
        "base",
        (
            "components/admission-webhook",
            "components/pod-admission-policy",
            "components/leader-election",
            *PREDICATE_EXTRAS,
            "components/requeue-pending-pods",
        ),
        {**PREDICATE, "requeuePendingPods.enabled": "true"},
        flag_order=False,
    ),
    Case(
        "predicate-mode without requeueing in other",
        "base",
        (
            "components/admission-webhook",
            "components/pod-admission-policy",
            "components/leader-election",
            *PREDICATE_EXTRAS,
        ),
        {**PREDICATE, "requeuePendingPods.enabled": "false"},
        namespace=OTHER,
    ),
    Case(
        "no pod admission",
        "base",
        ("components/admission-webhook", "components/leader-election", *PREDICATE_EXTRAS),
        {**PREDICATE, "requeuePendingPods.enabled": "false", "podAdmission.mode": "none"},
    ),
    Case(
        "no pod admission, no leader election, cert-manager",
        "base",
        ("components/admission-webhook", *PREDICATE_EXTRAS, "components/admission-webhook/cert-manager"),
        {
            **PREDICATE,
            "requeuePendingPods.enabled": "false",
            "podAdmission.mode": "none",
            "leaderElection.enabled": "false",
            "certManager.enabled": "true",
        },
    ),
]
POLICIES = ("components/pod-admission-policy",)
# Pod admission (podAdmission): auto on an API server without MutatingAdmissionPolicy is
# each overlay's copy the webhook way (docs/pod-webhook.md); webhook on a 1.36 one too;
# policy whatever the server says; both is the webhook way plus the policies (the step
# between the two, docs/upgrading.md).
POD_ADMISSION = [
    *(
        Case(
            f"{case.id} without MutatingAdmissionPolicy",
            case.overlay,
            case.components,
            case.values,
            file=case.file,
            api_versions=(),
            webhook_way=True,
        )
        for case in WEBHOOK_WAY
    ),
    Case(
        "predicate-mode + node labels without MutatingAdmissionPolicy in other",
        "overlays/predicate-mode",
        (LABEL_NODES,),
        file="predicate-labels-values.yaml",
        namespace=OTHER,
        api_versions=(),
        webhook_way=True,
    ),
    Case(
        "predicate-mode, webhook",
        "overlays/predicate-mode",
        values={**PREDICATE, "podAdmission.mode": "webhook"},
        webhook_way=True,
    ),
    Case(
        "predicate-mode, policy",
        "overlays/predicate-mode",
        values={**PREDICATE, "podAdmission.mode": "policy"},
        api_versions=(),
    ),
    # The default-scheduler mode's ci/ values name policy: the same on any server.
    Case(
        "default-scheduler without MutatingAdmissionPolicy, policy",
        "overlays/default-scheduler",
        file="default-scheduler-values.yaml",
        api_versions=(),
    ),
    Case(
        "default-scheduler, policy, in other",
        "overlays/default-scheduler",
        values={"podAdmission.mode": "policy"},
        namespace=OTHER,
        api_versions=(),
    ),
    Case(
        "predicate-mode + node labels, policy, cert-manager",
        "overlays/predicate-mode",
        (LABEL_NODES, *CERT_MANAGER),
        {
            **PREDICATE,
            "labelNodes.enabled": "true",
            "podAdmission.mode": "policy",
            "certManager.enabled": "true",
        },
        api_versions=(),
    ),
    # Both: the webhook way plus the policies' component, whose flag kustomize appends
    # after the pod webhook's (the chart has one place for each flag).
    Case(
        "predicate-mode, both",
        "overlays/predicate-mode",
        POLICIES,
        {**PREDICATE, "podAdmission.mode": "both"},
        flag_order=False,
        webhook_way=True,
    ),
    Case(
        "predicate-mode + node labels, both, in other",
        "overlays/predicate-mode",
        (LABEL_NODES, *POLICIES),
        {**PREDICATE, "labelNodes.enabled": "true", "podAdmission.mode": "both"},
        namespace=OTHER,
        flag_order=False,
        webhook_way=True,
    ),
    Case(
        "predicate-mode, both, cert-manager",
        "overlays/predicate-mode",
        (*POLICIES, *CERT_MANAGER),
        {**PREDICATE, "podAdmission.mode": "both", "certManager.enabled": "true"},
        flag_order=False,
        webhook_way=True,
    ),
]
CASES = SHIPPED + IN_ANOTHER_NAMESPACE + WITH_COMPONENTS + POD_ADMISSION


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_the_chart_renders_what_the_overlay_renders(case: Case) -> None:
    chart, overlay = case.chart(), case.kustomize()
    if MONITORING in case.components:
        chart = tuple(with_the_whole_dashboard(chart))
    assert differences(chart, overlay, flag_order=case.flag_order) == []
    # Not equal by being empty: the base alone has 15 objects, every setup more.
    assert len(chart) == len(overlay) > 20


def test_every_overlay_is_a_case_in_both_namespaces() -> None:
    overlays = {str(path.parent.relative_to(DEPLOY)) for path in DEPLOY.glob("overlays/*/kustomization.yaml")}
    assert {case.overlay for case in SHIPPED} == overlays
    assert {case.overlay for case in IN_ANOTHER_NAMESPACE} == overlays
    values_files = {path.name for path in SETUP_VALUES.glob("*-values.yaml")}
    assert {case.file for case in SHIPPED if case.file} <= values_files


def test_every_opt_in_component_is_a_case() -> None:
    """Every component no shipped overlay includes is compared with the chart's part."""
    shipped = {
        component for overlay in ("base", *(c.overlay for c in SHIPPED)) for component in _listed(overlay)
    }
    components = {
        str(path.parent.relative_to(DEPLOY)) for path in DEPLOY.glob("components/**/kustomization.yaml")
    }
    opt_in = components - shipped
    # The pod webhook replaces the pod admission policies on an API server without
    # MutatingAdmissionPolicy: the webhook-way cases compare it.
    assert opt_in == {AUDIT, MONITORING, *CERT_MANAGER, "components/pod-webhook"}
    compared = {c for case in WITH_COMPONENTS for c in case.components}
    assert compared | {"components/pod-webhook"} >= opt_in
    assert any(case.webhook_way for case in POD_ADMISSION)


def _listed(kustomization: str) -> set[str]:
    """The components a kustomization lists, itself and through its resources."""
    directory = DEPLOY / kustomization
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    found = {str((directory / c).resolve().relative_to(DEPLOY)) for c in spec.get("components", [])}
    for resource in spec.get("resources", []):
        target = (directory / resource).resolve()
        if (target / "kustomization.yaml").is_file():
            found |= _listed(str(target.relative_to(DEPLOY)))
    return found


# --- the overlays of one's own the docs show --------------------------------------------


def _documented_overlay(page: str, component: str) -> str:
    blocks = [
        block
        for block in fenced_blocks((DOCS / page).read_text(encoding="utf-8"), "yaml")
        if block.startswith("# my-overlay/kustomization.yaml\n") and component in block
    ]
    assert len(blocks) == 1, f"{page}: expected one overlay with {component}"
    return blocks[0]


def test_the_chart_renders_the_install_pages_overlay_of_ones_own() -> None:
    """docs/install.md's overlay (predicate mode, the audit, cert-manager, an image of
    one's registry) is four values."""
    overlay = render_own(_documented_overlay("install.md", "components/audit-running-pods"))
    chart = template(
        {
            **PREDICATE,
            "auditRunningPods.enabled": "true",
            "certManager.enabled": "true",
            "extender.image.repository": "REGISTRY/runtimeclass-extender",
            "extender.image.tag": "0.1.0",
        }
    )
    assert differences(chart, overlay) == []


def test_the_chart_renders_the_pod_webhook_pages_overlay_of_ones_own() -> None:
    """docs/pod-webhook.md's overlay (predicate mode the pod webhook's way, on the base,
    with cert-manager and an image of one's registry) is the chart's values for it."""
    overlay = render_own(_documented_overlay("pod-webhook.md", "- ../deploy/components/pod-webhook "))
    chart = template(
        {
            **PREDICATE,
            "podAdmission.mode": "webhook",
            "certManager.enabled": "true",
            "extender.image.repository": "REGISTRY/runtimeclass-extender",
            "extender.image.tag": "0.1.0",
        }
    )
    assert differences(chart, overlay, flag_order=False) == []


def test_the_chart_renders_the_metrics_pages_overlay_of_ones_own() -> None:
    """docs/metrics.md's overlay (monitoring, its objects labelled for a
    kube-prometheus-stack release) is monitoring.labels."""
    overlay = render_own(_documented_overlay("metrics.md", "components/monitoring"))
    chart = template(
        {**PREDICATE, "monitoring.enabled": "true", "monitoring.labels.release": "kube-prometheus-stack"}
    )
    assert differences(with_the_whole_dashboard(chart), overlay) == []


# --- the dashboard: the panels of what the release turns on -----------------------------


def test_the_dashboard_is_the_one_object_monitoring_renders_otherwise() -> None:
    """Compared as they are, the chart and the component differ in the dashboard's JSON
    and nowhere else; with the whole dashboard in the chart's place, not at all."""
    chart = template({**PREDICATE, "monitoring.enabled": "true"})
    overlay = render("overlays/predicate-mode", MONITORING)
    found = differences(chart, overlay)
    where = f"('ConfigMap', '{NAMESPACE}', '{DASHBOARD_CONFIGMAP}').data.{DASHBOARD_KEY}"
    assert [line.split(": chart ")[0] for line in found] == [where]
    assert differences(with_the_whole_dashboard(chart), overlay) == []


SETUP_FILES = sorted(SETUP_VALUES.glob("*-values.yaml"))


@pytest.mark.parametrize("values", SETUP_FILES, ids=lambda path: path.name)
def test_each_setups_dashboard_shows_the_panels_of_what_it_turns_on(values: Path) -> None:
    """Each ci setup with monitoring, rendered for a 1.36 API server: the generator's
    dashboard of the features the rendering turns on, never the capture panels (the chart
    has no capture setting), and every row it shows has a panel."""
    docs = template({"monitoring.enabled": "true"}, files=[values])
    features = setup_features(docs)
    assert "capture" not in features
    board = installed_dashboard(docs)
    assert board == json.loads(generator().render(features))
    titles = [panel["title"] for panel in board["panels"]]
    assert "Captures" not in titles
    rows = [index for index, panel in enumerate(board["panels"]) if panel["type"] == "row"]
    assert all(later - row > 1 for row, later in zip(rows, [*rows[1:], len(titles)], strict=True))


def test_the_setups_dashboards_differ_by_their_features() -> None:
    """What each turns on, as docs/metrics.md's table of features says: the rows of the
    leader's work only where it acts, the pod webhook's panel (and its latency line) only
    with the pod webhook, the certificates only when self-managed."""

    def shown(values: dict[str, str], *files: str) -> set[str]:
        """The rows and panels, and the lines of the review latency panel."""
        board = installed_dashboard(
            template({"monitoring.enabled": "true", **values}, files=[SETUP_VALUES / f for f in files])
        )
        titles = {panel["title"] for panel in board["panels"]}
        (latency,) = [panel for panel in board["panels"] if panel["title"] == "Review latency p99"]
        return titles | {f"latency: {target['legendFormat']}" for target in latency["targets"]}

    predicate = shown({}, "predicate-mode-values.yaml")
    large = shown({}, "predicate-labels-values.yaml")
    minimal = shown({}, "minimal-values.yaml")
    opt_in = shown({}, "opt-in-values.yaml")
    assert large - predicate == {
        "Node labels (label-nodes)",
        "Node labels added and removed",
        "Node label writes pending and failing",
        "RuntimeClass events on pending pods",
    }
    assert predicate - large == set()
    assert "latency: RuntimeClass {{pod}}" in minimal
    assert "Running pods (audit)" in opt_in and "Running pods (audit)" not in predicate
    # cert-manager's certificates: no self-managed certificate panels.
    assert "Webhook certificates" in predicate and "Webhook certificates" not in opt_in
    assert not {"Leader election", "Pending pods and requeue", "Webhook certificates"} & minimal
    assert {"Filter calls", "Rejections", "Cluster watch", "Admission webhooks", "Replay"} <= minimal
    # Requeueing turned off in predicate mode: its panels go.
    assert "Pending pods and requeue" not in shown(
        {"requeuePendingPods.enabled": "false"}, "predicate-mode-values.yaml"
    )
    # The default-scheduler mode: predicate mode with node labels' panels but requeueing's.
    assert large - shown({}, "default-scheduler-values.yaml") == {
        "Pending pods and requeue",
        "Pending pods and queued nudges",
        "Nudges sent, skipped and failed",
    }
    assert shown({}, "default-scheduler-values.yaml") <= large
    # podAdmission decides the pod webhook: policy alone has none, webhook and both have it.
    assert "Pod reviews" not in predicate
    assert "Pod reviews" in shown({**PREDICATE, "podAdmission.mode": "webhook"})
    assert "Pod reviews" in shown({**PREDICATE, "podAdmission.mode": "both"})


def test_a_feature_the_chart_does_not_know_fails_the_render(tmp_path: Path) -> None:
    """A feature the generator gains must be given its value in the chart
    (_helpers.tpl, "runtimeclass-extender.dashboardFeatures") before a release renders."""
    chart = _chart_copy(tmp_path)
    features_file = chart / "files" / "components" / "monitoring" / "dashboard-features.json"
    features = json.loads(features_file.read_text(encoding="utf-8"))
    features["features"] = sorted([*features["features"], "sharding"])
    features_file.write_text(json.dumps(features), encoding="utf-8")
    result = run_helm(
        "template",
        "r",
        str(chart),
        "--namespace",
        NAMESPACE,
        "--set",
        "mode=predicate",
        "--set",
        "monitoring.enabled=true",
    )
    assert result.returncode != 0
    assert (
        "the dashboard's features are always,audit,capture,labelNodes,leaderElection,podWebhook,requeue,"
        in result.stderr
    )


# --- where the chart differs on purpose ---------------------------------------------------


def test_cert_manager_in_another_namespace_as_the_permissions_page_shows_it() -> None:
    """The cert-manager sub-components name the namespace inside two strings (the
    Certificate's DNS names, the CA injector's annotations), which ``namespace: other``
    does not reach; docs/permissions.md's overlay rewrites them with replacements from
    the Namespace object, and then the chart, which names the release namespace there,
    renders the same objects."""
    documented = _documented_overlay("permissions.md", "components/admission-webhook/cert-manager")
    overlay = render_own(documented.replace("namespace: scheduling", f"namespace: {OTHER}"))
    chart = template({**PREDICATE, "certManager.enabled": "true"}, namespace=OTHER)
    assert differences(chart, overlay) == []
    service = one(chart, "Service")
    assert one(chart, "Certificate")["spec"]["dnsNames"][0] == f"{service['metadata']['name']}.{OTHER}.svc"
    without = render("overlays/predicate-mode", *CERT_MANAGER, namespace=OTHER)
    assert one(without, "Certificate")["spec"]["dnsNames"][0].endswith(".runtimeclass-extender.svc")


def test_sizes_and_images_are_values_and_change_nothing_else() -> None:
    plain = template(PREDICATE)
    changed = template(
        {
            **PREDICATE,
            "replicas": "3",
            "extender.image.repository": "registry.example/runtimeclass-extender",
            "extender.image.tag": "9.9.9",
            "scheduler.image.tag": "v1.36.3",
            "extender.resources.limits.memory": "1Gi",
        }
    )
    prefix = "('Deployment', 'runtimeclass-extender', 'runtimeclass-scheduler').spec"
    containers = f"{prefix}.template.spec.containers"
    assert differences(changed, plain) == [
        f"{prefix}.replicas: chart 3 != overlay 2",
        f"{containers}[0].image: chart 'registry.example/runtimeclass-extender:9.9.9' != "
        "overlay 'runtimeclass-extender:0.1.0'",
        f"{containers}[0].resources.limits.memory: chart '1Gi' != overlay '512Mi'",
        f"{containers}[1].image: chart 'registry.k8s.io/kube-scheduler:v1.36.3' != "
        "overlay 'registry.k8s.io/kube-scheduler:v1.36.2'",
    ]


def test_the_namespace_object_is_left_to_whoever_makes_the_namespace() -> None:
    """namespace.create=false: the same objects without the Namespace."""
    docs = template({**PREDICATE, "namespace.create": "false"}, namespace=OTHER)
    assert differences(docs, render("overlays/predicate-mode", namespace=OTHER)) == [
        "('Namespace', None, 'other'): only in the overlay"
    ]


# --- the copies under files/ -------------------------------------------------------------

COPIES = sorted(path.relative_to(CHART / "files") for path in (CHART / "files").rglob("*") if path.is_file())


def test_files_holds_the_payloads_the_templates_read() -> None:
    read = {
        f"files/{name}"
        for template_file in (CHART / "templates").iterdir()
        for name in _files_read(template_file.read_text(encoding="utf-8"))
    }
    assert read == {f"files/{path}" for path in COPIES}
    assert {str(path) for path in COPIES} == {
        "base/scheduler-config.yaml",
        "components/label-nodes/scheduler-config.yaml",
        "overlays/tls/scheduler-config.yaml",
        "components/monitoring/dashboard.json",
        "components/monitoring/dashboard-features.json",
        "components/monitoring/prometheusrule.yaml",
        "components/pod-admission-policy/crd.yaml",
        "components/pod-admission-policy/policies.yaml",
        "components/pod-admission-policy/admission-policy.yaml",
        "components/default-scheduler-placement/guard.yaml",
        "components/default-scheduler-placement/pod-admission-patch.yaml",
    }


def _files_read(text: str) -> set[str]:
    """The paths under files/ a template reads: literal .Files.Get paths, and the
    scheduler configurations, which _helpers.tpl names one by one."""
    return (
        set(re.findall(r'\.Files\.Get "files/([^"]+)"', text))
        | set(re.findall(r'\(list \. "files/([^"]+)"\)', text))
        | set(re.findall(r'"((?:base|(?:overlays|components)/[a-z-]+)/scheduler-config\.yaml)"', text))
    )


@pytest.mark.parametrize("path", COPIES, ids=str)
def test_each_file_is_a_byte_copy_of_deploys(path: Path) -> None:
    source = DEPLOY / path
    assert (CHART / "files" / path).read_bytes() == source.read_bytes(), (
        f"deploy/helm/runtimeclass-extender/files/{path} is not deploy/{path}: copy it "
        f"(cp deploy/{path} deploy/helm/runtimeclass-extender/files/{path})"
    )


# --- the comparison fails when it should ------------------------------------------------


def _chart_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "runtimeclass-extender"
    shutil.copytree(CHART, copy)
    return copy


def test_a_changed_template_is_caught(tmp_path: Path) -> None:
    chart = _chart_copy(tmp_path)
    deployment = chart / "templates" / "deployment.yaml"
    deployment.write_text(deployment.read_text(encoding="utf-8").replace("--port=8888", "--port=8889"))
    (chart / "templates" / "pdb.yaml").unlink()
    found = differences(template(PREDICATE, chart=chart), render("overlays/predicate-mode"))
    assert found == [
        "('PodDisruptionBudget', 'runtimeclass-extender', 'runtimeclass-scheduler'): only in the overlay",
        "('Deployment', 'runtimeclass-extender', 'runtimeclass-scheduler').spec.template.spec"
        ".containers[0].args[2]: chart '--port=8889' != overlay '--port=8888'",
    ]


def test_flags_in_another_order_are_caught_unless_asked_otherwise() -> None:
    chart = template({**PREDICATE, "requeuePendingPods.enabled": "true"})
    overlay = render(
        "base",
        "components/admission-webhook",
        "components/pod-admission-policy",
        "components/leader-election",
        *PREDICATE_EXTRAS,
        "components/requeue-pending-pods",
    )
    assert differences(chart, overlay) != []
    assert differences(chart, overlay, flag_order=False) == []


def _scheduler_config_name(docs: tuple[dict[str, object], ...]) -> str:
    (name,) = [
        d["metadata"]["name"]  # type: ignore[index]
        for d in docs
        if d["kind"] == "ConfigMap" and str(d["metadata"]["name"]).startswith("runtimeclass-scheduler-config")  # type: ignore[index]
    ]
    return str(name)


def test_a_changed_scheduler_configuration_changes_the_name_as_kustomize_does(tmp_path: Path) -> None:
    """The chart's ConfigMap name is kustomize's hash of the content, not a copy of the
    overlays' names: a configuration of other bytes (characters Go's JSON encoder escapes,
    non-ASCII) gets a new name, the one kustomize gives it."""
    chart = _chart_copy(tmp_path)
    path = "base/scheduler-config.yaml"
    edited = (DEPLOY / path).read_text(encoding="utf-8") + '# <&> \u00e9 "quoted"\n'
    (chart / "files" / path).write_text(edited, encoding="utf-8")
    docs = template(PREDICATE, chart=chart)
    found = differences(docs, render("overlays/predicate-mode"))
    assert [line for line in found if "only in" in line] == [
        f"('ConfigMap', 'runtimeclass-extender', '{_scheduler_config_name(render('overlays/predicate-mode'))}')"
        ": only in the overlay",
        f"('ConfigMap', 'runtimeclass-extender', '{_scheduler_config_name(docs)}'): only in the chart",
    ]
    # kustomize, given the same file, names it as the chart does.
    overlay = render_own(
        textwrap.dedent(
            """\
            resources:
            - ../deploy/overlays/predicate-mode
            configMapGenerator:
            - name: runtimeclass-scheduler-config
              namespace: runtimeclass-extender
              behavior: replace
              files:
              - config.yaml=edited.yaml
            """
        ),
        {"edited.yaml": edited},
    )
    assert one(overlay, "ConfigMap", _scheduler_config_name(overlay))["data"]["config.yaml"] == edited
    assert differences(docs, overlay) == []
