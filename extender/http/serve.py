"""``serve``: everything the running extender is made of, wired in one place.

From a ``ServeSettings`` this binds the listeners first (a bad port stops the start
at once), then builds, in order: the TLS context, the policy, the capture writer, the
cluster state with its selector-error log, the source (a cluster file, or a live
cluster: connection, watch, node lookup), the configuration warnings
(``extender.startup_checks``), the leader actors (the pending-pod requeuer, the
running-pod audit, the node labeller, the self-managed webhook certificates) and their
runner (``extender.leader.runner``), the app (``extender.http.app.create_app``, which
makes the decision cache), and attaches the optional parts: the leader election
(``extender.leader.election``) that gates the actors, the capture writer, the
certificate reloaders, with ``admission-port`` the webhook's own HTTPS listener
(``extender.http.admission_listener``, whose pair the certificate keeper switches when
it is self-managed), and with ``probe-port`` the probes' own listener
(``extender.http.probe_listener``). Each background job is registered with the app's
``extender.tasks.BackgroundTasks``, so it starts after the app is set up, is stopped in
reverse order on shutdown (the API client closes last), and turns ``/healthz``
unhealthy if it ends early. The components themselves know nothing of aiohttp; the
``attach_*`` functions are the only place they meet the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from extender.admission import RoutingConfig
from extender.audit.auditor import AuditOptions
from extender.capture.writer import CaptureWriter
from extender.certificates.serving import SwitchingContext
from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.class_labels import ClassLabels
from extender.cluster.file_source import load_cluster_file
from extender.cluster.live import LiveCluster, LiveOptions
from extender.cluster.state import ClusterState
from extender.http.actors import ActorOptions, leader_actors
from extender.http.admission import PATHS as ADMISSION_PATHS
from extender.http.admission_listener import AdmissionListener, admission_listener, create_admission_app
from extender.http.app import create_app
from extender.http.keys import (
    CAPTURE,
    INFORMERS,
    LEADER_GATE,
    METRICS,
    NODE_LOOKUP,
    POLICY,
    SOURCES,
    STATE,
    TASKS,
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
from extender.kube.health import SourceStats, waiting_report
from extender.kube.incluster import own_namespace
from extender.labeller.events import EventOptions
from extender.labeller.labeller import LabelOptions
from extender.leader.gate import ElectionOptions, LeaderGate, identity
from extender.leader.runner import LeaderRunner
from extender.policy_file import load_policy
from extender.requeue.requeuer import RequeueOptions
from extender.settings import ServeSettings, SettingsError
from extender.startup_checks import configuration_warnings
from extender.tasks import on_shutdown
from policies.registry import Policy

if TYPE_CHECKING:
    from extender.certificates.keeper import CertificateOptions, WebhookCertificates

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


def leader_gate_for(settings: ServeSettings) -> LeaderGate:
    return LeaderGate(
        identity(),
        ElectionOptions(
            lease_name=settings.leader_elect_lease_name,
            namespace=settings.leader_elect_lease_namespace or own_namespace(),
            lease_duration=settings.leader_elect_lease_duration,
            renew_deadline=settings.leader_elect_renew_deadline,
            retry_period=settings.leader_elect_retry_period,
        ),
    )


def actor_options(settings: ServeSettings) -> ActorOptions:
    """Which leader actors the settings turn on (``extender.http.actors``)."""
    return ActorOptions(
        requeue=requeue_options(settings) if settings.requeue_pending_pods else None,
        audit=AuditOptions() if settings.audit_running_pods else None,
        label=(
            LabelOptions(prefix=settings.node_label_prefix, rate=settings.label_nodes_rate)
            if settings.label_nodes
            else None
        ),
        # Pods the label rules out hear why from an event: FailedScheduling cannot say.
        events=EventOptions() if settings.label_nodes else None,
    )


def leader_runner(
    settings: ServeSettings,
    live: LiveCluster,
    state: ClusterState,
    policy: Policy,
    *,
    keeper: WebhookCertificates | None = None,
) -> LeaderRunner:
    """The leader actors the settings ask for, built before the watch starts (they hear
    the first LISTs), behind a gate with ``leader-elect``."""
    gate = leader_gate_for(settings) if settings.leader_elect else None
    actors = leader_actors(
        live.api,
        state,
        policy,
        actor_options(settings),
        gate=gate,
        others=(keeper,) if keeper is not None else (),
    )

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
    settings: ServeSettings, live: LiveCluster, serving: SwitchingContext
) -> WebhookCertificates:
    """The certificate keeper (a leader actor): it switches ``serving``, the admission
    listener's context, to each pair it follows."""
    # Here, not at the top: cryptography is loaded only when certificates are self-managed.
    from extender.certificates.keeper import WebhookCertificates

    return WebhookCertificates(live.api, webhook_certificate_options(settings), serving)


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


def informer_stats(live: LiveCluster, runner: LeaderRunner) -> Callable[[], list[SourceStats]]:
    """Every informer's health: the cluster state's watch, then the leader actors'."""
    actors = runner.sources()
    return lambda: [*live.watch.stats, *actors]


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
    keeper = (
        webhook_certificates(settings, live, webhook_serving)
        if live is not None and webhook_serving is not None and settings.webhook_certificate_secret
        else None
    )
    runner = leader_runner(settings, live, state, policy, keeper=keeper) if live is not None else None
    informers = informer_stats(live, runner) if live is not None and runner is not None else None
    app = create_app(
        state=state,
        policy=policy,
        max_body_bytes=settings.max_body_bytes,
        max_nodes_per_request=settings.max_nodes_per_request,
        body_read_timeout=settings.body_read_timeout,
        source_stats=informers,
        warnings=warnings,
        routing=RoutingConfig(
            settings.route_pods_to_scheduler,
            settings.namespace or "",
            # label-nodes: the pod webhook requires the label the labeller keeps.
            class_labels=ClassLabels(settings.node_label_prefix, policy) if settings.label_nodes else None,
        ),
    )
    if live is not None and runner is not None and informers is not None:
        attach_live(app, live)
        app[INFORMERS] = informers
        attach_leader_work(app, live.api, runner)
        if keeper is not None:
            app[WEBHOOK_CERTIFICATES] = keeper
    if capture is not None:
        attach_capture(app, capture)
    if tls is not None and ssl_context is not None:
        attach_certificate_reloader(app, ssl_context, tls)
    return app, ssl_context


def listed(app: web.Application) -> bool:
    """Every store the app reads is listed: the cluster state and every informer."""
    informers = app.get(INFORMERS)
    return bool(app[STATE].synced and (informers is None or all(s.synced for s in informers())))


def release_freed_memory() -> bool:
    """Hand the C heap's free pages back to the operating system (glibc's malloc_trim;
    False where there is none, such as musl)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    trim(0)
    return True


async def settle_memory_once_listed(
    app: web.Application, *, poll: float = 1.0, release: Callable[[], bool] = release_freed_memory
) -> None:
    """Once, after the first LISTs: the pages of every node and pending pod were decoded
    and dropped, and what they left is free but still counted as resident (the C heap
    keeps it); collect, give it back, and freeze what lives on (the caches: the
    collector need not re-scan them on every full collection, a pause some filter call
    would wait out). At 15,000 nodes and 10,000 pending pods about 7 MB."""
    while not listed(app):
        await asyncio.sleep(poll)
    gc.collect()
    released = release()
    gc.freeze()
    log.debug("settled memory after the first LISTs", extra={"released": released})


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
    settling = asyncio.create_task(settle_memory_once_listed(app), name="memory-settle")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        settling.cancel()
        await asyncio.gather(settling, return_exceptions=True)
        log.info("shutting down")
        if probe_runner is not None:
            await probe_runner.cleanup()
        if admission_runner is not None:
            await admission_runner.cleanup()
        await runner.cleanup()
