"""The Grafana dashboard (deploy/components/monitoring/dashboard.json) and the feature
each of its panels needs (dashboard-features.json).

Both are generated with grafana-foundation-sdk by generate_dashboard.py and committed:
the committed files are what the generator writes; the whole dashboard is the one of
every feature; every panel reads the chosen data source and is scoped by the namespace
and pod variables (and the RuntimeClass one where the metric has that label); every
metric a query names is in docs/metrics.md's table; the rows and panels, and the
feature each needs, are the ones docs/metrics.md describes, and they cover what an
operator watches; the component's kustomization.yaml says which rows need which
component. tests/monitoring/test_prometheus.py evaluates the queries on a real
Prometheus, test_chart_setups.py those of each chart setup's dashboard.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docs import page, section
from tests.support.monitoring import (
    DASHBOARD,
    GENERATOR,
    PANEL_FEATURES,
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
    assert PANEL_FEATURES.read_text(encoding="utf-8") == generator().render_features(), (
        f"dashboard-features.json is stale: run .venv/bin/python {GENERATOR.relative_to(REPO)}"
    )
    checked = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert checked.returncode == 0, checked.stderr


def test_the_check_sees_a_stale_file(tmp_path: Path) -> None:
    module = generator()
    written = ["--directory", str(tmp_path)]
    assert module.main(written) == 0
    assert (tmp_path / "dashboard.json").read_text(encoding="utf-8") == module.render()
    assert (tmp_path / "dashboard-features.json").read_text(encoding="utf-8") == module.render_features()
    assert module.main(["--check", *written]) == 0
    for name, old, new in (
        ("dashboard.json", "Filter latency", "Filter latency (old)"),
        ("dashboard-features.json", '"podWebhook"', '"always"'),
    ):
        path = tmp_path / name
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(old, new), encoding="utf-8")
        assert module.main(["--check", *written]) == 1, name
        path.unlink()
        assert module.main(["--check", *written]) == 1, name
        path.write_text(text, encoding="utf-8")
    assert module.main(["--check", *written]) == 0


# --- features: which panels a release shows ----------------------------------------------


def test_the_whole_dashboard_is_the_one_of_every_feature() -> None:
    module = generator()
    assert module.render(module.FEATURES) == module.render() == DASHBOARD.read_text(encoding="utf-8")
    assert module.render([]) == module.render(["always"])
    with pytest.raises(ValueError, match="unknown features: \\['sharding'\\]"):
        module.render(["sharding"])


def test_the_features_file_names_each_panel_and_query_of_the_dashboard() -> None:
    features = json.loads(PANEL_FEATURES.read_text(encoding="utf-8"))
    assert features["features"] == sorted(generator().FEATURES)
    by_id = {str(panel["id"]): panel for panel in panels(dashboard())}
    assert features["panels"].keys() == by_id.keys()
    for panel_id, spec in features["panels"].items():
        panel = by_id[panel_id]
        assert spec["title"] == panel["title"]
        assert spec["targets"].keys() == {target["refId"] for target in panel["targets"]}, panel["title"]
        # A query narrows its panel's feature only where the panel is always shown.
        assert set(spec["targets"].values()) <= {spec["feature"]} or spec["feature"] == "always", spec
        assert spec["feature"] in spec["targets"].values(), spec


def test_a_dashboard_of_fewer_features_keeps_ids_and_lays_out_anew() -> None:
    """Panels keep their ids (links to a panel stay valid), a row without a panel left is
    left out, and the rest is laid out without gaps: every row right below what comes
    before it, each line of panels filled from the left."""
    whole = {panel["id"]: panel for panel in dashboard()["panels"]}
    board = json.loads(generator().render([]))
    assert "Capture (capture-dir)" not in [panel["title"] for panel in board["panels"]]
    bottom = 0
    x = 0
    for panel in board["panels"]:
        assert panel["title"] == whole[panel["id"]]["title"]
        position = panel["gridPos"]
        if panel["type"] == "row":
            assert position == {"h": 1, "w": 24, "x": 0, "y": bottom}
            x = 0
        else:
            assert position["x"] == x % 24 and position["y"] < bottom + 1 + position["h"], panel["title"]
            x += position["w"]
        bottom = max(bottom, position["y"] + position["h"])


def test_a_panel_narrowed_to_another_feature_than_its_rows_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = generator()
    audit = next(row for row in module.ROWS if row.feature == "audit")
    for wrong in (
        dataclasses.replace(audit, panels=(dataclasses.replace(audit.panels[0], feature="requeue"),)),
        dataclasses.replace(audit, panels=(dataclasses.replace(audit.panels[0], feature="sharding"),)),
        dataclasses.replace(
            audit,
            panels=(
                dataclasses.replace(
                    audit.panels[0],
                    queries=(dataclasses.replace(audit.panels[0].queries[0], feature="requeue"),),
                ),
            ),
        ),
    ):
        monkeypatch.setattr(module, "ROWS", (wrong,))
        with pytest.raises(ValueError):
            module.placed()


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


def test_the_docs_describe_every_row_and_panel_in_order_with_its_feature() -> None:
    """docs/metrics.md's dashboard table: (row, panel, the features it needs: the
    panel's, then any of a query's own) as the dashboard has them."""
    described = []
    row = ""
    for match in re.finditer(
        r"^\|([^|]*)\|([^|]+)\|([^|]+)\|[^|]+\|$", section(page("metrics.md"), "## Dashboard"), re.MULTILINE
    ):
        if match.group(2).strip() in ("panel", "---"):
            continue
        row = match.group(1).strip() or row
        described.append((row, match.group(2).strip(), re.findall(r"`(\w+)`", match.group(3))))
    built = []
    for panel in generator().placed():
        own = [needs for _, needs, _ in panel.queries if needs != panel.feature]
        built.append((panel.row.title, panel.panel.title, [panel.feature, *dict.fromkeys(own)]))
    assert described == built


def _features_table() -> dict[str, list[str]]:
    """docs/metrics.md's table of the dashboard's features: feature -> its cells."""
    table = section(page("metrics.md"), "## Dashboard")
    return {
        match.group(1): [cell.strip() for cell in match.group(2).split(" | ")]
        for match in re.finditer(r"^\| `(\w+)` \| (.*) \|$", table, re.MULTILINE)
    }


def test_the_docs_say_what_turns_each_feature_on_and_what_it_shows() -> None:
    """docs/metrics.md's table of features: each of FEATURES, in order, with the rows
    and panels it shows, and the serve flags, components and chart values that turn it
    on (as FEATURES names them)."""
    module = generator()
    table = _features_table()
    assert list(table) == list(module.FEATURES)
    for feature, (shows, serve, component, chart) in table.items():
        spec = module.FEATURES[feature]
        for panel in module.placed():
            query_features = {needs for _, needs, _ in panel.queries}
            if feature == "always":
                continue
            if panel.row.feature == feature:
                assert panel.row.title in shows, (feature, panel.row.title)
            elif feature in {panel.feature, *query_features}:
                assert panel.panel.title in shows, (feature, panel.panel.title)
        for flag in re.findall(r"--[\w-]+", spec.serve):
            assert f"`{flag}`" in serve, (feature, flag)
        for path in re.findall(r"components/[\w/-]+", spec.component):
            assert f"`{path}`" in component, (feature, path)
        for value in re.findall(r"\b[a-z]\w+\.\w+\b", spec.chart):
            assert value in chart, (feature, value)
    assert "never" in table["capture"][3]


def test_the_components_comment_says_which_rows_need_which_component() -> None:
    """kustomize's component keeps the whole dashboard; its kustomization.yaml names, for
    each row (or panel) that needs more than every overlay has, what it needs."""
    comment = "\n".join(
        line[2:].rstrip()
        for line in (DASHBOARD.parent / "kustomization.yaml").read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    )
    module = generator()
    needs: dict[str, str] = {}
    for panel in module.placed():
        if panel.row.feature != "always":
            needs[panel.row.title] = panel.row.feature
        elif panel.feature != "always":
            needs[panel.panel.title] = panel.feature
    assert set(needs.values()) == set(module.FEATURES) - {"always"}
    for title, feature in needs.items():
        # An entry: the title indented, what it needs after it and on lines indented further.
        entry = re.search(rf"^ +{re.escape(title)}(?!\w).*(?:\n {{10,}}\S.*)*", comment, re.MULTILINE)
        assert entry, title
        wanted = re.findall(r"components/[\w/-]+", module.FEATURES[feature].component) or [
            module.FEATURES[feature].serve
        ]
        for what in wanted:
            assert what in entry.group(0), (title, what)
