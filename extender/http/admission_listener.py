"""The admission webhook's own HTTPS listener (``serve --admission-port``).

The API server calls webhooks over HTTPS only, through a Service; kube-scheduler
calls ``/filter`` on the pod's loopback, where plain HTTP is the default. One
listener cannot suit both without changing the scheduler's configuration, so with
``admission-port`` set a second listener serves the webhook, with its own
certificate, next to the main one.

It serves only what the API server and the kubelet need: ``POST`` of the admission
paths (RuntimeClasses and pods), and ``/healthz`` and ``/readyz`` (so the kubelet can probe over this port when
the main one requires client certificates, which probes never present). Everything
else (``/filter``, ``/explain``, ``/metrics``) answers 404 here: this port is reachable
through a Service from the whole cluster, and the scheduler's verbs stay on the pod.

It never asks for a client certificate, even when the main listener does
(``client-ca-file``): the API server presents none to webhooks by default.

Its certificate comes from files (``admission-tls-cert-file``, or the main pair), or
with ``webhook-certificate-secret`` from the self-managed Secret: then the listener's
context is a ``SwitchingContext`` (extender.certificates.serving) that the keeper
switches to each new pair, and its ``/readyz`` answers 503 until the caBundles of both
webhook configurations trust the certificate it serves.

Its socket is bound when the settings are checked, before anything is loaded or
logged: a busy port is then one line at start, like any other unusable setting,
rather than a failure after the cluster state was loaded and the watch started.

Its app shares the main app's state and admission metrics (objects, not copies), so
a review is counted once on the one registry ``/metrics`` exposes, whichever
listener answered it. The main app owns every background job (the watch, the
certificate reloaders); this app only answers requests.
"""

from __future__ import annotations

import json
import socket
import ssl
from dataclasses import dataclass

from aiohttp import web

from extender.certificates.serving import SwitchingContext
from extender.http.admission import PATH, POD_PATH, admission_handler, pod_admission_handler
from extender.http.app import errors_as_json, healthz, readyz
from extender.http.bodies import refuse_declared_oversize
from extender.http.keys import MAX_BODY_BYTES, POD_ADMISSION_TABLE, WEBHOOK_CERTIFICATES
from extender.http.listen import bind_listener
from extender.http.tls import TLSFiles, admission_tls_files, server_context
from extender.settings import ServeSettings

# A review carries one object (a RuntimeClass, a pod), and for UPDATE its old version:
# each at most the API server's object size limit (1.5 MiB), plus the request's own fields.
ADMISSION_MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class AdmissionListener:
    port: int
    # None with self-managed certificates (``switching`` then serves them).
    files: TLSFiles | None
    context: ssl.SSLContext
    # Bound and listening; the server that serves it closes it.
    sock: socket.socket
    switching: SwitchingContext | None = None


def admission_listener(settings: ServeSettings) -> AdmissionListener | None:
    """The listener ``admission-port`` asks for, its certificate loaded and its socket
    bound, or None. The caller closes ``sock`` if it never serves it.

    Raises SettingsError naming the setting to fix (see ``admission_tls_files``), or the
    port when it cannot be listened on.
    """
    files = admission_tls_files(settings)
    if settings.admission_port is None:
        return None
    switching: SwitchingContext | None = None
    if files is None:
        switching = SwitchingContext()  # no pair until the keeper loads one
        context = switching.front
    else:
        context = server_context(files)
    host = settings.admission_host if settings.admission_host is not None else settings.host
    return AdmissionListener(
        settings.admission_port,
        files,
        context,
        bind_listener(host, settings.admission_port, port_flag="--admission-port"),
        switching,
    )


def create_admission_app(main: web.Application) -> web.Application:
    """The webhook's app over ``main``'s state; call after every ``attach_*`` of ``main``
    (what they add, such as the live-mode health sources, is taken over now)."""
    app = web.Application(
        client_max_size=ADMISSION_MAX_BODY_BYTES, middlewares=[errors_as_json, refuse_declared_oversize]
    )
    # Every key, the same objects: the shared handlers then behave exactly as they do
    # on the main port, and the admission metrics land in the one registry.
    for key in main:
        app[key] = main[key]
    # Except the body limit: this port takes reviews only, sized by the API server.
    app[MAX_BODY_BYTES] = ADMISSION_MAX_BODY_BYTES
    app.router.add_post(PATH, admission_handler)
    app.router.add_post(POD_PATH, pod_admission_handler)
    app.router.add_get("/healthz", healthz, allow_head=True)
    app.router.add_get("/readyz", admission_readyz, allow_head=True)
    return app


async def admission_readyz(request: web.Request) -> web.Response:
    """``/readyz``, and not ready (503) with self-managed certificates until both
    caBundles trust the certificate this listener serves, and with pod-admission-table
    until the table exists: so ``kubectl rollout status`` and ``helm install --wait``
    end once pod admission works. Also the probe port's ``/readyz`` (the pod's
    readiness: extender.http.probe_listener)."""
    response = await readyz(request)
    if response.status != 200:
        return response
    certificates = request.app.get(WEBHOOK_CERTIFICATES)
    table = request.app.get(POD_ADMISSION_TABLE)
    untrusted = certificates is not None and not certificates.trust().trusted
    if not untrusted and (table is None or table.details()["ready"]):
        return response
    body = json.loads(response.text or "{}")
    return web.json_response({**body, "status": "not ready"}, status=503)
