"""Keeping the pod admission table equal to the RuntimeClasses (``serve --pod-admission-table``).

What the table says and why it exists is ``extender.admission.pod_table`` (pure). This
module writes it, as a leader actor on the controller shape (``extender.leader.
controller``):

- **One key, the table.** Every RuntimeClass event, and every change of the table
  object itself (a hand edit, a deletion), queues it; its reconcile compares the
  object's ``spec.runtimeClasses``, as this replica's informer shows it, with what the
  classes ask for now, and writes the difference. A burst of class events while a write
  is out is one more reconcile after it (the queue's dirty set), never one write per
  event.
- **Only its spec, written whole.** A write is one JSON patch (RFC 6902) that sets
  ``spec`` to what the classes ask for now, every entry whole. Whatever the informer
  showed when it was computed (it decides only *whether* to write), the table then
  says what some version of the classes said: a merge patch of the entries that
  differ, computed from an informer that had not yet seen the last write, merged into
  the entries member by member and could leave a value no version of a class ever had
  (an overhead of the second edit's cpu and the third's memory). No resourceVersion
  precondition either (which would turn every such overlap into a 409 and a backoff).
  A missing object is created, with the component's label; nothing else of it is ever
  in a request (and an admission policy, deploy/components/pod-admission-policy,
  refuses anything else from the extender's ServiceAccount).
- **And the classes the RuntimeClass admission plugin constrains fully**, on the
  extender's own Namespace (its annotation ``ADMITTED_BY_PLUGIN_ANNOTATION``, which the
  default-scheduler placement's guard reads: ``extender.admission.pod_table``,
  ``admitted_by_plugin``). The guard must let a pod of such a class pass unmarked from
  the moment the mutating policy stops marking it, so the annotation always holds the
  classes the table as stored makes the policy turn away, and never lags it: a reconcile
  makes one write of three, in order (the table's informer, or the annotation's write,
  brings the next): the annotation widened to the classes the table makes so now and will make so; the table;
  the annotation narrowed to what the new table makes so. Whether the API server runs
  the plugin is the ``plugin`` the keeper is given (``extender.podtable.plugin_finder``);
  while that is not known, the table keeps what it said.
- **The window it opens.** While no replica runs, the table is as the last leader left
  it: pods of a class created meanwhile are routed and get nothing else, and a class
  changed meanwhile gives its old overhead and label. A new term starts with the table
  (its pass, ``resync``) and logs how many entries it found stale;
  ``runtimeclass_extender_pod_admission_table_stale_entries`` says, on every replica,
  how many entries differ from the classes; ``check-pod-admission`` shows it per class;
  the audit reports the pods admitted with an overhead their class does not have
  (docs/pod-webhook.md, "The window").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import aiohttp
import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from extender import METRIC_PREFIX
from extender.admission.pod_table import (
    ADMITTED_BY_PLUGIN_ANNOTATION,
    API_VERSION,
    KIND,
    MISSING_CRD_HINT,
    NAMESPACE_PATH,
    PLURAL,
    TABLE_PATH,
    TABLES,
    admitted_by_plugin,
    entries_of,
    table,
    table_spec,
)
from extender.cluster.class_labels import ClassLabels
from extender.cluster.state import ClusterState
from extender.kube.api import ApiError, request_json, send
from extender.kube.health import missing_report
from extender.kube.informer import Informer
from extender.kube.reflector import ReflectorOptions, WatchedResource
from extender.kube.store import Named, Store
from extender.kube.watched import Watched, watched
from extender.leader.controller import Controller, WriteLog
from extender.leader.limits import Sleep, WriteLimiter
from extender.leader.results import FAILURES, Done, Failed, Report, Result, Sent, Unchanged, Write
from extender.leader.workqueue import WriteOptions
from extender.leader.writes import Turn
from extender.podtable.placement import InstalledPlacement

log = logging.getLogger("extender.podtable")

# The one key: the table.
TABLE = "table"
# The label of everything the component installs, on the object the keeper creates.
PART_OF = {"app.kubernetes.io/part-of": "runtimeclass-extender"}


@dataclass(frozen=True, kw_only=True)
class TableOptions(WriteOptions):
    """The table object (cluster-scoped, ``name``), and how the keeper writes it."""

    name: str
    # The extender's own Namespace, whose annotation names the classes the RuntimeClass
    # admission plugin constrains fully.
    namespace: str
    # The leader keeps the derived node labels (table_spec).
    label_nodes: bool = False
    # One object, written when a class changes: no need for more than a few a second.
    rate: float = 5.0
    burst: int = 5
    request_timeout: float = 10.0
    reflector: ReflectorOptions | None = None


class TableMetrics:
    def __init__(
        self, registry: CollectorRegistry, *, stale: Callable[[], int], entries: Callable[[], int]
    ) -> None:
        self.writes = Counter(
            METRIC_PREFIX + "pod_admission_table_writes",
            "Writes of the pod admission table (pod-admission-table) that succeeded, by what they did "
            "(create: the table object was missing; update: entries changed; annotate: the extender's "
            "Namespace's list of the classes the RuntimeClass admission plugin constrains fully).",
            ["action"],
            registry=registry,
        )
        self.errors = Counter(
            METRIC_PREFIX + "pod_admission_table_write_errors",
            "Writes of the pod admission table that failed, once per failing streak (each is tried "
            "again with backoff), by reason: forbidden (403: RBAC), rejected (another 4xx, such as "
            "422 from the admission policy), retries_exhausted.",
            ["reason"],
            registry=registry,
        )
        Gauge(
            METRIC_PREFIX + "pod_admission_table_stale_entries",
            "Entries of the pod admission table that differ from what the RuntimeClasses ask for, as "
            "this replica sees both (missing, different or left over), and other fields of it that differ "
            "(labelNodes, runtimeClassAdmissionPlugin); -1 while the table object is missing. Pods admitted "
            "meanwhile get the old entry.",
            registry=registry,
        ).set_function(lambda: float(stale()))
        Gauge(
            METRIC_PREFIX + "pod_admission_table_entries",
            "Entries (RuntimeClasses) in the pod admission table, as this replica's informer shows it.",
            registry=registry,
        ).set_function(lambda: float(entries()))
        for action in ("create", "update", "annotate"):
            self.writes.labels(action)
        for reason in FAILURES:
            self.errors.labels(reason)


WRITE_LOG = WriteLog(
    log,
    subject="table",
    failing="cannot write the pod admission table",
    retrying="pod admission table write will be retried",
    hints={
        403: ": grant the pod-admission-table ClusterRole (create, and get/list/watch/patch on the table "
        "and on the extender's Namespace)",
        422: ": refused by admission (the table's name must be the policies' param name)",
    },
)


Entries = dict[str, dict[str, Any]]


def merge_patch(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``current`` into ``wanted``: members
    that differ, ``None`` for members to remove, objects compared member by member."""
    patch: dict[str, Any] = {key: None for key in current if key not in wanted}
    for key, value in wanted.items():
        old = current.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            inner = merge_patch(old, value)
            if inner:
                patch[key] = inner
        elif key not in current or old != value:
            patch[key] = value
    return patch


class Written(NamedTuple):
    """What a write did: ``create`` (the object was missing) or ``update``, and how many
    entries it wrote."""

    action: str
    entries: int


def _constrained(spec: Mapping[str, Any] | None) -> list[str]:
    """The classes whose pods the mutating policy turns away, reading the table ``spec``
    (none without the plugin)."""
    if not spec or not spec.get("runtimeClassAdmissionPlugin"):
        return []
    entries = spec.get("runtimeClasses")
    return admitted_by_plugin(entries) if isinstance(entries, dict) else []


def _canonical(value: Any) -> bytes:
    """What a write makes the table say, comparable (the queue's damping compares them)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


class PodAdmissionTable(Controller[str]):
    """Keeps the pod admission table; see the module doc."""

    name = "pod-admission-table"

    def __init__(
        self,
        api: Any,
        state: ClusterState,
        *,
        options: TableOptions,
        rules: ClassLabels,
        plugin: Callable[[], bool | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        limiter: WriteLimiter | None = None,
    ) -> None:
        self.options: TableOptions = options
        super().__init__(options, clock=clock, sleep=sleep, limiter=limiter)
        self._api = api
        self.state = state
        # Which classes have node rules (the extender's policy), and their labels.
        self.rules = rules
        # Whether the API server runs the RuntimeClass admission plugin (None: not known).
        self.plugin = plugin
        self.informer: Informer[Watched] = Informer(
            api,
            WatchedResource(
                PLURAL,
                TABLES,
                watched,
                field_selector=f"metadata.name={options.name}",
                missing_hint=MISSING_CRD_HINT,
            ),
            Store("pod-admission-table"),
            options=options.reflector,
        )
        # The Namespace's annotation as last read (None: none), read again at each
        # reconcile: the Namespace is ours to read by name alone (a Role), not to list.
        self._named: list[str] | None = None
        self.metrics: TableMetrics | None = None
        # The install's placement against this replica's (serve wires it): a replica that
        # disagrees is not ready.
        self.placement: InstalledPlacement | None = None
        # What the classes ask for, recomputed when they change (every replica reads it
        # for the gauge at each scrape).
        self._wanted: Entries = {}
        self._wanted_for = -1
        state.runtime_classes.add_listener(self._changed)
        self.informer.store.add_listener(self._changed)

    # ----- the actor ----------------------------------------------------------------

    def plugin_changed(self) -> None:
        """The finding of the RuntimeClass admission plugin changed (``PluginFinder``)."""
        self.queue.add(TABLE)

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return (self.informer,)

    @property
    def reads(self) -> Sequence[Store[Any]]:
        return (self.state.runtime_classes, *super().reads)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        self.metrics = TableMetrics(registry, stale=self.stale, entries=self.entries)

    def starting(self) -> None:
        log.info(
            "keeping the pod admission table",
            extra={
                "table": self.options.name,
                "classes": len(self.wanted()),
                "stale": self.stale(),
            },
        )

    async def resync(self) -> None:
        """Every term starts with the table: what changed while no replica led it."""
        self.queue.add(TABLE)

    def _changed(self, _kind: str, _old: Named | None, _new: Named | None) -> None:
        self.queue.add(TABLE)

    # ----- what every replica reads ---------------------------------------------------

    def wanted(self) -> Entries:
        """The table the RuntimeClasses ask for now."""
        classes = self.state.runtime_classes
        if self._wanted_for != classes.generation:
            self._wanted = table(classes.values(), self.rules)
            self._wanted_for = classes.generation
        return self._wanted

    def current(self) -> Entries | None:
        found = self.informer.store.get(self.options.name)
        return entries_of(found.obj if found is not None else None)

    def stale(self) -> int:
        """Entries, and other fields of the spec, that differ from what the table should
        hold (-1: no table object); 0 before both are listed."""
        if not (self.informer.synced and self.state.runtime_classes.synced):
            return 0
        found = self.informer.store.get(self.options.name)
        if found is None:
            return -1
        current = found.obj.get("spec") if isinstance(found.obj, dict) else None
        current = current if isinstance(current, dict) else {}
        wanted = self.wanted_spec()
        fields = merge_patch(
            {k: v for k, v in current.items() if k != "runtimeClasses"},
            {k: v for k, v in wanted.items() if k != "runtimeClasses"},
        )
        return len(fields) + len(merge_patch(entries_of(found.obj) or {}, wanted["runtimeClasses"]))

    def entries(self) -> int:
        return len(self.current() or {})

    def details(self) -> dict[str, object]:
        """For ``/readyz``: whether the API server's pod admission can read the table, as
        this replica sees it (``ready``: the object exists), and why not. Until it does,
        the policies admit every pod as it came (docs/pod-webhook.md, "While the table
        is missing"), so a pod created then is placed as if nothing were installed."""
        stats = self.informer.stats
        found: dict[str, object] = {"table": self.options.name, "ready": False}
        problem = self.placement.problem() if self.placement is not None else None
        if problem is not None:
            return {**found, "reason": problem}
        if stats.missing:
            return {**found, "reason": missing_report(stats)}
        if not stats.synced:
            return {
                **found,
                "reason": "not listed yet" + (f": {stats.last_error}" if stats.last_error else ""),
            }
        current = self.current()
        if current is None:
            return {**found, "reason": "the table does not exist yet: the extender's leader creates it"}
        return {**found, "ready": True, "entries": len(current), "stale": self.stale()}

    # ----- reconciling --------------------------------------------------------------

    async def reconcile(self, key: str, turn: Turn) -> Result:
        self._named = await self._read_annotation()
        return await turn.write(self._write)

    async def _read_annotation(self) -> list[str] | None:
        """The classes the Namespace's annotation names now (None: none). An error is the
        write's to meet: read as before."""
        try:
            found = await request_json(
                self._api,
                "GET",
                NAMESPACE_PATH,
                path_params={"name": self.options.namespace},
                timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
            )
        except (ApiError, aiohttp.ClientError, TimeoutError):
            return self._named
        metadata = found.get("metadata") if isinstance(found, dict) else None
        annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
        value = annotations.get(ADMITTED_BY_PLUGIN_ANNOTATION) if isinstance(annotations, dict) else None
        return [name for name in str(value).split(",") if name] if value is not None else None

    def wanted_spec(self) -> dict[str, Any]:
        """The spec the table should hold: the entries, and whether the API server runs
        the RuntimeClass admission plugin as last found out, or as the table says while
        that is not known."""
        plugin = self.plugin()
        if plugin is None:
            found = self.informer.store.get(self.options.name)
            spec = found.obj.get("spec") if found is not None and isinstance(found.obj, dict) else None
            plugin = bool(isinstance(spec, dict) and spec.get("runtimeClassAdmissionPlugin"))
        return table_spec(dict(self.wanted()), label_nodes=self.options.label_nodes, admission_plugin=plugin)

    def _write(self) -> Write | Unchanged:
        """One write of the three (see the module doc), or none."""
        spec = self.wanted_spec()
        found = self.informer.store.get(self.options.name)
        current = found.obj.get("spec") if found is not None and isinstance(found.obj, dict) else None
        current = current if isinstance(current, dict) else None
        # What the mutating policy turns away now, and will with the new table.
        now, then = set(_constrained(current)), set(_constrained(spec))
        named = self._named
        if not set(named or ()) >= now | then:
            return self._annotate(sorted(now | then))
        if found is None:
            return Write(
                ("create", _canonical(spec)),
                partial(self._create, spec),
                detail=Written("create", len(spec["runtimeClasses"])),
            )
        if merge_patch(current or {}, spec):
            return Write(
                ("update", _canonical(spec)),
                partial(self._replace, spec),
                detail=Written(
                    "update", len(merge_patch(entries_of(found.obj) or {}, spec["runtimeClasses"]))
                ),
            )
        if sorted(named or ()) != sorted(then):
            return self._annotate(sorted(then))
        return Unchanged("in_sync")

    def _annotate(self, classes: list[str]) -> Write:
        value = ",".join(classes)
        return Write(
            ("annotate", value),
            partial(self._send_annotation, value),
            detail=Written("annotate", len(classes)),
        )

    async def _send_annotation(self, value: str) -> Sent:
        """The Namespace's annotation alone (a merge patch), which admission-policy.yaml
        confines the extender's writes of the Namespace to."""
        options = self.options
        return await send(
            self._api,
            "PATCH",
            NAMESPACE_PATH,
            path_params={"name": options.namespace},
            body={"metadata": {"annotations": {ADMITTED_BY_PLUGIN_ANNOTATION: value}}},
            content_type="application/merge-patch+json",
            timeout=aiohttp.ClientTimeout(total=options.request_timeout),
        )

    async def _create(self, spec: dict[str, Any]) -> Sent:
        options = self.options
        return await send(
            self._api,
            "POST",
            TABLES,
            body={
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": options.name, "labels": dict(PART_OF)},
                "spec": spec,
            },
            timeout=aiohttp.ClientTimeout(total=options.request_timeout),
        )

    async def _replace(self, spec: dict[str, Any]) -> Sent:
        """The table's spec, whole ("add" of an object member replaces it: RFC 6902
        section 4.1), whatever it held (see the module doc)."""
        options = self.options
        return await send(
            self._api,
            "PATCH",
            TABLE_PATH,
            path_params={"name": options.name},
            body=[{"op": "add", "path": "/spec", "value": spec}],
            content_type="application/json-patch+json",
            timeout=aiohttp.ClientTimeout(total=options.request_timeout),
        )

    def report(self, key: str, report: Report) -> None:
        result, metrics = report.result, self.metrics
        if isinstance(result, Done) and result.write is not None and isinstance(result.write.detail, Written):
            written = result.write.detail
            log.info(
                "pod admission table written",
                extra={"action": written.action, "entries": written.entries, "table": self.options.name},
            )
            if metrics is not None:
                metrics.writes.labels(written.action).inc()
            if written.action == "annotate":
                # No informer tells of the Namespace: the next of the three writes, if
                # one is due, is this key's next turn.
                self.queue.add(TABLE)
        elif isinstance(result, Failed):
            WRITE_LOG(key, report, table=self.options.name)
            if metrics is not None and report.failure:
                metrics.errors.labels(report.failure).inc()
