"""An overlay (or the chart) installed on a real control plane, its extender run beside it.

What ``kubectl apply -k`` would create goes into the API server as rendered: the
namespace, the RBAC, the webhook configurations, the admission policies and their table,
the scheduler's ConfigMap. The Deployment itself cannot run (no kubelet), so its
extender container is run here as a process of its own, with the container's flags
(but for the addresses and ports, which are local) and its downward-API environment,
as its own ServiceAccount (a token from the TokenRequest API): every request it makes
goes through the RBAC and the admission policies the install ships, as in a cluster.
The webhooks' Service reaches it through a forwarder on the Service's loopback
ClusterIP (tests/support/control_plane.py), as kube-proxy would.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support.control_plane import ControlPlane, Process, object_path
from tests.support.ports import free_port

Manifest = dict[str, Any]
SCHEDULER_DEPLOYMENT = "runtimeclass-scheduler"
WEBHOOK_SERVICE = "runtimeclass-extender-webhook"
# The container's flags that say where it listens: replaced by local ones.
LOCAL_FLAGS = ("--host", "--port", "--probe-port", "--probe-host", "--admission-port", "--admission-host")
# Not applied: the Deployment is run by hand; the extender's token Secret needs the
# token controller, which does not run here (the extender gets a TokenRequest token).
_NOT_APPLIED = ("Deployment",)


def extender_container(docs: Iterable[Manifest]) -> Manifest:
    deployment = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == SCHEDULER_DEPLOYMENT
    )
    container: Manifest = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    )
    return container


@dataclass
class Extender:
    """One replica of the extender, run as a process."""

    plane: ControlPlane
    namespace: str
    flags: list[str]
    env: dict[str, str]
    name: str = "extender-0"
    # Where the admission listener binds: loopback (the Service reaches it through a
    # forwarder), or the Service's own ClusterIP and port (no forwarder in the way, as
    # a benchmark wants; a port under 1024 needs root).
    admission_host: str = "127.0.0.1"
    admission_port: int = 0
    process: Process | None = None
    port: int = 0
    probe_port: int = 0

    def __post_init__(self) -> None:
        # Kept across restarts: the Service's forwarder points at the admission port.
        self.port, self.probe_port = free_port(), free_port()
        self.admission_port = self.admission_port or free_port()

    def start(self, *, wait: bool = True) -> Extender:
        kubeconfig = self.plane.service_account_kubeconfig(self.namespace, "runtimeclass-extender")
        argv = [
            sys.executable,
            "-m",
            "extender",
            "serve",
            *self.flags,
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--probe-port={self.probe_port}",
            f"--kubeconfig={kubeconfig}",
        ]
        if any(f.startswith("--admission-") or f.startswith("--webhook-certificate") for f in self.flags):
            argv += [f"--admission-host={self.admission_host}", f"--admission-port={self.admission_port}"]
        env = {**self.env, "POD_NAME": self.name, "POD_NAMESPACE": self.namespace}
        self.process = self.plane.spawn(self.name, argv, env=env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.process.tail(60)}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.probe_port}/readyz", timeout=2
                ) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(
            f"{self.name} not ready after {timeout:.0f} s:\n{self.process.tail(60) if self.process else ''}"
        )

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.plane.processes.remove(self.process)
            self.process = None


@dataclass
class Installed:
    plane: ControlPlane
    docs: list[Manifest]
    namespace: str
    extenders: list[Extender] = field(default_factory=list)
    # The webhook Service's addresses forwarded to a replica (kube-proxy's part).
    forwarded: list[tuple[str, int]] = field(default_factory=list)

    @property
    def extender(self) -> Extender:
        return self.extenders[0]

    def stop_extenders(self) -> None:
        for extender in self.extenders:
            extender.stop()

    def start_extenders(self) -> None:
        for extender in self.extenders:
            extender.start(wait=False)
        for extender in self.extenders:
            extender.wait_ready()

    def uninstall(self) -> None:
        """Delete what was applied (cluster-scoped objects especially: the next install
        on this control plane starts clean). Namespaced objects go with their kinds'
        deletions; the namespace itself stays (no controller-manager to finish it). Waits
        until each CustomResourceDefinition is gone: one still terminating would take the
        next install's copy of it down with it."""
        self.stop_extenders()
        self.plane.stop_forwarding(self.forwarded)
        for doc in reversed(self.docs):
            if doc["kind"] in _NOT_APPLIED or doc["kind"] == "Namespace":
                continue
            self.plane.delete(doc)
        deadline = time.monotonic() + 60
        for doc in self.docs:
            if doc["kind"] != "CustomResourceDefinition":
                continue
            while self.plane.client.request("GET", object_path(doc)).status != 404:
                if time.monotonic() > deadline:
                    raise AssertionError(f"CustomResourceDefinition {doc['metadata']['name']} still there")
                time.sleep(0.1)


def install(
    plane: ControlPlane,
    docs: Sequence[Manifest],
    *,
    replicas: int = 1,
    extra_flags: Sequence[str] = (),
    start: bool = True,
    on_service_address: bool = False,
) -> Installed:
    """Apply ``docs`` (an overlay or the chart as rendered) and start ``replicas`` extenders
    with the Deployment's flags (plus ``extra_flags``); ``on_service_address``: the first
    replica's admission listener binds the webhook Service's ClusterIP and port itself."""
    applied = [d for d in docs if d["kind"] not in _NOT_APPLIED]
    namespace = next(d for d in docs if d["kind"] == "Deployment")["metadata"]["namespace"]
    plane.apply_all(applied)
    container = extender_container(docs)
    args = list(container["args"])
    assert args[0] == "serve", args
    flags = [a for a in args[1:] if a.split("=", 1)[0] not in LOCAL_FLAGS] + list(extra_flags)
    env = _downward_env(container.get("env") or (), namespace)
    installed = Installed(plane, list(applied), namespace)
    has_service = any(d["kind"] == "Service" and d["metadata"]["name"] == WEBHOOK_SERVICE for d in docs)
    direct: dict[str, Any] = {}
    if has_service and on_service_address:
        service = plane.client.get(f"/api/v1/namespaces/{namespace}/services/{WEBHOOK_SERVICE}")
        direct = {"admission_host": service["spec"]["clusterIP"], "admission_port": service["spec"]["ports"][0]["port"]}
    for index in range(replicas):
        extra = direct if index == 0 else {}
        installed.extenders.append(Extender(plane, namespace, flags, env, name=f"extender-{index}", **extra))
    if start:
        installed.start_extenders()
    if has_service and not direct:
        # One replica answers the webhooks (the Service's endpoints, without kube-proxy).
        installed.forwarded = plane.forward_service(
            namespace, WEBHOOK_SERVICE, ("127.0.0.1", installed.extender.admission_port)
        )
    return installed


def _downward_env(env: Iterable[Mapping[str, Any]], namespace: str) -> dict[str, str]:
    """The container's environment as the kubelet would give it (metadata.namespace from
    the downward API; POD_NAME is the replica's own)."""
    values: dict[str, str] = {}
    for variable in env:
        if "value" in variable:
            values[variable["name"]] = str(variable["value"])
        elif variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            values[variable["name"]] = namespace
    return {k: v for k, v in values.items() if k != "POD_NAME"} | {
        "PYTHONUNBUFFERED": "1",
        "PATH": os.environ.get("PATH", ""),
    }
