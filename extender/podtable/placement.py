"""Who places the pods of a RuntimeClass, as the install says it, against what this replica runs.

The install's manifests say it on the extender's own Namespace, its label
``PLACEMENT_LABEL`` (``default-scheduler``; absent: the RuntimeClass scheduler): the
default-scheduler placement's guard selects its param by that label, and the mutating
pod admission policy of the same manifests routes pods or does not, so the API server
follows an install's placement the moment its manifests are applied
(components/default-scheduler-placement). The extender's ``--placement`` comes with the
same manifests, in its Deployment. The two differ while a move between placements rolls
out (the replicas of the old Deployment still run), and for good when the Namespace
lost its label or never had it (a chart installed with ``namespace.create=false`` into a
namespace made elsewhere): then the guard selects nothing and refuses nothing, and a pod
of a class the table does not hold yet would be placed anywhere.

So every replica reads its Namespace at start and every ``interval`` seconds (a GET by
name, which a Role in its namespace allows: components/pod-admission-policy/rbac.yaml),
and says it while the two differ: the pod admission table's part of ``/readyz`` is not
ready, with why (extender.podtable.keeper), and the log says it once per change.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from extender.admission.pod_table import NAMESPACE_PATH, PLACEMENT_LABEL
from extender.kube.api import ApiError, request_json
from extender.settings import PLACEMENT_RUNTIMECLASS_SCHEDULER

log = logging.getLogger("extender.podtable")


class InstalledPlacement:
    """The placement the install's Namespace says, read again every ``interval`` seconds."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        *,
        running: str,
        interval: float = 30.0,
        request_timeout: float = 10.0,
    ) -> None:
        self._api = api
        self.namespace = namespace
        self.running = running
        self.interval = interval
        self.request_timeout = request_timeout
        # None until read.
        self.installed: str | None = None

    def problem(self) -> str | None:
        """Why the install and this replica disagree, or None."""
        if self.installed is None or self.installed == self.running:
            return None
        return (
            f"namespace {self.namespace} says placement {self.installed} (its label {PLACEMENT_LABEL}), and "
            f"this replica runs placement {self.running}: a move between placements is rolling out, or the "
            f"namespace lost the label (docs/upgrading.md#moving-between-placements)"
        )

    async def run(self) -> None:
        while True:
            await self.read()
            await asyncio.sleep(self.interval)

    async def read(self) -> None:
        try:
            found = await request_json(
                self._api,
                "GET",
                NAMESPACE_PATH,
                path_params={"name": self.namespace},
                timeout=aiohttp.ClientTimeout(total=self.request_timeout),
            )
        except (ApiError, aiohttp.ClientError, TimeoutError, OSError):
            return  # as before: the next read
        metadata = found.get("metadata") if isinstance(found, dict) else None
        labels = (metadata or {}).get("labels") or {}
        installed = str(labels.get(PLACEMENT_LABEL) or PLACEMENT_RUNTIMECLASS_SCHEDULER)
        if installed != self.installed:
            self.installed = installed
            problem = self.problem()
            if problem is not None:
                log.warning(problem)
            else:
                log.info("the install's placement is this replica's", extra={"placement": installed})
