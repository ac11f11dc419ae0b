"""The probes' own listener (``serve --probe-port``): ``/healthz``, ``/readyz``, ``/metrics``.

kube-scheduler calls ``/filter`` on the pod's loopback, so the main listener can be
bound to ``127.0.0.1`` (``--host``) and nothing outside the pod reaches ``/filter``,
``/explain`` or the webhook paths there. The kubelet's probes and a metrics scraper
come to the pod's IP, though: with ``probe-port`` a second, plain-HTTP listener on
``probe-host`` serves them, and only them. Everything else answers 404 on it.

It shares the main app's state and metrics (the same objects), as the admission
listener does; it never asks for a client certificate (the kubelet presents none), so
it also replaces the exec probe that the mutual-TLS overlay needed.

Its ``/readyz`` is the pod's readiness, and the webhook Service sends the API server's
calls only to ready pods: with self-managed webhook certificates it is the admission
listener's (``admission_readyz``), 503 until both caBundles trust the certificate that
listener serves, so a replica with no certificate yet, or one the API server cannot
verify, gets no webhook call. The main port's ``/readyz`` (kube-scheduler's, on
loopback) only reports it: ``/filter`` does not depend on it.
"""

from __future__ import annotations

import socket

from aiohttp import web

from extender.http.admission_listener import admission_readyz
from extender.http.app import errors_as_json, healthz
from extender.http.keys import METRICS
from extender.http.listen import bind_listener
from extender.settings import ServeSettings


def probe_socket(settings: ServeSettings) -> socket.socket | None:
    """The probe listener's bound socket, or None without ``probe-port``. Raises
    SettingsError naming ``--probe-port`` or ``--host`` when it cannot be listened on."""
    if settings.probe_port is None:
        return None
    host = settings.probe_host if settings.probe_host is not None else settings.host
    return bind_listener(host, settings.probe_port, port_flag="--probe-port")


def create_probe_app(main: web.Application) -> web.Application:
    """The probe app over ``main``'s state; call after every ``attach_*`` of ``main``."""
    app = web.Application(client_max_size=1024, middlewares=[errors_as_json])
    for key in main:
        app[key] = main[key]
    app.router.add_get("/healthz", healthz, allow_head=True)
    app.router.add_get("/readyz", admission_readyz, allow_head=True)
    app.router.add_get("/metrics", main[METRICS].handler)
    return app
