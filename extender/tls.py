"""Serving HTTPS, and with a client CA, mutual TLS.

kube-scheduler's extender ``tlsConfig`` (``certFile``/``keyFile``/``caFile`` in
KubeSchedulerConfiguration v1) makes it present a client certificate and verify ours.
The matching settings here are ``tls-cert-file``/``tls-key-file`` (our serving
certificate) and ``client-ca-file`` (the CA whose client certificates we accept; with
it a client certificate is required, ``ssl.CERT_REQUIRED``, so a caller without one
is refused during the handshake, before any request is read).

Files are read once at start; a bad combination or an unreadable file stops the
process with a message naming the setting. To rotate certificates, replace the files
and restart the process.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.settings import SettingsError


@dataclass(frozen=True)
class TLSFiles:
    cert_file: str
    key_file: str
    client_ca_file: str | None = None


def tls_files(settings: Mapping[str, Any]) -> TLSFiles | None:
    """The TLS files the settings ask for, or None for plain HTTP.

    Raises SettingsError for a half-given pair, or a client CA without a certificate
    (client authentication is part of the TLS handshake, so it needs HTTPS).
    """
    cert = settings.get("tls_cert_file")
    key = settings.get("tls_key_file")
    client_ca = settings.get("client_ca_file")
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


def server_context(files: TLSFiles) -> ssl.SSLContext:
    """An SSLContext serving ``files``; raises SettingsError naming the unusable file."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # kube-scheduler (Go) speaks TLS 1.2 and 1.3; nothing older is worth accepting.
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=files.cert_file, keyfile=files.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(
            f"tls-cert-file {files.cert_file!r} / tls-key-file {files.key_file!r}: "
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


def server_context_from_settings(settings: Mapping[str, Any]) -> ssl.SSLContext | None:
    files = tls_files(settings)
    return server_context(files) if files is not None else None


def _describe(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc)
