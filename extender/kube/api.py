"""Kubernetes API access: one way to send a request, one error, one pager.

Everything the extender asks of the API server goes through ``request`` (the watch,
the LISTs of the reflectors and of the one-shot tools, the node lookup's GETs, the
requeuer's PATCHes). It runs on kubernetes-asyncio's ``ApiClient``, which brings the
configuration, authentication (bearer tokens, exec plugins, client certificates) and
TLS, but none of the generated models nor its request path: requests go out on its
aiohttp session, answers are read as bytes and parsed with orjson into plain dicts,
and streams (a WATCH) are handed back unread.

Non-success answers become one ``ApiError``, built from the meta/v1 ``Status`` body the
API server sends (code, reason, message, cause reasons) and the ``Retry-After`` header
(sent with 429 and some 5xx). ``ApiError.expired`` says whether the answer means "the
resourceVersion (or continue token) you hold is gone, LIST again": 410 Gone/Expired, or
504 with cause ``ResourceVersionTooLarge`` (client-go reflector.go ``isExpiredError``
and ``isTooLargeResourceVersionError``).

``list_pages`` pages through a collection with ``limit``/``continue``. When a continue
token outlives etcd compaction (410 on a later page) it starts again with one unpaged
LIST, as client-go's pager does with ``FullListIfExpired``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import quote, urlencode

import aiohttp
import orjson

from extender.kube.answer import Sent
from extender.kube.defaults import DEFAULT_PAGE_SIZE, DEFAULT_REQUEST_TIMEOUT

Query = Sequence[tuple[str, str]]


class ApiError(Exception):
    """A non-success answer from the API server, described by its Status."""

    def __init__(
        self,
        status: int,
        message: str = "",
        *,
        reason: str = "",
        code: int | None = None,
        causes: Sequence[str] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status = status
        # The Status object's own code, where it differs from the HTTP status.
        self.code = code if code is not None else status
        self.message = message
        self.reason = reason
        self.causes = tuple(causes)
        self.retry_after = retry_after

    @property
    def expired(self) -> bool:
        """The resourceVersion or continue token is no longer served: LIST again."""
        return (
            410 in (self.status, self.code)
            or self.reason in ("Expired", "Gone")
            or "ResourceVersionTooLarge" in self.causes
        )

    @classmethod
    def from_status(
        cls,
        status_object: Any,
        *,
        http_status: int | None = None,
        http_reason: str = "",
        retry_after: float | None = None,
    ) -> ApiError:
        """From a meta/v1 Status: a response body (``http_status`` given), or a watch
        ERROR event's object (no HTTP status: the Status's code, else 500)."""
        code: int | None = None
        reason, message, causes = "", "", []
        if isinstance(status_object, dict):
            if isinstance(status_object.get("code"), int) and status_object["code"]:
                code = status_object["code"]
            reason = str(status_object.get("reason") or "")
            message = str(status_object.get("message") or "")
            details = status_object.get("details")
            raw_causes = details.get("causes") if isinstance(details, dict) else None
            if isinstance(raw_causes, list):
                causes = [str(c.get("reason", "")) for c in raw_causes if isinstance(c, dict)]
        status = http_status if http_status is not None else (code or 500)
        return cls(
            status,
            message or reason or http_reason,
            reason=reason,
            code=code,
            causes=causes,
            retry_after=retry_after,
        )


def retry_after(headers: Any) -> float | None:
    """Seconds from a ``Retry-After`` header (the API server sends whole seconds)."""
    value = headers.get("Retry-After") if headers is not None else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


async def request(
    api: Any,
    method: str,
    path: str,
    *,
    query: Query = (),
    path_params: dict[str, str] | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: aiohttp.ClientTimeout | None = None,
) -> aiohttp.ClientResponse:
    """Send one request; the response comes back unread (the caller reads or streams it).

    ``path_params`` are quoted, so a value cannot escape its path segment.

    Sent on the ``ApiClient``'s own aiohttp session, with its configuration (host,
    the TLS context and client certificate in its connector, the bearer token through
    ``auth_settings``, which runs the token refresh hook of in-cluster and exec-plugin
    credentials, a proxy, a TLS server name), but not through its ``call_api``: that
    path serialises every header, parameter and body through the generated client's
    sanitiser and ``json.dumps``, several times what sending a write costs otherwise
    (a relabel sends a hundred a second, each on the event loop that answers /filter).
    What ``call_api`` does for these requests is done here, in the same order:
    ``RESTClientObject.request`` (kubernetes_asyncio/client/rest.py) and
    ``ApiClient.__call_api`` (api_client.py).
    """
    config = api.configuration
    rest = api.rest_client
    if path_params:
        safe = config.safe_chars_for_path_param
        path = path.format(**{key: quote(str(value), safe=safe) for key, value in path_params.items()})
    url = config.host + path
    if query:
        url += "?" + urlencode(list(query))
    headers = {**api.default_headers, "Accept": "application/json", "User-Agent": api.user_agent}
    if api.cookie:
        headers["Cookie"] = api.cookie
    for setting in (await config.auth_settings()).values():
        if setting["in"] == "header" and setting["value"]:
            headers[setting["key"]] = setting["value"]
    data = None
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
        data = orjson.dumps(body)
    elif content_type is not None:
        headers["Content-Type"] = content_type
    options: dict[str, Any] = {}
    if rest.proxy:
        options["proxy"] = rest.proxy
    if rest.proxy_headers:
        options["proxy_headers"] = rest.proxy_headers
    if rest.server_hostname:
        options["server_hostname"] = rest.server_hostname
    response: aiohttp.ClientResponse = await rest.pool_manager.request(
        method,
        url,
        headers=headers,
        data=data,
        timeout=timeout or aiohttp.ClientTimeout(total=DEFAULT_REQUEST_TIMEOUT),
        **options,
    )
    return response


async def error_of(response: aiohttp.ClientResponse) -> ApiError:
    """The ``ApiError`` a non-success response stands for (reads its body)."""
    try:
        status_object = orjson.loads(await response.read())
    except (orjson.JSONDecodeError, aiohttp.ClientError, TimeoutError):
        status_object = None
    return ApiError.from_status(
        status_object,
        http_status=response.status,
        http_reason=response.reason or "",
        retry_after=retry_after(response.headers),
    )


async def send(
    api: Any,
    method: str,
    path: str,
    *,
    query: Query = (),
    path_params: dict[str, str] | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: aiohttp.ClientTimeout | None = None,
) -> Sent:
    """One write, its answer as the leader's write queue reads it: never raises for an
    error answer, a connection error or a timeout (status 0)."""
    try:
        async with await request(
            api,
            method,
            path,
            query=query,
            path_params=path_params,
            body=body,
            content_type=content_type,
            timeout=timeout,
        ) as response:
            if response.status < 300:
                return Sent(response.status)
            error = await error_of(response)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return Sent(0, f"{type(exc).__name__}: {exc}")
    return Sent(error.status, error.message, error.retry_after)


async def request_json(
    api: Any,
    method: str,
    path: str,
    *,
    query: Query = (),
    path_params: dict[str, str] | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: aiohttp.ClientTimeout | None = None,
) -> Any:
    """Send one request and return its decoded JSON body; raises ``ApiError`` for a
    non-2xx answer and ``ValueError`` for a body that is not JSON."""
    async with await request(
        api,
        method,
        path,
        query=query,
        path_params=path_params,
        body=body,
        content_type=content_type,
        timeout=timeout,
    ) as response:
        if not 200 <= response.status < 300:
            raise await error_of(response)
        data = await response.read()
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{method} {path}: the answer is not JSON: {exc}") from None


class Page(NamedTuple):
    items: list[Any]
    # The List's resourceVersion (meaningful on the last page: the snapshot's version).
    resource_version: str
    # True on the first page of a new, unpaged LIST after the continue token expired:
    # whatever the caller kept from earlier pages is stale and must be dropped.
    restarted: bool


@dataclass(frozen=True)
class ListOptions:
    page_size: int = DEFAULT_PAGE_SIZE
    field_selector: str = ""
    timeout: aiohttp.ClientTimeout | None = None


async def list_pages(api: Any, path: str, options: ListOptions | None = None) -> AsyncIterator[Page]:
    """The pages of one consistent LIST of ``path``; raises ``ApiError``/``ValueError``.

    No resourceVersion is sent: a consistent read, which is what a re-LIST after 410
    needs (client-go relists with RV="" after expiry for the same reason), and the form
    the server paginates.
    """
    options = options or ListOptions()
    continue_token = ""
    limit: int | None = options.page_size
    restarted = False
    while True:
        query = [("limit", str(limit))] if limit else []
        if options.field_selector:
            query.append(("fieldSelector", options.field_selector))
        if continue_token:
            query.append(("continue", continue_token))
        try:
            body = await request_json(api, "GET", path, query=query, timeout=options.timeout)
        except ApiError as exc:
            if exc.expired and continue_token:
                # The continue token outlived compaction: list everything in one request
                # instead (client-go pager's FullListIfExpired).
                continue_token, limit, restarted = "", None, True
                continue
            raise
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise ValueError(f"LIST {path}: the answer is not a List object")
        items = body.get("items") or []
        if not isinstance(items, list):
            raise ValueError(f"LIST {path}: the answer's items is not a list")
        metadata = body["metadata"]
        yield Page(items, str(metadata.get("resourceVersion") or ""), restarted)
        restarted = False
        continue_token = str(metadata.get("continue") or "")
        if not continue_token:
            return
