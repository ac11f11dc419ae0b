"""The alerts under promtool (deploy/components/monitoring/prometheusrule.yaml).

The rule file is the PrometheusRule's ``spec``, extracted as docs/metrics.md shows: it
passes ``promtool check rules``; every alert's unit tests (rules_test.yaml beside this
file) pass under ``promtool test rules``, each alert with a case where it fires (labels
and annotations as expected) and one where it stays quiet on healthy series; every alert
has a summary, a severity and a runbook_url leading to its section of
docs/troubleshooting.md, and docs/metrics.md's table lists exactly these alerts.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.docs import fenced_blocks, headings, page, section
from tests.support.monitoring import alert_rules, rule_file, tool, write_rule_file
from tests.support.paths import REPO

UNIT_TESTS = Path(__file__).with_name("rules_test.yaml")
SEVERITIES = {"critical", "warning", "info"}


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, cwd=cwd, check=False)


def _unit_tests() -> dict[str, Any]:
    tests: dict[str, Any] = yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))
    return tests


def _run_unit_tests(directory: Path, tests: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` over ``tests``, next to the rule file they name."""
    write_rule_file(directory / "rules.yaml")
    (directory / "rules_test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    return _promtool("test", "rules", "rules_test.yaml", cwd=directory)


def test_promtool_checks_the_rule_file(tmp_path: Path) -> None:
    rules = write_rule_file(tmp_path / "rules.yaml")
    checked = _promtool("check", "rules", str(rules), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    tests = _unit_tests()
    assert tests["rule_files"] == ["rules.yaml"]
    ran = _run_unit_tests(tmp_path, tests)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout


def test_the_unit_tests_fail_on_a_wrong_expectation(tmp_path: Path) -> None:
    """The run above can fail: an expected annotation that differs from what the rule
    renders, or an alert expected quiet that fires, makes promtool fail."""
    tests = _unit_tests()
    firing = next(case for case in _cases(tests) if case["exp_alerts"])
    firing["exp_alerts"][0]["exp_annotations"]["summary"] += " (not what the rule says)"
    ran = _run_unit_tests(tmp_path, tests)
    assert ran.returncode != 0 and "not what the rule says" in ran.stdout + ran.stderr
    tests = _unit_tests()
    firing = next(case for case in _cases(tests) if case["exp_alerts"])
    firing["exp_alerts"] = []
    assert _run_unit_tests(tmp_path, tests).returncode != 0


def _cases(tests: dict[str, Any]) -> list[dict[str, Any]]:
    return [case for group in tests["tests"] for case in group.get("alert_rule_test", [])]


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = {rule["alert"] for rule in alert_rules()}
    cases = _cases(_unit_tests())
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert sorted(alerts - firing) == [], "alerts no unit test fires"
    assert sorted(alerts - quiet) == [], "alerts no unit test expects quiet"
    assert firing | quiet <= alerts, "unit tests of alerts the rules do not have"


def test_every_firing_case_checks_labels_and_every_annotation() -> None:
    """promtool compares what it is given: an expected alert without annotations would
    not check the summary and the runbook."""
    rules = {rule["alert"]: rule for rule in alert_rules()}
    for case in _cases(_unit_tests()):
        for expected in case["exp_alerts"]:
            rule = rules[case["alertname"]]
            assert set(expected["exp_annotations"]) == set(rule["annotations"]), case["alertname"]
            assert expected["exp_labels"]["severity"] == rule["labels"]["severity"], case["alertname"]


def test_every_alert_has_a_severity_a_summary_and_a_runbook() -> None:
    troubleshooting = page("troubleshooting.md")
    runbooks = section(troubleshooting, "## Alerts")
    alert_sections = {title for level, title, _ in headings(runbooks) if level == 3}
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names)), "an alert name used twice"
    for rule in alert_rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert set(rule["annotations"]) == {"summary", "runbook_url"}, name
        # GitHub's anchor of a heading that is the alert's name is the name in lower case.
        assert rule["annotations"]["runbook_url"] == f"docs/troubleshooting.md#{name.lower()}", name
        assert name in alert_sections, f"docs/troubleshooting.md has no section ### {name}"
        assert section(runbooks, f"### {name}").strip(), name
    assert alert_sections == set(names), "sections for alerts the rules do not have"


def test_the_docs_table_lists_every_alert_with_its_severity_and_runbook() -> None:
    alerts = section(page("metrics.md"), "## Alerts")
    listed = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(r"^\| \[(\w+)\]\(troubleshooting\.md#(\w+)\) \| (\w+) \|", alerts, re.MULTILINE)
    }
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert listed.keys() == rules.keys()
    for name, (anchor, severity) in listed.items():
        assert f"docs/troubleshooting.md#{anchor}" == rules[name]["annotations"]["runbook_url"]
        assert severity == rules[name]["labels"]["severity"], name
    # The rules live in one file: the docs point at it instead of carrying a copy.
    assert "PrometheusRule" in alerts and "deploy/components/monitoring/prometheusrule.yaml" in alerts
    assert not [block for block in fenced_blocks(page("metrics.md"), "yaml") if "alert:" in block]


def test_the_documented_plain_rule_file_command(tmp_path: Path) -> None:
    """docs/metrics.md's command for a plain Prometheus, run as written (from a
    directory laid out like the repository): it writes the PrometheusRule's spec, which
    promtool accepts."""
    (block,) = [
        b
        for b in fenced_blocks(section(page("metrics.md"), "## Monitoring component"), "sh")
        if "promtool check rules" in b
    ]
    (tmp_path / "deploy").symlink_to(REPO / "deploy")
    # This environment's interpreter under the name the docs use.
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    env = {**os.environ, "PATH": f"{Path(tool('promtool')).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (written,) = tmp_path.glob("*.rules.yaml")
    assert yaml.safe_load(written.read_text(encoding="utf-8")) == rule_file()
