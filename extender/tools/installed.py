"""What the installed extender has found out about the cluster, for the commands that judge it.

An autoscaler sees a RuntimeClass's rules only in its pods (extender.autoscaling), and
what is in a class's pods depends on two facts the extender's leader writes into the pod
admission table (extender.admission.pod_table): whether it keeps the derived node
labels (``spec.labelNodes``), and whether the API server runs the RuntimeClass
admission plugin (``spec.runtimeClassAdmissionPlugin``, which the extender finds out
with a dry-run pod: extender.podtable.plugin_finder). ``check`` and ``node-template``
read them from the table, so that an operator need not say how the cluster runs; a flag
says otherwise. Without the table (no extender installed yet, a cluster file), the
plugin is taken as on, as kube-apiserver ships it (it is in the admission plugins every
kube-apiserver enables by default, ``pkg/kubeapiserver/options/plugins.go``), and the
labels as off.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from typing import Any, Final

from extender.admission.pod_table import TABLE_PATH
from extender.cluster.snapshot import ClusterUnavailable, client_timeout, connect_for_tool, describe_failure
from extender.kube.api import ApiError, request_json

AUTO: Final = "auto"
ON: Final = "on"
OFF: Final = "off"
CHOICES: Final = (AUTO, ON, OFF)


@dataclass(frozen=True)
class Installed:
    """The table's two facts, None where it does not say (no table, no right to read it)."""

    label_nodes: bool | None = None
    admission_plugin: bool | None = None

    def plugin(self, choice: str) -> bool:
        """Whether to take the plugin as running: ``choice`` (on, off), or with ``auto``
        what the table says, else on (kube-apiserver's default)."""
        if choice != AUTO:
            return choice == ON
        return True if self.admission_plugin is None else self.admission_plugin


def from_spec(spec: Any) -> Installed:
    """The facts of a table's ``spec``: the leader writes each field only when it is
    true (extender.admission.pod_table.table_spec), so a table without one says no."""
    if not isinstance(spec, dict):
        return Installed()
    return Installed(
        label_nodes=spec.get("labelNodes") is True,
        admission_plugin=spec.get("runtimeClassAdmissionPlugin") is True,
    )


async def read_installed(api: Any, table: str, timeout: Any) -> Installed:
    """The facts of the table named ``table``; none where it cannot be read."""
    try:
        answer = await request_json(api, "GET", TABLE_PATH, path_params={"name": table}, timeout=timeout)
    except ApiError:
        return Installed()
    return from_spec(answer.get("spec") if isinstance(answer, dict) else None)


def installed_in(args: argparse.Namespace) -> Installed:
    """The facts of the live cluster of ``args`` (its kubeconfig and context), or none
    with a cluster file."""
    if getattr(args, "cluster_file", None):
        return Installed()
    return asyncio.run(_read(args))


async def _read(args: argparse.Namespace) -> Installed:
    connection = await connect_for_tool(args.kubeconfig, args.context)
    try:
        async with connection.api as api:
            return await read_installed(api, args.pod_admission_table, client_timeout(args.request_timeout))
    except Exception as exc:  # connection refused, TLS, DNS, timeouts: say where, and why
        raise ClusterUnavailable(
            f"cannot read PodAdmissionTable {args.pod_admission_table} from {connection.host}: "
            f"{describe_failure(exc, args.request_timeout)}"
        ) from None
