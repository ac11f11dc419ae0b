"""The monitoring component as the tests read it (deploy/components/monitoring): the
PrometheusRule and the rule file its ``spec`` is, the dashboard and its queries, the
dashboard's generator, and the Prometheus tools that check them; and the dashboard a
rendering installs (the chart's, of the features the rendering turns on).

Shared by tests/monitoring/, tests/helm/ and tests/http/test_metrics.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.support.docs import page, section
from tests.support.paths import MONITORING

PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboard.json"
PANEL_FEATURES = MONITORING / "dashboard-features.json"
GENERATOR = MONITORING / "generate_dashboard.py"
# The ConfigMap Grafana's sidecar reads the dashboard from, and its one key.
DASHBOARD_CONFIGMAP = "runtimeclass-extender-dashboard"
DASHBOARD_KEY = "runtimeclass-extender.json"
# Every metric the extender exports carries this prefix (extender.METRIC_PREFIX).
METRIC = re.compile(r"\bruntimeclass_extender_\w+")
# The one series an expression may read that the extender does not export: Prometheus'
# own record of each scrape (RuntimeClassExtenderDown).
SCRAPE_SERIES = "up"


def prometheus_rule() -> dict[str, Any]:
    rule: dict[str, Any] = yaml.safe_load(PROMETHEUS_RULE.read_text(encoding="utf-8"))
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    return rule


def rule_file() -> dict[str, Any]:
    """The plain Prometheus rule file: the PrometheusRule's ``spec`` (its ``groups:``)."""
    spec: dict[str, Any] = prometheus_rule()["spec"]
    assert set(spec) == {"groups"}, "the spec must be a rule file as it is"
    return spec


def write_rule_file(path: Path) -> Path:
    path.write_text(yaml.safe_dump(rule_file(), sort_keys=False), encoding="utf-8")
    return path


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in rule_file()["groups"] for rule in group["rules"] if "alert" in rule]


def metric_names(expr: str) -> set[str]:
    """The extender's series an expression (or a dashboard query) reads, as named in it
    (``..._bucket`` and ``..._total`` included)."""
    return set(METRIC.findall(expr))


def tool(name: str) -> str:
    """The path of ``promtool`` or ``prometheus`` (Debian's package ``prometheus``). A test
    that needs one is skipped where it is missing, except under CI (``CI`` set), which
    installs it (.ci/run): there a missing tool fails instead of passing unnoticed."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed (Debian's package prometheus provides it)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; .ci/run installs it, so under CI it must be there", pytrace=False)
        pytest.skip(message)
    return found


def generator() -> ModuleType:
    """deploy/components/monitoring/generate_dashboard.py, imported (it is a script, not a
    module of a package), as importlib's recipe for a source file does: registered in
    sys.modules first, where its dataclasses look their module up."""
    name = "deploy_monitoring_generate_dashboard"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def dashboard() -> dict[str, Any]:
    """The committed dashboard.json."""
    board: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return board


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's panels, rows left out (rows are open: their panels follow them)."""
    return [panel for panel in board["panels"] if panel["type"] != "row"]


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) of every query of every panel."""
    return [(panel["title"], target["expr"]) for panel in panels(board) for target in panel["targets"]]


def variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in board["templating"]["list"]}


def documented_metrics() -> dict[str, set[str]]:
    """docs/metrics.md's table of every metric: name -> its labels."""
    table = section(page("metrics.md"), "## Metrics")
    return {
        match.group(1): set(re.findall(r"`(\w+)`", match.group(2)))
        for match in re.finditer(
            r"^\| `(runtimeclass_extender_\w+)` \| \w+ \| ([^|]*) \|", table, re.MULTILINE
        )
    }


def family(series: str) -> str:
    """The metric a series name belongs to, as the docs table names it (a histogram's
    ``_bucket``, ``_sum`` and ``_count`` are its own name)."""
    return re.sub(r"_(bucket|sum|count)$", "", series)


# --- the dashboard a rendering installs -------------------------------------------------

Manifest = dict[str, Any]


def extender_args(docs: Iterable[Manifest]) -> list[str]:
    """The extender container's args in a rendering (its one Deployment)."""
    (deployment,) = [doc for doc in docs if doc["kind"] == "Deployment"]
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    ]
    args: list[str] = container["args"]
    return args


def setup_features(docs: Iterable[Manifest]) -> frozenset[str]:
    """The dashboard features (generate_dashboard.py's FEATURES) a rendering turns on,
    read from what it installs, not from the values that chose it: the extender's flags,
    and a MutatingWebhookConfiguration for the pod webhook."""
    docs = list(docs)
    args = extender_args(docs)
    flags = {arg.split("=", 1)[0] for arg in args}
    features = {"always"}
    features |= {
        feature
        for flag, feature in (
            ("--requeue-pending-pods", "requeue"),
            ("--label-nodes", "labelNodes"),
            ("--audit-running-pods", "audit"),
            ("--leader-elect", "leaderElection"),
            ("--capture-dir", "capture"),
        )
        if flag in flags
    }
    if any(doc["kind"] == "MutatingWebhookConfiguration" for doc in docs):
        features.add("podWebhook")
    if "--webhook-certificate-secret" in flags and "--admission-tls-cert-file" not in flags:
        features.add("selfManagedCertificates")
    assert features <= set(generator().FEATURES), features - set(generator().FEATURES)
    return frozenset(features)


def installed_dashboard(docs: Iterable[Manifest]) -> dict[str, Any]:
    """The dashboard a rendering's ConfigMap holds, parsed."""
    (config_map,) = [
        doc for doc in docs if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == DASHBOARD_CONFIGMAP
    ]
    assert set(config_map["data"]) == {DASHBOARD_KEY}
    board: dict[str, Any] = json.loads(config_map["data"][DASHBOARD_KEY])
    return board


def dashboard_difference(board: dict[str, Any], features: Iterable[str]) -> list[str]:
    """How ``board`` differs from the generator's dashboard of ``features``: the panels
    (id, title, queries) only in one, then any other difference; empty when equal."""
    expected: dict[str, Any] = json.loads(generator().render(features))
    if board == expected:
        return []

    def shown(panels: dict[str, Any]) -> set[str]:
        return {
            f"{p['id']} {p['title']}: " + ", ".join(t["refId"] for t in p.get("targets", []))
            for p in panels["panels"]
        }

    found = [f"only in the chart's: {line}" for line in sorted(shown(board) - shown(expected))]
    found += [f"only in the generator's: {line}" for line in sorted(shown(expected) - shown(board))]
    return found or [
        f"same panels, other fields: {sorted(k for k in board.keys() | expected.keys() if board.get(k) != expected.get(k))}"
    ]


def with_the_whole_dashboard(chart: Iterable[Manifest]) -> list[Manifest]:
    """A chart rendering with monitoring, compared with an overlay with the monitoring
    component: the one thing that differs on purpose is the dashboard, the chart's of
    the features the rendering turns on, the component's whole. This checks the first
    (it must be exactly the generator's dashboard of those features) and returns the
    rendering with the component's whole dashboard (the committed dashboard.json, as its
    configMapGenerator reads it) in its place, so the rest compares field for field."""
    docs = [dict(doc) for doc in chart]
    assert dashboard_difference(installed_dashboard(docs), setup_features(docs)) == []
    for index, doc in enumerate(docs):
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == DASHBOARD_CONFIGMAP:
            docs[index] = {**doc, "data": {DASHBOARD_KEY: DASHBOARD.read_text(encoding="utf-8")}}
    return docs
