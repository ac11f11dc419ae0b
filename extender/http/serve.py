"""``serve``: everything the running extender is made of, wired in one place.

From a ``ServeSettings`` this builds, in order: the policy, the cluster state with its
selector-error log, the source (a cluster file, or a live cluster: connection, watch,
node lookup), the app (``extender.http.app.create_app``, which makes the decision
cache), and the optional parts: the leader election (``extender.cluster.leader``)
that gates the two acting parts, the pending-pod requeuer, the running-pod audit
(``extender.audit.auditor``), the capture writer, the
certificate reloader, with ``admission-port`` the webhook's own HTTPS listener
(``extender.http.admission_listener``) and with ``webhook-certificate-secret`` its
self-managed certificates (``extender.certificates.keeper``: the observing side on
every replica, the leading side gated like the requeuer), and with ``probe-port`` the
probes' own listener (``extender.http.probe_listener``). Each background job is registered with
``extender.tasks.background``, so it starts after the app is set up and is stopped in
reverse order on shutdown (the API client closes last). The components themselves know
nothing of aiohttp; the ``attach_*`` functions are the only place they meet the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import Gauge

from extender.admission import RoutingConfig
from extender.audit.auditor import Auditor
from extender.capture.writer import CaptureWriter
from extender.certificates.serving import SwitchingContext
from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.file_source import load_cluster_file
from extender.cluster.leadership import ElectionOptions, Leadership, identity, own_namespace
from extender.cluster.live import LiveCluster, LiveOptions
from extender.cluster.metrics import PREFIX
from extender.cluster.state import ClusterState
from extender.http.admission import PATHS as ADMISSION_PATHS
from extender.http.admission_listener import AdmissionListener, admission_listener, create_admission_app
from extender.http.app import create_app
from extender.http.keys import (
    CAPTURE,
    LEADERSHIP,
    METRICS,
    NODE_LOOKUP,
    POLICY,
    SOURCES,
    UNHEALTHY_AFTER,
    WEBHOOK_CERTIFICATES,
)
from extender.http.listen import bind_listener
from extender.http.metrics import CAPTURE_COUNTERS, NODE_LOOKUP_COUNTERS
from extender.http.probe_listener import create_probe_app, probe_socket
from extender.http.tls import (
    RELOAD_INTERVAL_SECONDS,
    CertificateReloader,
    TLSFiles,
    server_context,
    tls_files,
)
from extender.policy_file import load_policy
from extender.requeue.requeuer import RequeueOptions, Requeuer
from extender.settings import ServeSettings, SettingsError
from extender.startup_checks import configuration_warnings
from extender.tasks import background, on_shutdown

if TYPE_CHECKING:
    from extender.certificates.keeper import CertificateOptions

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
    app.cleanup_ctx.append(background("cluster-watch", live.watch.run))


# With --leader-elect: 1 on the replica that acts.
LEADER_GAUGE = PREFIX + "leader"


def attach_leader_election(
    app: web.Application, api: Any, leadership: Leadership, *, ready: Callable[[], bool]
) -> None:
    """After ``attach_live`` and before the acting parts: the election stops after them
    (a leader drains its nudges, then hands the Lease on) and before the API client."""
    # Here, not at the top: the election loads kubernetes-asyncio's whole generated
    # client (about 35 MB resident), which a serve without --leader-elect never needs.
    from extender.cluster.leader import LeaderElector

    elector = LeaderElector(api, leadership, ready=ready)
    app[LEADERSHIP] = leadership
    Gauge(
        LEADER_GAUGE,
        "1 while this replica holds the leader-election Lease (acts on the cluster), else 0.",
        registry=app[METRICS].registry,
    ).set_function(lambda: 1.0 if leadership.leading else 0.0)
    app.cleanup_ctx.append(background("leader-election", elector.run))


def leadership_for(settings: ServeSettings) -> Leadership:
    return Leadership(
        identity(),
        ElectionOptions(
            lease_name=settings.leader_elect_lease_name,
            namespace=settings.leader_elect_lease_namespace or own_namespace(),
            lease_duration=settings.leader_elect_lease_duration,
            renew_deadline=settings.leader_elect_renew_deadline,
            retry_period=settings.leader_elect_retry_period,
        ),
    )


def attach_requeuer(app: web.Application, requeuer: Requeuer) -> None:
    """After ``attach_live``: the requeuer stops before the API client closes."""
    requeuer.register_metrics(app[METRICS].registry)
    app.cleanup_ctx.append(background("requeuer", requeuer.run, drain=requeuer.drain))


def attach_audit(app: web.Application, auditor: Auditor) -> None:
    """After ``attach_live``: the misplaced-pod gauge, and the pod informer as a job that
    stops before the API client closes."""
    auditor.register_metrics(app[METRICS].registry)
    app.cleanup_ctx.append(background("audit", auditor.run))


def attach_capture(app: web.Application, writer: CaptureWriter) -> None:
    """Capture every filter call of ``app``; on shutdown what is queued is written first."""
    app[CAPTURE] = writer
    app[METRICS].add_stats(writer.stats, CAPTURE_COUNTERS)
    app.cleanup_ctx.append(background("capture-writer", writer.run, drain=writer.close))


def attach_certificate_reloader(
    app: web.Application,
    context: ssl.SSLContext,
    files: TLSFiles,
    *,
    interval: float = RELOAD_INTERVAL_SECONDS,
    name: str = "tls-reloader",
) -> None:
    reloader = CertificateReloader(context, files)
    app.cleanup_ctx.append(background(name, lambda: reloader.run(interval)))


def webhook_certificate_options(settings: ServeSettings) -> CertificateOptions:
    from extender.certificates.keeper import CertificateOptions

    assert settings.webhook_certificate_secret is not None
    return CertificateOptions(
        secret=settings.webhook_certificate_secret,
        # The pod webhook's namespace setting when given, else the pod's own.
        namespace=settings.namespace or own_namespace(),
        service=settings.webhook_service,
        validating_configuration=settings.webhook_validating_configuration,
        mutating_configuration=settings.webhook_mutating_configuration,
    )


def attach_webhook_certificates(
    app: web.Application,
    api: Any,
    switching: SwitchingContext,
    options: CertificateOptions,
    leadership: Leadership | None,
) -> None:
    """After ``attach_live`` (and the election, if any): every replica observes (follows
    the Secret, switches the listener's pair, reports trust); the leader, or the only
    replica without ``--leader-elect``, also writes (``lead``)."""
    # Here, not at the top: cryptography is loaded only when certificates are self-managed.
    from extender.certificates.keeper import WebhookCertificates

    keeper = WebhookCertificates(api, options, switching)
    app[WEBHOOK_CERTIFICATES] = keeper
    keeper.register_metrics(app[METRICS].registry)
    app.cleanup_ctx.append(background("webhook-certificates", keeper.observe))
    lead: Callable[[], Awaitable[None]] = (
        keeper.lead if leadership is None else partial(leadership.while_leading, keeper.lead)
    )
    app.cleanup_ctx.append(background("webhook-certificates-leader", lead))


async def start_probe_listener(app: web.Application, sock: socket.socket) -> web.AppRunner:
    """The probes' plain-HTTP listener over ``app``'s state, on the socket bound at start."""
    runner = web.AppRunner(create_probe_app(app), handle_signals=False, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    log.info(
        "serving probes",
        extra={
            "listen": ",".join(f"{addr[0]}:{addr[1]}" for addr in runner.addresses),
            "path": "/healthz,/readyz,/metrics",
        },
    )
    return runner


async def start_admission_listener(app: web.Application, listener: AdmissionListener) -> web.AppRunner:
    """The webhook's HTTPS listener over ``app``'s state, on the socket
    ``admission_listener`` bound."""
    runner = web.AppRunner(create_admission_app(app), handle_signals=False, access_log=None)
    await runner.setup()
    await web.SockSite(runner, listener.sock, ssl_context=listener.context).start()
    log.info(
        "serving admission webhook",
        extra={
            "listen": ",".join(f"{addr[0]}:{addr[1]}" for addr in runner.addresses),
            "scheme": "https",
            "path": ",".join(ADMISSION_PATHS),
            "certFile": listener.files.cert_file if listener.files else "self-managed",
        },
    )
    return runner


def capture_writer(settings: ServeSettings) -> CaptureWriter:
    """The writer for the capture settings; the directory is created now, so a path that
    cannot be used stops the process at start instead of dropping captures."""
    assert settings.capture_dir is not None
    directory = Path(settings.capture_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as exc:
        raise SettingsError(f"capture-dir: cannot use {directory}: {exc}") from None
    return CaptureWriter(
        directory, max_files=settings.capture_max_files, max_bytes=settings.capture_max_bytes
    )


def requeue_options(settings: ServeSettings) -> RequeueOptions:
    rate = settings.requeue_rate
    return RequeueOptions(
        scheduler_names=settings.requeue_scheduler_names,
        window=settings.requeue_window,
        rate=rate,
        burst=max(1, min(5, int(rate))),
    )


async def connect_live(
    settings: ServeSettings, state: ClusterState, selector_errors: SelectorErrorLog
) -> LiveCluster:
    """Live cluster mode: raises ServeError at once when no API server is configured."""
    # Imported here: kubernetes-asyncio takes about a second to import, and only live
    # mode needs it.
    from extender.cluster.kube import KubeConfigError, connect

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
    warnings = configuration_warnings(cluster_file=settings.cluster_file, state=state, policy=policy)
    for warning in warnings:
        log.warning(warning)
    app = create_app(
        state=state,
        policy=policy,
        max_body_bytes=settings.max_body_bytes,
        max_nodes_per_request=settings.max_nodes_per_request,
        body_read_timeout=settings.body_read_timeout,
        source_stats=live.source_stats if live is not None else None,
        warnings=warnings,
        routing=RoutingConfig(settings.route_pods_to_scheduler, settings.namespace or ""),
    )
    if live is not None:
        attach_live(app, live)
        leadership = leadership_for(settings) if settings.leader_elect else None
        requeuer = (
            Requeuer(live.api, state, options=requeue_options(settings), leadership=leadership)
            if settings.requeue_pending_pods
            else None
        )
        auditor = Auditor(live.api, state, leadership=leadership) if settings.audit_running_pods else None
        if leadership is not None:

            def caches_listed() -> bool:
                # Campaign on warm caches only: a new leader acts at once, never cold.
                return (
                    state.synced
                    and (requeuer is None or requeuer.pods.listed.is_set())
                    and (auditor is None or auditor.synced)
                )

            attach_leader_election(app, live.api, leadership, ready=caches_listed)
        if requeuer is not None:
            attach_requeuer(app, requeuer)
        if auditor is not None:
            attach_audit(app, auditor)
        if webhook_serving is not None and settings.webhook_certificate_secret:
            attach_webhook_certificates(
                app, live.api, webhook_serving, webhook_certificate_options(settings), leadership
            )
    if capture is not None:
        attach_capture(app, capture)
    if tls is not None and ssl_context is not None:
        attach_certificate_reloader(app, ssl_context, tls)
    return app, ssl_context


async def serve(settings: ServeSettings) -> None:
    """Run until SIGINT or SIGTERM."""
    # First, before anything is loaded or logged: an unusable port, host, webhook
    # certificate or webhook port stops the start with one line.
    sock = bind_listener(settings.host, settings.port)
    with contextlib.closing(sock), contextlib.ExitStack() as stack:
        admission = admission_listener(settings)
        if admission is not None:
            stack.enter_context(contextlib.closing(admission.sock))
        probes = probe_socket(settings)
        if probes is not None:
            stack.enter_context(contextlib.closing(probes))
        await _serve_until_stopped(settings, sock, admission, probes)


async def _serve_until_stopped(
    settings: ServeSettings,
    sock: socket.socket,
    admission: AdmissionListener | None,
    probes: socket.socket | None = None,
) -> None:
    app, ssl_context = await build_app(
        settings, webhook_serving=admission.switching if admission is not None else None
    )
    if admission is not None and admission.files is not None:
        attach_certificate_reloader(app, admission.context, admission.files, name="admission-tls-reloader")
    # What is loaded by now lives as long as the process: keep the cyclic collector
    # from re-scanning it on every full collection (a pause some filter call waits out).
    gc.freeze()
    # No access log: one line per scheduler call costs time on every pod's critical path.
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock, ssl_context=ssl_context)
    await site.start()
    admission_runner = await start_admission_listener(app, admission) if admission is not None else None
    probe_runner = await start_probe_listener(app, probes) if probes is not None else None
    addresses = [f"{addr[0]}:{addr[1]}" for addr in runner.addresses]
    log.info(
        "serving",
        extra={
            "listen": ",".join(addresses),
            "scheme": "https" if ssl_context else "http",
            "clientCertificates": bool(settings.client_ca_file),
            "predicates": ",".join(app[POLICY].names),
        },
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        if probe_runner is not None:
            await probe_runner.cleanup()
        if admission_runner is not None:
            await admission_runner.cleanup()
        await runner.cleanup()
