"""Keeping each RuntimeClass's label on exactly the nodes that fit it (``serve --label-nodes``).

What the labels are and why is ``extender.cluster.class_labels`` (pure). This module
writes them, as a leader actor (``extender.leader.actor``):

- **Level-triggered.** It watches nothing of its own: the cluster state's Node and
  RuntimeClass stores (the watch every replica runs) are both what should be (the
  classes' rules) and what is (each node's labels). At the start of each term every
  node is compared; from then on a node event compares that node, and a class event
  that changes what decides a class's nodes (``ClassLabels.rules_key``: an edit of its
  labels or annotations moves nothing) compares every node for that class alone. A
  node whose labels under the prefix differ from what its classes ask for gets one
  write, computed when it is *sent* from the state at that moment, so a burst of
  changes to one node is one patch, and a new leader finds nothing to do where its
  predecessor finished: no churn on hand-over.
- **Never stalls the loop.** A compare of every node (15,000 nodes x 20 classes is
  300,000 rule checks, about 0.4 s of CPU) runs in slices of at most
  ``slice_seconds``, each followed by a pause three times as long: ``/filter``, the
  webhooks and the Lease renewals are served in between, and a request, which needs a
  few turns of the loop, waits out at most a slice or two
  (bench/label_stall_bench.py measures it).
- **A requirement once given out stays satisfiable** (class_labels): a class that
  lost its node rules keeps its label on every node while some node carries it or a
  pending pod requires it. The labeller counts, on every replica, the nodes carrying
  each key under the prefix, and reads the pending pods' requirements from the
  shared pending-pod informer.
- **Never removes before the state is listed.** node-feature-discovery stripped every
  label of large clusters by acting on a cache that was not yet synced (its issues
  #1802, #2408); here the election does not campaign before Nodes and RuntimeClasses
  are listed, and ``lead`` waits for them again.
- **Only its prefix.** A JSON merge patch of ``metadata.labels`` naming only keys under
  the prefix: labels of anyone else are never in the request (and an admission policy,
  deploy/components/label-nodes, refuses any other change).
- **Bounded.** Writes go through the leader's ``WriteQueue``: a rate limit, at most
  ``max_in_flight`` at once, one write per node waiting or in flight, and a backoff
  per node that also brings back writes refused for a while (each label write wakes
  every node watcher, kube-scheduler's included).

One log line per class change says what it moves ("RuntimeClass gvisor: node labels:
3 to add, 1 to remove"); counters say what was written.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge

from extender import METRIC_PREFIX
from extender.cluster.class_labels import ClassLabels
from extender.cluster.pending_pod_informer import PendingPodInformer
from extender.cluster.pending_pods import PendingPod
from extender.cluster.state import ClusterState
from extender.kube.api import send
from extender.kube.informer import Informer
from extender.kube.store import Named
from extender.leader.actor import LeaderActor, wait_while
from extender.leader.gate import LeaderGate
from extender.leader.writes import Sent, Sleep, WriteOptions, WriteQueue
from extender.settings import DEFAULT_LABEL_NODES_RATE, DEFAULT_NODE_LABEL_PREFIX
from extender.tasks import run_all
from policies.objects import NodeView, RuntimeClassView
from policies.registry import Policy

log = logging.getLogger("extender.labeller")

NODE = "/api/v1/nodes/{name}"
# Why a label write failed for good (a fixed set, pre-created).
WRITE_FAIL_REASONS = ("forbidden", "rejected", "retries_exhausted")


@dataclass(frozen=True)
class LabelOptions:
    prefix: str = DEFAULT_NODE_LABEL_PREFIX
    # Node patches per second, bursts, and patches in flight at once.
    rate: float = DEFAULT_LABEL_NODES_RATE
    burst: int = 20
    max_in_flight: int = 10
    request_timeout: float = 10.0
    # Backoff of one node's write after a failure or a refusal (retried up to every
    # retry_max while still wrong: within a minute of a refusal's end).
    retry_initial: float = 0.5
    retry_max: float = 30.0
    # Longest wait on shutdown for planned writes to go out.
    drain_timeout: float = 5.0
    # Longest run of comparing before the loop is handed back, for three times as long
    # (a request waits that long at most behind a slice of a relabel).
    slice_seconds: float = 0.00025


class LabelMetrics:
    def __init__(self, registry: CollectorRegistry, *, pending: Callable[[], int]) -> None:
        self.added = Counter(
            METRIC_PREFIX + "node_labels_added",
            "RuntimeClass labels set on nodes (label-nodes).",
            registry=registry,
        )
        self.removed = Counter(
            METRIC_PREFIX + "node_labels_removed",
            "RuntimeClass labels removed from nodes (label-nodes).",
            registry=registry,
        )
        self.errors = Counter(
            METRIC_PREFIX + "node_label_write_errors",
            "Node label writes that failed, once per failing streak (each is tried again with "
            "backoff while still wrong), by reason: forbidden (403: RBAC), rejected (another 4xx, "
            "such as 422 from the admission policy), retries_exhausted.",
            ["reason"],
            registry=registry,
        )
        Gauge(
            METRIC_PREFIX + "node_label_writes_pending",
            "Node label writes waiting for their turn, for a retry, or in flight.",
            registry=registry,
        ).set_function(lambda: float(pending()))
        for reason in WRITE_FAIL_REASONS:
            self.errors.labels(reason)


class NodeLabeller(LeaderActor):
    """Keeps the derived RuntimeClass labels on the nodes; see the module doc."""

    name = "node-labeller"

    def __init__(
        self,
        api: Any,
        state: ClusterState,
        policy: Policy,
        *,
        options: LabelOptions | None = None,
        gate: LeaderGate | None = None,
        pending: PendingPodInformer | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._api = api
        self.state = state
        self.gate = gate
        self.options = options = options or LabelOptions()
        self.labels = ClassLabels(options.prefix, policy)
        self.metrics: LabelMetrics | None = None
        self.writes: WriteQueue[str] = WriteQueue(
            self,
            WriteOptions(
                rate=options.rate,
                burst=options.burst,
                concurrency=options.max_in_flight,
                retry_initial=options.retry_initial,
                retry_max=options.retry_max,
            ),
            clock=clock,
            sleep=sleep,
        )
        # What to compare at the next pass (only while leading: a term starts with all).
        self._dirty_nodes: set[str] = set()
        self._changed_classes: set[str] = set()
        self._all = True
        self._wake = asyncio.Event()
        # On every replica: how many nodes carry each key under the prefix, and the
        # pending pods' requirements (a label in use stays satisfiable).
        self._carried: collections.Counter[str] = collections.Counter()
        self._informer = pending
        self._pending = pending.pods if pending is not None else None
        # The labelled classes, recomputed when a class or a key's use changes.
        self._labelled: dict[str, RuntimeClassView] = {}
        self._labelled_for: tuple[int, frozenset[str]] | None = None
        # The patch each node's write carried, for the counters; and the last patch
        # computed, with the node and labelled classes it was computed from.
        self._sending: dict[str, dict[str, str | None]] = {}
        self._last_patch: tuple[NodeView, dict[str, RuntimeClassView], dict[str, str | None]] | None = None
        for node in state.nodes.values():
            self._carried.update(self.labels.owned(node.labels).keys())
        state.nodes.add_listener(self._node_changed)
        state.runtime_classes.add_listener(self._class_changed)
        if self._pending is not None:
            self._pending.add_listener(self._requirement_changed)

    # ----- the actor ----------------------------------------------------------------

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self._informer,) if self._informer is not None else ()

    def waiting(self) -> list[str]:
        return [*(f"{kind}: not listed yet" for kind in self.state.unsynced_kinds()), *super().waiting()]

    def register_metrics(self, registry: CollectorRegistry) -> None:
        self.metrics = LabelMetrics(registry, pending=lambda: len(self.writes) + self.writes.in_flight)

    async def lead(self) -> None:
        """Compare every node, then each node or class that changes; write the differences."""
        await self.state.nodes.wait_synced()
        await self.state.runtime_classes.wait_synced()
        if self._pending is not None:
            await self._pending.wait_synced()
        self._all = True
        self._wake.set()
        log.info("labelling nodes for RuntimeClasses", extra={"prefix": self.options.prefix})
        try:
            await run_all(self.writes.run, self._compare_loop)
        finally:
            # The next term, here or elsewhere, compares every node again.
            self.writes.clear()

    async def drain(self) -> None:
        await wait_while(lambda: self.writes.busy, self.options.drain_timeout)

    @property
    def _leading(self) -> bool:
        return self.gate is None or self.gate.leading

    def _node_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        before = self.labels.owned(old.labels) if isinstance(old, NodeView) else {}
        after = self.labels.owned(new.labels) if isinstance(new, NodeView) else {}
        if before.keys() != after.keys():
            self._carried.subtract(before.keys())
            self._carried.update(after.keys())
            for key in before.keys() ^ after.keys():
                if self._carried[key] <= 0:
                    del self._carried[key]
                    self._use_changed(key)
                elif self._carried[key] == 1 and key in after:
                    self._use_changed(key)
        if self._leading and new is not None:
            self._dirty_nodes.add(new.name)
            self._wake.set()

    def _class_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        before = old if isinstance(old, RuntimeClassView) else None
        after = new if isinstance(new, RuntimeClassView) else None
        current = after or before
        if current is None or self.labels.rules_key(before) == self.labels.rules_key(after):
            return  # metadata only: no label moves
        self._mark_class(current.name)

    def _requirement_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        """A pending pod that is the first to require a key, or the last, can change
        whether a class without node rules keeps its label."""
        pending = self._pending
        if pending is None:
            return
        before = old.required if isinstance(old, PendingPod) else frozenset()
        after = new.required if isinstance(new, PendingPod) else frozenset()
        for key in before ^ after:
            count = pending.requiring(key)
            if count == 0 or (count == 1 and key in after):
                self._use_changed(key)

    def _use_changed(self, key: str) -> None:
        """A key just came into use or went out of it: compare its class, if it is one
        without node rules (those with rules are labelled either way)."""
        for runtime_class in self.state.runtime_classes.values():
            if self.labels.key(runtime_class.name) == key and not self.labels.has_node_rules(runtime_class):
                self._mark_class(runtime_class.name)

    def _mark_class(self, class_name: str) -> None:
        if self._leading:
            self._changed_classes.add(class_name)
            self._wake.set()

    # ----- comparing ----------------------------------------------------------------

    def labelled(self) -> dict[str, RuntimeClassView]:
        """The classes that get a label, by key (cached per RuntimeClass generation and
        the set of keys in use)."""
        classes = self.state.runtime_classes
        in_use = frozenset(self._carried) | self._required()
        if self._labelled_for != (classes.generation, in_use):
            self._labelled = self.labels.labelled(classes.values(), in_use.__contains__)
            self._labelled_for = (classes.generation, in_use)
        return self._labelled

    def _required(self) -> frozenset[str]:
        return self._pending.required_keys() if self._pending is not None else frozenset()

    async def _compare_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            nodes = self.state.nodes
            changed, self._changed_classes = self._changed_classes, set()
            if self._all:
                self._all = False
                self._dirty_nodes.clear()
                await self._compare(list(nodes.keys()), None, changed)
            else:
                dirty, self._dirty_nodes = self._dirty_nodes, set()
                if changed:
                    keys = {self.labels.key(name) for name in changed}
                    await self._compare(list(nodes.keys()), keys, changed)
                # A node event compares the whole node (all its classes).
                await self._compare([name for name in dirty if name in nodes], None, set())

    async def _compare(self, names: list[str], keys: set[str] | None, changed: set[str]) -> None:
        """Queue a write for each of ``names`` whose labels (only ``keys``, when given)
        differ; in slices, yielding the loop between them (see the module doc)."""
        loop = asyncio.get_running_loop()
        slice_ends = loop.time() + self.options.slice_seconds
        moves = {name: [0, 0] for name in changed}
        nodes, labelled = self.state.nodes, self.labelled()
        for name in names:
            node = nodes.get(name)
            if node is not None:
                patch = self.labels.patch(node, labelled, keys)
                if patch:
                    self.writes.put(name)
                    self._count_moves(patch, changed, moves)
            if loop.time() >= slice_ends:
                # Three times as long for everything else: a request needs a few turns
                # of the loop, and each would otherwise wait out a slice of the compare.
                await asyncio.sleep(3 * self.options.slice_seconds)
                # What changed meanwhile is compared again by its own event; the writes
                # are computed when sent.
                slice_ends = loop.time() + self.options.slice_seconds
                labelled = self.labelled()
        for class_name, (adding, removing) in sorted(moves.items()):
            log.info(
                "RuntimeClass %s: node labels: %d to add, %d to remove",
                class_name,
                adding,
                removing,
                extra={
                    "runtimeClass": class_name,
                    "label": self.labels.key(class_name),
                    "adding": adding,
                    "removing": removing,
                },
            )
        # Yield between passes: a flood of node events is taken in batches.
        await asyncio.sleep(0)

    def _count_moves(
        self, patch: dict[str, str | None], changed: set[str], moves: dict[str, list[int]]
    ) -> None:
        for class_name in changed:
            value = patch.get(self.labels.key(class_name), ...)
            if value is ...:
                continue
            moves[class_name][0 if value is not None else 1] += 1

    # ----- the writes (extender.leader.writes.WriteHandler) -------------------------

    def key(self, item: str) -> str:
        return item

    def _patch_now(self, name: str) -> dict[str, str | None] | None:
        node: NodeView | None = self.state.nodes.get(name)
        if node is None:
            return None
        labelled = self.labelled()
        # ``due`` and then ``send`` ask for the same node's patch, usually with nothing
        # in between: the node and the labelled classes are the same objects then.
        last = self._last_patch
        if last is not None and last[0] is node and last[1] is labelled:
            return last[2]
        patch = self.labels.patch(node, labelled)
        self._last_patch = (node, labelled, patch)
        return patch

    def due(self, item: str) -> str | None:
        patch = self._patch_now(item)
        if patch is None:
            return "node_gone"
        return None if patch else "in_sync"

    def content(self, item: str) -> Hashable:
        return frozenset((self._patch_now(item) or {}).items())

    async def send(self, item: str) -> Sent:
        patch = self._patch_now(item) or {}
        self._sending[item] = patch
        return await send(
            self._api,
            "PATCH",
            NODE,
            path_params={"name": item},
            body={"metadata": {"labels": patch}},
            content_type="application/merge-patch+json",
            timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
        )

    def settle(self, item: str, outcome: str, *, reason: str = "", sent: Sent | None = None) -> None:
        patch = self._sending.pop(item, {})
        metrics = self.metrics
        if outcome == "sent":
            log.debug(
                "labelled node",
                extra={"node": item, "labels": ",".join(f"{k}={v}" for k, v in patch.items())},
            )
            if metrics is not None:
                metrics.added.inc(sum(1 for v in patch.values() if v is not None))
                metrics.removed.inc(sum(1 for v in patch.values() if v is None))
        elif outcome == "failed":
            status, message = (sent.status, sent.message) if sent is not None else (0, "")
            hint = {
                403: ": grant the node-labels ClusterRole (patch nodes)",
                422: ": refused by admission (is node-label-prefix the admission policy's prefix?)",
            }.get(status, "")
            log.warning(
                "cannot label node" + hint,
                extra={"node": item, "status": status, "error": message, "reason": reason},
            )
            if metrics is not None:
                metrics.errors.labels(reason).inc()

    def retrying(self, item: str, sent: Sent, delay: float) -> None:
        # Debug: a refusal was logged once, as a warning, when its streak began.
        log.debug(
            "node label write will be retried",
            extra={"node": item, "status": sent.status, "error": sent.message, "retryIn": round(delay, 3)},
        )
