"""Direct GETs for node names the watch has not delivered yet.

In names mode (``nodeCacheCapable: true``) kube-scheduler sends node names only and
trusts us to know the nodes. Right after a node joins, its name can reach us in a
filter request before its ADDED event does (the scheduler's informer and ours are two
independent watches). Such a name is fetched with ``GET /api/v1/nodes/<name>`` before
deciding, so a new node is judged on its real labels and taints rather than rejected
or, worse, passed blindly.

Bounds, because this runs inside the scheduler's synchronous filter call (its
``httpTimeout`` defaults to 5 s, and a slow extender slows every pod):

- at most ``max_concurrency`` GETs at once, and at most ``max_names_per_call`` names
  looked up per filter call (a request full of unknown names means something else is
  wrong: the rest are answered "unknown" at once);
- one wait of at most ``timeout`` per filter call; GETs still running then finish in
  the background and fill the cache for the next call;
- results are remembered with cachetools TTL caches: found nodes for ``ttl`` seconds,
  "not found" and failures for ``negative_ttl`` seconds (briefly: the node may appear
  any moment, and the API server may recover);
- concurrent filter calls asking for the same name share one GET.

A name that cannot be resolved is never passed: the caller puts it in FailedNodes
with the reason ``REASON_NODE_UNKNOWN`` and the detail returned here.

Race: the watch may deliver the node while a GET is in flight. The filter prefers the
store over anything fetched here (``decide(extra_nodes=...)``), and the cached copy
expires within ``ttl``, so the watched view wins as soon as it exists.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import aiohttp
from cachetools import TTLCache

from extender.cluster.objects import ObjectError, node_from_api
from extender.kube.api import ApiError, request_json
from policies.node_affinity import node_name_errors
from policies.objects import NodeView

log = logging.getLogger("extender.lookup")


@dataclass(frozen=True)
class LookupOptions:
    max_concurrency: int = 8
    # Longest a filter call waits for its lookups, in seconds.
    timeout: float = 1.0
    ttl: float = 10.0
    negative_ttl: float = 2.0
    max_names_per_call: int = 50
    cache_size: int = 4096


class LookupResult(NamedTuple):
    # Nodes fetched from the API server, by name.
    nodes: dict[str, NodeView]
    # Names that could not be resolved -> a detail for logs and explain.
    unknown: dict[str, str]


@dataclass
class LookupStats:
    requests: int = 0
    found: int = 0
    not_found: int = 0
    failed: int = 0
    cache_hits: int = 0
    last_error: str = ""


class _Missing(NamedTuple):
    """A negative result: the detail to report."""

    detail: str


def detail_not_found(name: str) -> str:
    return f"node {name!r} is neither in the extender's cache nor on the API server"


def detail_failed(name: str, error: str) -> str:
    return f"node {name!r} is not in the extender's cache and looking it up failed: {error}"


def detail_timeout(name: str) -> str:
    return f"node {name!r} is not in the extender's cache and the lookup did not finish in time"


def detail_invalid(name: str) -> str:
    return f"node {name!r} is not in the extender's cache and is not a valid node name"


def detail_over_budget(name: str) -> str:
    return f"node {name!r} is not in the extender's cache (too many unknown nodes in one request to look up)"


class NodeLookup:
    """Resolves node names missing from the store by direct GET (see module docstring)."""

    def __init__(
        self,
        api: Any,
        *,
        options: LookupOptions | None = None,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self.options = options or LookupOptions()
        opts = self.options
        self._found: TTLCache[str, NodeView] = TTLCache(opts.cache_size, opts.ttl, timer=timer)
        self._missing: TTLCache[str, _Missing] = TTLCache(opts.cache_size, opts.negative_ttl, timer=timer)
        self._inflight: dict[str, asyncio.Task[NodeView | _Missing]] = {}
        self._semaphore = asyncio.Semaphore(opts.max_concurrency)
        self.stats = LookupStats()

    async def lookup(self, names: Sequence[str]) -> LookupResult:
        """Resolve ``names``; every name ends up in exactly one of the two maps."""
        nodes: dict[str, NodeView] = {}
        unknown: dict[str, str] = {}
        pending: dict[str, asyncio.Task[NodeView | _Missing]] = {}
        budget = self.options.max_names_per_call
        for name in dict.fromkeys(names):  # de-duplicated, order kept
            if node_name_errors(name):
                # Not a node name (ValidateNodeName: a DNS-1123 subdomain), so no node has
                # it, and it must not become a path: "n1/" or "/n1" reach node n1, "."
                # the whole node LIST.
                unknown[name] = detail_invalid(name)
                continue
            cached_node = self._found.get(name)
            if cached_node is not None:
                self.stats.cache_hits += 1
                nodes[name] = cached_node
                continue
            cached_missing = self._missing.get(name)
            if cached_missing is not None:
                self.stats.cache_hits += 1
                unknown[name] = cached_missing.detail
                continue
            if len(pending) >= budget:
                unknown[name] = detail_over_budget(name)
                continue
            pending[name] = self._task(name)
        if pending:
            done, _ = await asyncio.wait(pending.values(), timeout=self.options.timeout)
            for name, task in pending.items():
                if task not in done:
                    unknown[name] = detail_timeout(name)
                    continue
                outcome = task.result()
                if isinstance(outcome, _Missing):
                    unknown[name] = outcome.detail
                else:
                    nodes[name] = outcome
        return LookupResult(nodes, unknown)

    async def close(self) -> None:
        """Cancel lookups still running (on shutdown)."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _task(self, name: str) -> asyncio.Task[NodeView | _Missing]:
        task = self._inflight.get(name)
        if task is None:
            task = asyncio.create_task(self._fetch(name), name=f"node-lookup-{name}")
            self._inflight[name] = task
            task.add_done_callback(lambda _task: self._inflight.pop(name, None))
        return task

    async def _fetch(self, name: str) -> NodeView | _Missing:
        """One GET; never raises (the outcome is cached either way)."""
        outcome: NodeView | _Missing
        async with self._semaphore:
            self.stats.requests += 1
            try:
                outcome = await self._get(name)
            except Exception as exc:  # any failure is a reasoned "unknown", never a 500
                error = str(exc) or type(exc).__name__
                self.stats.failed += 1
                self.stats.last_error = error
                log.warning("node lookup failed", extra={"node": name, "error": error})
                outcome = _Missing(detail_failed(name, error))
        if isinstance(outcome, _Missing):
            self._missing[name] = outcome
        else:
            self.stats.found += 1
            self._found[name] = outcome
        return outcome

    async def _get(self, name: str) -> NodeView | _Missing:
        try:
            obj = await request_json(
                self._api,
                "GET",
                "/api/v1/nodes/{name}",
                path_params={"name": name},  # quoted by the client: a name cannot escape the path
                timeout=aiohttp.ClientTimeout(total=self.options.timeout),
            )
        except ApiError as exc:
            if exc.status == 404:
                self.stats.not_found += 1
                return _Missing(detail_not_found(name))
            raise
        try:
            node = node_from_api(obj)
        except ObjectError as exc:
            raise ValueError(f"malformed Node: {exc}") from None
        if node.name != name:
            raise ValueError(f"the API server answered with node {node.name!r}")
        return node
