"""Pod admission in the default-scheduler placement (deploy/overlays/default-scheduler),
the policies as shipped, on the test API server (tests/real/ admits pods on
kube-apiserver itself).

The cluster's default scheduler places the pods by what pod admission gives them, so
every pod of the table of pods (tests/support/pod_cases.py) comes out as in
predicate mode with the node labels, but for two things: no pod is routed (its ``schedulerName`` stays as
it came), and a pod of a class in the table is marked admitted; and a pod of a class
that is not in the table (or not at all) is refused by the placement's guard, since
nothing else would keep it off nodes that cannot run its class. While the table is
missing, every pod of a class is refused, and a pod that names none is admitted.
"""

from __future__ import annotations

import copy
from typing import Any

import aiohttp

from extender.admission.pod_table import ADMITTED_LABEL
from tests.support.apiserver import RUNTIME_CLASSES, FakeApiServer
from tests.support.pod_cases import (
    CLASSES,
    DEFAULT_SCHEDULER,
    NAMESPACE_OBJECTS,
    NAMESPACES,
    PODS_TABLE,
    SETUPS,
    TABLES,
    Admitted,
    PodCase,
    create_pod,
)

Manifest = dict[str, Any]
LARGE = SETUPS[1]
KNOWN = {rc["metadata"]["name"] for rc in CLASSES}
REFUSED = (
    "pod rejected: RuntimeClass {name} is not in the pod admission table runtimeclass-extender yet (the "
    "extender's leader adds a class within seconds of its creation; kubectl get podadmissiontable "
    "runtimeclass-extender): without its entry the pod would get no node requirement and could be placed "
    "on a node that cannot run it"
)


async def _server(manifests: list[Manifest], namespaces: list[Manifest] = NAMESPACE_OBJECTS) -> FakeApiServer:
    server = FakeApiServer()
    server.register(NAMESPACES)
    server.register(TABLES)
    for namespace in namespaces:
        server.add(NAMESPACES, namespace)
    for rc in CLASSES:
        server.add(RUNTIME_CLASSES, rc)
    for doc in manifests:
        if doc["kind"] == TABLES.kind:
            server.add(TABLES, doc)
    assert server.apply([d for d in manifests if d["kind"] != TABLES.kind]) == []
    await server.start()
    return server


def _placed_by_the_default_scheduler(case: PodCase, routed: Admitted) -> Admitted:
    """What predicate mode with the node labels's admission gives the pod, without the routing, and with
    the admitted mark on a pod of a class in the table."""
    if routed.pod is None:
        return routed
    pod = copy.deepcopy(routed.pod)
    pod["spec"]["schedulerName"] = case.manifest()["spec"].get("schedulerName") or "default-scheduler"
    if case.runtime_class in KNOWN and case.namespace == "apps" and not case.labels:
        pod["metadata"].setdefault("labels", {})[ADMITTED_LABEL] = "true"
    return Admitted(201, pod, "")


async def test_every_pod_comes_out_as_in_large_cluster_mode_unrouted_and_a_class_not_in_the_table_is_refused() -> None:
    large = await _server(LARGE.policies_way())
    placement = await _server(DEFAULT_SCHEDULER.policies_way(), DEFAULT_SCHEDULER.namespaces())
    try:
        async with aiohttp.ClientSession() as session:
            for case in PODS_TABLE:
                got = await create_pod(session, placement, case.manifest())
                if case.runtime_class and case.runtime_class not in KNOWN and case.namespace == "apps":
                    assert (got.status, got.message) == (403, REFUSED.format(name=case.runtime_class)), case.id
                    continue
                routed = await create_pod(session, large, case.manifest())
                assert got == _placed_by_the_default_scheduler(case, routed), case.id
    finally:
        await large.stop()
        await placement.stop()


async def test_while_the_table_is_missing_every_pod_of_a_class_is_refused_and_no_other() -> None:
    """Just after the install, before the leader's first write: the mutating policy is
    skipped, and the guard refuses every pod of a class in a bound namespace (its
    controller retries); a pod that names no class, or one in a namespace left out, is
    admitted as it came."""
    without = await _server(DEFAULT_SCHEDULER.policies_way()[1:], DEFAULT_SCHEDULER.namespaces())
    try:
        async with aiohttp.ClientSession() as session:
            for case in PODS_TABLE:
                got = await create_pod(session, without, case.manifest())
                if case.runtime_class and case.namespace == "apps" and not case.labels:
                    assert (got.status, got.message) == (403, REFUSED.format(name=case.runtime_class)), case.id
                elif case.runtime_class == "":
                    assert got.status == 422, case.id  # validation, either way
                else:
                    assert got.status == 201 and got.pod is not None, case.id
                    assert got.pod["spec"] == {"schedulerName": "default-scheduler", **case.manifest()["spec"]}, case.id
    finally:
        await without.stop()
