"""docs/install.md's "Install with Helm" matches the chart: every setup its table names
renders what the overlay it names renders, its commands run, its values table is
values.yaml, and the Argo CD Application and Flux HelmRelease it shows render the chart
and leave alone exactly the field the chart leaves out (each webhook's caBundle).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.docs import fenced_blocks, page, section
from tests.support.helm import CHART, SERVER_1_36, differences, template
from tests.support.manifests import render, render_webhook_way
from tests.support.monitoring import with_the_whole_dashboard
from tests.support.paths import REPO

HELM_SECTION = section(page("install.md"), "## Install with Helm")
VALUES = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
CHART_PATH = str(CHART.relative_to(REPO))


def _table(text: str, header: str, *, every: bool = False) -> list[list[str]]:
    """The rows of the Markdown table whose header row starts with ``header``, as cells
    (``every``: of every such table, in order)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header)]
    rows = []
    for start in starts if every else starts[:1]:
        for line in lines[start + 2 :]:
            if not line.startswith("|"):
                break
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


SETUPS = _table(HELM_SECTION, "| setup or part |")


@pytest.mark.parametrize("row", SETUPS, ids=lambda row: row[0])
def test_each_documented_setup_renders_what_its_overlay_renders(row: list[str]) -> None:
    _, sets, renders = row
    values = dict(item.split("=", 1) for item in re.findall(r"`([\w.]+=[^`]+)`", sets))
    kustomization, *components = re.findall(r"`([a-z/-]+)`", renders)
    if " in place of " in renders:
        # An overlay's copy for an API server without MutatingAdmissionPolicy, which the
        # chart renders there by itself (podAdmission auto).
        assert differences(template(values, api_versions=()), render_webhook_way(kustomization)) == []
        return
    overlay = render(kustomization, *components)
    chart = template(values)
    if "components/monitoring" in components:
        # The chart's dashboard is that of what the release turns on (test_overlays.py).
        chart = tuple(with_the_whole_dashboard(chart))
    assert differences(chart, overlay) == []


def test_the_setups_table_has_every_overlay_and_opt_in_part() -> None:
    named = {path for row in SETUPS for path in re.findall(r"`([a-z/-]+)`", row[2])}
    overlays = {
        str(p.parent.relative_to(REPO / "deploy"))
        for p in (REPO / "deploy").glob("overlays/*/kustomization.yaml")
    }
    assert overlays <= named
    assert {
        "components/audit-running-pods",
        "components/monitoring",
        "components/admission-webhook/cert-manager",
    } <= named


def _helm_commands() -> list[list[str]]:
    commands = []
    for block in fenced_blocks(HELM_SECTION, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["helm"]:
                commands.append(words)
    return commands


def test_the_documented_helm_commands_render() -> None:
    """``helm install`` as ``helm template`` with the same flags (no cluster here; as for a
    1.36 API server, which helm install would ask): the chart path, release name and
    every --set exist and are accepted."""
    commands = _helm_commands()
    assert [words[1] for words in commands] == ["template", "install"]
    for words in commands:
        release, chart, *flags = words[2:]
        assert (release, chart) == ("runtimeclass-extender", CHART_PATH)
        flags = [flag for flag in flags if flag not in ("--create-namespace", "--wait")]
        namespace = flags[flags.index("--namespace") + 1]
        values = dict(flags[i + 1].split("=", 1) for i, flag in enumerate(flags) if flag == "--set")
        versions = [flags[i + 1] for i, flag in enumerate(flags) if flag == "--api-versions"]
        assert len(flags) == 2 + 2 * (len(values) + len(versions)), f"a flag the test does not know: {flags}"
        if words[1] == "install":
            # helm install asks the cluster what it serves: the 1.36 the page installs on.
            versions = list(SERVER_1_36)
        assert template(values, namespace=namespace, api_versions=versions)


def _leaves(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, value in values.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict) and value and not path.endswith("resources"):
            found |= _leaves(value, f"{path}.")
        else:
            found[path] = value
    return found


def test_the_values_table_is_values_yaml() -> None:
    rows = _table(HELM_SECTION, "| value | default | what |", every=True)
    documented = {row[0].strip("`"): yaml.safe_load(row[1].strip("`")) for row in rows}
    assert documented == _leaves(VALUES)


# --- Argo CD and Flux -----------------------------------------------------------------


def _documented(kind: str) -> list[dict[str, Any]]:
    for block in fenced_blocks(HELM_SECTION, "yaml"):
        docs = [doc for doc in yaml.safe_load_all(block) if doc]
        if any(doc.get("kind") == kind for doc in docs):
            return docs
    raise AssertionError(f"no {kind} in docs/install.md's Install with Helm")


def _render_with(values: dict[str, Any], namespace: str, tmp_path: Path) -> tuple[dict[str, Any], ...]:
    """The documented values rendered as for a 1.36 API server (the default-scheduler
    mode: no pod webhook), and in predicate mode for one without MutatingAdmissionPolicy
    (the pod webhook): what the tool may meet, both."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return (
        *template(files=[path], namespace=namespace),
        *template({"mode": "predicate"}, files=[path], namespace=namespace, api_versions=()),
    )


def _webhook_configurations(docs: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    found = {d["kind"]: d for d in docs if d["kind"].endswith("WebhookConfiguration")}
    assert set(found) == {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    for configuration in found.values():
        # What the tools are told to ignore is what the chart leaves to the extender.
        assert all("caBundle" not in hook["clientConfig"] for hook in configuration["webhooks"])
    return found


def test_the_argo_cd_application_renders_the_chart_and_ignores_each_ca_bundle(tmp_path: Path) -> None:
    (application,) = _documented("Application")
    spec = application["spec"]
    assert spec["source"]["path"] == CHART_PATH
    assert spec["source"]["helm"]["releaseName"] == "runtimeclass-extender"
    docs = _render_with(spec["source"]["helm"]["valuesObject"], spec["destination"]["namespace"], tmp_path)
    configurations = _webhook_configurations(docs)
    ignored = {
        (entry["group"], entry["kind"], entry["name"]): entry["jqPathExpressions"]
        for entry in spec["ignoreDifferences"]
    }
    assert ignored == {
        ("admissionregistration.k8s.io", kind, c["metadata"]["name"]): [".webhooks[]?.clientConfig.caBundle"]
        for kind, c in configurations.items()
    }
    assert "RespectIgnoreDifferences=true" in spec["syncPolicy"]["syncOptions"]
    assert "CreateNamespace=true" not in spec["syncPolicy"]["syncOptions"]  # the chart's Namespace


def test_the_flux_helm_release_renders_the_chart_and_ignores_each_ca_bundle(tmp_path: Path) -> None:
    source, release = _documented("HelmRelease")
    assert source["kind"] == "GitRepository"
    spec = release["spec"]
    chart = spec["chart"]["spec"]
    assert chart["chart"] == CHART_PATH
    assert (chart["sourceRef"]["kind"], chart["sourceRef"]["name"]) == (
        "GitRepository",
        source["metadata"]["name"],
    )
    assert "install" not in spec  # no createNamespace: the chart's Namespace
    docs = _render_with(spec["values"], spec["targetNamespace"], tmp_path)
    configurations = _webhook_configurations(docs)
    ignored = {entry["target"]["kind"]: entry["paths"] for entry in spec["driftDetection"]["ignore"]}
    # A JSON pointer names one webhook: each configuration has exactly one.
    assert ignored == {kind: ["/webhooks/0/clientConfig/caBundle"] for kind in configurations}
    assert all(len(c["webhooks"]) == 1 for c in configurations.values())


# --- Which mode do I install? -------------------------------------------------------------

CHOOSING = section(page("install.md"), "## Which mode do I install?")
OPERATORS = _table(CHOOSING, "| your cluster | mode | the one command |")


def _command(cell: str) -> list[str]:
    """A row's command: the first row's whole ``helm install``, or "the same, with"
    further ``--set`` flags."""
    (first,) = re.findall(r"`(helm install [^`]+)`", OPERATORS[0][2])
    words = shlex.split(first)
    return words + [word for flags in re.findall(r"`(--set [^`]+)`", cell) for word in shlex.split(flags)]


def test_one_mode_and_one_command_for_each_of_five_operators() -> None:
    """The issue's five operators each find their row, with one mode and one command."""
    clusters = [row[0] for row in OPERATORS]
    assert len(OPERATORS) == 5, clusters
    for needle in ("GKE", "EKS, with Karpenter and Kata", "1.35", "kubeadm", "on-premises"):
        assert sum(needle in cluster for cluster in clusters) == 1, needle
    assert {row[1] for row in OPERATORS} == {"default-scheduler", "predicate"}
    assert OPERATORS[1][2] == "the same"


@pytest.mark.parametrize("row", OPERATORS, ids=lambda row: row[0])
def test_each_operators_command_installs_their_mode(row: list[str]) -> None:
    """Each command, rendered as helm install renders it on the operator's cluster (1.36,
    or 1.35 for the row that says so: no MutatingAdmissionPolicy), installs the row's
    mode: no kube-scheduler in the default-scheduler mode, runtimeclass-scheduler's in
    predicate mode, with the node labels where the row asks for them."""
    cluster, mode, cell = row
    words = _command(cell)
    assert words[:4] == ["helm", "install", "runtimeclass-extender", CHART_PATH]
    values = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "--set")
    docs = template(
        values, namespace="runtimeclass-extender", api_versions=() if "1.35" in cluster else SERVER_1_36
    )
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    args = containers["extender"]["args"]
    if mode == "default-scheduler":
        assert set(containers) == {"extender"} and "--placement=default-scheduler" in args
    else:
        assert (
            set(containers) == {"extender", "kube-scheduler"} and "--placement=default-scheduler" not in args
        )
    assert ("--label-nodes" in args) == (mode == "default-scheduler" or "thousands" in cluster)
    # Before 1.36 the API server serves no MutatingAdmissionPolicy v1: pod admission is the
    # extender's webhook there, and the policies everywhere else.
    kinds = {d["kind"] for d in docs}
    assert ("MutatingAdmissionPolicy" in kinds) == ("1.35" not in cluster), kinds
    assert ("MutatingWebhookConfiguration" in kinds) == ("1.35" in cluster), kinds
