"""The Grafana dashboard of the monitoring component, built with grafana-foundation-sdk.

    .venv/bin/python deploy/components/monitoring/generate_dashboard.py           # rewrites both files
    .venv/bin/python deploy/components/monitoring/generate_dashboard.py --check   # exit 1 if one is stale

It writes two files, both committed, so installing needs no build step:

- dashboard.json, the whole dashboard: kustomize's configMapGenerator reads it as it is
  (the component cannot know which other components an overlay lists, so it keeps every
  row; its kustomization.yaml says which rows need which component);
- dashboard-features.json, the feature each panel and each query needs (FEATURES): the
  Helm chart, which knows what it installs, reads both and leaves out every panel and
  query of a feature the release does not turn on, laying the rest out as ``build``
  does for those features (templates/_helpers.tpl, "runtimeclass-extender.dashboard").

tests/monitoring/test_dashboard.py checks that both are what this script writes, that
every metric a query names is in docs/metrics.md's table, and that docs/metrics.md
describes every panel and its feature; tests/helm/ that the chart renders ``build`` of
each setup's features; tests/monitoring/test_prometheus.py evaluates every query on a
real Prometheus scraping a real extender, and test_chart_setups.py each chart setup's
dashboard on the extender that setup runs.

The layout is data (ROWS); the SDK turns it into the dashboard model, placing the
panels on Grafana's grid row by row.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableModel,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

DIRECTORY = Path(__file__).resolve().parent
DASHBOARD = "dashboard.json"
PANEL_FEATURES = "dashboard-features.json"
UID = "runtimeclass-extender"
TITLE = "RuntimeClass extender"
RATE = "[$__rate_interval]"
# The labels the PodMonitor adds, narrowed by the dashboard's variables.
SCOPE = 'namespace="$namespace", pod=~"$pod"'
CLASS = 'runtime_class=~"$runtime_class"'
# Grid: 24 columns; three panels to a row unless a panel says otherwise.
THIRD = 8
HALF = 12
FULL = 24
HEIGHT = 8


def m(metric: str, *, by_class: bool = False) -> str:
    """``metric`` with the dashboard's scope (and its RuntimeClass filter) as matchers."""
    matchers = f"{SCOPE}, {CLASS}" if by_class else SCOPE
    return f"runtimeclass_extender_{metric}{{{matchers}}}"


@dataclass(frozen=True)
class Feature:
    """A part of the extender whose metrics some panels read: what turns it on in
    ``serve``, in a kustomize overlay, and in the Helm chart."""

    serve: str
    component: str
    chart: str


ALWAYS = "always"
# A panel or query shows what its feature's metrics say; without the feature they have
# no series (or sit at 0 for good), so the chart leaves it out.
FEATURES: dict[str, Feature] = {
    ALWAYS: Feature(
        "live cluster mode with the admission listener (--admission-port)",
        "every overlay (base, components/admission-webhook)",
        "every release",
    ),
    "requeue": Feature(
        "--requeue-pending-pods",
        "components/requeue-pending-pods",
        "requeuePendingPods.enabled (null: on in predicate mode)",
    ),
    "labelNodes": Feature("--label-nodes", "components/label-nodes", "labelNodes.enabled"),
    "audit": Feature("--audit-running-pods", "components/audit-running-pods", "auditRunningPods.enabled"),
    "podWebhook": Feature(
        "a MutatingWebhookConfiguration calling /admission/pods (--webhook-mutating-configuration)",
        "components/pod-webhook",
        "podAdmission.mode webhook or both, or policy with labelNodes",
    ),
    "leaderElection": Feature("--leader-elect", "components/leader-election", "leaderElection.enabled"),
    "selfManagedCertificates": Feature(
        "--webhook-certificate-secret without --admission-tls-cert-file",
        "components/admission-webhook without its cert-manager sub-component",
        "certManager.enabled false",
    ),
    "capture": Feature(
        "--capture-dir", "none: a serve option only", "never: the chart has no capture setting"
    ),
}


def datasource() -> DataSourceRef:
    """The data source the viewer picks: every panel, query and variable reads it."""
    return DataSourceRef(type_val="prometheus", uid="${datasource}")


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    # The feature it needs, where it is not its panel's (then its panel's is ALWAYS).
    feature: str | None = None


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    # The feature it needs, where it is not its row's (then its row's is ALWAYS).
    feature: str | None = None
    unit: str = "short"
    kind: Literal["timeseries", "stat"] = "timeseries"
    width: int = THIRD
    height: int = HEIGHT
    # Stat panels only: (value, text, color), e.g. ("1", "trusted", "green").
    mappings: tuple[tuple[str, str, str], ...] = ()
    # Stat panels only: (from value, color) steps, the first from minus infinity.
    thresholds: tuple[tuple[float | None, str], ...] = ()
    stepped: bool = False


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]
    # The feature its panels need, unless a panel names its own.
    feature: str = ALWAYS


def _summed(function: str, metric: str, by: str, by_class: bool) -> str:
    grouping = f"sum by ({by}) " if by else "sum "
    return f"{grouping}({function}({m(metric, by_class=by_class)}{RATE}))"


def rate(metric: str, by: str, *, by_class: bool = False) -> str:
    return _summed("rate", metric, by, by_class)


def increase(metric: str, by: str, *, by_class: bool = False) -> str:
    return _summed("increase", metric, by, by_class)


def quantile(q: float, metric: str) -> str:
    return f"histogram_quantile({q}, sum by (pod, le) (rate({m(metric + '_bucket')}{RATE})))"


ROWS: tuple[Row, ...] = (
    Row(
        "Filter calls",
        (
            Panel(
                "Filter calls by RuntimeClass",
                "POST /filter calls answered with a decision, per second, by the pod's RuntimeClass "
                "(none: the pod names no class; unknown: it names one that does not exist).",
                (
                    Query(
                        rate("filter_requests_by_runtimeclass_total", "runtime_class", by_class=True),
                        "{{runtime_class}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Filter calls by outcome",
                "Every POST /filter call by outcome. Anything but ok and not_synced is a fault of the "
                "extender or a refused request (RuntimeClassExtenderFilterErrors).",
                (Query(rate("filter_requests_total", "outcome"), "{{outcome}}"),),
                unit="reqps",
            ),
            Panel(
                "Filter latency",
                "Median and 99th percentile time to answer POST /filter, per pod; kube-scheduler "
                "gives up after its httpTimeout (RuntimeClassExtenderSlowFilter at 0.5 s).",
                (
                    Query(quantile(0.5, "filter_duration_seconds"), "p50 {{pod}}"),
                    Query(quantile(0.99, "filter_duration_seconds"), "p99 {{pod}}"),
                ),
                unit="s",
            ),
        ),
    ),
    Row(
        "Rejections",
        (
            Panel(
                "Nodes rejected by reason",
                "Nodes the extender removed from filter calls, per second, by RuntimeClass and reason "
                "(runtimeclass_mismatch, untolerated_taint, handler_unsupported, ...).",
                (
                    Query(
                        rate("nodes_rejected_total", "runtime_class, reason", by_class=True),
                        "{{runtime_class}}: {{reason}}",
                    ),
                ),
                unit="ops",
            ),
            Panel(
                "Pods left no node by their RuntimeClass",
                "Filter answers that left the pod no node, at least one rejected for its RuntimeClass: "
                "the scheduling failures caused by unsupported runtimes (RuntimeClassSchedulingFailures).",
                (
                    Query(
                        increase("runtime_rejections_total", "runtime_class", by_class=True),
                        "{{runtime_class}}",
                    ),
                ),
            ),
            Panel(
                "Fitting nodes hidden by node sampling",
                "Filter calls where kube-scheduler's node sampling offered none of the nodes that fit the "
                "class (RuntimeClassNodesHiddenBySampling: set percentageOfNodesToScore: 100).",
                (
                    Query(
                        increase("filter_fitting_nodes_not_offered_total", "runtime_class", by_class=True),
                        "{{runtime_class}}",
                    ),
                ),
            ),
        ),
    ),
    Row(
        "RuntimeClasses and nodes",
        (
            Panel(
                "Nodes fitting each RuntimeClass",
                "Nodes where a pod of the class, with no tolerations of its own, passes the whole policy "
                "(selector, taints, handler): the FITTING column of classes. 0 means its pods will pend "
                "(RuntimeClassFitsNoNode).",
                (
                    Query(
                        f"max by (runtime_class) ({m('runtimeclass_nodes_fitting', by_class=True)})",
                        "{{runtime_class}}",
                    ),
                ),
            ),
            Panel(
                "Nodes selected by each RuntimeClass",
                "Nodes that satisfy the class's node selector, taints aside: the SELECTED column of "
                "classes. Selected but not fitting means taints or handlers keep its pods off.",
                (
                    Query(
                        f"max by (runtime_class) ({m('runtimeclass_nodes_selected', by_class=True)})",
                        "{{runtime_class}}",
                    ),
                ),
            ),
            Panel(
                "RuntimeClasses",
                "RuntimeClasses the cluster defines, as the extender's cache holds them.",
                (Query(f"max({m('runtimeclasses')})", "RuntimeClasses"),),
                kind="stat",
                width=4,
            ),
            Panel(
                "Nodes",
                "Nodes in the extender's cache.",
                (Query(f"max({m('nodes')})", "nodes"),),
                kind="stat",
                width=4,
            ),
        ),
    ),
    Row(
        "Pending pods and requeue",
        feature="requeue",
        panels=(
            Panel(
                "Pending pods and queued nudges",
                "Unscheduled pods of the configured schedulers that name a RuntimeClass, and nudges "
                "waiting under the rate limit or for a retry (requeue-pending-pods).",
                (
                    Query(f"max({m('requeue_pending_pods')})", "pending pods"),
                    Query(f"max({m('requeue_queued_nudges')})", "queued nudges"),
                ),
                width=HALF,
            ),
            Panel(
                "Nudges sent, skipped and failed",
                "Pending pods patched after a change of their RuntimeClass, nudges skipped and failing "
                "by reason, and retried patches. failed: forbidden means missing RBAC "
                "(RuntimeClassExtenderRequeueFailures).",
                (
                    Query(rate("requeue_nudges_sent_total", ""), "sent"),
                    Query(rate("requeue_nudges_skipped_total", "reason"), "skipped: {{reason}}"),
                    Query(rate("requeue_nudges_failed_total", "reason"), "failed: {{reason}}"),
                    Query(rate("requeue_patch_retries_total", ""), "retried"),
                ),
                unit="ops",
                width=HALF,
            ),
        ),
    ),
    Row(
        "Node labels (label-nodes)",
        feature="labelNodes",
        panels=(
            Panel(
                "Node labels added and removed",
                "RuntimeClass labels the leader set on and removed from nodes: a burst follows a class "
                "edit or new nodes.",
                (
                    Query(increase("node_labels_added_total", ""), "added"),
                    Query(increase("node_labels_removed_total", ""), "removed"),
                ),
            ),
            Panel(
                "Node label writes pending and failing",
                "Label writes waiting for their turn, a retry or in flight, and failing writes by reason "
                "(RuntimeClassExtenderNodeLabelWritesFailing).",
                (
                    Query(f"max({m('node_label_writes_pending')})", "pending"),
                    Query(increase("node_label_write_errors_total", "reason"), "failing: {{reason}}"),
                ),
            ),
            Panel(
                "RuntimeClass events on pending pods",
                "Warning events on pending pods whose RuntimeClass fits no node: written, existing "
                "(written before), failed (RuntimeClassExtenderEventsFailing).",
                (Query(increase("runtimeclass_events_total", "result"), "{{result}}"),),
            ),
        ),
    ),
    Row(
        "Running pods (audit)",
        feature="audit",
        panels=(
            Panel(
                "Misplaced running pods",
                "Running pods on nodes that no longer fit their RuntimeClass, by class and problem "
                "(audit-running-pods; RuntimeClassMisplacedPods). audit -o wide lists them.",
                (
                    Query(
                        f"sum by (runtime_class, problem) ({m('misplaced_pods', by_class=True)})",
                        "{{runtime_class}}: {{problem}}",
                    ),
                ),
                width=HALF + 4,
            ),
            Panel(
                "Audited running pods",
                "Running pods with a RuntimeClass that the audit checks.",
                (Query(f"sum({m('audited_pods')})", "audited"),),
                kind="stat",
            ),
        ),
    ),
    Row(
        "Cluster watch",
        (
            Panel(
                "Watch failing for",
                "How long each informer's watch has been failing, per pod and kind; 0 while healthy. "
                "/healthz fails after unhealthy-after (RuntimeClassExtenderWatchFailing).",
                (Query(f"max by (pod, kind) ({m('watch_failing_seconds')})", "{{pod}}: {{kind}}"),),
                unit="s",
            ),
            Panel(
                "Last contact with the API server",
                "Seconds since each informer last heard from the API server; it grows when the API "
                "server is unreachable even before the watch counts as failing.",
                (Query(f"max by (pod, kind) ({m('watch_last_contact_age_seconds')})", "{{pod}}: {{kind}}"),),
                unit="s",
            ),
            Panel(
                "Watch events, relists and reconnects",
                "Watch events applied, LISTs forced by 410 Gone, and watch restarts, per second by kind.",
                (
                    Query(rate("watch_events_total", "kind"), "events: {{kind}}"),
                    Query(rate("watch_relists_total", "kind"), "relists: {{kind}}"),
                    Query(rate("watch_reconnects_total", "kind"), "reconnects: {{kind}}"),
                ),
                unit="ops",
            ),
            Panel(
                "Caches listed",
                "Whether Nodes and RuntimeClasses (and the leader actors' kinds) have been listed on "
                "every pod selected; until then /filter answers not synced (RuntimeClassExtenderNotSynced).",
                (Query(f"min by (kind) ({m('watch_synced')})", "{{kind}}"),),
                kind="stat",
                width=HALF,
                height=4,
                mappings=(("0", "not listed", "red"), ("1", "listed", "green")),
            ),
            Panel(
                "Node lookups",
                "Direct GETs of node names the watch had not delivered yet, by result, and those answered "
                "from the lookup's cache. failed ones mean the API server cannot be reached.",
                (
                    Query(rate("node_lookups_total", "result"), "{{result}}"),
                    Query(rate("node_lookup_cache_hits_total", ""), "cache hits"),
                ),
                unit="ops",
                width=HALF,
                height=4,
            ),
        ),
    ),
    Row(
        "Leader election",
        feature="leaderElection",
        panels=(
            Panel(
                "Leader and campaigning",
                "Per pod: 1 while it holds the Lease (it requeues, labels nodes, writes events, keeps the "
                "webhook certificates), and 1 once it campaigns. No leader while some campaign is "
                "RuntimeClassExtenderNoLeader; none campaigning is RuntimeClassExtenderNotCampaigning.",
                (
                    Query(f"max by (pod) ({m('leader')})", "leader {{pod}}"),
                    Query(f"max by (pod) ({m('leader_campaigning')})", "campaigning {{pod}}"),
                ),
                width=HALF,
                stepped=True,
            ),
            Panel(
                "Leader actors restarted",
                "Restarts of a leader actor's loop after it raised (requeuer, node-labeller, "
                "runtimeclass-events, audit, webhook-certificates), per pod: a bug, logged with its "
                "traceback; the pod keeps serving /filter (RuntimeClassExtenderActorFailing).",
                (Query(increase("actor_failures_total", "pod, actor"), "{{pod}}: {{actor}}"),),
                width=HALF,
            ),
        ),
    ),
    Row(
        "Admission webhooks",
        (
            Panel(
                "RuntimeClass reviews",
                "Reviews of RuntimeClass writes by operation and result (denied: an invalid node-selector-"
                "term annotation refused at kubectl apply), and malformed requests.",
                (
                    Query(rate("admission_reviews_total", "operation, result"), "{{operation}}: {{result}}"),
                    Query(rate("admission_reviews_malformed_total", ""), "malformed"),
                ),
                unit="ops",
            ),
            Panel(
                "Pod reviews",
                "Pod reviews by result (patched, unchanged, denied), the fields the pod webhook set, and "
                "malformed requests. The pod webhook fails closed: denied pods are not created.",
                (
                    Query(rate("pod_admission_reviews_total", "result"), "{{result}}"),
                    Query(rate("pod_admission_patches_total", "field"), "set {{field}}"),
                    Query(rate("pod_admission_reviews_malformed_total", ""), "malformed"),
                ),
                unit="ops",
                feature="podWebhook",
            ),
            Panel(
                "Review latency p99",
                "99th percentile time to answer one review, per pod and webhook; the API server waits at "
                "most the webhook's timeoutSeconds.",
                (
                    Query(quantile(0.99, "admission_review_duration_seconds"), "RuntimeClass {{pod}}"),
                    Query(
                        quantile(0.99, "pod_admission_review_duration_seconds"),
                        "pod {{pod}}",
                        feature="podWebhook",
                    ),
                ),
                unit="s",
            ),
        ),
    ),
    Row(
        "Webhook certificates",
        feature="selfManagedCertificates",
        panels=(
            Panel(
                "Webhook certificate expires in",
                "Days until the certificate each pod's admission listener serves expires; the leader "
                "renews 90 days ahead (RuntimeClassExtenderWebhookCertificateExpiring under 30).",
                (
                    Query(
                        f"min by (pod) ({m('webhook_certificate_expiry_timestamp_seconds')} - time()) / 86400",
                        "{{pod}}",
                    ),
                ),
                unit="d",
                kind="stat",
                thresholds=((None, "red"), (30, "orange"), (60, "green")),
            ),
            Panel(
                "Webhook caBundles trust the served certificate",
                "1 while the caBundle of every webhook trusts the certificate the pod serves; 0 means the "
                "API server's calls fail with x509 errors (RuntimeClassExtenderWebhookCertificateUntrusted).",
                (Query(f"min by (pod) ({m('webhook_certificate_trusted')})", "{{pod}}"),),
                kind="stat",
                mappings=(("0", "not trusted", "red"), ("1", "trusted", "green")),
            ),
            Panel(
                "Old CAs kept in the caBundles",
                "On the leader: CAs the caBundles keep although the Secret no longer names them, because "
                "a replica still serves a certificate they signed or cannot be asked "
                "(RuntimeClassExtenderWebhookCAsRetained).",
                (Query(f"max({m('webhook_certificate_retained_cas')})", "retained"),),
                kind="stat",
                thresholds=((None, "green"), (1, "orange")),
            ),
        ),
    ),
    Row(
        "Replay",
        (
            Panel(
                "Replayed filter calls",
                "Filter calls sent by replay --url (captures decided again by this extender), by "
                "outcome; they count in no other filter panel.",
                (Query(rate("replayed_filter_requests_total", "outcome"), "{{outcome}}"),),
                unit="reqps",
                width=FULL,
            ),
        ),
    ),
    Row(
        "Capture (capture-dir)",
        feature="capture",
        panels=(
            Panel(
                "Captures",
                "Filter calls offered to the capture writer by result (dropped and failed ones are lost "
                "to replay: RuntimeClassExtenderCapturesLost), and old files removed (capture-dir).",
                (
                    Query(rate("captures_total", "result"), "{{result}}"),
                    Query(rate("capture_files_removed_total", ""), "files removed"),
                ),
                unit="ops",
                width=FULL,
            ),
        ),
    ),
)


def _target(query: Query, ref_id: str) -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .datasource(datasource())
        .expr(query.expr)
        .legend_format(query.legend)
        .range()
        .ref_id(ref_id)
    )


def _panel(spec: Panel, panel_id: int, queries: list[tuple[str, Query]]) -> timeseries.Panel | stat.Panel:
    built: timeseries.Panel | stat.Panel
    if spec.kind == "stat":
        built = (
            stat.Panel()
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
            .color_mode(
                common.BigValueColorMode.BACKGROUND
                if spec.mappings or spec.thresholds
                else common.BigValueColorMode.VALUE
            )
            .graph_mode(common.BigValueGraphMode.NONE)
        )
        if spec.mappings:
            built.mappings(
                [
                    ValueMap(
                        {
                            value: ValueMappingResult(text=text, color=color)
                            for value, text, color in spec.mappings
                        }
                    )
                ]
            )
        if spec.thresholds:
            built.thresholds(
                dashboard.ThresholdsConfig()
                .mode(ThresholdsMode.ABSOLUTE)
                .steps([Threshold(value=value, color=color) for value, color in spec.thresholds])
            )
    else:
        built = timeseries.Panel().legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        if spec.stepped:
            built.line_interpolation(common.LineInterpolation.STEP_AFTER)
    built.id(panel_id).title(spec.title).description(spec.description).datasource(datasource())
    built.unit(spec.unit).span(spec.width).height(spec.height)
    for ref_id, query in queries:
        built.with_target(_target(query, ref_id))
    return built


def _variables() -> list[Builder[VariableModel]]:
    def query_variable(name: str, label: str, query: str, *, multi: bool) -> dashboard.QueryVariable:
        variable = (
            dashboard.QueryVariable(name)
            .label(label)
            .datasource(datasource())
            .query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
        )
        if multi:
            # All as a regex, not a list of every value: short queries on large clusters.
            variable.multi(True).include_all(True).all_value(".*")
            variable.current(VariableOption(selected=True, text=["All"], value=["$__all"]))
        return variable

    return [
        dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        query_variable(
            "namespace",
            "Namespace",
            "label_values(runtimeclass_extender_filter_requests_total, namespace)",
            multi=False,
        ),
        query_variable(
            "pod",
            "Pod",
            'label_values(runtimeclass_extender_filter_requests_total{namespace="$namespace"}, pod)',
            multi=True,
        ),
        query_variable(
            "runtime_class",
            "RuntimeClass",
            'label_values({__name__=~"runtimeclass_extender_(runtimeclass_nodes_selected|'
            'filter_requests_by_runtimeclass_total)", namespace="$namespace"}, runtime_class)',
            multi=True,
        ),
    ]


@dataclass(frozen=True)
class Placed:
    """A panel of ROWS with its id in the whole dashboard (rows count: each is a panel of
    its own, with the id before its panels'), its feature, and each query's refId (A, B,
    ... in the whole panel, so a query keeps its refId when one before it is left out)
    and feature."""

    row: Row
    row_id: int
    panel: Panel
    panel_id: int
    feature: str
    queries: tuple[tuple[str, str, Query], ...]


def placed() -> list[Placed]:
    """Every panel of ROWS, placed; a feature that is not in FEATURES, or a panel (query)
    narrowed to a feature other than its row's (panel's) own, raises ValueError."""
    found = []
    panel_id = 1
    for row in ROWS:
        row_id = panel_id
        panel_id += 1
        for spec in row.panels:
            feature = spec.feature or row.feature
            if feature not in FEATURES or row.feature not in (ALWAYS, feature):
                raise ValueError(
                    f"{row.title}/{spec.title}: feature {feature!r} under a row of {row.feature!r}"
                )
            queries = []
            for index, query in enumerate(spec.queries):
                needs = query.feature or feature
                if needs not in FEATURES or feature not in (ALWAYS, needs):
                    raise ValueError(f"{spec.title}: a query of feature {needs!r} in a panel of {feature!r}")
                queries.append((chr(ord("A") + index), needs, query))
            if not any(needs == feature for _, needs, _ in queries):
                raise ValueError(f"{spec.title}: no query needs only the panel's feature, {feature!r}")
            found.append(Placed(row, row_id, spec, panel_id, feature, tuple(queries)))
            panel_id += 1
    return found


def _features(features: Iterable[str] | None) -> set[str]:
    if features is None:
        return set(FEATURES)
    on = {ALWAYS, *features}
    if not on <= FEATURES.keys():
        raise ValueError(f"unknown features: {sorted(on - FEATURES.keys())}")
    return on


def build(features: Iterable[str] | None = None) -> dashboard.Dashboard:
    """The dashboard of ``features`` (None: every feature, the whole dashboard): the
    panels and queries whose feature is on, under the rows that keep a panel, with the
    ids they have in the whole dashboard, laid out anew."""
    on = _features(features)
    board = (
        dashboard.Dashboard(TITLE)
        .uid(UID)
        .description(
            "The RuntimeClass scheduler extender: filter calls, rejections, RuntimeClasses and nodes, "
            "the leader's work (requeue, node labels, events, certificates), the audit and the "
            "webhooks. docs/metrics.md describes every panel."
        )
        .tags(["kubernetes", "scheduler", "runtimeclass"])
        .refresh("30s")
        .time("now-3h", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .variables(_variables())
    )
    row = None
    for panel in placed():
        if panel.feature not in on:
            continue
        if panel.row is not row:
            row = panel.row
            board.with_row(dashboard.Row(row.title).id(panel.row_id))
        queries = [(ref_id, query) for ref_id, needs, query in panel.queries if needs in on]
        board.with_panel(_panel(panel.panel, panel.panel_id, queries))
    return board


def render(features: Iterable[str] | None = None) -> str:
    """dashboard.json's text (or, given ``features``, the dashboard of those): the model
    as JSON, keys sorted so the diff of a change is its own."""
    return json.dumps(build(features).build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def render_features() -> str:
    """dashboard-features.json's text: for each panel of dashboard.json, by id, the
    feature it needs and the feature of each of its queries, by refId."""
    panels = {
        str(panel.panel_id): {
            "title": panel.panel.title,
            "feature": panel.feature,
            "targets": {ref_id: needs for ref_id, needs, _ in panel.queries},
        }
        for panel in placed()
    }
    return json.dumps({"features": sorted(FEATURES), "panels": panels}, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=f"Write the monitoring component's Grafana dashboard ({DASHBOARD}) and the feature "
        f"of each of its panels ({PANEL_FEATURES})."
    )
    parser.add_argument(
        "--directory", type=Path, default=DIRECTORY, help="where to write them (default: %(default)s)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a file there is not what this writes")
    args = parser.parse_args(argv)
    files = {args.directory / DASHBOARD: render(), args.directory / PANEL_FEATURES: render_features()}
    if args.check:
        stale = [
            path
            for path, text in files.items()
            if not path.is_file() or path.read_text(encoding="utf-8") != text
        ]
        for path in stale:
            print(f"{path} is stale: run {Path(__file__).name} to regenerate it", file=sys.stderr)
        return 1 if stale else 0
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
