"""GET /metrics: names, label bounds, and the values a real filter call produces."""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from extender import METRIC_PREFIX as PREFIX
from extender.audit.metrics import AUDITED_PODS, MISPLACED_PODS
from extender.autoscaling.finder import AutoscalerCheck
from extender.capture.writer import CaptureWriter
from extender.cluster.class_labels import ClassLabels
from extender.cluster.file_source import load_cluster_file
from extender.cluster.node_lookup import LookupStats
from extender.cluster.state import ClusterState
from extender.http.app import create_app
from extender.http.keys import METRICS
from extender.http.metrics import NODE_LOOKUP_COUNTERS, RETIRED_CLASS_SECONDS, FilterMetrics
from extender.http.wiring import attach_capture
from extender.kube.health import SourceStats
from extender.labeller.events import ClassEvents
from extender.labeller.labeller import LabelMetrics
from extender.leader.runner import CAMPAIGNING_GAUGE, LEADER_GAUGE, LeaderRunner
from extender.podtable.keeper import PodAdmissionTable, TableOptions
from extender.podtable.plugin_finder import PluginFinder
from extender.policy_file import load_policy
from extender.requeue.metrics import RequeueMetrics
from policies.objects import NodeView, RuntimeClassView, Taint, Toleration
from policies.verdict import (
    REASON_LABELS,
    REASON_NODE_UNKNOWN,
    REASON_RUNTIMECLASS_MISMATCH,
    REASON_UNTOLERATED_TAINT,
    reason_label,
    reason_runtime_handler_features_unsupported,
    reason_runtime_handler_unsupported,
    reason_runtimeclass_not_found,
    reason_runtimeclass_selector_invalid,
)
from tests.support.docs import page, section
from tests.support.monitoring import SCRAPE_SERIES, alert_rules, metric_names
from tests.support.paths import REPO

EXAMPLE_CLUSTER = REPO / "deploy" / "examples" / "cluster.yaml"
EXAMPLE_REQUEST = json.loads((REPO / "deploy" / "examples" / "filter-request.json").read_text())
ALL_NODES = ["runc-1", "runc-2", "gvisor-1", "gvisor-2", "kata-1", "win-1"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _app(state: ClusterState | None = None, **kwargs: Any) -> web.Application:
    return create_app(
        state=state if state is not None else load_cluster_file(EXAMPLE_CLUSTER),
        policy=load_policy(),
        **kwargs,
    )


def _request(runtime_class: str | None, nodes: list[str] = ALL_NODES) -> dict[str, Any]:
    body = copy.deepcopy(EXAMPLE_REQUEST)
    if runtime_class is None:
        body["Pod"]["spec"].pop("runtimeClassName", None)
    else:
        body["Pod"]["spec"]["runtimeClassName"] = runtime_class
    body["NodeNames"] = nodes
    return body


async def _scrape(client: TestClient[Any, Any]) -> tuple[str, Samples]:
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain;")
    text = await response.text()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return text, samples


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_every_metric_is_prefixed_and_has_no_node_label(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_app())
    await client.post("/filter", json=_request("gvisor"))
    text, samples = await _scrape(client)
    families = list(text_string_to_metric_families(text))
    assert families
    for family in families:
        assert family.name.startswith("runtimeclass_extender_"), family.name
    for _, labels in samples:
        assert "node" not in dict(labels)
    # No node name appears anywhere in the exposition.
    for node in ALL_NODES:
        assert node not in text


async def test_filter_call_counts_outcome_duration_and_rejections(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_app())
    response = await client.post("/filter", json=_request("gvisor"))
    assert response.status == 200
    assert sorted((await response.json())["NodeNames"]) == ["gvisor-1", "gvisor-2"]  # in any order
    _, samples = await _scrape(client)
    assert _value(samples, "runtimeclass_extender_filter_requests_total", outcome="ok") == 1
    assert _value(samples, "runtimeclass_extender_filter_duration_seconds_count") == 1
    assert (
        _value(
            samples,
            "runtimeclass_extender_nodes_rejected_total",
            reason="runtimeclass_mismatch",
            runtime_class="gvisor",
        )
        == 4
    )
    # Two nodes passed: not a scheduling failure.
    assert _value(samples, "runtimeclass_extender_runtime_rejections_total", runtime_class="gvisor") == 0
    # Every outcome series exists from the start, at zero.
    for outcome in ("not_synced", "bad_request", "too_large", "unsupported_media_type", "error"):
        assert ("runtimeclass_extender_filter_requests_total", (("outcome", outcome),)) in samples


# The counters labelled by RuntimeClass, each (name, labels besides runtime_class).
BY_CLASS = [
    *(("runtimeclass_extender_nodes_rejected_total", {"reason": reason}) for reason in REASON_LABELS),
    ("runtimeclass_extender_filter_requests_by_runtimeclass_total", {}),
    ("runtimeclass_extender_runtime_rejections_total", {}),
    ("runtimeclass_extender_filter_fitting_nodes_not_offered_total", {}),
]


def _class_series(samples: Samples) -> dict[str, set[tuple[str, tuple[tuple[str, str], ...]]]]:
    """The series of the counters labelled by RuntimeClass, by runtime_class."""
    found: dict[str, set[tuple[str, tuple[tuple[str, str], ...]]]] = {}
    names = {name for name, _ in BY_CLASS}
    for (name, labels), _ in samples.items():
        if name in names:
            found.setdefault(dict(labels)["runtime_class"], set()).add((name, labels))
    return found


async def test_every_class_has_its_series_at_zero_before_any_call(aiohttp_client: Any) -> None:
    """The panels and alerts reading these counters have a series from the start: for
    none, unknown and each RuntimeClass in the cache, every reason for the rejected
    nodes, all at 0 (Prometheus' "Avoid missing metrics")."""
    state = load_cluster_file(EXAMPLE_CLUSTER)
    client = await aiohttp_client(_app(state))
    _, samples = await _scrape(client)
    classes = {*state.runtime_classes.keys(), "none", "unknown"}
    assert len(classes) > 4
    for runtime_class in classes:
        for name, labels in BY_CLASS:
            key = (name, tuple(sorted({**labels, "runtime_class": runtime_class}.items())))
            assert samples.get(key) == 0, key
    assert set(_class_series(samples)) == classes
    assert len([key for key in samples if key[0] == BY_CLASS[0][0]]) == len(classes) * len(REASON_LABELS)


def _filter_metrics(classes: set[str], now: list[float]) -> tuple[FilterMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return FilterMetrics(registry, lambda: classes, clock=lambda: now[0]), registry


def _collected(registry: CollectorRegistry) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def test_the_class_series_follow_the_cache() -> None:
    """A class's series appear with it; a class gone keeps its counts for
    RETIRED_CLASS_SECONDS (its last values are scraped, a class back in time continues),
    then its series are removed; back after that, they start again from 0 (a reset, as
    rate() and increase() read it)."""
    classes, now = {"gvisor"}, [1000.0]
    metrics, registry = _filter_metrics(classes, now)
    assert set(_class_series(_collected(registry))) == {"gvisor", "none", "unknown"}

    classes.add("kata")
    assert "kata" in _class_series(_collected(registry))
    metrics.classes.child(metrics.nodes_rejected, "kata", "runtimeclass_mismatch").inc(3)
    metrics.classes.child(metrics.runtime_rejections, "kata").inc()

    # Gone: still exported, with its counts, until the retention has passed.
    classes.discard("kata")
    rejected = (
        "runtimeclass_extender_nodes_rejected_total",
        (("reason", "runtimeclass_mismatch"), ("runtime_class", "kata")),
    )
    assert _collected(registry)[rejected] == 3
    now[0] += RETIRED_CLASS_SECONDS - 1
    assert _collected(registry)[rejected] == 3
    # Back within it: the same series, counts kept, and no longer counted as gone.
    classes.add("kata")
    assert _collected(registry)[rejected] == 3
    classes.discard("kata")
    now[0] += RETIRED_CLASS_SECONDS - 1
    assert _collected(registry)[rejected] == 3
    now[0] += 1
    assert _collected(registry)[rejected] == 3
    now[0] += RETIRED_CLASS_SECONDS
    assert "kata" not in _class_series(_collected(registry))
    # Removed for good: a count now lands in a new series, exported (and retired) too.
    classes.add("kata")
    assert _collected(registry)[rejected] == 0
    classes.discard("kata")
    metrics.classes.child(metrics.nodes_rejected, "kata", "runtimeclass_mismatch").inc()
    assert _collected(registry)[rejected] == 1
    now[0] += RETIRED_CLASS_SECONDS
    assert "kata" not in _class_series(_collected(registry))
    # none and unknown are never retired, whatever the cache holds. (The time counts
    # from the first collection that finds a class gone.)
    classes.clear()
    assert "gvisor" in _class_series(_collected(registry))
    now[0] += RETIRED_CLASS_SECONDS
    assert set(_class_series(_collected(registry))) == {"none", "unknown"}


def test_a_class_counted_but_never_in_the_cache_is_retired_too() -> None:
    """A call decided just before its class left the cache, before any scrape saw it."""
    classes, now = set[str](), [0.0]
    metrics, registry = _filter_metrics(classes, now)
    metrics.classes.child(metrics.by_runtime_class, "short-lived").inc()
    series = (
        "runtimeclass_extender_filter_requests_by_runtimeclass_total",
        (("runtime_class", "short-lived"),),
    )
    assert _collected(registry)[series] == 1
    now[0] += RETIRED_CLASS_SECONDS
    assert series not in _collected(registry)


async def test_a_new_class_has_its_series_at_the_next_scrape(aiohttp_client: Any) -> None:
    state = load_cluster_file(EXAMPLE_CLUSTER)
    client = await aiohttp_client(_app(state))
    state.runtime_classes.upsert(RuntimeClassView("wasm", "spin", node_selector={"wasm": "true"}))
    _, samples = await _scrape(client)
    assert (
        _value(samples, "runtimeclass_extender_runtime_rejections_total", runtime_class="wasm") == 0
        and ("runtimeclass_extender_runtime_rejections_total", (("runtime_class", "wasm"),)) in samples
    )


async def test_pod_input_cannot_create_label_values(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_app())
    await client.post("/filter", json=_request("made-up-class-4f9a"))
    text, samples = await _scrape(client)
    assert "made-up-class-4f9a" not in text
    assert (
        _value(
            samples,
            "runtimeclass_extender_nodes_rejected_total",
            reason="runtimeclass_not_found",
            runtime_class="unknown",
        )
        == 6
    )
    # No node left, all for a runtime reason: one scheduling rejection.
    assert _value(samples, "runtimeclass_extender_runtime_rejections_total", runtime_class="unknown") == 1


async def test_runtime_rejection_when_no_node_can_run_the_class(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_app())
    await client.post("/filter", json=_request("kata-containers", ["runc-1", "gvisor-1", "win-1"]))
    _, samples = await _scrape(client)
    assert (
        _value(samples, "runtimeclass_extender_runtime_rejections_total", runtime_class="kata-containers")
        == 1
    )


async def test_pod_without_class_is_labelled_none_and_taints_are_not_runtime_rejections(
    aiohttp_client: Any,
) -> None:
    client = await aiohttp_client(_app())
    await client.post("/filter", json=_request(None, ["gvisor-1", "win-1"]))
    _, samples = await _scrape(client)
    assert (
        _value(
            samples,
            "runtimeclass_extender_nodes_rejected_total",
            reason="untolerated_taint",
            runtime_class="none",
        )
        == 2
    )
    assert _value(samples, "runtimeclass_extender_runtime_rejections_total", runtime_class="none") == 0


async def test_error_outcomes(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_app(max_body_bytes=64 * 1024))
    assert (
        await client.post("/filter", data=b"{not json", headers={"Content-Type": "application/json"})
    ).status == 400
    assert (await client.post("/filter", data=b"{}", headers={"Content-Type": "text/plain"})).status == 415
    too_big = b'{"Pod": {}, "NodeNames": ["' + b"x" * (128 * 1024) + b'"]}'
    assert (
        await client.post("/filter", data=too_big, headers={"Content-Type": "application/json"})
    ).status == 413
    assert (await client.get("/filter")).status == 405
    _, samples = await _scrape(client)
    for outcome in ("bad_request", "unsupported_media_type", "too_large", "method_not_allowed"):
        assert _value(samples, "runtimeclass_extender_filter_requests_total", outcome=outcome) == 1, outcome
    assert _value(samples, "runtimeclass_extender_filter_requests_total", outcome="ok") == 0
    # Other paths are not filter requests.
    await client.get("/healthz")
    _, again = await _scrape(client)
    assert _value(again, "runtimeclass_extender_filter_duration_seconds_count") == 4


async def test_not_synced_outcome(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_app(ClusterState()))
    response = await client.post("/filter", json=_request("gvisor"))
    assert (await response.json())["Error"] == "cluster state not synced"
    _, samples = await _scrape(client)
    assert _value(samples, "runtimeclass_extender_filter_requests_total", outcome="not_synced") == 1
    assert _value(samples, "runtimeclass_extender_watch_synced", kind="nodes") == 0
    assert _value(samples, "runtimeclass_extender_runtimeclasses") == 0


# gvisor-2 carries a taint that only the "sandboxed" class tolerates: it is selected by
# runc, gvisor and sandboxed, but fits a pod of runc or gvisor (no tolerations of its own) no more.
SANDBOX_TAINT = Taint("sandbox/runtime", "NoSchedule", "gvisor")


def _small_cluster() -> ClusterState:
    """Three runtimes over six nodes, built by hand so the expected counts are plain."""
    linux = {"kubernetes.io/os": "linux"}
    gvisor = {**linux, "sandbox/runtime": "gvisor"}
    kata = {**linux, "kata": "true"}
    state = ClusterState()
    state.nodes.replace(
        [
            NodeView("plain-1", labels=linux),
            NodeView("plain-2", labels=linux),
            NodeView("gvisor-1", labels=gvisor),
            NodeView("gvisor-2", labels=gvisor, taints=(SANDBOX_TAINT,)),
            NodeView("kata-1", labels=kata),
            NodeView("win-1", labels={"kubernetes.io/os": "windows"}),
        ]
    )
    state.runtime_classes.replace(
        [
            RuntimeClassView("runc", "runc", node_selector=linux),
            RuntimeClassView("gvisor", "runsc", node_selector={"sandbox/runtime": "gvisor"}),
            RuntimeClassView(
                "sandboxed",
                "runsc",
                node_selector={"sandbox/runtime": "gvisor"},
                tolerations=(Toleration("sandbox/runtime", "Equal", "gvisor", "NoSchedule"),),
            ),
            RuntimeClassView("kata-containers", "kata", node_selector={"kata": "true"}),
            RuntimeClassView("windows", "runhcs", node_selector={"kubernetes.io/os": "windows"}),
        ]
    )
    return state


SELECTED = "runtimeclass_extender_runtimeclass_nodes_selected"
FITTING = "runtimeclass_extender_runtimeclass_nodes_fitting"


async def test_runtimeclass_support_gauges(aiohttp_client: Any) -> None:
    state = _small_cluster()
    client = await aiohttp_client(_app(state))
    _, samples = await _scrape(client)
    assert _value(samples, "runtimeclass_extender_runtimeclasses") == 5
    assert _value(samples, "runtimeclass_extender_nodes") == 6
    selected = {"runc": 5, "gvisor": 2, "sandboxed": 2, "kata-containers": 1, "windows": 1}
    for name, count in selected.items():
        assert _value(samples, SELECTED, runtime_class=name) == count, name
    # Fitting also judges taints: gvisor-2's taint is tolerated by "sandboxed" only.
    fitting = {**selected, "runc": 4, "gvisor": 1}
    for name, count in fitting.items():
        assert _value(samples, FITTING, runtime_class=name) == count, name
    # Classes per node: plain-1, plain-2, win-1 -> 1; kata-1 -> 2 (runc, kata);
    # gvisor-1, gvisor-2 -> 3 (runc, gvisor, sandboxed).
    histogram = "runtimeclass_extender_node_runtimeclasses"
    assert _value(samples, histogram + "_bucket", le="0.0") == 0
    assert _value(samples, histogram + "_bucket", le="1.0") == 3
    assert _value(samples, histogram + "_bucket", le="2.0") == 4
    assert _value(samples, histogram + "_bucket", le="3.0") == 6
    assert _value(samples, histogram + "_bucket", le="+Inf") == 6
    assert _value(samples, histogram + "_count") == 6
    assert _value(samples, histogram + "_sum") == 11
    assert _value(samples, "runtimeclass_extender_watch_synced", kind="runtimeclasses") == 1

    # The gauges follow the state (the scrape-time cache is invalidated).
    state.nodes.upsert(NodeView("gvisor-3", labels={"sandbox/runtime": "gvisor"}))
    state.runtime_classes.delete("sandboxed")
    _, after = await _scrape(client)
    assert _value(after, "runtimeclass_extender_runtimeclasses") == 4
    assert _value(after, SELECTED, runtime_class="gvisor") == 3
    assert _value(after, FITTING, runtime_class="gvisor") == 2
    assert (SELECTED, (("runtime_class", "sandboxed"),)) not in after
    assert (FITTING, (("runtime_class", "sandboxed"),)) not in after


async def test_watch_health_from_source_stats(aiohttp_client: Any) -> None:
    now = time.monotonic()
    stats = [
        SourceStats(
            "nodes",
            synced=True,
            lists=2,
            relists=1,
            reconnects=3,
            events=7,
            last_event=now - 30,
            last_contact=now,
        ),
        SourceStats("runtimeclasses", lists=0, failing_since=now - 12, last_error="connection refused"),
    ]
    client = await aiohttp_client(_app(source_stats=lambda: stats))
    _, samples = await _scrape(client)
    assert _value(samples, "runtimeclass_extender_watch_lists_total", kind="nodes") == 2
    assert _value(samples, "runtimeclass_extender_watch_relists_total", kind="nodes") == 1
    assert _value(samples, "runtimeclass_extender_watch_reconnects_total", kind="nodes") == 3
    assert _value(samples, "runtimeclass_extender_watch_events_total", kind="nodes") == 7
    assert _value(samples, "runtimeclass_extender_watch_last_event_age_seconds", kind="nodes") >= 30
    assert (
        "runtimeclass_extender_watch_last_event_age_seconds",
        (("kind", "runtimeclasses"),),
    ) not in samples
    assert _value(samples, "runtimeclass_extender_watch_failing_seconds", kind="nodes") == 0
    assert _value(samples, "runtimeclass_extender_watch_failing_seconds", kind="runtimeclasses") >= 12
    # The record counts more than once a scrape: the counters are read, not kept.
    stats[0].events = 9
    _, again = await _scrape(client)
    assert _value(again, "runtimeclass_extender_watch_events_total", kind="nodes") == 9


async def test_apps_have_separate_registries(aiohttp_client: Any) -> None:
    first = await aiohttp_client(_app())
    second = await aiohttp_client(_app())
    await first.post("/filter", json=_request("gvisor"))
    _, samples = await _scrape(second)
    assert _value(samples, "runtimeclass_extender_filter_requests_total", outcome="ok") == 0


@pytest.mark.parametrize(
    ("reason", "label"),
    [
        (REASON_RUNTIMECLASS_MISMATCH, "runtimeclass_mismatch"),
        (REASON_UNTOLERATED_TAINT, "untolerated_taint"),
        (REASON_NODE_UNKNOWN, "unknown_node"),
        (reason_runtimeclass_not_found("anything-at-all"), "runtimeclass_not_found"),
        (reason_runtimeclass_selector_invalid("gvisor"), "runtimeclass_invalid"),
        (reason_runtime_handler_unsupported("runsc"), "handler_unsupported"),
        (reason_runtime_handler_features_unsupported("runsc"), "handler_unsupported"),
        ("a reason some plugin made up", "other"),
    ],
)
def test_reason_labels_are_a_fixed_set(reason: str, label: str) -> None:
    assert reason_label(reason) == label
    assert label in REASON_LABELS


def _webhook_certificate_registry() -> CollectorRegistry:
    """The self-managed webhook certificates' gauges (--webhook-certificate-secret), with
    a pair served (the expiry gauge exists only then)."""
    from datetime import UTC, datetime, timedelta

    from extender.certificates.authority import new_ca, new_serving
    from extender.certificates.keeper import CertificateOptions, WebhookCertificates
    from extender.certificates.secret import TLS_CERT, TLS_KEY, read_served
    from extender.certificates.serving import SwitchingContext

    now = datetime.now(UTC)
    pair = new_serving(
        new_ca(now, timedelta(days=2), common_name="ca"), ["svc.ns.svc"], now, timedelta(days=1)
    )
    keeper = WebhookCertificates(None, CertificateOptions("s", "ns", "svc", "v", "m"), SwitchingContext())
    keeper.served = read_served({TLS_CERT: pair.cert_pem, TLS_KEY: pair.key_pem}, ca=None, previous=None)
    registry = CollectorRegistry()
    keeper.register_metrics(registry)
    return registry


async def _exported_names(aiohttp_client: Any, tmp_path: Path) -> set[str]:
    """Every metric name the extender can export, as Prometheus shows it (counters with
    their _total suffix): the app with its optional components, the requeuer's registry
    and the audit's gauges."""
    stats = [
        SourceStats("nodes", synced=True, lists=1, last_event=time.monotonic(), last_contact=time.monotonic())
    ]
    app = _app(source_stats=lambda: stats)
    # The optional components export their counters too: capture and the node lookup.
    attach_capture(app, CaptureWriter(tmp_path / "captures"))
    app[METRICS].add_stats(LookupStats(), NODE_LOOKUP_COUNTERS)
    client = await aiohttp_client(app)
    await client.post("/filter", json=_request("made-up"))
    text, _ = await _scrape(client)
    families = list(text_string_to_metric_families(text))
    requeue = CollectorRegistry()
    RequeueMetrics(requeue, pending=lambda: 0, queued=lambda: 0)
    families += list(requeue.collect())
    labels = CollectorRegistry()
    LabelMetrics(labels, pending=lambda: 0)
    families += list(labels.collect())
    class_events = CollectorRegistry()
    ClassEvents(None, ClusterState(), load_policy(), prefix="example.com").register_metrics(class_events)
    families += list(class_events.collect())
    families += list(_webhook_certificate_registry().collect())
    table = CollectorRegistry()
    PodAdmissionTable(
        None,
        ClusterState(),
        options=TableOptions(name="t", namespace="n"),
        rules=ClassLabels("example.com", load_policy()),
    ).register_metrics(table)
    families += list(table.collect())
    autoscalers = CollectorRegistry()
    AutoscalerCheck(
        None,
        ClusterState(),
        ClassLabels("example.com", load_policy()),
        status_configmap=None,
    ).register_metrics(autoscalers)
    families += list(autoscalers.collect())
    plugin = CollectorRegistry()
    PluginFinder(None, "n", classes=lambda: (), ready=lambda: False).register_metrics(plugin)
    families += list(plugin.collect())
    runner = CollectorRegistry()
    LeaderRunner(
        [ClassEvents(None, ClusterState(), load_policy(), prefix="example.com")], None
    ).register_metrics(runner)
    families += list(runner.collect())
    names = {family.name + "_total" if family.type == "counter" else family.name for family in families}
    # Exported only with --audit-running-pods and --leader-elect (serve wires them).
    return names | {MISPLACED_PODS, AUDITED_PODS, LEADER_GAUGE, CAMPAIGNING_GAUGE}


def _documented_names() -> set[str]:
    table = section(page("metrics.md"), "## Metrics")  # docs/metrics.md, the one table of every metric
    return set(re.findall(r"^\| `(runtimeclass_extender_\w+)` \|", table, flags=re.MULTILINE))


async def test_every_metric_is_in_the_docs_metrics_table(aiohttp_client: Any, tmp_path: Path) -> None:
    exported = await _exported_names(aiohttp_client, tmp_path)
    assert MISPLACED_PODS in exported and PREFIX + "requeue_nudges_sent_total" in exported
    missing = sorted(exported - _documented_names())
    assert not missing, f"metrics missing from the table of docs/metrics.md: {missing}"


async def test_every_documented_metric_is_exported(aiohttp_client: Any, tmp_path: Path) -> None:
    stale = sorted(_documented_names() - await _exported_names(aiohttp_client, tmp_path))
    assert not stale, f"docs/metrics.md lists metrics the extender does not export: {stale}"


def test_alert_expressions_name_documented_metrics_and_labels() -> None:
    """The alerts (deploy/components/monitoring/prometheusrule.yaml): every metric an
    expression reads is in docs/metrics.md's table (so, by the tests above, exported), and
    every label it groups, joins or matches by is a label of one of those metrics (or one
    the scrape adds); every value it matches is one the table names."""
    table = section(page("metrics.md"), "## Metrics")
    rows = {
        m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| \w+ \| ([^|]*) \|", table, re.MULTILINE)
    }
    rules = alert_rules()
    assert {
        "RuntimeClassExtenderFilterErrors",
        "RuntimeClassExtenderNotSynced",
        "RuntimeClassExtenderWatchFailing",
        "RuntimeClassExtenderRequeueFailures",
        "RuntimeClassMisplacedPods",
    } <= {r["alert"] for r in rules}
    for rule in rules:
        expr = rule["expr"]
        metrics = {re.sub(r"_(bucket|sum|count)$", "", name) for name in metric_names(expr)}
        if not metrics:
            # Prometheus' own series for the scrape: the only other series an alert reads.
            assert re.match(rf"{SCRAPE_SERIES}\{{", expr), (rule["alert"], expr)
            continue
        assert metrics <= rows.keys(), (rule["alert"], metrics - rows.keys())
        labels = {
            label.strip()
            for clause in re.findall(r"\b(?:by|on|ignoring) \(([^)]*)\)", expr)
            for label in clause.split(",")
        }
        labels |= set(re.findall(r"[{,]\s*(\w+)\s*=~?\"", expr))
        allowed = {label for metric in metrics for label in re.findall(r"`(\w+)`", rows[metric])}
        allowed |= {"namespace", "pod", "le"}
        assert labels <= allowed, (rule["alert"], labels - allowed)
        for value in re.findall(r'=~?"([^"]*)"', expr):
            for alternative in value.split("|"):
                assert f"`{alternative}`" in table, (rule["alert"], alternative)


async def test_component_stats_are_exported_as_counters(aiohttp_client: Any, tmp_path: Path) -> None:
    """Capture and lookup counters are read from their stats records at scrape time."""
    app = _app()
    writer = CaptureWriter(tmp_path / "captures")
    attach_capture(app, writer)
    lookup = LookupStats(found=2, not_found=1, failed=3, cache_hits=5)
    app[METRICS].add_stats(lookup, NODE_LOOKUP_COUNTERS)
    client = await aiohttp_client(app)
    writer.stats.written, writer.stats.dropped, writer.stats.removed = 7, 1, 4
    _, samples = await _scrape(client)
    assert _value(samples, "runtimeclass_extender_captures_total", result="written") == 7
    assert _value(samples, "runtimeclass_extender_captures_total", result="dropped") == 1
    assert ("runtimeclass_extender_captures_total", (("result", "failed"),)) in samples
    assert _value(samples, "runtimeclass_extender_capture_files_removed_total") == 4
    assert _value(samples, "runtimeclass_extender_node_lookups_total", result="failed") == 3
    assert _value(samples, "runtimeclass_extender_node_lookups_total", result="not_found") == 1
    assert _value(samples, "runtimeclass_extender_node_lookup_cache_hits_total") == 5
