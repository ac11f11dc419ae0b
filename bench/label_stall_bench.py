"""Node labels (serve --label-nodes): what a full relabel costs everything else on the event loop.

    .venv/bin/python bench/label_stall_bench.py                          # 15,000 nodes x 20 classes
    .venv/bin/python bench/label_stall_bench.py --nodes 5000 --classes 5 --seconds 5

The node labeller shares its event loop with ``/filter``, the webhooks and the Lease
renewals. At the start of a term it compares every node against every labelled class
(15,000 x 20 is 300,000 rule checks) and then writes what differs. This measures, in
one run, on 127.0.0.1:

- the test API server (tests/support/apiserver) in a process of its own, holding
  ``--nodes`` synthetic nodes (bench/cluster_gen.py) and ``--classes`` RuntimeClasses,
  each selecting an equal share of them by a label, no node labelled yet;
- in this process, the extender's parts as ``serve --label-nodes`` wires them: the
  cluster watch, the filter app on a port, and the node labeller (its writes at
  ``--rate`` per second, 10 in flight);
- a load generator in a process of its own, sending kube-scheduler's sample at that
  size (names mode, one call at a time) for ``--seconds``;
- a ticker on the loop measuring how late each 1 ms timer fires: the longest stall.

First idle (the state synced, the labeller not started), then from the start of the
labeller's term until its writes are done. Printed: the longest loop stall and the
stall p99 in each phase, the /filter p50 and p99 in each and the ratio of the p99s,
the relabel's duration and its patches. Exits 1 if a node ends with the wrong labels.
Numbers from one run compare with each other; absolute times on a shared machine do not.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import cluster_gen  # noqa: E402
from filter_bench import percentile, sample_requests  # noqa: E402
from local import free_port, serve_api_server  # noqa: E402

from extender.settings import DEFAULT_LABEL_NODES_RATE  # noqa: E402

GROUP = "bench.runtimeclass-extender.dev/group"
PREFIX = "runtimeclass.node-restriction.kubernetes.io"


def cluster(nodes: int, classes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    node_objects = cluster_gen.nodes(nodes, managed_fields=False)
    for index, node in enumerate(node_objects):
        node["metadata"]["labels"][GROUP] = f"g{index % classes}"
    class_objects = [
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": f"class-{c}"},
            "handler": f"handler-{c}",
            "scheduling": {"nodeSelector": {GROUP: f"g{c}"}},
        }
        for c in range(classes)
    ]
    return node_objects, class_objects


# --------------------------------------------------------------------------- processes


def apiserver_main(argv: Sequence[str]) -> int:
    """The test API server with the cluster, in a process of its own (the API server is
    not on the extender's loop in a cluster either)."""
    parser = argparse.ArgumentParser(prog="label_stall_bench.py --apiserver")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--classes", type=int, required=True)
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer

    # Below the extender's priority: in a cluster the API server has cores of its own.
    os.nice(10)

    async def run() -> None:
        server = FakeApiServer()
        node_objects, class_objects = cluster(args.nodes, args.classes)
        for node in node_objects:
            server.add(NODES, node)
        for runtime_class in class_objects:
            server.add(RUNTIME_CLASSES, runtime_class)
        await serve_api_server(server, args.kubeconfig)

    asyncio.run(run())
    return 0


def client_main(argv: Sequence[str]) -> int:
    """Sequential /filter calls for a while; prints the latencies' percentiles."""
    parser = argparse.ArgumentParser(prog="label_stall_bench.py --client")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("body")
    args = parser.parse_args(argv)
    body = Path(args.body).read_bytes()
    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    for _ in range(20):  # warm-up
        conn.request("POST", "/filter", body=body, headers=headers)
        conn.getresponse().read()
    deadline = time.perf_counter() + args.seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        conn.request("POST", "/filter", body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        latencies.append(time.perf_counter() - t0)
        if response.status != 200 or b'"Error":""' not in data:
            raise SystemExit(f"bad answer: {response.status} {data[:200]!r}")
    print(
        json.dumps(
            {
                "calls": len(latencies),
                "p50_ms": percentile(latencies, 50) * 1e3,
                "p99_ms": percentile(latencies, 99) * 1e3,
            }
        ),
        flush=True,
    )
    return 0


# --------------------------------------------------------------------------- measuring


class Ticker:
    """How late a 1 ms timer fires on this loop (what anything waiting on it waits extra),
    and how much of that lateness this thread spent running (the loop's own work, as
    opposed to the machine giving its cores to other processes: the API server and the
    load generator run on the same two cores here, not in a cluster)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.busy: list[float] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + 0.001
            cpu = time.thread_time()
            await asyncio.sleep(0.001)
            lag = max(0.0, loop.time() - due)
            self.lags.append(lag)
            # CPU this thread used while the timer was due and not served.
            self.busy.append(min(lag, max(0.0, time.thread_time() - cpu - 0.0002)))

    def take(self) -> dict[str, float]:
        lags, self.lags = self.lags, []
        busy, self.busy = self.busy, []
        return {
            "stall_max_ms": max(busy, default=0.0) * 1e3,
            "stall_p99_ms": percentile(busy, 99) * 1e3,
            "lag_max_ms": max(lags, default=0.0) * 1e3,
        }


async def filter_load(port: int, seconds: float, body: Path) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--client",
        "--port",
        str(port),
        "--seconds",
        str(seconds),
        str(body),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise SystemExit("the load generator failed")
    result: dict[str, Any] = json.loads(out)
    return result


async def measure(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    from aiohttp import web

    from extender.cluster.state import ClusterState
    from extender.cluster.watch import ClusterWatch
    from extender.http.app import create_app
    from extender.kube import connect as kube
    from extender.labeller.labeller import LabelOptions, NodeLabeller
    from extender.leader.runner import LeaderRunner
    from extender.policy_file import load_policy
    from extender.tasks import stop

    kubeconfig = directory / "kubeconfig"
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--apiserver",
        "--nodes",
        str(args.nodes),
        "--classes",
        str(args.classes),
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
    )
    assert server.stdout is not None
    await server.stdout.readline()  # its URL: up
    tasks: list[asyncio.Task[None]] = []
    try:
        conn = await kube.connect(kubeconfig=str(kubeconfig))
        state = ClusterState()
        policy = load_policy()
        labeller = NodeLabeller(conn.api, state, policy, options=LabelOptions(rate=args.rate, burst=100))
        watch = ClusterWatch(conn.api, state)
        tasks.append(asyncio.create_task(watch.run()))
        while not state.synced:
            await asyncio.sleep(0.05)
        node_objects, _ = cluster(args.nodes, args.classes)
        body = directory / "sample.json"
        body.write_bytes(sample_requests(node_objects, 1)[0])
        app = create_app(state=state, policy=policy)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        # As serve does once loaded: what lives as long as the process is not scanned by
        # every full collection (a pause some filter call would wait out).
        gc.freeze()
        ticker = Ticker()
        tasks.append(asyncio.create_task(ticker.run()))
        # The first calls build the decision cache's entry for the sample's class.
        await filter_load(port, 0.5, body)
        ticker.take()

        idle_filter = await filter_load(port, args.seconds, body)
        idle = {**ticker.take(), **idle_filter}

        # The relabel: the term's compare of every node, then its writes (as many as
        # the rate allows in the window; --until-done waits for the last one).
        key_of = {f"g{c}": f"{PREFIX}/class-{c}" for c in range(args.classes)}

        def labelled() -> int:
            return sum(node.labels.get(key_of[node.labels[GROUP]]) == "true" for node in state.nodes.values())

        started = time.perf_counter()
        tasks.append(asyncio.create_task(LeaderRunner([labeller], None).run()))
        during = {**await filter_load(port, args.seconds, body), **ticker.take()}
        written_in_window = labelled()
        if args.until_done:
            while labelled() < args.nodes:
                await asyncio.sleep(0.5)
        relabel_seconds = time.perf_counter() - started
        wrong = [
            node.name
            for node in state.nodes.values()
            if {k for k in node.labels if k.startswith(PREFIX + "/")} - {key_of[node.labels[GROUP]]}
        ]
        await runner.cleanup()
        return {
            "nodes": args.nodes,
            "classes": args.classes,
            "rate": args.rate,
            "idle": idle,
            "relabel": during,
            "labelled_in_window": written_in_window,
            "relabel_seconds": relabel_seconds if args.until_done else None,
            "p99_ratio": during["p99_ms"] / idle["p99_ms"],
            "wrong_nodes": len(wrong),
        }
    finally:
        for task in reversed(tasks):
            await stop(task)
        server.terminate()
        await server.wait()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--apiserver"]:
        return apiserver_main(argv[1:])
    if argv[:1] == ["--client"]:
        return client_main(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=15000)
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_LABEL_NODES_RATE,
        help="node patches per second (serve's default)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="of /filter load in each phase")
    parser.add_argument("--until-done", action="store_true", help="wait for every node's label, and time it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(measure(args, Path(directory)))
    idle, during = result["idle"], result["relabel"]
    print(f"{args.nodes} nodes x {args.classes} classes, node patches at {args.rate:g}/s")
    print("phase     stall max   stall p99   timer lag max   /filter p50   /filter p99   calls")
    for name, phase in (("idle", idle), ("relabel", during)):
        print(
            f"{name:<9} {phase['stall_max_ms']:>7.1f} ms {phase['stall_p99_ms']:>8.2f} ms "
            f"{phase['lag_max_ms']:>11.1f} ms {phase['p50_ms']:>9.2f} ms {phase['p99_ms']:>10.2f} ms "
            f"{phase['calls']:>7}"
        )
    done = f"; all labelled in {result['relabel_seconds']:.1f} s" if args.until_done else ""
    print(
        f"relabel window: {result['labelled_in_window']} nodes labelled{done}; "
        f"/filter p99 during / idle: {result['p99_ratio']:.2f}"
    )
    print(json.dumps(result))
    return 1 if result["wrong_nodes"] else 0


if __name__ == "__main__":
    sys.exit(main())
