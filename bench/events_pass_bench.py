"""Events (serve --label-nodes): what the events actor's pass costs the event loop under node churn.

    .venv/bin/python bench/events_pass_bench.py --before /tmp/before   # 15,000 nodes, 10 classes, both trees
    .venv/bin/python bench/events_pass_bench.py --nodes 5000 --seconds 5

The events actor (extender/labeller/events.py) runs a pass over every pending pod of a
RuntimeClass at most once per ``interval`` (1 s) after any change of a pod, a node or a
class, and its pass runs on the loop that also serves ``/filter``, the webhooks, the
probes and the Lease renewals. On a large cluster node events come by the hundred a
second (kubelets' status reports, labels), so a pass nearly always follows some. Each
class with pending pods asks how many nodes pass its node rules (for the note of a pod
no node of its class could take); this measures what that pass costs, in one process per
version, on a cluster built in memory (the stores as the watch fills them, from the
real decoders):

- ``--nodes`` synthetic nodes (bench/cluster_gen.py), each in one of ``--classes``
  groups by a label, and ``--classes`` RuntimeClasses each selecting one group;
- ``--pods`` pending pods per class, admitted with their class's label requirement,
  each found unschedulable by kube-scheduler (so each is owed a
  RuntimeClassNodesUnavailable event that counts its class's nodes);
- node churn at ``--churn`` node updates a second (a label of each updated node
  changes; one update in ten moves the node to another group, so the counts move),
  applied in 10 ms batches as the watch applies events;
- the pass (``EventDecisions.due_events``, what ``ClassEvents.resync`` runs before
  queueing keys) every ``--interval`` seconds, for ``--seconds``;
- a ticker on the loop measuring how late each 1 ms timer fires, counting only the
  time this thread spent running (bench/label_stall_bench.py's): the longest stall.

With ``--before TREE`` (a directory, such as ``git worktree add /tmp/before HEAD``
made before a change, or a git revision, checked out in a temporary worktree) each
version runs ``--runs`` times, alternating, each in a process of its own importing
``extender`` from its tree. Printed per version: the pass's median and longest
duration, the longest loop stall and its p99 (medians over the runs), the ratios
before / after, and whether both versions owed the same events with the same notes
after the same churn (a digest of every event's pod, reason and note, after a final
fixed batch of updates). Numbers from one run compare with each other; absolute times
on a shared machine do not.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

GROUP = "bench.runtimeclass-extender.dev/group"
BEAT = "bench.runtimeclass-extender.dev/beat"
PREFIX = "runtimeclass.node-restriction.kubernetes.io"
UNSCHEDULABLE = (
    "0/{n} nodes are available: {fit} Insufficient cpu, {rest} node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/{n} nodes are available: {fit} No preemption victims found for "
    "incoming pod, {rest} Preemption is not helpful for scheduling."
)


def pod_object(index: int, class_index: int, nodes: int, classes: int) -> dict[str, Any]:
    fit = nodes // classes
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"sandboxed-{class_index}-{index}",
            "namespace": "default",
            "uid": f"00000000-0000-4000-8000-{class_index:04d}{index:08d}",
            "resourceVersion": str(1000 + index),
        },
        "spec": {
            "schedulerName": "runtimeclass-scheduler",
            "runtimeClassName": f"class-{class_index}",
            "nodeSelector": {f"{PREFIX}/class-{class_index}": "true"},
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": UNSCHEDULABLE.format(n=nodes, fit=fit, rest=nodes - fit),
                }
            ],
        },
    }


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One version's run (``extender`` imported from ``args.tree``)."""
    # The version's own packages first: the bench helpers put this tree on the path.
    sys.path.insert(0, str(args.tree))
    import extender
    import policies
    from extender.cluster.class_labels import ClassLabels
    from extender.cluster.objects import nodes_from_api, runtime_class_from_api
    from extender.cluster.pending_pods import PendingPods, pending_pod_converter
    from extender.cluster.state import ClusterState
    from extender.labeller.event_decisions import EventDecisions
    from extender.policy_file import load_policy
    from policies.objects import NodeView

    sys.path.insert(0, str(HERE))
    import cluster_gen
    from filter_bench import percentile
    from label_stall_bench import Ticker

    for package in (extender, policies):
        assert Path(package.__file__ or "").resolve().is_relative_to(Path(args.tree).resolve()), package

    state = ClusterState()
    node_objects = cluster_gen.nodes(args.nodes, managed_fields=False)
    for index, node in enumerate(node_objects):
        node["metadata"]["labels"][GROUP] = f"g{index % args.classes}"
    state.nodes.replace(nodes_from_api(node_objects))
    state.runtime_classes.replace(
        runtime_class_from_api(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": f"class-{c}", "resourceVersion": "1"},
                "handler": f"handler-{c}",
                "scheduling": {"nodeSelector": {GROUP: f"g{c}"}},
            }
        )
        for c in range(args.classes)
    )
    convert = pending_pod_converter(PREFIX)
    pods = PendingPods()
    pods.replace(
        convert(pod_object(i, c, args.nodes, args.classes))
        for c in range(args.classes)
        for i in range(args.pods)
    )
    decisions = EventDecisions(ClassLabels(PREFIX, load_policy()), state.nodes, state.runtime_classes, pods)
    names = list(state.nodes.keys())
    updates = 0

    def update() -> None:
        """The next node update of a fixed sequence: a label changes, and one update in
        ten moves the node to the next group."""
        nonlocal updates
        name = names[(updates * 7919) % len(names)]
        node: NodeView = state.nodes[name]
        labels = dict(node.labels)
        labels[BEAT] = str(updates)
        if updates % 10 == 0:
            labels[GROUP] = f"g{(int(labels[GROUP][1:]) + 1) % args.classes}"
        state.nodes.upsert(NodeView(name, labels, node.taints, node.runtime_handlers, str(updates)))
        updates += 1

    def digest() -> tuple[str, int]:
        due = sorted((event.pod.name, event.reason, event.note) for event in decisions.due_events())
        return hashlib.sha256(json.dumps(due).encode()).hexdigest()[:16], len(due)

    async def run() -> dict[str, Any]:
        digest()  # the first pass of a term counts every class over every node: not timed
        gc.collect()
        gc.freeze()  # as serve does once every store is listed
        ticker = Ticker()
        ticking = asyncio.create_task(ticker.run())
        await asyncio.sleep(0.5)
        ticker.take()
        stop = time.perf_counter() + args.seconds
        per_batch = max(1, round(args.churn / 100))

        async def churn() -> None:
            while True:
                for _ in range(per_batch):
                    update()
                await asyncio.sleep(0.01)

        churning = asyncio.create_task(churn())
        passes: list[float] = []
        owed = 0
        while time.perf_counter() < stop:
            await asyncio.sleep(args.interval)
            started = time.perf_counter()
            owed = len(decisions.due_events())
            passes.append(time.perf_counter() - started)
        churning.cancel()
        stalls = ticker.take()
        ticking.cancel()
        await asyncio.gather(churning, ticking, return_exceptions=True)
        applied = updates
        # The same state in both versions: a fixed number of updates, then one pass.
        while updates < args.final_updates:
            update()
        events_digest, events = digest()
        return {
            "passes": len(passes),
            "pass_median_ms": statistics.median(passes) * 1e3,
            "pass_p99_ms": percentile(passes, 99) * 1e3,
            "pass_max_ms": max(passes) * 1e3,
            "node_updates": applied,
            "owed_per_pass": owed,
            "events": events,
            "events_digest": events_digest,
            **stalls,
        }

    return asyncio.run(run())


def run_version(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--worker",
        str(tree),
        *("--nodes", str(args.nodes), "--classes", str(args.classes), "--pods", str(args.pods)),
        *("--churn", str(args.churn), "--interval", str(args.interval), "--seconds", str(args.seconds)),
        *("--final-updates", str(args.final_updates)),
    ]
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=tree)
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=15000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--pods", type=int, default=100, help="pending pods per class")
    parser.add_argument("--churn", type=float, default=200.0, help="node updates a second")
    parser.add_argument(
        "--interval", type=float, default=1.0, help="seconds between passes (EventOptions.interval)"
    )
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--runs", type=int, default=2, help="of each version, alternating")
    parser.add_argument(
        "--final-updates", type=int, default=5000, help="node updates before the compared pass"
    )
    parser.add_argument("--before", help="a directory (a worktree) or a git revision, measured as before")
    parser.add_argument("--after", help="the same, measured as after (default: this tree)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.tree = Path(args.worker)
        print(json.dumps(worker(args)), flush=True)
        return 0

    sys.path.insert(0, str(HERE))
    from filter_ab import checkout

    print(
        f"{args.nodes} nodes x {args.classes} classes, {args.pods} pending pods each, {args.churn:g} node "
        f"updates/s, a pass every {args.interval:g} s for {args.seconds:g} s; {args.runs} run(s) of each"
    )
    results: dict[str, list[dict[str, Any]]] = {}
    with (
        checkout(args.before) if args.before else _nothing() as before,
        checkout(args.after) if args.after else _nothing() as after,
    ):
        trees = {"after": after or ROOT} if before is None else {"before": before, "after": after or ROOT}
        for run in range(args.runs):
            order = list(trees.items()) if run % 2 == 0 else list(reversed(trees.items()))
            for version, tree in order:
                result = run_version(tree, args)
                results.setdefault(version, []).append(result)
                print(f"  {version} run {run + 1}: {json.dumps(result)}", flush=True)

    def median(version: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in results[version])

    # The stall's p99 is left out of the ratios: a loop blocked for most of a run ticks
    # too seldom for one (it reads 0 before).
    keys = ("pass_median_ms", "pass_max_ms", "stall_max_ms")
    print("version   pass median   pass max   stall max   stall p99   node updates   events (digest)")
    for version in results:
        last = results[version][-1]
        print(
            f"{version:<9} {median(version, 'pass_median_ms'):>8.2f} ms {median(version, 'pass_max_ms'):>7.1f} ms "
            f"{median(version, 'stall_max_ms'):>8.1f} ms {median(version, 'stall_p99_ms'):>8.2f} ms "
            f"{median(version, 'node_updates'):>14.0f}   {last['events']} ({last['events_digest']})"
        )
    if "before" in results:
        ratios = ", ".join(f"{key} {median('before', key) / median('after', key):.1f}x" for key in keys)
        print(f"before / after: {ratios}")
        digests = {r["events_digest"] for rs in results.values() for r in rs}
        print(
            "the same events and notes in both versions" if len(digests) == 1 else f"EVENTS DIFFER: {digests}"
        )
        if len(digests) != 1:
            return 1
    return 0


class _nothing:
    def __enter__(self) -> Path | None:
        return None

    def __exit__(self, *_exc: object) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())
