"""The Grafana dashboard (deploy/components/monitoring/dashboard.json).

It is generated with grafana-foundation-sdk by generate_dashboard.py and committed: the
committed file is what the generator writes; every panel reads the chosen data source
and is scoped by the namespace and pod variables (and the RuntimeClass one where the
metric has that label); every metric a query names is in docs/metrics.md's table; the
rows and panels are the ones docs/metrics.md describes, and they cover what an operator
watches. tests/monitoring/test_prometheus.py evaluates the queries on a real Prometheus.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.docs import page, section
from tests.support.monitoring import (
    DASHBOARD,
    GENERATOR,
    dashboard,
    documented_metrics,
    family,
    generator,
    metric_names,
    panels,
    queries,
    variables,
)
from tests.support.paths import REPO

# Exported, at 0 for every outcome, by every extender from its start.
ALWAYS_EXPORTED = "runtimeclass_extender_filter_requests_total"
SELECTOR = re.compile(r"(runtimeclass_extender_\w+)\{([^}]*)\}")
# What the dashboard must show, by the metrics that show it.
COVERED = {
    "filter calls and their latency": {
        "runtimeclass_extender_filter_requests_by_runtimeclass_total",
        "runtimeclass_extender_filter_duration_seconds",
    },
    "rejections": {
        "runtimeclass_extender_nodes_rejected_total",
        "runtimeclass_extender_runtime_rejections_total",
    },
    "fitting and selected nodes": {
        "runtimeclass_extender_runtimeclass_nodes_fitting",
        "runtimeclass_extender_runtimeclass_nodes_selected",
    },
    "pending pods and nudges": {
        "runtimeclass_extender_requeue_pending_pods",
        "runtimeclass_extender_requeue_nudges_sent_total",
        "runtimeclass_extender_requeue_nudges_failed_total",
    },
    "node labels": {
        "runtimeclass_extender_node_labels_added_total",
        "runtimeclass_extender_node_labels_removed_total",
        "runtimeclass_extender_node_label_writes_pending",
    },
    "misplaced pods": {"runtimeclass_extender_misplaced_pods"},
    "watch health": {
        "runtimeclass_extender_watch_failing_seconds",
        "runtimeclass_extender_watch_last_contact_age_seconds",
    },
    "leader election": {"runtimeclass_extender_leader", "runtimeclass_extender_leader_campaigning"},
    "webhook reviews": {
        "runtimeclass_extender_admission_reviews_total",
        "runtimeclass_extender_admission_review_duration_seconds",
        "runtimeclass_extender_pod_admission_reviews_total",
        "runtimeclass_extender_pod_admission_review_duration_seconds",
    },
    "certificates": {
        "runtimeclass_extender_webhook_certificate_expiry_timestamp_seconds",
        "runtimeclass_extender_webhook_certificate_trusted",
    },
}


def test_the_committed_dashboard_is_what_the_generator_writes() -> None:
    assert DASHBOARD.read_text(encoding="utf-8") == generator().render(), (
        f"dashboard.json is stale: run .venv/bin/python {GENERATOR.relative_to(REPO)}"
    )
    checked = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert checked.returncode == 0, checked.stderr


def test_the_check_sees_a_stale_dashboard(tmp_path: Path) -> None:
    module = generator()
    stale = tmp_path / "dashboard.json"
    assert module.main(["--output", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == module.render()
    assert module.main(["--check", "--output", str(stale)]) == 0
    stale.write_text(module.render().replace("Filter latency", "Filter latency (old)"), encoding="utf-8")
    assert module.main(["--check", "--output", str(stale)]) == 1
    assert module.main(["--check", "--output", str(tmp_path / "missing.json")]) == 1


def test_every_panel_reads_the_chosen_data_source_with_unique_ids() -> None:
    board = dashboard()
    assert board["uid"] == "runtimeclass-extender" and board["schemaVersion"] >= 39
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    source = {"type": "prometheus", "uid": "${datasource}"}
    assert variables(board)["datasource"]["type"] == "datasource"
    assert variables(board)["datasource"]["query"] == "prometheus"
    for panel in panels(board):
        assert panel["datasource"] == source, panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)) and all(ref_ids), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == source, panel["title"]
            assert target["legendFormat"], panel["title"]
        assert panel["description"], panel["title"]


def test_every_query_is_scoped_by_the_variables() -> None:
    """Each selector of each query is narrowed to the chosen namespace and pods, and, where
    the metric has a runtime_class label, to the chosen RuntimeClasses."""
    labels = documented_metrics()
    board = dashboard()
    assert {"namespace", "pod", "runtime_class"} <= variables(board).keys()
    for title, expr in queries(board):
        selectors = SELECTOR.findall(expr)
        assert selectors and len(selectors) == len(metric_names(expr)), (title, expr)
        for metric, matchers in selectors:
            assert 'namespace="$namespace"' in matchers and 'pod=~"$pod"' in matchers, (title, metric)
            if "runtime_class" in labels[family(metric)] and "by (runtime_class" in expr:
                assert 'runtime_class=~"$runtime_class"' in matchers, (title, metric)
        if "[" in expr:
            assert "[$__rate_interval]" in expr, (title, expr)


def test_the_variables_read_series_every_extender_exports() -> None:
    """namespace and pod come from a counter every extender exports from its start; the
    RuntimeClasses from the two metrics that name every class (and none, unknown)."""
    board = dashboard()
    assert metric_names(variables(board)["namespace"]["query"]) == {ALWAYS_EXPORTED}
    assert metric_names(variables(board)["pod"]["query"]) == {ALWAYS_EXPORTED}
    (names,) = re.findall(
        r'__name__=~"runtimeclass_extender_\(([^)]*)\)"', variables(board)["runtime_class"]["query"]
    )
    for name in names.split("|"):
        assert "runtime_class" in documented_metrics()["runtimeclass_extender_" + name], name
    for name in ("namespace", "pod", "runtime_class"):
        assert variables(board)[name]["type"] == "query", name
        assert variables(board)[name]["query"].startswith("label_values("), name
    for name in ("pod", "runtime_class"):
        assert variables(board)[name]["multi"] and variables(board)[name]["includeAll"], name


def test_every_metric_a_query_names_is_documented() -> None:
    documented = documented_metrics()
    for title, expr in queries(dashboard()):
        named = {family(series) for series in metric_names(expr)}
        assert named <= documented.keys(), (title, named - documented.keys())


def test_the_dashboard_shows_what_an_operator_watches() -> None:
    shown = {family(series) for _, expr in queries(dashboard()) for series in metric_names(expr)}
    for topic, metrics in COVERED.items():
        assert metrics <= shown, (topic, metrics - shown)


def test_the_docs_describe_every_row_and_panel_in_order() -> None:
    """docs/metrics.md's dashboard table: (row, panel) as the dashboard has them."""
    described = []
    row = ""
    for match in re.finditer(
        r"^\|([^|]*)\|([^|]+)\|[^|]+\|$", section(page("metrics.md"), "## Dashboard"), re.MULTILINE
    ):
        if match.group(2).strip() in ("panel", "---"):
            continue
        row = match.group(1).strip() or row
        described.append((row, match.group(2).strip()))
    built = []
    for panel in dashboard()["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        else:
            built.append((row, panel["title"]))
    assert described == built
