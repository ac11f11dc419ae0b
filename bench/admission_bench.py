"""How long the admission webhooks take to review a RuntimeClass and a pod, by cluster size.

    .venv/bin/python bench/admission_bench.py                 # 500 and 5,000 nodes
    .venv/bin/python bench/admission_bench.py --nodes 15000 --rounds 200

The review answers from the watch cache only, so its cost is the check of one class
against every node (selector, taints, runtime handlers) plus decoding the review. The
API server waits for it on every RuntimeClass create and update (timeoutSeconds: 5 in
deploy/components/admission-webhook). Each round reviews every RuntimeClass of the
generated cluster (bench/cluster_gen.py) once, as a CREATE, through the same function
the HTTP handler calls; printed: p50/p99/max per review, in-process (no HTTP).

The pod webhook (POST /admission/pods) is on the API server's path for every pod that
names a RuntimeClass (failurePolicy: Fail in deploy/components/pod-webhook), so its
cost matters more. It reads one class from the cache and never walks the nodes; its
cost is decoding the review. Each round sends the pod review the API server really
sent (tests/data/admission/plugin-off/03-pods.json: overhead missing, schedulerName
default-scheduler, so the answer is a two-operation JSONPatch) with routing on; printed
in-process and over HTTP on loopback (one aiohttp client, sequential requests, the
production app; plain HTTP, where the API server would add TLS).

Numbers on a shared machine: compare within one run, never as pass/fail checks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

# Run as a script: the review builder is the tests' (tests/support/admission.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_gen import RUNTIME_CLASSES, cluster_list, nodes  # bench/, beside this script
from local import cpu_model

from extender.admission import RoutingConfig, review, review_pod
from extender.cluster.file_source import parse_cluster
from extender.cluster.objects import runtime_class_from_api
from extender.cluster.state import ClusterState
from extender.http.admission import POD_PATH
from extender.http.app import create_app
from extender.policy_file import load_policy
from tests.support.admission import body, request
from tests.support.paths import ADMISSION_DATA

POD_REVIEW = (ADMISSION_DATA / "plugin-off" / "03-pods.json").read_bytes()
KATA = json.loads((ADMISSION_DATA / "plugin-off" / "00-runtimeclasses.json").read_bytes())["request"][
    "object"
]
ROUTING = RoutingConfig("runtimeclass-scheduler", own_namespace="runtimeclass-extender")


def _state(node_count: int) -> ClusterState:
    nodes_, classes = parse_cluster(orjson.dumps(cluster_list(nodes(node_count))).decode())
    state = ClusterState()
    state.nodes.replace(nodes_)
    state.runtime_classes.replace([*classes, runtime_class_from_api(KATA)])
    return state


def _summary(samples: list[float]) -> dict[str, float]:
    samples.sort()
    return {
        "p50": statistics.median(samples),
        "p99": samples[int(len(samples) * 0.99) - 1],
        "max": samples[-1],
        "reviews": len(samples),
    }


def measure_pods(node_count: int, rounds: int) -> dict[str, float]:
    state = _state(node_count)
    samples: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        outcome = review_pod(POD_REVIEW, state, ROUTING)
        samples.append((time.perf_counter() - start) * 1000)
        assert outcome.patched == ("overhead", "schedulerName"), outcome
    return _summary(samples)


async def measure_pods_http(node_count: int, rounds: int) -> dict[str, float]:
    app = create_app(state=_state(node_count), policy=load_policy(), routing=ROUTING)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}{POD_PATH}"
    samples: list[float] = []
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(rounds + 20):
                start = time.perf_counter()
                async with session.post(
                    url, data=POD_REVIEW, headers={"Content-Type": "application/json"}
                ) as response:
                    answer = await response.read()
                elapsed = (time.perf_counter() - start) * 1000
                assert response.status == 200 and b'"patch"' in answer, answer
                if i >= 20:  # the first requests open the connection and warm up
                    samples.append(elapsed)
    finally:
        await runner.cleanup()
    return _summary(samples)


def measure(node_count: int, rounds: int) -> dict[str, float]:
    nodes_, classes = parse_cluster(orjson.dumps(cluster_list(nodes(node_count))).decode())
    state = ClusterState()
    state.nodes.replace(nodes_)
    state.runtime_classes.replace(classes)
    bodies = [body(request(rc)) for rc in RUNTIME_CLASSES]
    results: list[str] = []
    samples: list[float] = []
    for _ in range(rounds):
        for data in bodies:
            start = time.perf_counter()
            outcome = review(data, state)
            samples.append((time.perf_counter() - start) * 1000)
            results.append(outcome.result)
    return {**_summary(samples), "warned": results.count("warned")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    print("RuntimeClass reviews (in-process):\n")
    print("| nodes | reviews | warned | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for count in args.nodes:
        r = measure(count, args.rounds)
        print(
            f"| {count} | {r['reviews']:.0f} | {r['warned']:.0f} | {r['p50']:.3f} | {r['p99']:.3f} "
            f"| {r['max']:.3f} |"
        )
    print("\nPod reviews (the captured pod; overhead and schedulerName patched):\n")
    print("| nodes | where | reviews | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for count in args.nodes:
        pod_rounds = args.rounds * 20
        for where, r in (
            ("in-process", measure_pods(count, pod_rounds)),
            ("HTTP loopback", asyncio.run(measure_pods_http(count, pod_rounds))),
        ):
            print(
                f"| {count} | {where} | {r['reviews']:.0f} | {r['p50']:.3f} | {r['p99']:.3f} | {r['max']:.3f} |"
            )
    print(f"\n{cpu_model()}")


if __name__ == "__main__":
    main()
