"""Memory of the running-pod audit (``serve --audit-running-pods``): bytes per pod held.

    .venv/bin/python bench/audit_memory_bench.py                  # 20,000 pods, 500 nodes
    .venv/bin/python bench/audit_memory_bench.py --pods 100000 --nodes 5000

Builds pods as the API server sends them (metadata with labels, annotations and
managedFields-like bulk, two containers, the ``not-ready``/``unreachable`` tolerations
that DefaultTolerationSeconds admission adds to every pod, a share with one more
toleration of their own), converts them as the informer does
(``scheduled_pod_from_api`` with one ``TolerationInterner``), and measures with
tracemalloc what the informer's store and the ``MisplacedIndex`` keep once the raw
objects are dropped: the steady-state cost per audited pod. ``--with-class`` is the
share of pods that name a RuntimeClass (the store keeps only those).

Numbers on a shared machine: read them as orders of magnitude, not as pass/fail checks.
"""

from __future__ import annotations

import argparse
import gc
import random
import tracemalloc
from types import MappingProxyType
from typing import Any

from cluster_gen import DEFAULT_TOLERATIONS  # bench/, beside this script

from extender.audit.auditor import AuditedPods
from extender.audit.index import MisplacedIndex
from extender.cluster.pod_views import TolerationInterner, scheduled_pod_from_api
from extender.cluster.state import ClusterState
from policies.objects import NodeView, RuntimeClassView


def raw_pod(i: int, nodes: int, rng: random.Random, with_class: float) -> dict[str, Any]:
    tolerations = list(DEFAULT_TOLERATIONS)
    if rng.random() < 0.2:
        tolerations.append({"key": f"team-{i % 7}", "operator": "Exists", "effect": "NoSchedule"})
    spec: dict[str, Any] = {
        "nodeName": f"node-{i % nodes}",
        "containers": [
            {"name": "app", "image": f"registry.example.com/app:{i % 13}", "args": ["--port=8080"] * 4},
            {"name": "sidecar", "image": "registry.example.com/proxy:1.2"},
        ],
        "tolerations": tolerations,
    }
    if rng.random() < with_class:
        spec["runtimeClassName"] = rng.choice(["gvisor", "kata-containers"])
    return {
        "metadata": {
            "name": f"app-{i:07d}-x2x8q",
            "namespace": f"team-{i % 40}",
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "resourceVersion": str(100000 + i),
            "labels": {"app": f"app-{i % 300}", "pod-template-hash": "7d4b9c6f5"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x" * 800},
        },
        "spec": spec,
        "status": {"phase": "Running", "podIP": f"10.0.{i % 250}.{i % 200}"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--with-class", type=float, default=1.0, help="share of pods naming a RuntimeClass")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    state = ClusterState()
    labels = MappingProxyType({"sandbox": "true"})
    state.nodes.replace(NodeView(name=f"node-{n}", labels=labels) for n in range(args.nodes))
    state.runtime_classes.replace(
        RuntimeClassView(name=name, handler=name, node_selector=labels)
        for name in ("gvisor", "kata-containers")
    )

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    store = AuditedPods()
    index = MisplacedIndex(state)
    index.attach(store)
    interner = TolerationInterner()
    # Page by page, as the reflector converts a LIST: raw objects do not outlive a page.
    views = []
    for start in range(0, args.pods, 500):
        page = [
            raw_pod(i, args.nodes, rng, args.with_class) for i in range(start, min(start + 500, args.pods))
        ]
        views.extend(scheduled_pod_from_api(obj, intern=interner) for obj in page)
    store.replace(views)
    del views, page
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()

    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    audited = len(index)
    print(
        f"pods: {args.pods}, audited (naming a RuntimeClass): {audited}, misplaced: {len(index.misplaced())}"
    )
    print(f"distinct toleration sets shared: {len(interner)}")
    print(
        f"held by the store and the index: {held / 1e6:.1f} MB, {held / max(audited, 1):.0f} bytes per audited pod"
    )


if __name__ == "__main__":
    main()
