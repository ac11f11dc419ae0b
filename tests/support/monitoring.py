"""The monitoring component as the tests read it (deploy/components/monitoring): the
PrometheusRule and the rule file its ``spec`` is, the dashboard and its queries, the
dashboard's generator, and the Prometheus tools that check them.

Shared by tests/monitoring/ and tests/http/test_metrics.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.support.docs import page, section
from tests.support.paths import MONITORING

PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboard.json"
GENERATOR = MONITORING / "generate_dashboard.py"
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
