"""Node labels (serve --label-nodes) under faults: how soon a relabel ends exactly right after one.

    .venv/bin/python bench/label_faults_bench.py                      # both faults, 1,000 labels moved
    .venv/bin/python bench/label_faults_bench.py --fault refused --refused-for 30

Runs on 127.0.0.1 only: the test API server (tests/support/apiserver) and replicas of
the extender's node labeller with leader election at kube-scheduler's durations
(lease 15 s, renew 10 s, retry 2 s), each over its own API connection
(tests/support/replicas.py), at the production write settings (100 patches/s, 10 in
flight, backoff 0.5 s doubling to 30 s). A class's selector is edited so that
``--moved`` nodes change label (half lose it, half gain it), and while the relabel is
under way one fault strikes:

- ``leader-killed``: the leader dies (its connection cut, its tasks stopped, the Lease
  not released, as when its process is killed); the other replica takes over once the
  Lease expires and finishes the relabel.
- ``refused``: every node write is refused (422, as an admission policy refuses it)
  for ``--refused-for`` seconds, then allowed again; the leader keeps running.

Printed, per fault: seconds from the fault's end (the kill; the refusal lifted) to the
last node carrying exactly the labels the class asks for, and the label flaps (a node
whose label under the prefix changed more than once after the edit, or a node outside
the move that changed at all); for the refusal, the node writes sent while it lasted
and the warnings the labeller logged. Exits 1 on a wrong label, a flap, or no convergence
within ``--limit`` seconds of the fault's end.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from extender.labeller.labeller import LabelOptions
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.replicas import FAST_ELECTION, Replica, start_replica

ELECTION = replace(FAST_ELECTION, lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)
KEY = "runtimeclass.node-restriction.kubernetes.io/gvisor"


async def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _labelled(server: FakeApiServer) -> set[str]:
    return {
        o["metadata"]["name"] for o in server.objects(NODES) if (o["metadata"].get("labels") or {}).get(KEY)
    }


def _node_patches(server: FakeApiServer) -> int:
    return sum(1 for r in server.requests if r.verb == "patch" and r.path.startswith("/api/v1/nodes/"))


class _Warnings(logging.Handler):
    """Counts the labeller's warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def _flaps(server: FakeApiServer, since: int, moved: set[str]) -> list[str]:
    """Nodes whose label changed more than once in the history after ``since``, or at
    all if not moved."""
    changes: dict[str, int] = {}
    for _, obj, prev in server.changes(NODES)[since:]:
        before = ((prev or {}).get("metadata") or {}).get("labels") or {}
        after = (obj.get("metadata") or {}).get("labels") or {}
        if before.get(KEY) != after.get(KEY):
            name = obj["metadata"]["name"]
            changes[name] = changes.get(name, 0) + 1
    return sorted(n for n, count in changes.items() if count > 1 or n not in moved)


async def run(fault: str, nodes: int, moved: int, refused_for: float, limit: float) -> dict[str, object]:
    server = FakeApiServer()
    await server.start()
    replicas: list[Replica] = []
    warnings = _Warnings()
    # Counted here, not printed (the base level is ERROR).
    labeller_log = logging.getLogger("extender.labeller")
    labeller_log.addHandler(warnings)
    labeller_log.setLevel(logging.WARNING)
    labeller_log.propagate = False
    refused_writes = 0
    try:
        half = moved // 2
        for i in range(nodes):
            pool = "a" if i < half else "b" if i < moved else "other"
            server.add(NODES, make_node(f"node-{i:05}", labels={"pool": pool}))
        server.add(
            RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc", node_selector={"pool": "a"})
        )
        with tempfile.TemporaryDirectory() as directory:
            first = await start_replica(
                server, Path(directory), "r0", requeue=None, label=LabelOptions(), election=ELECTION
            )
            replicas.append(first)
            await _until(lambda: first.leading, 60, "r0 leading")
            if fault == "leader-killed":
                second = await start_replica(
                    server, Path(directory), "r1", requeue=None, label=LabelOptions(), election=ELECTION
                )
                replicas.append(second)
                await _until(second.synced, 60, "r1 synced")
            pool = {
                o["metadata"]["name"] for o in server.objects(NODES) if o["metadata"]["labels"]["pool"] == "a"
            }
            await _until(lambda: _labelled(server) == pool, 120, "the first labels")
            after = {
                o["metadata"]["name"] for o in server.objects(NODES) if o["metadata"]["labels"]["pool"] == "b"
            }
            moving = pool | after
            since = len(server.changes(NODES))
            server.modify(RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"pool": "b"}}})
            # Strike once a fifth of the move is done.
            await _until(
                lambda: len(server.changes(NODES)) - since >= moved // 5, 60, "the relabel under way"
            )
            if fault == "leader-killed":
                first.proxy.blackhole()
                for task, _ in first.tasks:
                    task.cancel()
                ended = time.perf_counter()
            else:
                server.fail_next(
                    10**9, 422, verbs={"patch"}, resource=NODES, message="denied by an admission policy"
                )
                before, warnings.count = _node_patches(server), 0
                await asyncio.sleep(refused_for)
                server.clear_failures()
                refused_writes = _node_patches(server) - before
                ended = time.perf_counter()
            await _until(lambda: _labelled(server) == after, limit, "every label right")
            seconds = time.perf_counter() - ended
            await asyncio.sleep(2.0)  # time for a late write (a flap) to show
            return {
                "fault": fault,
                "seconds": seconds,
                "right": _labelled(server) == after,
                "flaps": _flaps(server, since, moving),
                "refused_writes": refused_writes,
                "warnings": warnings.count,
            }
    finally:
        labeller_log.removeHandler(warnings)
        labeller_log.propagate = True
        for replica in reversed(replicas):
            await replica.stop()
        await server.stop()


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fault", choices=["leader-killed", "refused", "both"], default="both")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--moved", type=int, default=1000)
    parser.add_argument("--refused-for", type=float, default=20.0, help="seconds every node write is refused")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds after the fault's end to converge")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    failed = False
    for fault in ("leader-killed", "refused") if args.fault == "both" else (args.fault,):
        try:
            result = await run(fault, args.nodes, args.moved, args.refused_for, args.limit)
        except TimeoutError as exc:
            print(f"{fault}: FAILED: {exc}")
            failed = True
            continue
        flaps = result["flaps"]
        assert isinstance(flaps, list)
        refusal = (
            f"; {result['refused_writes']} node writes refused, {result['warnings']} warning(s)"
            if fault == "refused"
            else ""
        )
        print(
            f"{fault}: {args.moved} labels moved on {args.nodes} nodes; exactly right "
            f"{result['seconds']:.1f} s after the fault's end; {len(flaps)} flapping node(s){refusal}"
        )
        failed = failed or not result["right"] or bool(flaps)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
