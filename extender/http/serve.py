"""``serve``: the process around the app.

From a ``ServeSettings`` this binds the listeners first (a bad port, host or webhook
certificate stops the start at once, before anything is loaded or logged), builds the
app (``extender.http.wiring``), serves it on the loopback socket, with
``admission-port`` the webhooks' own HTTPS listener (``extender.http.admission_listener``,
whose pair the certificate keeper switches when it is self-managed) and with
``probe-port`` the probes' own listener (``extender.http.probe_listener``), settles the
memory once the caches are listed (``extender.http.memory``), and runs until SIGINT or
SIGTERM, then stops the listeners and the app's background jobs in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket

from aiohttp import web

from extender.http.admission import PATHS as ADMISSION_PATHS
from extender.http.admission_listener import AdmissionListener, admission_listener, create_admission_app
from extender.http.keys import POLICY
from extender.http.listen import bind_listener
from extender.http.memory import settle_memory_once_listed
from extender.http.probe_listener import create_probe_app, probe_socket
from extender.http.wiring import ServeError, attach_certificate_reloader, build_app
from extender.settings import PLACEMENT_DEFAULT_SCHEDULER, ServeSettings

__all__ = ["ServeError", "serve"]

log = logging.getLogger("extender")


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
            **({"placement": settings.placement} if settings.label_nodes else {}),
        },
    )
    if settings.placement == PLACEMENT_DEFAULT_SCHEDULER:
        log.info(
            "placement default-scheduler: the cluster's default scheduler places the pods of every "
            "RuntimeClass by the label requirement, tolerations and overhead pod admission gives them; "
            "no scheduler calls /filter (docs/large-clusters.md)"
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
