"""Finding out, on every replica, whether the API server runs the RuntimeClass admission plugin.

What the probe is and how its answer reads is ``extender.admission.runtimeclass_plugin``
(pure). This module sends it: one dry-run pod create in the extender's own namespace
(which no pod admission of ours selects), once the RuntimeClasses are listed and then
every ``interval`` seconds (the plugin is an API server flag, which changes only when
the API servers restart with another). Each replica asks for itself: it is a reading,
not a write, and every replica's ``/readyz`` and metrics say what it found.

What reads the finding: the pod admission table's keeper (the table's
``runtimeClassAdmissionPlugin``, and the classes the plugin constrains fully), and the
check for node autoscalers (only the classes whose rules the plugin cannot merge go
unseen by them). A finding stands until a later probe says otherwise; an answer that
says neither (another plugin or a webhook refused the probe first, no right to create
pods, a timeout) leaves it as it was, and until a first one arrives nothing is known
(``runs`` is None: the readers then do what they do without the plugin, the safe side).
It needs ``create`` on pods in its namespace (components/pod-admission-policy/rbac.yaml),
which an admission policy confines to dry runs (admission-policy.yaml there).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Collection
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Gauge

from extender import METRIC_PREFIX
from extender.admission.runtimeclass_plugin import plugin_runs, probe_pod
from extender.kube.api import ApiError, request_json

log = logging.getLogger("extender.podtable")

PODS = "/api/v1/namespaces/{namespace}/pods"
# Until a first finding, ask again sooner than the interval.
RETRY = 10.0


class PluginFinder:
    """Whether the API server runs the RuntimeClass admission plugin (see the module doc)."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        *,
        classes: Callable[[], Collection[str]],
        ready: Callable[[], bool],
        interval: float = 60.0,
        request_timeout: float = 10.0,
    ) -> None:
        self._api = api
        self.namespace = namespace
        self._classes = classes
        self._ready = ready
        self.interval = interval
        self.request_timeout = request_timeout
        # The finding (None: none yet), and why the last probe said nothing, if it did not.
        self.runs: bool | None = None
        self.undetermined = ""
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called when the finding changes."""
        self._listeners.append(listener)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        Gauge(
            METRIC_PREFIX + "runtimeclass_admission_plugin",
            "Whether the API server runs the RuntimeClass admission plugin, as this replica last found "
            "out with a dry-run pod: 1 it does, 0 it does not, -1 not found out yet "
            "(docs/pod-webhook.md#the-runtimeclass-admission-plugin).",
            registry=registry,
        ).set_function(lambda: -1.0 if self.runs is None else float(self.runs))

    def details(self) -> dict[str, object]:
        """For ``/readyz``."""
        found: dict[str, object] = {"runs": self.runs}
        if self.undetermined:
            found["undetermined"] = self.undetermined
        return found

    async def run(self) -> None:
        while not self._ready():
            await asyncio.sleep(0.5)
        while True:
            await self.probe()
            await asyncio.sleep(self.interval if self.runs is not None else min(RETRY, self.interval))

    async def probe(self) -> bool | None:
        """One probe; the finding after it."""
        known = set(self._classes())
        name = f"runtimeclass-extender-probe-{secrets.token_hex(4)}"
        while name in known:
            name = f"runtimeclass-extender-probe-{secrets.token_hex(4)}"
        try:
            await request_json(
                self._api,
                "POST",
                PODS,
                path_params={"namespace": self.namespace},
                query=(("dryRun", "All"), ("fieldManager", "runtimeclass-extender")),
                body=probe_pod(self.namespace, name),
                timeout=aiohttp.ClientTimeout(total=self.request_timeout),
            )
            status, message = 201, ""
        except ApiError as exc:
            status, message = exc.status, exc.message
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            status, message = 0, f"no answer: {type(exc).__name__}: {exc}"
        self._found(plugin_runs(status, message, name), status, message)
        return self.runs

    def _found(self, runs: bool | None, status: int, message: str) -> None:
        if runs is None:
            why = f"HTTP {status}: {message}" if status else message
            if status == 403 and "forbidden" in message.lower() and "admission" not in message.lower():
                why += f" (grant create on pods in namespace {self.namespace}, for dry runs alone)"
            if why != self.undetermined:
                log.warning(
                    "cannot tell whether the API server runs the RuntimeClass admission plugin; "
                    "going on with what was last found",
                    extra={"answer": why, "runs": self.runs},
                )
            self.undetermined = why
            return
        self.undetermined = ""
        if runs == self.runs:
            return
        log.info(
            "the API server runs the RuntimeClass admission plugin"
            if runs
            else "the API server does not run the RuntimeClass admission plugin",
            extra={"namespace": self.namespace},
        )
        self.runs = runs
        for listener in self._listeners:
            listener()
