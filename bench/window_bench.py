"""The window: a node loses the label its RuntimeClass selects, and pods are bound there before the labeller's write.

    .venv/bin/python bench/window_bench.py                      # 5,000 nodes, both arms
    .venv/bin/python bench/window_bench.py --quick              # 600 nodes, a smoke run
    .venv/bin/python bench/window_bench.py --arms default-scheduler --json window.json

With the default-scheduler placement nothing but the derived label keeps a class's pods
off a node: between a change that makes a node unfit (it loses the label its class
selects) and the labeller's write that takes the derived label off, the default
scheduler may bind a pod there. With the extender in kube-scheduler's path
(with the node labels) ``/filter`` judges the node by its own watch and rejects it as soon
as it has seen the change. This measures both, on a real kube-apiserver and
kube-scheduler 1.36 (``KUBEBUILDER_ASSETS``), each arm on a fresh control plane:

1. ``--nodes`` Ready nodes: ``--pool`` of them in class gvisor's pool (``pool: gvisor``,
   tainted as GKE Sandbox taints its pool), the rest plain; the arm's overlay installed
   with its extender (the leader labels the pool).
2. A relabel under way: class ``batch``, which selects ``kubernetes.io/os: linux`` (every
   node), is created, so the labeller has a write queued for every node (at its
   shipped 100 a second: 50 s at 5,000 nodes).
3. Meanwhile ``--changes`` pool nodes, one every ``--interval`` seconds, lose
   ``pool: gvisor`` (a patch as an operator or a node-feature tool makes it); and pods of
   class gvisor are created at ``--rate`` a second, from before the first change to
   after the last.

Reported per arm: the labeller's **reaction** to each change (from the patch's answer
to when a watch of nodes sees the derived label gone), p50, p99 and the longest; the
pods bound; and the pods **misplaced**: bound to a changed node after its change (its
bind seen by a watch of bound pods after the change was answered), which is what a
pod in the window gets.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import scheduling_bench as sb
from local import cpu_model

from tests.support.autoscaler import scheduler_configuration, start_scheduler
from tests.support.control_plane import ControlPlane, find_assets
from tests.support.install import install
from tests.support.manifests import PREDICATE_LABELS, render

Json = dict[str, Any]
ARMS = ("default-scheduler", "node-labels")
BATCH: Json = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "batch"},
    "handler": "runc",
    "scheduling": {"nodeSelector": {"kubernetes.io/os": "linux"}},
}


class LabelLoss:
    """A watch of Nodes: when each node was first seen without the derived label."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.lost: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="label-loss", daemon=True)
        self._version = str(plane.client.get("/api/v1/nodes", limit="1")["metadata"]["resourceVersion"])

    def start(self) -> LabelLoss:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(70)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.2)

    def _watch(self) -> None:
        plane = self.plane
        connection = http.client.HTTPSConnection("127.0.0.1", plane.port, context=plane.context, timeout=90)
        try:
            connection.request(
                "GET",
                f"/api/v1/nodes?watch=1&allowWatchBookmarks=true&timeoutSeconds=5&resourceVersion={self._version}",
            )
            response = connection.getresponse()
            if response.status != 200:
                response.read()
                return
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    return
                event = orjson.loads(line)
                node = event["object"]
                now = time.perf_counter()
                self._version = node["metadata"].get("resourceVersion", self._version)
                if event["type"] == "MODIFIED" and sb.LABEL not in (node["metadata"].get("labels") or {}):
                    self.lost.setdefault(node["metadata"]["name"], now)
        finally:
            connection.close()


def run_arm(arm: str, args: argparse.Namespace) -> Json:
    assets = find_assets()
    assert assets is not None, "no control plane binaries: set KUBEBUILDER_ASSETS"
    result: Json = {"arm": arm}
    with ControlPlane(assets, apiserver_flags=sb.PREDICATE_MODE) as plane:
        plane.apply(sb.RUNTIME_CLASS)
        plane.ensure_namespace(sb.NAMESPACE)
        pool = {sb.pool_node(i) for i in range(args.pool)}
        names = sorted(pool) + [sb.plain_node(i) for i in range(args.nodes - args.pool)]
        _create_nodes(plane, names, pool, args.setup_threads)
        overlay = "overlays/default-scheduler" if arm == "default-scheduler" else PREDICATE_LABELS
        docs = render(overlay)
        installed = install(plane, docs)
        sb.wait_labelled(plane, installed, pool, len(pool) / 100 * 3 + 120)
        if arm == "default-scheduler":
            scheduler = sb.in_tree_scheduler(plane, sb.DEFAULT_PROFILE)
            sb.wait_admitting(plane, sb.DEFAULT_SCHEDULER, 120, installed.extender.process)
        else:
            scheduler = start_scheduler(
                plane, scheduler_configuration(docs), namespace=installed.namespace, extender_port=installed.extender.port
            )
            sb.wait_admitting(plane, sb.SCHEDULER, 120, installed.extender.process)
        binds = sb.Binds(plane).start()
        losses = LabelLoss(plane).start()
        try:
            plane.apply(BATCH)  # the relabel: a write queued for every node
            changed: dict[str, float] = {}
            stop = threading.Event()
            created: list[str] = []
            creator = threading.Thread(target=_stream, args=(plane, args.rate, stop, created), daemon=True)
            creator.start()
            time.sleep(args.interval)
            for node in sorted(pool)[: args.changes]:
                plane.client.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {"pool": None}}})
                changed[node] = time.perf_counter()
                time.sleep(args.interval)
            time.sleep(2.0)
            stop.set()
            creator.join(30)
            missing = binds.wait(created, args.timeout)
            deadline = time.monotonic() + args.timeout
            while set(changed) - set(losses.lost) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            losses.stop()
            binds.stop()
            scheduler.stop()
        reactions = sorted(losses.lost[n] - at for n, at in changed.items() if n in losses.lost)
        result["changes"] = len(changed)
        result["reacted"] = len(reactions)
        if reactions:
            result["reaction_p50_ms"] = sb.percentile(reactions, 0.50) * 1e3
            result["reaction_p99_ms"] = sb.percentile(reactions, 0.99) * 1e3
            result["reaction_max_ms"] = reactions[-1] * 1e3
        result["pods"] = len(created)
        result["bound"] = len(created) - len(missing)
        misplaced = [
            pod for pod in created if (node := binds.node.get(pod)) in changed and binds.at[pod] > changed[node]
        ]
        result["misplaced"] = len(misplaced)
        # Of those, bound after the label was gone too (kube-scheduler's view behind).
        result["misplaced_after_label_gone"] = sum(
            1 for pod in misplaced if binds.at[pod] > losses.lost.get(binds.node[pod], float("inf"))
        )
        if misplaced:
            first = misplaced[0]
            node = binds.node[first]
            result["example"] = {
                "pod": first,
                "node": node,
                "bound_after_change_ms": (binds.at[first] - changed[node]) * 1e3,
                "label_gone_after_change_ms": (losses.lost.get(node, float("nan")) - changed[node]) * 1e3,
            }
        result["relabel_added"] = int(sb.metric(installed.extender.metrics(), "runtimeclass_extender_node_labels_added_total"))
    return result


def _create_nodes(plane: ControlPlane, names: Sequence[str], pool: set[str], threads: int) -> None:
    """As scheduling_bench creates them, ``pool`` in the class's pool."""
    from concurrent.futures import ThreadPoolExecutor

    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}

    def create(name: str) -> None:
        in_pool = name in pool
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(sb.POOL if in_pool else {})}
        taints = [sb.TAINT] if in_pool else []
        plane.client.create(
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": taints},
                "status": {"capacity": sb.RESOURCES, "allocatable": sb.RESOURCES, "conditions": [condition]},
            },
        )
        plane.client.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}})

    with ThreadPoolExecutor(threads) as workers:
        list(workers.map(create, names))


def _stream(plane: ControlPlane, rate: float, stop: threading.Event, created: list[str]) -> None:
    """Pods of class gvisor at ``rate`` a second until ``stop``."""
    path = f"/api/v1/namespaces/{sb.NAMESPACE}/pods"
    index = 0
    next_at = time.perf_counter()
    while not stop.is_set():
        name = f"stream-{index:05d}"
        answer = plane.client.request("POST", path, sb.pod_body(name, "plain"))
        if answer.status == 201:
            created.append(name)
        index += 1
        next_at += 1.0 / rate
        time.sleep(max(0.0, next_at - time.perf_counter()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pool", type=int, default=100, help="nodes in class gvisor's pool")
    parser.add_argument("--changes", type=int, default=20, help="pool nodes that lose pool=gvisor")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between changes")
    parser.add_argument("--rate", type=float, default=20.0, help="gvisor pods created a second")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--setup-threads", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="600 nodes, 10 changes: a smoke run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.pool, args.changes = 600, 40, 10
    print(f"window bench: {args.nodes} nodes ({args.pool} in the pool), {args.changes} changes every "
          f"{args.interval} s, {args.rate} pods/s; {cpu_model() or 'unknown CPU'}")
    results = []
    for round_ in range(args.rounds):
        for arm in args.arms if round_ % 2 == 0 else list(reversed(args.arms)):
            result = run_arm(arm, args) | {"round": round_ + 1}
            results.append(result)
            print(json.dumps(result))
            if args.json:
                args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
