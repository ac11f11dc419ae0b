"""Serving HTTPS, and with a client CA, mutual TLS.

kube-scheduler's extender ``tlsConfig`` (``certFile``/``keyFile``/``caFile`` in
KubeSchedulerConfiguration v1) makes it present a client certificate and verify ours.
The matching settings here are ``tls-cert-file``/``tls-key-file`` (our serving
certificate) and ``client-ca-file`` (the CA whose client certificates we accept; with
it a client certificate is required, ``ssl.CERT_REQUIRED``, so a caller without one
is refused during the handshake, before any request is read).

Files are read at start; a bad combination or an unreadable file stops the process
with a message naming the setting. Afterwards ``CertificateReloader`` watches the
files and loads a changed certificate and key into the live context, so new
connections use them (a Kubernetes Secret volume is updated in place by the kubelet:
rotation needs no restart). A changed file that does not load is logged and the old
certificate stays in use. Client CAs can only be added this way, never removed: drop
a CA by restarting.

The admission webhook's listener (``admission-port``) has a pair of its own
(``admission-tls-cert-file``/``admission-tls-key-file``, by default the main pair) and
never a client CA; it gets a reloader of its own too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from dataclasses import dataclass

from extender.settings import ServeSettings, SettingsError

log = logging.getLogger("extender.tls")

# How often the files are checked. The kubelet itself refreshes Secret volumes only
# every minute or so, so checking more often buys nothing.
RELOAD_INTERVAL_SECONDS = 30.0


@dataclass(frozen=True)
class TLSFiles:
    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    # The settings the pair came from, so that an unusable file is reported under the
    # name the operator has to fix (the admission listener has its own pair).
    cert_setting: str = "tls-cert-file"
    key_setting: str = "tls-key-file"


def tls_files(settings: ServeSettings) -> TLSFiles | None:
    """The TLS files the settings ask for, or None for plain HTTP.

    Raises SettingsError for a half-given pair, or a client CA without a certificate
    (client authentication is part of the TLS handshake, so it needs HTTPS).
    """
    cert, key, client_ca = settings.tls_cert_file, settings.tls_key_file, settings.client_ca_file
    if cert and not key:
        raise SettingsError("tls-cert-file is set but tls-key-file is not: both are needed to serve HTTPS")
    if key and not cert:
        raise SettingsError("tls-key-file is set but tls-cert-file is not: both are needed to serve HTTPS")
    if client_ca and not cert:
        raise SettingsError(
            "client-ca-file needs tls-cert-file and tls-key-file: client certificates are only checked over HTTPS"
        )
    if not cert or not key:
        return None
    return TLSFiles(cert, key, client_ca or None)


def admission_tls_files(settings: ServeSettings) -> TLSFiles | None:
    """The admission listener's certificate files, or None when ``admission-port`` is not
    set or its certificates are self-managed (``webhook-certificate-secret``).

    Its own ``admission-tls-cert-file``/``admission-tls-key-file`` when given, else
    self-managed certificates when ``webhook-certificate-secret`` is set, else the main
    listener's pair. Never a client CA: the API server presents no client
    certificate to a webhook unless its admission configuration names one, so requiring
    one (as ``client-ca-file`` does on the main listener) would refuse every review.
    Raises SettingsError for a half-given pair, a pair without the port, no certificate
    at all (the API server calls webhooks over HTTPS only), or the main port reused.
    """
    cert, key = settings.admission_tls_cert_file, settings.admission_tls_key_file
    port = settings.admission_port
    if port is None:
        if cert or key:
            given = "admission-tls-cert-file" if cert else "admission-tls-key-file"
            raise SettingsError(
                f"{given} is set but admission-port is not: set the port to serve the webhook"
            )
        return None
    if cert and not key:
        raise SettingsError(
            "admission-tls-cert-file is set but admission-tls-key-file is not: both are needed"
        )
    if key and not cert:
        raise SettingsError(
            "admission-tls-key-file is set but admission-tls-cert-file is not: both are needed"
        )
    if port != 0 and port == settings.port:
        raise SettingsError(f"admission-port {port} is also port: the webhook needs a port of its own")
    if cert and key:
        return TLSFiles(
            cert, key, cert_setting="admission-tls-cert-file", key_setting="admission-tls-key-file"
        )
    if settings.webhook_certificate_secret:
        # Self-managed (extender.certificates): no files; preferred to the main pair,
        # which names the scheduler's loopback address, not the webhook's Service.
        return None
    if settings.tls_cert_file and settings.tls_key_file:
        return TLSFiles(settings.tls_cert_file, settings.tls_key_file)
    raise SettingsError(
        "admission-port needs a certificate (the API server calls webhooks over HTTPS only): "
        "set admission-tls-cert-file and admission-tls-key-file, or tls-cert-file and tls-key-file"
    )


def server_context(files: TLSFiles) -> ssl.SSLContext:
    """An SSLContext serving ``files``; raises SettingsError naming the unusable file."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # kube-scheduler (Go) speaks TLS 1.2 and 1.3; nothing older is worth accepting.
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=files.cert_file, keyfile=files.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(
            f"{files.cert_setting} {files.cert_file!r} / {files.key_setting} {files.key_file!r}: "
            f"cannot load the certificate and key: {_describe(exc)}"
        ) from None
    if files.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=files.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(
                f"client-ca-file {files.client_ca_file!r}: cannot load the CA certificates: {_describe(exc)}"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _describe(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc)


def _file_signature(path: str) -> tuple[int, int, int] | None:
    # os.stat follows symlinks: a Secret volume swaps its ..data symlink on update,
    # which changes the inode even when size and mtime happen to match.
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class CertificateReloader:
    """Reloads the serving certificate (and added client CAs) when their files change."""

    def __init__(self, context: ssl.SSLContext, files: TLSFiles) -> None:
        self.context = context
        self.files = files
        self._paths = [p for p in (files.cert_file, files.key_file, files.client_ca_file) if p is not None]
        self._seen = self._signatures()

    def _signatures(self) -> list[tuple[int, int, int] | None]:
        return [_file_signature(path) for path in self._paths]

    def check(self) -> bool:
        """Reload if any file changed since the last check; True if a new certificate is in use."""
        current = self._signatures()
        if current == self._seen:
            return False
        try:
            # Load into a scratch context first: a half-written pair (new certificate,
            # old key) must not replace a working one.
            server_context(self.files)
        except SettingsError as exc:
            log.warning(
                "TLS files changed but do not load; keeping the current certificate",
                extra={"error": str(exc)},
            )
            return False  # not marked seen: retried at the next check
        self.context.load_cert_chain(certfile=self.files.cert_file, keyfile=self.files.key_file)
        if self.files.client_ca_file is not None:
            self.context.load_verify_locations(cafile=self.files.client_ca_file)
        self._seen = current
        log.info("reloaded TLS certificate", extra={"certFile": self.files.cert_file})
        return True

    async def run(self, interval: float = RELOAD_INTERVAL_SECONDS) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.check()
            except (OSError, ssl.SSLError) as exc:
                # The files changed again between the trial load and the real one.
                log.warning("TLS reload failed; retrying", extra={"error": str(exc)})
