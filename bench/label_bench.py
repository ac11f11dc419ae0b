"""Node labels (serve --label-nodes): how long a RuntimeClass edit takes to move its labels.

    .venv/bin/python bench/label_bench.py                       # 2,000 nodes, 1,000 move
    .venv/bin/python bench/label_bench.py --nodes 5000 --moved 1000 --trials 3
    .venv/bin/python bench/label_bench.py --nodes 15000 --pool 7500 --moved 7500

Runs on 127.0.0.1 only: the test API server (tests/support/apiserver) and one replica
of the extender's node labeller with leader election, over its own API connection
(tests/support/replicas.py), at the production write settings (100 patches/s, bursts
of 20, 10 in flight). Each trial: a cluster of fresh nodes, ``pool`` of them (default
half of ``moved``) in the class's pool, labelled from none; then the class's selector
is edited so that ``moved`` nodes change label (half lose it, half gain it). Printed:
seconds from the first leader to every node of the pool labelled (a fresh cluster),
seconds from the edit to the last node carrying exactly the labels the class asks
for, and the patches sent. Exits 1 if any node ends with the wrong labels or a node
outside the move was patched.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from extender.labeller.labeller import LabelOptions
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.replicas import FAST_ELECTION, Replica, start_replica

# kube-scheduler's durations: the test-speed ones (lease 1 s) lose the Lease while the
# in-process API server, on the same loop, is busy with a thousand patches.
ELECTION = replace(FAST_ELECTION, lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)
PREFIX = "runtimeclass.node-restriction.kubernetes.io"
KEY = PREFIX + "/gvisor"


async def _until(condition: object, timeout: float, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        # Not faster: the checks read the server's objects, on the loop being measured.
        await asyncio.sleep(0.05)


def _patches(server: FakeApiServer) -> int:
    return sum(1 for r in server.requests if r.verb == "patch" and r.path.startswith("/api/v1/nodes/"))


def _labelled(server: FakeApiServer) -> set[str]:
    return {
        o["metadata"]["name"]
        for o in server.objects(NODES)
        if (o["metadata"].get("labels") or {}).get(KEY) == "true"
    }


async def trial(nodes: int, pool: int, moved: int, number: int) -> tuple[float, float, int]:
    server = FakeApiServer()
    await server.start()
    replica: Replica | None = None
    try:
        # Before the edit the class selects before=a, the nodes [0, pool); after it,
        # after=b, the nodes [moved / 2, pool + moved / 2): moved / 2 lose the label and
        # as many gain it.
        half = moved // 2
        for i in range(nodes):
            labels = {"before": "a" if i < pool else "-", "after": "b" if half <= i < pool + half else "-"}
            server.add(
                NODES, make_node(f"ip-10-0-{i // 250}-{i % 250}.eu-west-1.compute.internal", labels=labels)
            )
        server.add(
            RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc", node_selector={"before": "a"})
        )
        with tempfile.TemporaryDirectory() as directory:
            replica = await start_replica(
                server, Path(directory), f"r{number}", requeue=None, label=LabelOptions(), election=ELECTION
            )
            await _until(lambda: replica is not None and replica.leading, 60, "leading")
            led = time.perf_counter()
            before = {
                o["metadata"]["name"]
                for o in server.objects(NODES)
                if o["metadata"]["labels"]["before"] == "a"
            }
            await _until(lambda: _labelled(server) == before, 600, "the first labels")
            fresh = time.perf_counter() - led
            patches_before = _patches(server)
            after = {
                o["metadata"]["name"]
                for o in server.objects(NODES)
                if o["metadata"]["labels"]["after"] == "b"
            }
            started = time.perf_counter()
            # A merge patch: the old key removed, the new one set.
            server.modify(
                RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"before": None, "after": "b"}}}
            )
            await _until(lambda: _patches(server) - patches_before >= moved, 600, "the moved labels")
            seconds = time.perf_counter() - started
            await asyncio.sleep(1.0)  # time for any extra patch to show
            patches = _patches(server) - patches_before
            if patches != moved:
                raise AssertionError(f"{patches} node patches for {moved} moved labels")
            if _labelled(server) != after:
                raise AssertionError("the labels are not where the class asks for them")
            return fresh, seconds, patches
    finally:
        if replica is not None:
            await replica.stop()
        await server.stop()


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--moved", type=int, default=1000)
    parser.add_argument("--pool", type=int, help="nodes in the class before the edit (default: moved / 2)")
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    pool = args.pool if args.pool is not None else args.moved // 2
    times: list[float] = []
    for number in range(args.trials):
        try:
            fresh, seconds, patches = await trial(args.nodes, pool, args.moved, number)
        except (AssertionError, TimeoutError) as exc:
            print(f"FAILED: {exc}")
            return 1
        times.append(seconds)
        print(
            f"trial {number + 1}: {pool} nodes labelled fresh in {fresh:.2f} s; "
            f"{args.moved} labels moved on {args.nodes} nodes in {seconds:.2f} s ({patches} patches)"
        )
    print(
        f"edit to every label moved: min {min(times):.2f} s, median {statistics.median(times):.2f} s, max {max(times):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
