"""Serving a pair that changes while the listener runs, without a restart or a bad moment.

``load_cert_chain`` on a live ``SSLContext`` would reach new handshakes too, but a load
that fails half-way (a certificate without its key) leaves that context broken for
every later handshake. So each pair gets a fresh ``SSLContext`` of its own, loaded
completely before anything uses it, and the listener's context (``front``) only
chooses: its ``sni_callback``, which OpenSSL calls for every ClientHello (with
``server_name`` None when the client sends no SNI), hands the connection to the newest
context (``ssl_sock.context = current``). A pair that fails to load changes nothing:
the previous one keeps serving. Before any pair is loaded, handshakes are refused.

``ssl`` only reads files, so a pair is written to a private temporary directory
(mode 0700, files 0600) for the load and removed at once.
"""

from __future__ import annotations

import logging
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Only the type: the listener's module imports this one, and cryptography is
    # loaded when a certificate is first minted or read.
    from extender.certificates.authority import Pair

log = logging.getLogger("extender.certificates")


class PairError(ValueError):
    """A pair that does not load; the message says why."""


def pair_context(pair: Pair) -> ssl.SSLContext:
    """A server context serving ``pair`` alone; raises PairError."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # The API server (Go) speaks TLS 1.2 and 1.3; nothing older is worth accepting.
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="webhook-pair-") as directory:
        cert_file, key_file = Path(directory, "tls.crt"), Path(directory, "tls.key")
        for path, data in ((cert_file, pair.cert_pem), (key_file, pair.key_pem)):
            path.touch(mode=0o600)
            path.write_bytes(data)
        try:
            context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
        except (OSError, ssl.SSLError) as exc:
            reason = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else str(exc)
            raise PairError(f"the certificate and key do not load: {reason}") from None
    return context


class SwitchingContext:
    """The listener's context (``front``), switching each handshake to the current pair."""

    def __init__(self) -> None:
        self.front = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.front.minimum_version = ssl.TLSVersion.TLSv1_2
        self.front.sni_callback = self._choose
        self._current: ssl.SSLContext | None = None
        self.pair: Pair | None = None

    def _choose(self, connection: Any, server_name: str | None, _front: ssl.SSLContext) -> int | None:
        current = self._current
        if current is None:
            # Nothing to serve yet: refuse rather than present no certificate.
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        connection.context = current
        return None

    def serve(self, pair: Pair) -> None:
        """Serve ``pair`` from the next handshake on; raises PairError and keeps the
        previous pair when it does not load."""
        if pair == self.pair:
            return
        context = pair_context(pair)
        self._current, self.pair = context, pair
