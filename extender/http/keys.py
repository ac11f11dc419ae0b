"""Every key of the aiohttp application's typed state, in one place.

Handlers read what they need from ``request.app[KEY]``; ``extender.http.app`` sets the
keys every app has, and ``extender.http.wiring`` the ones a feature adds (live cluster
mode, capture). A key that is absent means its feature is off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from extender.admission import RoutingConfig
from extender.autoscaling.finder import AutoscalerCheck
from extender.capture.writer import CaptureWriter
from extender.cluster.node_lookup import NodeLookup
from extender.cluster.state import ClusterState
from extender.decision_cache import DecisionCache
from extender.http.admission_metrics import AdmissionMetrics
from extender.http.metrics import Metrics
from extender.kube.health import SourceStats
from extender.leader.gate import LeaderGate
from extender.podtable.keeper import PodAdmissionTable
from extender.podtable.plugin_finder import PluginFinder
from extender.tasks import BackgroundTasks
from policies.registry import Policy

if TYPE_CHECKING:
    from extender.certificates.keeper import WebhookCertificates
    from extender.http.sampling import HiddenNodeReports

STATE = web.AppKey("state", ClusterState)
POLICY = web.AppKey("policy", Policy)
# The filter's fast path over STATE (created with the app, never shared between apps).
DECISIONS = web.AppKey("decisions", DecisionCache)
METRICS = web.AppKey("metrics", Metrics)
MAX_NODES = web.AppKey("max_nodes", int)
# The body limit (max-body-bytes), also checked against a declared Content-Length.
MAX_BODY_BYTES = web.AppKey("max_body_bytes", int)
BODY_READ_TIMEOUT = web.AppKey("body_read_timeout", float)
# Set in live cluster mode, absent with a cluster file: the watch sources' health (for
# /healthz), the liveness window in seconds, and the direct lookup of node names the
# watch has not delivered yet.
SOURCES = web.AppKey("sources", list[SourceStats])
# Every informer's health (the cluster state's and the leader actors'), for the
# /healthz body; only SOURCES decide liveness (see extender.http.app.healthz).
INFORMERS: web.AppKey[Callable[[], list[SourceStats]]] = web.AppKey("informers")
# The app's background tasks: one that ended while the app runs makes /healthz 503.
TASKS = web.AppKey("tasks", BackgroundTasks)
UNHEALTHY_AFTER = web.AppKey("unhealthy_after", float)
NODE_LOOKUP = web.AppKey("node_lookup", NodeLookup)
# Set with --capture-dir.
CAPTURE = web.AppKey("capture", CaptureWriter)
# What the configuration means that the operator may not have intended (an empty
# cluster file, a policy without predicates): logged at start, listed by /readyz.
WARNINGS = web.AppKey("warnings", tuple[str, ...])
# The webhook's counters (POST /admission/runtimeclasses), on the app's registry.
ADMISSION_METRICS: web.AppKey[AdmissionMetrics] = web.AppKey("admission_metrics")
# Filter calls where kube-scheduler's node sampling hid the fitting nodes, per class.
HIDDEN_NODES: web.AppKey[HiddenNodeReports] = web.AppKey("hidden_nodes")
# Node autoscalers that cannot see the RuntimeClasses' rules (live mode without label-nodes).
AUTOSCALER_CHECK = web.AppKey("autoscaler_check", AutoscalerCheck)
# The pod webhook's routing (serve --route-pods-to-scheduler); absent: routing off.
ROUTING = web.AppKey("routing", RoutingConfig)
# Set with --leader-elect: who leads, for /readyz and the leader gauge.
LEADER_GATE = web.AppKey("leader_gate", LeaderGate)
# Set with webhook-certificate-secret: the self-managed webhook certificates, for
# /readyz (a detail on the main listener, the status on the admission listener).
WEBHOOK_CERTIFICATES: web.AppKey[WebhookCertificates] = web.AppKey("webhook_certificates")
# Set with label-nodes: who places the pods of a RuntimeClass (the placement setting),
# for /readyz.
PLACEMENT: web.AppKey[str] = web.AppKey("placement")
# Set with pod-admission-table: the table the API server's pod admission reads, for
# /readyz (a detail on the main listener, the status on the probe and admission ones).
POD_ADMISSION_TABLE = web.AppKey("pod_admission_table", PodAdmissionTable)
# Live mode: whether the API server runs the RuntimeClass admission plugin, for /readyz.
PLUGIN_FINDER = web.AppKey("plugin_finder", PluginFinder)
