"""Freshness benchmark: how soon a change on the API server shows in /filter answers.

    .venv/bin/python bench/freshness_bench.py                 # 300 changes, 500 nodes
    .venv/bin/python bench/freshness_bench.py --changes 1000 --nodes 5000 --json out.json

One process runs the test API server (``tests/support/apiserver``, the real list/watch
protocol), the extender's live-mode app exactly as ``serve`` builds it (connected
through a kubeconfig file, reflectors started by the app's cleanup_ctx) on a loopback
port, and a client. For each change it flips the label a RuntimeClass selects on one
node (so the expected decision alternates between pass and reject), then posts the
filter request as kube-scheduler would (names mode) until the answer changes. It
reports, over all changes:

* ``store``: from the change on the API server to the reflector applying the event
  (the watch's share: serialisation, loopback, parsing, the store update);
* ``decision``: from the change to the first /filter answer that reflects it, over
  HTTP (what kube-scheduler would observe; includes the polling client's own calls,
  which share the one event loop, so it is an upper bound).

Target (docs/performance.md): decision p99 <= 100 ms. Timings on a shared machine: read them
as orders of magnitude, repeat runs, never turn them into pass/fail checks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script (python bench/freshness_bench.py): the test helpers live in tests/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import orjson
from aiohttp import web

from extender.cluster.live import LiveCluster, LiveOptions
from extender.cluster.state import ClusterState
from extender.http.app import create_app
from extender.http.wiring import attach_live
from extender.kube.connect import connect
from extender.policy_file import load_policy
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class

TARGET_MS = 100.0
LABEL = "sandbox.example.dev/gvisor"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[index]


def summary(values_ms: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(values_ms), 3),
        "p90_ms": round(percentile(values_ms, 90), 3),
        "p99_ms": round(percentile(values_ms, 99), 3),
        "max_ms": round(max(values_ms), 3),
        "mean_ms": round(statistics.fmean(values_ms), 3),
    }


async def run(nodes: int, changes: int, poll_timeout: float) -> dict[str, Any]:
    server = FakeApiServer()
    await server.start()
    server.add(RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc", node_selector={LABEL: "true"}))
    for i in range(nodes):
        server.add(NODES, make_node(f"node-{i:05d}", labels={LABEL: "true"} if i % 2 else {}))
    target = "node-00000"
    with tempfile.TemporaryDirectory() as tmp:
        connection = await connect(kubeconfig=str(server.write_kubeconfig(Path(tmp) / "kubeconfig")))
        state = ClusterState()
        live = LiveCluster(connection.api, state, options=LiveOptions())
        app = create_app(state=state, policy=load_policy(), source_stats=live.source_stats)
        attach_live(app, live)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]

        applied: dict[str, float] = {}

        def on_change(kind: str, old: Any, new: Any) -> None:
            if new is not None and new.name == target:
                applied[new.resource_version] = time.perf_counter()

        state.nodes.add_listener(on_change)
        body = orjson.dumps(
            {
                "Pod": {
                    "metadata": {"name": "p", "namespace": "default"},
                    "spec": {"runtimeClassName": "gvisor"},
                },
                "Nodes": None,
                "NodeNames": [target],
            }
        )
        url = f"http://127.0.0.1:{port}/filter"
        store_ms: list[float] = []
        decision_ms: list[float] = []
        polls = 0
        try:
            async with aiohttp.ClientSession() as http:
                deadline = time.monotonic() + 30
                while not state.synced:
                    if time.monotonic() > deadline:
                        raise SystemExit("the extender did not sync within 30 s")
                    await asyncio.sleep(0.01)
                await server.wait_for_watchers(NODES, 1)
                passing = False  # node-00000 starts without the label
                for _ in range(changes):
                    passing = not passing
                    labels = {LABEL: "true"} if passing else {LABEL: None}
                    start = time.perf_counter()
                    changed = server.modify(NODES, target, {"metadata": {"labels": labels}})
                    rv = changed["metadata"]["resourceVersion"]
                    give_up = start + poll_timeout
                    while True:
                        async with http.post(
                            url, data=body, headers={"Content-Type": "application/json"}
                        ) as resp:
                            answer = orjson.loads(await resp.read())
                        polls += 1
                        if (answer["NodeNames"] == [target]) == passing:
                            break
                        if time.perf_counter() > give_up:
                            raise SystemExit(f"change {rv} not visible after {poll_timeout} s")
                    decision_ms.append((time.perf_counter() - start) * 1000)
                    store_ms.append((applied[rv] - start) * 1000)
        finally:
            await runner.cleanup()
            await server.stop()
    return {
        "nodes": nodes,
        "changes": changes,
        "filter_calls": polls,
        "store": summary(store_ms),
        "decision": summary(decision_ms),
        "target_p99_ms": TARGET_MS,
        "meets_target": percentile(decision_ms, 99) <= TARGET_MS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=500, help="nodes in the cluster (default 500)")
    parser.add_argument(
        "--changes", type=int, default=300, help="label changes to time (default 300, >= 200)"
    )
    parser.add_argument("--poll-timeout", type=float, default=5.0, help="give up on one change after this")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    result = asyncio.run(run(args.nodes, args.changes, args.poll_timeout))
    print(
        f"freshness over {result['changes']} label changes, {result['nodes']} nodes ({result['filter_calls']} filter calls)"
    )
    print(f"{'':10} {'median':>9} {'p90':>9} {'p99':>9} {'max':>9}")
    for name in ("store", "decision"):
        s = result[name]
        print(
            f"{name:10} {s['median_ms']:>7.2f}ms {s['p90_ms']:>7.2f}ms {s['p99_ms']:>7.2f}ms {s['max_ms']:>7.2f}ms"
        )
    verdict = "meets" if result["meets_target"] else "MISSES"
    print(f"decision p99 {verdict} the {TARGET_MS:.0f} ms target")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
