"""The shipped manifests as ``kubectl apply -k`` would apply them: rendered with ``kubectl kustomize``.

One way to render for every test that reads deploy/: a kustomization as it is, or an
overlay of the user's own around it (extra components, another install namespace), as
docs/install.md tells operators to write one.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO

DEPLOY = REPO / "deploy"
# Predicate mode with the derived node labels: an overlay of one's own on
# overlays/predicate-mode that lists components/label-nodes (docs/large-clusters.md),
# what the chart's labelNodes.enabled=true renders.
PREDICATE_LABELS = "overlays/predicate-mode + components/label-nodes"
# Every setup deploy/ ships or the docs build from it, as ``render`` takes them: the
# overlays, and the names of setups that add components to one.
SETUPS: dict[str, tuple[str, ...]] = {
    "overlays/predicate-mode": ("overlays/predicate-mode",),
    PREDICATE_LABELS: ("overlays/predicate-mode", "components/label-nodes"),
    "overlays/tls": ("overlays/tls",),
    "overlays/default-scheduler": ("overlays/default-scheduler",),
}
OVERLAYS = tuple(SETUPS)

Manifest = dict[str, Any]


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: cannot render the kustomizations (kubectl kustomize)")
    return kubectl


def render(kustomization: str, *components: str, namespace: str | None = None) -> tuple[Manifest, ...]:
    """``deploy/<kustomization>``, with ``components`` and ``namespace`` added by an
    overlay of our own when given (kustomize accepts relative paths only). Rendered
    once; each caller gets objects of its own, which it may change. A name of ``SETUPS``
    stands for its overlay and components."""
    kustomization, *more = SETUPS.get(kustomization, (kustomization,))
    return copy.deepcopy(_render(kustomization, *more, *components, namespace=namespace))


@cache
def _render(kustomization: str, *components: str, namespace: str | None = None) -> tuple[Manifest, ...]:
    kubectl = _kubectl()
    with tempfile.TemporaryDirectory() as directory:
        target = str(DEPLOY / kustomization)
        if components or namespace is not None:
            overlay: Manifest = {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY / kustomization, directory)],
            }
            if components:
                overlay["components"] = [os.path.relpath(DEPLOY / c, directory) for c in components]
            if namespace is not None:
                overlay["namespace"] = namespace
            (Path(directory) / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
            target = directory
        result = subprocess.run([kubectl, "kustomize", target], capture_output=True, text=True, check=False)
    what = " + ".join((kustomization, *components)) + (f" in {namespace}" if namespace else "")
    assert result.returncode == 0, f"kubectl kustomize of {what} failed:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc is not None)


def render_own(kustomization: str, files: dict[str, str] | None = None) -> tuple[Manifest, ...]:
    """An overlay of one's own as the docs show it (``# my-overlay/kustomization.yaml``,
    its paths relative to a directory beside deploy/): written into a directory of the
    repository, with ``files`` (name: text) beside it, and rendered."""
    kubectl = _kubectl()
    with tempfile.TemporaryDirectory(dir=REPO) as directory:
        for name, text in {**(files or {}), "kustomization.yaml": kustomization}.items():
            (Path(directory) / name).write_text(text, encoding="utf-8")
        result = subprocess.run(
            [kubectl, "kustomize", directory], capture_output=True, text=True, check=False
        )
    assert result.returncode == 0, f"kubectl kustomize of an overlay of one's own failed:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc is not None)


# docs/pod-webhook.md's edit of a copy of an overlay for an API server without
# MutatingAdmissionPolicy: the pod webhook in place of the pod admission policies.
_POLICIES = "- ../../components/pod-admission-policy\n"


def webhook_way(kustomization: str) -> str:
    """An overlay's kustomization.yaml with components/pod-webhook in place of
    components/pod-admission-policy."""
    return kustomization.replace(_POLICIES, "- ../../components/pod-webhook\n")


def render_webhook_way(overlay: str, *components: str, namespace: str | None = None) -> tuple[Manifest, ...]:
    """``deploy/<overlay>`` the webhook way (``webhook_way``), with ``components`` and
    ``namespace`` added as ``render`` adds them: every overlay is copied beside
    deploy/overlays (its relative paths stay right, and tls's ../predicate-mode is the
    copy) and edited. Rendered once; each caller gets objects of its own. A name of
    ``SETUPS`` stands for its overlay and components."""
    overlay, *more = SETUPS.get(overlay, (overlay,))
    return copy.deepcopy(_render_webhook_way(overlay, *more, *components, namespace=namespace))


@cache
def _render_webhook_way(overlay: str, *components: str, namespace: str | None = None) -> tuple[Manifest, ...]:
    kubectl = _kubectl()
    with tempfile.TemporaryDirectory(dir=DEPLOY) as directory:
        copies = Path(directory)
        for source in (DEPLOY / "overlays").iterdir():
            shutil.copytree(source, copies / source.name)
            path = copies / source.name / "kustomization.yaml"
            path.write_text(webhook_way(path.read_text(encoding="utf-8")), encoding="utf-8")
        target = copies / Path(overlay).name
        if components or namespace is not None:
            wrapper: Manifest = {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"../{target.name}"],
            }
            if components:
                wrapper["components"] = [os.path.relpath(DEPLOY / c, copies / "own") for c in components]
            if namespace is not None:
                wrapper["namespace"] = namespace
            (copies / "own").mkdir()
            (copies / "own" / "kustomization.yaml").write_text(yaml.safe_dump(wrapper))
            target = copies / "own"
        result = subprocess.run(
            [kubectl, "kustomize", str(target)], capture_output=True, text=True, check=False
        )
    assert result.returncode == 0, f"kubectl kustomize of {overlay} the webhook way failed:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc is not None)


def one(docs: tuple[Manifest, ...] | list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
