"""One raw request to the test API server as a given user: what a test sends when it
checks the server's own answers (authorization, admission, dry runs) rather than a
client's handling of them."""

from __future__ import annotations

from typing import Any, NamedTuple

import aiohttp
import orjson

from tests.support.apiserver.server import FakeApiServer


class Answer(NamedTuple):
    status: int
    body: bytes
    # The Warning headers (an admission policy's Warn action, a deprecated API).
    warnings: list[str]


async def send_as(
    server: FakeApiServer,
    token: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    params: dict[str, str] | None = None,
) -> Answer:
    """``method path`` with ``body`` (JSON-encoded) and a bearer ``token``."""
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session,
        session.request(
            method,
            server.url + path,
            data=None if body is None else orjson.dumps(body),
            headers={"Content-Type": content_type},
            params=params,
        ) as response,
    ):
        return Answer(response.status, await response.read(), response.headers.getall("Warning", []))
