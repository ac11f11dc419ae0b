"""The tier that runs against a real control plane (tests/support/control_plane.py).

Found as envtest finds it (``KUBEBUILDER_ASSETS``, a directory holding kube-apiserver,
etcd and kubectl): without the binaries every test here is skipped with a message
naming ``KUBEBUILDER_ASSETS``, except under CI (``CI`` set), where .ci/run unpacks them
and a missing binary fails. Each module starts its own control plane (a few seconds),
so that what one module installs never leaks into another.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.control_plane import MISSING, PREDICATE_MODE, Assets, ControlPlane, find_assets


@pytest.fixture(scope="session")
def assets() -> Assets:
    found = find_assets()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{MISSING}; .ci/run unpacks them, so under CI they must be there", pytrace=False)
        pytest.skip(MISSING)
    return found


def _require(assets: Assets, *names: str) -> None:
    """Skip without these binaries beside the control plane's, except under CI, where
    .ci/run unpacks them: fail."""
    missing = [name for name in names if assets.binary(name) is None]
    if missing:
        message = f"{', '.join(missing)} not in {assets.directory} (KUBEBUILDER_ASSETS)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="module")
def kube_scheduler(assets: Assets) -> None:
    """kube-scheduler beside the control plane (a module's ``pytestmark`` asks for it)."""
    _require(assets, "kube-scheduler")


@pytest.fixture(scope="module")
def cluster_autoscaler(assets: Assets) -> None:
    """kube-scheduler and cluster-autoscaler (kwok provider) beside the control plane."""
    _require(assets, "kube-scheduler", "cluster-autoscaler")


@pytest.fixture(scope="module")
def plane(assets: Assets) -> Iterator[ControlPlane]:
    """kube-apiserver (and etcd) as predicate mode runs it: RuntimeClass admission off."""
    with ControlPlane(assets, apiserver_flags=PREDICATE_MODE) as control_plane:
        yield control_plane


@pytest.fixture
def new_plane(assets: Assets) -> Iterator[ControlPlane]:
    """A control plane of the test alone, on which nothing was ever installed, as a new
    cluster is. Where a test needs that: on the module's, an earlier test installed the
    PodAdmissionTable CRD and removed it, and for a few seconds after its next install
    kube-apiserver 1.36.2's policies still read the table as absent (the informer of
    their param kind relists the recreated kind after a backoff), which is not the first
    install a test of it means."""
    with ControlPlane(assets, apiserver_flags=PREDICATE_MODE) as control_plane:
        yield control_plane
