"""Receiving request bodies: content type, declared size, read timeout, hang-ups.

Every POST endpoint (``/filter``, ``/explain``, ``/admission/runtimeclasses``) reads its
body through here, so each refuses the same way, in the one error shape of
``extender.http.app.errors_as_json``:

- a ``Content-Length`` over the app's limit is refused with 413 before a byte of the
  body is read: aiohttp checks ``client_max_size`` only while reading, so a client
  that declares 300 MB and trickles it would otherwise hold a connection until the
  read timeout, and get 408 instead of the 413 it earned;
- a body that does not arrive within the read timeout gets 408;
- a client that hangs up before its body is complete is not a server fault: it is
  logged at info and counted as ``client_disconnected``, never as an error with a
  trace (an alert on server errors must not fire because a client went away).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from extender.http.keys import BODY_READ_TIMEOUT, MAX_BODY_BYTES
from extender.http.metrics import Handler

log = logging.getLogger("extender.http")


class RequestRefused(Exception):
    """An answer other than 200, with a short ``error`` and a one-line ``detail``."""

    def __init__(
        self, status: int, error: str, detail: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(f"{error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = headers or {}


class ClientDisconnected(Exception):
    """The client closed the connection before its request body was complete."""


def require_json(request: web.Request) -> None:
    if request.content_type != "application/json":
        # aiohttp reports a missing header as application/octet-stream; say what was sent.
        sent = repr(request.content_type) if "Content-Type" in request.headers else "none"
        raise RequestRefused(
            415, "unsupported media type", f"Content-Type must be application/json, got {sent}"
        )


async def read_body(request: web.Request) -> bytes:
    """The whole body, within the app's body-read-timeout. Raises RequestRefused (408)
    or ClientDisconnected; aiohttp's own 413 when more arrives than ``client_max_size``
    without a declared length."""
    # A body that trickles in must not hold a handler (and a connection) forever;
    # kube-scheduler and the API server give up on a call after a few seconds anyway.
    timeout = request.app.get(BODY_READ_TIMEOUT)
    if request.content.is_eof():
        # Already received whole (the usual case): no timer to arm and cancel.
        return await request.read()
    try:
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        raise RequestRefused(
            408,
            "request timeout",
            f"request body not received within body-read-timeout ({timeout:g} s)",
            headers={"Connection": "close"},
        ) from None
    except ConnectionResetError:
        raise ClientDisconnected() from None


@web.middleware
async def refuse_declared_oversize(request: web.Request, handler: Handler) -> web.StreamResponse:
    """413 at once for a declared ``Content-Length`` over the app's body limit."""
    limit = request.app.get(MAX_BODY_BYTES)
    declared = request.content_length
    if limit is not None and declared is not None and declared > limit:
        # The body stays unread on the connection, so the connection cannot be reused.
        raise RequestRefused(
            413,
            "request body too large",
            f"Content-Length {declared} is over max-body-bytes ({limit})",
            headers={"Connection": "close"},
        )
    return await handler(request)
