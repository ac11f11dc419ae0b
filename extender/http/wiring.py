"""``serve``'s app, with every part the settings ask for attached: the wiring in one place.

``build_app`` builds, in order: the TLS context, the policy, the capture writer, the
cluster state with its selector-error log, the source (a cluster file, or a live
cluster: connection, watch, node lookup), the configuration warnings
(``extender.startup_checks``), the leader actors (the pending-pod requeuer, the
running-pod audit, the node labeller and its events, the self-managed webhook
certificates) and their runner (``extender.leader.runner``), the app
(``extender.http.app.create_app``, which makes the decision cache), and attaches the
optional parts: the leader election (``extender.leader.election``) that gates the
actors, the capture writer and the certificate reloaders. Each background job is
registered with the app's ``extender.tasks.BackgroundTasks``, so it starts after the
app is set up, is stopped in reverse order on shutdown (the API client closes last),
and turns ``/healthz`` unhealthy if it ends early. The components know nothing of
aiohttp; the ``attach_*`` functions are the only place they meet the app. What each is
given comes from ``extender.http.options``; the process around the app (sockets,
listeners, signals) is ``extender.http.serve``.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from extender.autoscaling.finder import AutoscalerCheck
from extender.capture.writer import CaptureWriter
from extender.certificates.serving import SwitchingContext
from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.class_labels import ClassLabels
from extender.cluster.file_source import load_cluster_file
from extender.cluster.live import LiveCluster, LiveOptions
from extender.cluster.state import ClusterState
from extender.http.actors import leader_actors
from extender.http.app import create_app
from extender.http.keys import (
    AUTOSCALER_CHECK,
    CAPTURE,
    INFORMERS,
    LEADER_GATE,
    METRICS,
    NODE_LOOKUP,
    PLACEMENT,
    PLUGIN_FINDER,
    POD_ADMISSION_TABLE,
    SOURCES,
    TASKS,
    UNHEALTHY_AFTER,
    WEBHOOK_CERTIFICATES,
)
from extender.http.metrics import CAPTURE_COUNTERS, NODE_LOOKUP_COUNTERS
from extender.http.options import (
    actor_options,
    capture_writer,
    leader_gate_for,
    routing_config,
    webhook_certificate_options,
)
from extender.http.tls import (
    RELOAD_INTERVAL_SECONDS,
    CertificateReloader,
    TLSFiles,
    server_context,
    tls_files,
)
from extender.kube.health import SourceStats, waiting_report
from extender.kube.incluster import own_namespace
from extender.leader.limits import WriteLimiter
from extender.leader.runner import LeaderRunner
from extender.podtable.keeper import PodAdmissionTable
from extender.podtable.placement import InstalledPlacement
from extender.podtable.plugin_finder import PluginFinder
from extender.policy_file import load_policy
from extender.settings import ServeSettings
from extender.startup_checks import configuration_warnings
from extender.tasks import on_shutdown
from policies.registry import Policy

if TYPE_CHECKING:
    from extender.certificates.keeper import WebhookCertificates

log = logging.getLogger("extender")


class ServeError(Exception):
    """``serve`` cannot start; the message says why (printed without a trace)."""


def attach_live(app: web.Application, live: LiveCluster) -> None:
    """Live cluster mode: health sources, node lookup, and the watch as a background job.
    The API client is closed last (cleanup contexts unwind in reverse)."""
    app[SOURCES] = live.watch.stats
    app[UNHEALTHY_AFTER] = live.options.unhealthy_after
    app[NODE_LOOKUP] = live.lookup
    app[METRICS].add_stats(live.lookup.stats, NODE_LOOKUP_COUNTERS)
    app.cleanup_ctx.append(on_shutdown(live.api.close))
    app.cleanup_ctx.append(on_shutdown(live.lookup.close))
    app.cleanup_ctx.append(app[TASKS].job("cluster-watch", live.watch.run))


def leader_runner(
    settings: ServeSettings,
    live: LiveCluster,
    state: ClusterState,
    policy: Policy,
    *,
    limiter: WriteLimiter,
    keeper: WebhookCertificates | None = None,
    plugin: PluginFinder | None = None,
) -> LeaderRunner:
    """The leader actors the settings ask for, built before the watch starts (they hear
    the first LISTs), behind a gate with ``leader-elect``, writing through ``limiter``
    (the API client's, which the keeper writes through too)."""
    gate = leader_gate_for(settings) if settings.leader_elect else None
    actors = leader_actors(
        live.api,
        state,
        policy,
        actor_options(settings),
        gate=gate,
        limiter=limiter,
        others=(keeper,) if keeper is not None else (),
        plugin=(lambda: plugin.runs) if plugin is not None else (lambda: None),
    )
    table = next((actor for actor in actors if isinstance(actor, PodAdmissionTable)), None)
    if plugin is not None and table is not None:
        plugin.add_listener(table.plugin_changed)

    def cluster_state_waiting() -> list[str]:
        # Campaign on warm caches only: a new leader acts at once, never cold.
        return [r for s in live.watch.stats if (r := waiting_report(s)) is not None]

    return LeaderRunner(actors, gate, also_waiting=cluster_state_waiting)


def attach_leader_work(app: web.Application, api: Any, runner: LeaderRunner) -> None:
    """After ``attach_live``: the election, then one job per actor, so on shutdown the
    actors stop first (a leader drains what it owes), then the election hands the Lease
    on, then the watch and the API client."""
    runner.register_metrics(app[METRICS].registry)
    tasks = app[TASKS]
    if runner.gate is not None:
        # Here, not at the top: the election loads kubernetes-asyncio's whole generated
        # client (about 35 MB resident), which a serve without --leader-elect never needs.
        from extender.leader.election import LeaderElector

        app[LEADER_GATE] = runner.gate
        elector = LeaderElector(api, runner.gate, waiting=runner.waiting)
        app.cleanup_ctx.append(tasks.job("leader-election", elector.run))
    for job in runner.jobs():
        app.cleanup_ctx.append(tasks.job(job.name, job.run, drain=job.drain))


def attach_autoscaler_check(app: web.Application, check: AutoscalerCheck) -> None:
    """After ``attach_live``: the check for node autoscalers that cannot see the
    RuntimeClasses' rules, its gauge, and its warning in ``/readyz``."""
    app[AUTOSCALER_CHECK] = check
    check.register_metrics(app[METRICS].registry)
    app.cleanup_ctx.append(app[TASKS].job("autoscaler-check", check.run))


def attach_plugin_finder(app: web.Application, finder: PluginFinder) -> None:
    """After ``attach_live``: finding out whether the API server runs the RuntimeClass
    admission plugin, its gauge, and what it found in ``/readyz``."""
    app[PLUGIN_FINDER] = finder
    finder.register_metrics(app[METRICS].registry)
    app.cleanup_ctx.append(app[TASKS].job("runtimeclass-plugin-finder", finder.run))


def installed_placement(settings: ServeSettings, live: LiveCluster) -> InstalledPlacement:
    return InstalledPlacement(live.api, settings.namespace or own_namespace(), running=settings.placement)


def attach_installed_placement(app: web.Application, table: PodAdmissionTable, placement: InstalledPlacement) -> None:
    """After ``attach_live``: the install's placement against this replica's, read by
    every replica, in the table's part of ``/readyz``."""
    table.placement = placement
    app.cleanup_ctx.append(app[TASKS].job("installed-placement", placement.run))


def plugin_finder(settings: ServeSettings, live: LiveCluster, state: ClusterState) -> PluginFinder:
    """Every replica's finder, probing in the extender's own namespace."""
    return PluginFinder(
        live.api,
        settings.namespace or own_namespace(),
        classes=lambda: state.runtime_classes.keys(),
        ready=lambda: state.runtime_classes.synced,
    )


def autoscaler_check(
    settings: ServeSettings, live: LiveCluster, state: ClusterState, policy: Policy, plugin: PluginFinder | None
) -> AutoscalerCheck | None:
    """The check, in live mode without label-nodes (with it, every class is seen)."""
    if settings.label_nodes:
        return None
    reference = settings.cluster_autoscaler_status
    namespace, _, name = reference.partition("/")
    return AutoscalerCheck(
        live.api,
        state,
        ClassLabels(settings.node_label_prefix, policy),
        status_configmap=(namespace, name) if reference else None,
        admission_plugin=(lambda: plugin.runs) if plugin is not None else (lambda: None),
    )


def attach_capture(app: web.Application, writer: CaptureWriter) -> None:
    """Capture every filter call of ``app``; on shutdown what is queued is written first."""
    app[CAPTURE] = writer
    app[METRICS].add_stats(writer.stats, CAPTURE_COUNTERS)
    app.cleanup_ctx.append(app[TASKS].job("capture-writer", writer.run, drain=writer.close))


def attach_certificate_reloader(
    app: web.Application,
    context: ssl.SSLContext,
    files: TLSFiles,
    *,
    interval: float = RELOAD_INTERVAL_SECONDS,
    name: str = "tls-reloader",
) -> None:
    reloader = CertificateReloader(context, files)
    app.cleanup_ctx.append(app[TASKS].job(name, lambda: reloader.run(interval)))


def webhook_certificates(
    settings: ServeSettings, live: LiveCluster, serving: SwitchingContext, limiter: WriteLimiter
) -> WebhookCertificates:
    """The certificate keeper (a leader actor): it switches ``serving``, the admission
    listener's context, to each pair it follows."""
    # Here, not at the top: cryptography is loaded only when certificates are self-managed.
    from extender.certificates.keeper import WebhookCertificates

    return WebhookCertificates(live.api, webhook_certificate_options(settings), serving, limiter=limiter)


def informer_stats(live: LiveCluster, runner: LeaderRunner) -> Callable[[], list[SourceStats]]:
    """Every informer's health: the cluster state's watch, then the leader actors'."""
    actors = runner.sources()
    return lambda: [*live.watch.stats, *actors]


async def connect_live(
    settings: ServeSettings, state: ClusterState, selector_errors: SelectorErrorLog
) -> LiveCluster:
    """Live cluster mode: raises ServeError at once when no API server is configured."""
    # Imported here: kubernetes-asyncio takes about a second to import, and only live
    # mode needs it.
    from extender.kube.connect import KubeConfigError, connect

    try:
        connection = await connect(kubeconfig=settings.kubeconfig, context=settings.context)
    except KubeConfigError as exc:
        raise ServeError(str(exc)) from None
    log.info("watching the API server", extra={"server": connection.host, "config": connection.source})
    return LiveCluster(
        connection.api,
        state,
        options=LiveOptions(unhealthy_after=settings.unhealthy_after),
        selector_errors=selector_errors,
    )


async def build_app(
    settings: ServeSettings, *, webhook_serving: SwitchingContext | None = None
) -> tuple[web.Application, ssl.SSLContext | None]:
    """The app ``serve`` runs, with every part the settings ask for attached.
    ``webhook_serving``: the admission listener's context, with self-managed certificates."""
    tls = tls_files(settings)
    ssl_context = server_context(tls) if tls is not None else None  # fail fast on bad TLS files
    policy = load_policy(settings.policy_file)
    # Before anything is loaded or logged as done: a capture directory that cannot be
    # used is a bad setting like any other.
    capture = capture_writer(settings) if settings.capture_dir else None
    state = ClusterState()
    # Created here, not found in a module global: the file source and the watch report
    # bad node-selector-term annotations to it, and it logs each class revision once.
    selector_errors = SelectorErrorLog()
    live = None
    if settings.cluster_file:
        load_cluster_file(settings.cluster_file, state, selector_errors=selector_errors)
        log.info(
            "loaded cluster file",
            extra={
                "path": settings.cluster_file,
                "nodes": len(state.nodes),
                "runtimeClasses": len(state.runtime_classes),
            },
        )
    else:
        live = await connect_live(settings, state, selector_errors)
    warnings = configuration_warnings(
        cluster_file=settings.cluster_file,
        state=state,
        policy=policy,
        label_nodes=settings.label_nodes,
        admission_port=settings.admission_port,
    )
    for warning in warnings:
        log.warning(warning)
    # One per API client: every leader actor's writes over it honour one 429 pause.
    limiter = WriteLimiter()
    keeper = (
        webhook_certificates(settings, live, webhook_serving, limiter)
        if live is not None and webhook_serving is not None and settings.webhook_certificate_secret
        else None
    )
    # Where the extender keeps the pod admission table: the install grants the probe there.
    finder = plugin_finder(settings, live, state) if live is not None and settings.pod_admission_table else None
    runner = (
        leader_runner(settings, live, state, policy, limiter=limiter, keeper=keeper, plugin=finder)
        if live is not None
        else None
    )
    informers = informer_stats(live, runner) if live is not None and runner is not None else None
    app = create_app(
        state=state,
        policy=policy,
        max_body_bytes=settings.max_body_bytes,
        max_nodes_per_request=settings.max_nodes_per_request,
        body_read_timeout=settings.body_read_timeout,
        source_stats=informers,
        warnings=warnings,
        routing=routing_config(settings, policy),
    )
    if live is not None and runner is not None and informers is not None:
        attach_live(app, live)
        app[INFORMERS] = informers
        attach_leader_work(app, live.api, runner)
        if finder is not None:
            attach_plugin_finder(app, finder)
        check = autoscaler_check(settings, live, state, policy, finder)
        if check is not None:
            attach_autoscaler_check(app, check)
        if keeper is not None:
            app[WEBHOOK_CERTIFICATES] = keeper
        if settings.label_nodes:
            app[PLACEMENT] = settings.placement
        table = next((actor for actor in runner.actors if isinstance(actor, PodAdmissionTable)), None)
        if table is not None:
            app[POD_ADMISSION_TABLE] = table
            attach_installed_placement(app, table, installed_placement(settings, live))
    if capture is not None:
        attach_capture(app, capture)
    if tls is not None and ssl_context is not None:
        attach_certificate_reloader(app, ssl_context, tls)
    return app, ssl_context
