"""The pod admission table's keeper against the test API server (extender/podtable/keeper.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from extender.cluster.class_labels import ClassLabels
from extender.cluster.state import ClusterState
from extender.cluster.watch import ClusterWatch
from extender.kube import connect as kube
from extender.leader.runner import LeaderRunner
from extender.podtable.keeper import PodAdmissionTable, TableOptions, merge_patch
from extender.policy_file import load_policy
from extender.settings import DEFAULT_NODE_LABEL_PREFIX
from extender.tasks import stop as stop_task
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from tests.support.apiserver import RUNTIME_CLASSES, FakeApiServer, make_runtime_class
from tests.support.pod_cases import NAMESPACES, TABLES
from tests.support.reflectors import fast_reflector
from tests.support.waiting import eventually, stays

FAST = fast_reflector()
NAME = "runtimeclass-extender"
# The extender's own Namespace, whose annotation names the classes the RuntimeClass
# admission plugin constrains fully.
NAMESPACE = "runtimeclass-extender"
ANNOTATION = "runtimeclass-extender.dev/admitted-by-plugin"
OVERHEAD: dict[str, Any] = {"overhead": {"cpu": "250m", "memory": "64Mi"}}
# A class with node rules: its label, which its pods require where the nodes carry it,
# unless they show its selector, all its rules.
RULES: dict[str, Any] = {
    "nodeLabel": DEFAULT_NODE_LABEL_PREFIX + "/gvisor",
    "unlessNodeSelector": {"runtime": "gvisor"},
}
GVISOR: dict[str, Any] = {**OVERHEAD, **RULES}


def gvisor(**overrides: Any) -> dict[str, Any]:
    rc = make_runtime_class("gvisor", handler="runsc", node_selector={"runtime": "gvisor"})
    rc["overhead"] = {"podFixed": {"cpu": "250m", "memory": "64Mi"}}
    rc.update(overrides)
    return rc


def table_object(entries: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": TABLES.api_version,
        "kind": TABLES.kind,
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/part-of": "runtimeclass-extender"}},
        "spec": {},
    }
    if entries is not None:
        obj["spec"]["runtimeClasses"] = entries
    return obj


def spec(server: FakeApiServer) -> dict[str, Any] | None:
    obj = server.get(TABLES, NAME)
    return None if obj is None else dict(obj.get("spec") or {})


def named(server: FakeApiServer) -> str | None:
    """The Namespace's annotation (None: none)."""
    namespace = server.get(NAMESPACES, NAMESPACE)
    assert namespace is not None
    return (namespace["metadata"].get("annotations") or {}).get(ANNOTATION)


def serve_namespace(server: FakeApiServer) -> None:
    server.register(NAMESPACES)
    server.add(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})


def entries(server: FakeApiServer) -> dict[str, Any] | None:
    obj = server.get(TABLES, NAME)
    return None if obj is None else dict((obj.get("spec") or {}).get("runtimeClasses") or {})


@dataclass
class Running:
    keeper: PodAdmissionTable
    registry: CollectorRegistry
    state: ClusterState
    # What the keeper is told of the RuntimeClass admission plugin (None: not known).
    plugin: list[bool | None]

    def plugin_found(self, runs: bool | None) -> None:
        self.plugin[0] = runs
        self.keeper.plugin_changed()


@pytest.fixture
async def running(
    fake_apiserver: FakeApiServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Running]:
    label_nodes = getattr(request, "param", False)
    fake_apiserver.register(TABLES)
    serve_namespace(fake_apiserver)
    conn = await kube.connect(kubeconfig=str(fake_apiserver.write_kubeconfig(tmp_path / "kubeconfig")))
    state = ClusterState()
    rules = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, load_policy())
    plugin: list[bool | None] = [None]
    keeper = PodAdmissionTable(
        conn.api,
        state,
        options=TableOptions(
            name=NAME,
            namespace=NAMESPACE,
            label_nodes=label_nodes,
            reflector=FAST,
            retry_initial=0.02,
            retry_max=0.2,
        ),
        rules=rules,
        plugin=lambda: plugin[0],
    )
    registry = CollectorRegistry()
    keeper.register_metrics(registry)
    watch = asyncio.create_task(ClusterWatch(conn.api, state, options=FAST).run())
    runner = asyncio.create_task(LeaderRunner([keeper], None).run())
    try:
        yield Running(keeper, registry, state, plugin)
    finally:
        await stop_task(runner)
        await stop_task(watch)
        await conn.api.close()


def gauge(run: Running, name: str) -> float | None:
    return run.registry.get_sample_value(f"runtimeclass_extender_pod_admission_table_{name}")


async def test_a_term_fills_the_table_and_follows_every_class_change(
    fake_apiserver: FakeApiServer, running: Running
) -> None:
    fake_apiserver.add(TABLES, table_object())
    fake_apiserver.add(RUNTIME_CLASSES, gvisor())
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("runc"))
    await eventually(
        lambda: entries(fake_apiserver) == {"gvisor": GVISOR, "runc": {}}, what="the table filled"
    )
    fake_apiserver.modify(
        RUNTIME_CLASSES, "gvisor", lambda rc: rc.update(overhead={"podFixed": {"cpu": "500m"}})
    )
    await eventually(
        lambda: entries(fake_apiserver) == {"gvisor": {"overhead": {"cpu": "500m"}, **RULES}, "runc": {}},
        what="a change",
    )
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("kata"))
    fake_apiserver.delete(RUNTIME_CLASSES, "runc")
    await eventually(
        lambda: entries(fake_apiserver) == {"gvisor": {"overhead": {"cpu": "500m"}, **RULES}, "kata": {}},
        what="add, delete",
    )
    await eventually(lambda: gauge(running, "stale_entries") == 0, what="nothing stale")
    assert gauge(running, "entries") == 2
    # Each write changed the entries alone.
    for event, obj, prev in fake_apiserver.changes(TABLES):
        if event == "MODIFIED":
            assert prev is not None
            assert {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"} == {
                k: v for k, v in prev["metadata"].items() if k != "resourceVersion"
            }
            assert set(obj["spec"]) == {"runtimeClasses"}


@pytest.mark.parametrize("running", [True], indirect=True)
async def test_with_label_nodes_the_table_says_so_and_each_class_with_node_rules_names_its_label(
    fake_apiserver: FakeApiServer, running: Running
) -> None:
    fake_apiserver.add(TABLES, table_object())
    fake_apiserver.add(RUNTIME_CLASSES, gvisor())
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("runc"))
    await eventually(
        lambda: (
            spec(fake_apiserver) == {"labelNodes": True, "runtimeClasses": {"gvisor": GVISOR, "runc": {}}}
        ),
        what="the labels in the table",
    )
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", lambda rc: rc.pop("scheduling"))
    await eventually(lambda: entries(fake_apiserver) == {"gvisor": OVERHEAD, "runc": {}}, what="rules gone")


async def test_no_interleaving_of_writes_leaves_an_entry_no_version_of_its_class_had(
    fake_apiserver: FakeApiServer, running: Running
) -> None:
    """Two edits in a row, the second written from an informer that has not seen the
    first write (its watch stalled). A merge patch of what differed from that informer
    merged into the first write, member by member: the table said {cpu: 2, memory: 2Gi}
    while the class said {cpu: 1, memory: 2Gi}, a value no version of it had."""

    def overhead(cpu: str, memory: str) -> Any:
        return lambda rc: rc.update(overhead={"podFixed": {"cpu": cpu, "memory": memory}})

    fake_apiserver.add(TABLES, table_object())
    fake_apiserver.add(RUNTIME_CLASSES, gvisor(overhead={"podFixed": {"cpu": "1", "memory": "1Gi"}}))
    await eventually(
        lambda: (
            running.keeper.current() == entries(fake_apiserver)
            and "gvisor" in (entries(fake_apiserver) or {})
        ),
        what="the table written, and seen by the keeper's informer",
    )
    fake_apiserver.stall_watches(TABLES)
    versions = [{"cpu": "1", "memory": "1Gi"}]
    for cpu, memory in (("2", "2Gi"), ("1", "2Gi")):
        fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", overhead(cpu, memory))
        versions.append({"cpu": cpu, "memory": memory})
        await eventually(
            lambda: (entries(fake_apiserver) or {}).get("gvisor", {}).get("overhead") == versions[-1],
            what=f"the table at {versions[-1]}",
        )
    # What the table said at each of its writes was what some version of the class said.
    said = [
        entry["overhead"]
        for _, obj, _ in fake_apiserver.changes(TABLES)
        if (entry := (obj.get("spec") or {}).get("runtimeClasses", {}).get("gvisor")) is not None
    ]
    assert said and all(overhead in versions for overhead in said), said
    fake_apiserver.resume_watches()


async def test_a_deleted_table_is_created_again_and_a_hand_edit_undone(
    fake_apiserver: FakeApiServer, running: Running
) -> None:
    fake_apiserver.add(RUNTIME_CLASSES, gvisor())
    # No table at all (the first start, or deleted): created, with the component's label.
    await eventually(lambda: entries(fake_apiserver) == {"gvisor": GVISOR}, what="created")
    created = fake_apiserver.get(TABLES, NAME)
    assert created is not None
    assert created["metadata"]["labels"] == {"app.kubernetes.io/part-of": "runtimeclass-extender"}
    fake_apiserver.modify(
        TABLES,
        NAME,
        {"spec": {"runtimeClasses": {"gvisor": {"overhead": {"cpu": "9"}, "nodeLabel": "x"}, "other": {}}}},
    )
    await eventually(lambda: entries(fake_apiserver) == {"gvisor": GVISOR}, what="the edit undone")
    fake_apiserver.delete(TABLES, NAME)
    await eventually(lambda: entries(fake_apiserver) == {"gvisor": GVISOR}, what="created again")


async def test_a_conflict_is_computed_again_and_a_refusal_said_once(
    fake_apiserver: FakeApiServer, running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="extender.podtable")
    fake_apiserver.add(TABLES, table_object({"gvisor": GVISOR}))
    fake_apiserver.add(RUNTIME_CLASSES, gvisor())
    await eventually(lambda: gauge(running, "stale_entries") == 0, what="in sync")
    fake_apiserver.fail_next(3, status=403, verbs={"patch"}, resource=TABLES)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("runc"))
    await eventually(
        lambda: entries(fake_apiserver) == {"gvisor": GVISOR, "runc": {}}, what="written at last"
    )
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "cannot write the pod admission table: grant the pod-admission-table ClusterRole "
        "(create, and get/list/watch/patch on the table and on the extender's Namespace)"
    ]
    assert (
        running.registry.get_sample_value(
            "runtimeclass_extender_pod_admission_table_write_errors_total", {"reason": "forbidden"}
        )
        == 1
    )
    fake_apiserver.fail_next(1, status=409, verbs={"patch"}, resource=TABLES)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("kata"))
    await eventually(lambda: "kata" in (entries(fake_apiserver) or {}), what="written after a conflict")


async def test_the_gauge_counts_what_differs_while_nobody_writes(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """A follower (no term) writes nothing, and its gauge says how stale the table is."""
    fake_apiserver.register(TABLES)
    serve_namespace(fake_apiserver)
    fake_apiserver.add(TABLES, table_object({"gvisor": {"overhead": {"cpu": "1"}}, "gone": {}}))
    fake_apiserver.add(RUNTIME_CLASSES, gvisor())
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("runc"))
    conn = await kube.connect(kubeconfig=str(fake_apiserver.write_kubeconfig(tmp_path / "kubeconfig")))
    state = ClusterState()
    keeper = PodAdmissionTable(
        conn.api,
        state,
        options=TableOptions(name=NAME, namespace=NAMESPACE, reflector=FAST),
        rules=ClassLabels(DEFAULT_NODE_LABEL_PREFIX, load_policy()),
    )
    registry = CollectorRegistry()
    keeper.register_metrics(registry)
    watch = asyncio.create_task(ClusterWatch(conn.api, state, options=FAST).run())
    informer = asyncio.create_task(keeper.informer.run())
    try:
        # gvisor differs, runc is missing, gone is left over.
        await eventually(
            lambda: registry.get_sample_value("runtimeclass_extender_pod_admission_table_stale_entries") == 3,
            what="three stale entries",
        )
        await stays(
            lambda: entries(fake_apiserver) == {"gvisor": {"overhead": {"cpu": "1"}}, "gone": {}},
            duration=0.2,
        )
        fake_apiserver.delete(TABLES, NAME)
        await eventually(
            lambda: (
                registry.get_sample_value("runtimeclass_extender_pod_admission_table_stale_entries") == -1
            ),
            what="no table",
        )
    finally:
        await stop_task(informer)
        await stop_task(watch)
        await conn.api.close()


@pytest.mark.parametrize(
    ("current", "wanted", "patch"),
    [
        ({}, {}, {}),
        ({"a": {}}, {"a": {}}, {}),
        ({"a": {}}, {}, {"a": None}),
        ({}, {"a": {"overhead": {}}}, {"a": {"overhead": {}}}),
        # A member of an entry goes with a null of its own: a merge patch merges objects.
        (
            {"a": {"overhead": {"cpu": "1", "memory": "1Gi"}}},
            {"a": {"overhead": {"cpu": "2"}}},
            {"a": {"overhead": {"cpu": "2", "memory": None}}},
        ),
        (
            {"a": {"overhead": {"cpu": "1"}, "nodeLabel": "x"}},
            {"a": {}},
            {"a": {"overhead": None, "nodeLabel": None}},
        ),
        ({"a": {"overhead": {"cpu": "1"}}}, {"a": {"overhead": {}}}, {"a": {"overhead": {"cpu": None}}}),
    ],
)
def test_the_merge_patch_turns_one_table_into_the_other(
    current: dict[str, Any], wanted: dict[str, Any], patch: dict[str, Any]
) -> None:
    assert merge_patch(current, wanted) == patch
    assert apply_merge_patch(current, patch) == wanted


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 section 2, as the API server applies a merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def _constrained(table_spec: dict[str, Any] | None) -> set[str]:
    """The classes whose pods the default-scheduler placement's mutating policy turns
    away, as its match condition reads the table: with the plugin, a class without a
    label, or one whose selector is all its rules."""
    if not table_spec or not table_spec.get("runtimeClassAdmissionPlugin"):
        return set()
    return {
        name
        for name, entry in (table_spec.get("runtimeClasses") or {}).items()
        if "nodeLabel" not in entry or "unlessNodeSelector" in entry
    }


def _never_behind(server: FakeApiServer) -> None:
    """At every moment of the history, the Namespace's annotation named every class the
    table as stored made the policy turn away (the guard lets those pass unmarked): the
    writes of both objects in the order the API server stored them (one counter)."""
    history = sorted(
        [(int(obj["metadata"]["resourceVersion"]), "table", obj) for _, obj, _ in server.changes(TABLES)]
        + [
            (int(obj["metadata"]["resourceVersion"]), "namespace", obj)
            for _, obj, _ in server.changes(NAMESPACES)
        ]
    )
    stored: dict[str, Any] = {}
    annotation: set[str] = set()
    for _, kind, obj in history:
        if kind == "table":
            stored = obj.get("spec") or {}
        else:
            value = (obj["metadata"].get("annotations") or {}).get(ANNOTATION) or ""
            annotation = {name for name in value.split(",") if name}
        assert annotation >= _constrained(stored), (kind, annotation, stored)


async def test_with_the_plugin_the_namespace_names_the_classes_it_constrains_before_the_policy_skips_them(
    fake_apiserver: FakeApiServer, running: Running
) -> None:
    kata = make_runtime_class("kata", handler="kata", node_selector={"runtime": "kata"})
    kata["metadata"]["annotations"] = {
        NODE_SELECTOR_TERM_ANNOTATION: '{"matchExpressions": [{"key": "cpu", "operator": "In", "values": ["amd"]}]}'
    }
    fake_apiserver.add(RUNTIME_CLASSES, gvisor())
    fake_apiserver.add(RUNTIME_CLASSES, kata)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("runc"))
    await eventually(
        lambda: set(entries(fake_apiserver) or {}) == {"gvisor", "kata", "runc"}, what="the table"
    )
    # Not known yet: the table says nothing of the plugin, and the Namespace names nothing.
    await stays(lambda: named(fake_apiserver) is None, duration=0.2)
    assert "runtimeClassAdmissionPlugin" not in (spec(fake_apiserver) or {})

    running.plugin_found(True)
    await eventually(
        lambda: (
            named(fake_apiserver) == "gvisor,runc"
            and (spec(fake_apiserver) or {}).get("runtimeClassAdmissionPlugin") is True
            and running.keeper.stale() == 0
        ),
        what="the plugin in the table, and the classes it constrains on the Namespace",
    )
    # gvisor gains a rule no selector shows: its pods are admitted from the table again.
    fake_apiserver.modify(
        RUNTIME_CLASSES,
        "gvisor",
        lambda rc: rc["metadata"].update(annotations=kata["metadata"]["annotations"]),
    )
    await eventually(lambda: named(fake_apiserver) == "runc", what="gvisor no longer named")
    # The plugin turned off: every class admitted from the table again.
    running.plugin_found(False)
    await eventually(
        lambda: (
            named(fake_apiserver) == "" and "runtimeClassAdmissionPlugin" not in (spec(fake_apiserver) or {})
        ),
        what="the plugin gone from the table, and nothing named",
    )
    # Not known again (a probe another webhook refused): the table keeps what it says.
    running.plugin_found(None)
    await stays(lambda: named(fake_apiserver) == "" and running.keeper.stale() == 0, duration=0.2)
    _never_behind(fake_apiserver)
