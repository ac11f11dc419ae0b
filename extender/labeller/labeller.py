"""Keeping each RuntimeClass's label on exactly the nodes that fit it (``serve --label-nodes``).

What the labels are and why is ``extender.cluster.class_labels`` (pure). This module
writes them, as a leader actor (``extender.leader.actor``):

- **A controller** (``extender.leader.controller``), level-triggered. It watches nothing
  of its own: the cluster state's Node and RuntimeClass stores (the watch every replica
  runs) are both what should be (the classes' rules) and what is (each node's labels).
  Its keys are node names (reconciled: one merge patch of the labels under the prefix
  that differ from what its classes ask for, computed from the state when it is sent,
  so a burst of changes to one node is one patch). A node event queues that node. Its
  pass (``resync``) compares the nodes and queues each that differs: every node for
  every class at the start of a term, and every node for the classes whose nodes may
  have moved since (a class event that changes what decides them,
  ``ClassLabels.rules_key``; an edit of its labels or annotations moves nothing). A new
  leader finds nothing to do where its predecessor finished: no churn on hand-over.
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
  are listed, and a term starts only once they are (``Controller.reads``).
- **Only its prefix.** A JSON merge patch of ``metadata.labels`` naming only keys under
  the prefix: labels of anyone else are never in the request (and an admission policy,
  deploy/components/label-nodes, refuses any other change).
- **Removals first.** A write that takes a derived label off a node (the node lost a
  label its class reads; a class edited to another pool) goes to the head of the
  queue, ahead of a relabel's backlog of additions: until it lands, the node still
  claims a class it no longer runs, and with the default-scheduler placement nothing
  else keeps the class's pods off it.
- **Bounded.** Writes go through the controller's ``WorkQueue``: a rate limit, at most
  ``concurrency`` at once, one reconcile per node at a time, a backoff per node that
  fails, and a refusal (a missing RBAC rule, the admission policy) said once with one
  node probing while the others wait, so that 15,000 refused nodes are not 15,000
  retries (each label write wakes every node watcher, kube-scheduler's included).

- **The startup taint** (``extender.autoscaling.startup_taint``): a node that carries it
  (a node group's new node, registered with it so that cluster-autoscaler counts the
  node as starting while its labels are missing) has it removed in the write that
  makes its labels right, or alone when they already are, but for one case, with
  ``startup_taint_grace`` (off by default): while a pending pod of a class with node
  rules waits, a node that fits none of the classes pending pods wait for keeps it for
  up to the grace after this leader first saw it, since a label such a class reads may
  still come (kata-deploy's ``katacontainers.io/kata-runtime``, node-feature-
  discovery's, set once a DaemonSet pod has run on the node); it is looked at again
  when the node changes, and when the grace ends. That write reads the node first (taints are one list, replaced
  whole by a merge patch: every other taint is sent back as the API server has it)
  and is conditional on the node's resourceVersion, so a taint someone adds meanwhile
  is never undone (409: tried again). A node whose labels the cache shows differently
  than the read is tried again once the watch has caught up; a read that finds the
  taint gone already removes nothing, and counts nothing.

One log line per class change says what it moves ("RuntimeClass gvisor: node labels:
3 to add, 1 to remove"); counters say what was written.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge

from extender import METRIC_PREFIX
from extender.autoscaling.startup_taint import carries, untainting_patch
from extender.cluster.class_labels import ClassLabels
from extender.cluster.pending_pod_informer import PendingPodInformer
from extender.cluster.pending_pods import PendingPod
from extender.cluster.state import ClusterState
from extender.kube.api import ApiError, request_json, send
from extender.kube.informer import Informer
from extender.kube.store import Named, Store
from extender.leader.controller import Controller, WriteLog
from extender.leader.limits import Sleep, WriteLimiter
from extender.leader.results import FAILURES, Done, Failed, Report, Result, Retry, Sent, Unchanged, Write
from extender.leader.workqueue import WriteOptions
from extender.leader.writes import Turn
from extender.settings import (
    DEFAULT_LABEL_NODES_RATE,
    DEFAULT_NODE_LABEL_PREFIX,
    DEFAULT_STARTUP_TAINT,
    DEFAULT_STARTUP_TAINT_GRACE,
)
from policies.objects import NodeView, RuntimeClassView
from policies.registry import Policy

log = logging.getLogger("extender.labeller")

NODE = "/api/v1/nodes/{name}"


@dataclass(frozen=True, kw_only=True)
class LabelOptions(WriteOptions):
    prefix: str = DEFAULT_NODE_LABEL_PREFIX
    # The taint removed from a node once its labels are right ("": none), and how long a
    # node may keep it for a label still to come (see the module doc).
    startup_taint: str = DEFAULT_STARTUP_TAINT
    startup_taint_grace: float = DEFAULT_STARTUP_TAINT_GRACE
    # Node patches per second, bursts, and patches in flight at once; a node's write
    # after a failure is tried again with backoff up to every retry_max (a refusal:
    # one probe, the other nodes held, extender.leader.refusal).
    rate: float = DEFAULT_LABEL_NODES_RATE
    burst: int = 20
    concurrency: int = 10
    request_timeout: float = 10.0
    # Longest run of comparing before the loop is handed back, for three times as long
    # (a request waits that long at most behind a slice of a relabel).
    slice_seconds: float = 0.00025


@dataclass
class NodeWrite:
    """One write of a node (a ``Write``'s detail): the labels it sets (``None``: removes),
    the startup taint it removes (None: none), and, once sent, whether the taint was
    removed by it (the read before it may find the taint gone)."""

    labels: dict[str, str | None]
    taint: str | None
    untainted: bool = False


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
            "Node label writes that failed, once per failing streak of a node and once per refusal "
            "of the labeller's writes (each is tried again with "
            "backoff while still wrong), by reason: forbidden (403: RBAC), rejected (another 4xx, "
            "such as 422 from the admission policy), retries_exhausted.",
            ["reason"],
            registry=registry,
        )
        self.untainted = Counter(
            METRIC_PREFIX + "node_startup_taints_removed",
            "Startup taints (startup-taint) removed from nodes once their RuntimeClass labels were right.",
            registry=registry,
        )
        Gauge(
            METRIC_PREFIX + "node_label_writes_pending",
            "Node label writes waiting for their turn, for a retry, or in flight.",
            registry=registry,
        ).set_function(lambda: float(pending()))
        for reason in FAILURES:
            self.errors.labels(reason)


WRITE_LOG = WriteLog(
    log,
    subject="node",
    failing="cannot label node",
    retrying="node label write will be retried",
    hints={
        403: ": grant the node-labels ClusterRole (patch nodes)",
        422: ": refused by admission (are node-label-prefix and startup-taint the admission policy's prefix "
        "and startupTaint?)",
    },
)


class NodeLabeller(Controller[str]):
    """Keeps the derived RuntimeClass labels on the nodes; see the module doc."""

    name = "node-labeller"

    def __init__(
        self,
        api: Any,
        state: ClusterState,
        policy: Policy,
        *,
        options: LabelOptions | None = None,
        pending: PendingPodInformer | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        limiter: WriteLimiter | None = None,
    ) -> None:
        self.options: LabelOptions = options or LabelOptions()
        super().__init__(self.options, clock=clock, sleep=sleep, limiter=limiter)
        self._api = api
        self.state = state
        self.labels = ClassLabels(self.options.prefix, policy)
        self.metrics: LabelMetrics | None = None
        # On every replica: how many nodes carry each key under the prefix, and the
        # pending pods' requirements (a label in use stays satisfiable).
        self._carried: collections.Counter[str] = collections.Counter()
        self._informer = pending
        self._pending = pending.pods if pending is not None else None
        # What the next pass compares: every node for every class (a term's first), and
        # the classes whose nodes may have moved since the last pass.
        self._full = False
        self._moved: set[str] = set()
        # The labelled classes, recomputed when a class or a key's use changes.
        self._labelled: dict[str, RuntimeClassView] = {}
        self._labelled_for: tuple[int, frozenset[str]] | None = None
        # The last patch computed, with the node and labelled classes it was computed
        # from (a write asks for it before and after its wait for the rate limit).
        self._last_patch: tuple[NodeView, dict[str, RuntimeClassView], dict[str, str | None]] | None = None
        # When this term first saw each node that still has the startup taint (its grace).
        self._tainted_since: dict[str, float] = {}
        self._clock = clock
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

    @property
    def reads(self) -> Sequence[Store[Any]]:
        return (self.state.nodes, self.state.runtime_classes, *super().reads)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        self.metrics = LabelMetrics(registry, pending=lambda: len(self.queue) + self.queue.in_flight)

    def starting(self) -> None:
        log.info("labelling nodes for RuntimeClasses", extra={"prefix": self.options.prefix})
        self._full, self._moved = True, set()
        self._tainted_since = {}

    # ----- listeners: every change is a key -------------------------------------------

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
        if isinstance(new, NodeView):
            self.queue.add(new.name, first=self._removes(new))
        elif old is not None:
            self._tainted_since.pop(old.name, None)

    def _removes(self, node: NodeView) -> bool:
        """The node carries a derived label it must lose: its write goes first, ahead of a
        relabel's backlog (with no extender in kube-scheduler's path, a pod may be bound
        there meanwhile: docs/large-clusters.md, "The window")."""
        if not self.labels.owned(node.labels):
            return False
        labelled = self.labelled()
        patch = self.labels.patch(node, labelled)
        self._last_patch = (node, labelled, patch)  # what its write will ask for
        return any(value is None for value in patch.values())

    def _class_changed(self, _kind: str, old: Named | None, new: Named | None) -> None:
        before = old if isinstance(old, RuntimeClassView) else None
        after = new if isinstance(new, RuntimeClassView) else None
        current = after or before
        if current is None or self.labels.rules_key(before) == self.labels.rules_key(after):
            return  # metadata only: no label moves
        self._class_moved(current.name)

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
                self._class_moved(runtime_class.name)

    def _class_moved(self, name: str) -> None:
        """The class's nodes may have moved: the next pass compares them (nothing while
        following: a term starts with a full pass)."""
        if self.queue.running:
            self._moved.add(name)
            self.queue.resync()

    # ----- reconciling --------------------------------------------------------------

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

    async def resync(self) -> None:
        full, moved = self._full, self._moved
        self._full, self._moved = False, set()
        if full:
            await self._compare(None)
        for name in sorted(moved):
            await self._compare(name)

    async def reconcile(self, key: str, turn: Turn) -> Result:
        return await turn.write(partial(self._write, key))

    async def _compare(self, class_name: str | None) -> None:
        """Queue each node whose labels (only ``class_name``'s, when given) differ; in
        slices, yielding the loop between them (see the module doc)."""
        loop = asyncio.get_running_loop()
        slice_ends = loop.time() + self.options.slice_seconds
        keys = None if class_name is None else {self.labels.key(class_name)}
        adding = removing = 0
        nodes, labelled = self.state.nodes, self.labelled()
        for name in list(nodes.keys()):
            node = nodes.get(name)
            if node is not None:
                patch = self.labels.patch(node, labelled, keys)
                if patch or (keys is None and carries(node, self.options.startup_taint)):
                    self.queue.add(name, first=any(value is None for value in patch.values()))
                    if class_name is not None and patch:
                        value = patch[self.labels.key(class_name)]
                        adding += value is not None
                        removing += value is None
            if loop.time() >= slice_ends:
                # Three times as long for everything else: a request needs a few turns
                # of the loop, and each would otherwise wait out a slice of the compare.
                await asyncio.sleep(3 * self.options.slice_seconds)
                # What changed meanwhile is compared again by its own event; the writes
                # are computed when sent.
                slice_ends = loop.time() + self.options.slice_seconds
                labelled = self.labelled()
        if class_name is not None:
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

    def _write(self, name: str) -> Write | Unchanged | Retry:
        """The node's patch as things are now: one merge patch of the labels under the
        prefix that differ, and the startup taint's removal when the node carries it and
        may lose it (the ``detail``, a ``NodeWrite``), or why there is none."""
        node: NodeView | None = self.state.nodes.get(name)
        if node is None:
            return Unchanged("node_gone")
        labelled = self.labelled()
        last = self._last_patch
        if last is not None and last[0] is node and last[1] is labelled:
            patch = last[2]
        else:
            patch = self.labels.patch(node, labelled)
            self._last_patch = (node, labelled, patch)
        taint, kept = None, 0.0
        if carries(node, self.options.startup_taint):
            kept = self._startup_taint_kept(node, labelled, patch)
            taint = None if kept > 0 else self.options.startup_taint
        if not patch and taint is None:
            return Retry("startup_taint_kept", after=kept, early=True) if kept > 0 else Unchanged("in_sync")
        content = frozenset(patch.items()) | ({("taint", taint)} if taint else set())
        detail = NodeWrite(patch, taint)
        send_it = partial(self._send_untainting, node, detail) if taint else partial(self._send, name, patch)
        return Write(content, send_it, detail=detail)

    def _startup_taint_kept(
        self, node: NodeView, labelled: dict[str, RuntimeClassView], patch: dict[str, str | None]
    ) -> float:
        """How much longer the node keeps its startup taint (0: it loses it now), see the
        module doc: while it fits none of the classes pending pods wait for, though some
        wait, within its grace."""
        now = self._clock()
        left = self.options.startup_taint_grace - (now - self._tainted_since.setdefault(node.name, now))
        if left <= 0 or self._pending is None:
            return 0.0
        waiting = {pod.runtime_class_name for pod in self._pending.values() if pod.schedulable}
        waiting &= {runtime_class.name for runtime_class in labelled.values()}
        if not waiting:
            return 0.0
        carried = {**self.labels.owned(node.labels), **patch}
        fits = {labelled[key].name for key, value in carried.items() if value is not None and key in labelled}
        return 0.0 if waiting & fits else left

    async def _send(self, name: str, patch: dict[str, str | None]) -> Sent:
        return await self._patch(name, {"metadata": {"labels": patch}})

    async def _patch(self, name: str, body: dict[str, Any]) -> Sent:
        """One merge patch of the node."""
        return await send(
            self._api,
            "PATCH",
            NODE,
            path_params={"name": name},
            body=body,
            content_type="application/merge-patch+json",
            timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
        )

    async def _send_untainting(self, node: NodeView, write: NodeWrite) -> Sent:
        """The labels and the startup taint's removal in one write (see the module doc):
        the node is read first, for its taints as the API server has them; the patch is
        conditional on that read's resourceVersion. ``write.untainted`` says whether the
        taint was in it (the read may find it gone already)."""
        patch, taint = write.labels, write.taint
        assert taint is not None
        timeout = aiohttp.ClientTimeout(total=self.options.request_timeout)
        try:
            current = await request_json(
                self._api, "GET", NODE, path_params={"name": node.name}, timeout=timeout
            )
        except ApiError as exc:
            return Sent(exc.status, exc.message, exc.retry_after)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            return Sent(0, f"{type(exc).__name__}: {exc}")
        if dict((current.get("metadata") or {}).get("labels") or {}) != dict(node.labels):
            # The patch was computed from labels the node no longer has (the cache is
            # behind the read): tried again after the watch.
            return Sent(409, "the node changed since the cache saw it")
        body = untainting_patch(current, patch, taint)
        write.untainted = body is not None and "spec" in body
        if body is None:
            return Sent(200)
        return await self._patch(node.name, body)

    def report(self, key: str, report: Report) -> None:
        result, metrics = report.result, self.metrics
        if isinstance(result, Done) and isinstance(write := result.write.detail if result.write else None, NodeWrite):
            patch = write.labels
            if patch:
                log.debug(
                    "labelled node",
                    extra={"node": key, "labels": ",".join(f"{k}={v}" for k, v in patch.items())},
                )
            if write.untainted:
                self._tainted_since.pop(key, None)
                log.info("removed the startup taint", extra={"node": key, "taint": write.taint})
            if metrics is not None:
                metrics.added.inc(sum(1 for v in patch.values() if v is not None))
                metrics.removed.inc(sum(1 for v in patch.values() if v is None))
                if write.untainted:
                    metrics.untainted.inc()
        elif isinstance(result, Failed):
            WRITE_LOG(key, report)
            if metrics is not None and report.failure:
                metrics.errors.labels(report.failure).inc()
