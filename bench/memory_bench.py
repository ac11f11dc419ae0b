"""One replica's memory with everything on: large clusters with many pending pods.

    .venv/bin/python bench/memory_bench.py                          # 15,000 nodes, 10,000 pending pods
    .venv/bin/python bench/memory_bench.py --nodes 5000 --pods 2000

Runs on 127.0.0.1 only: the test API server (tests/support/apiserver) in a process of
its own with ``--nodes`` nodes (bench/cluster_gen.py ``nodes``: realistic labels,
taints and pools, half of them already carrying the gVisor class's derived label),
the generated RuntimeClasses, both webhook configurations, and ``--pods`` pending pods
of the gVisor class for the runtimeclass-scheduler profile; and one
``runtimeclass-extender serve`` with every part on, as predicate mode with the node labels plus
the audit runs it: node labels and their events, requeueing, the audit of running
pods, both webhooks with self-managed certificates, leader election. Once it leads,
every informer is listed and nothing has changed for ``--settle`` seconds, its
resident memory (VmRSS and VmHWM of /proc/PID/status) is printed, in MB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import cluster_gen  # noqa: E402
from local import free_port, rss_mb, serve_api_server, serve_command  # noqa: E402

NAMESPACE = "runtimeclass-extender"
SCHEDULER = "runtimeclass-scheduler"
LABEL = "runtimeclass.node-restriction.kubernetes.io/gvisor"


def apiserver_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="memory_bench.py --apiserver")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    from tests.support.apiserver import (
        MUTATING_WEBHOOKS,
        NODES,
        PODS,
        RUNTIME_CLASSES,
        VALIDATING_WEBHOOKS,
        FakeApiServer,
    )

    os.nice(10)

    def hook(name: str, path: str) -> dict[str, Any]:
        service = {"name": "runtimeclass-extender-webhook", "namespace": NAMESPACE, "path": path, "port": 443}
        return {
            "name": name,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": service},
        }

    async def run() -> None:
        server = FakeApiServer()
        for node in cluster_gen.nodes(args.nodes, managed_fields=False):
            if cluster_gen.in_gvisor_pool(node):
                node["metadata"]["labels"][LABEL] = "true"
            server.add(NODES, node)
        for runtime_class in cluster_gen.RUNTIME_CLASSES:
            server.add(RUNTIME_CLASSES, runtime_class)
        server.add(
            VALIDATING_WEBHOOKS,
            {
                "metadata": {"name": "runtimeclass-extender"},
                "webhooks": [hook("runtimeclasses.runtimeclass-extender.dev", "/admission/runtimeclasses")],
            },
        )
        server.add(
            MUTATING_WEBHOOKS,
            {
                "metadata": {"name": "runtimeclass-extender"},
                "webhooks": [hook("pods.runtimeclass-extender.dev", "/admission/pods")],
            },
        )
        for i in range(args.pods):
            pod = cluster_gen.pod_object(f"sandboxed-{i:05}", "gvisor", ())
            pod["metadata"] = {
                "name": f"sandboxed-{i:05}",
                "namespace": "apps",
                "labels": {"app": f"app-{i % 50}"},
            }
            pod["spec"]["schedulerName"] = SCHEDULER
            pod["spec"]["nodeSelector"] = {LABEL: "true"}
            server.add(PODS, pod)
        await serve_api_server(server, args.kubeconfig)

    asyncio.run(run())
    return 0


async def measure(args: argparse.Namespace, directory: Path) -> dict[str, float]:
    kubeconfig = directory / "kubeconfig"
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--apiserver",
            "--nodes",
            str(args.nodes),
            "--pods",
            str(args.pods),
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
    )
    assert server.stdout is not None
    server.stdout.readline()
    probe = free_port()
    command = [
        *serve_command(),
        "serve",
        f"--kubeconfig={kubeconfig}",
        "--host=127.0.0.1",
        f"--port={free_port()}",
        f"--probe-port={probe}",
        f"--admission-port={free_port()}",
        "--webhook-certificate-secret=runtimeclass-extender-webhook-certificate",
        f"--route-pods-to-scheduler={SCHEDULER}",
        "--label-nodes",
        "--requeue-pending-pods",
        f"--requeue-scheduler-names={SCHEDULER}",
        "--audit-running-pods",
        "--leader-elect",
        "--leader-elect-lease-name=runtimeclass-extender",
        "--log-level=warning",
    ]
    env = {**os.environ, "POD_NAMESPACE": NAMESPACE, "POD_NAME": "bench-0"}
    extender = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 600
            while True:
                if extender.poll() is not None:
                    raise RuntimeError(extender.stderr.read().decode() if extender.stderr else "serve exited")
                try:
                    async with session.get(f"http://127.0.0.1:{probe}/readyz") as response:
                        body = await response.json()
                        if body.get("leader", {}).get("leading"):
                            break
                except (aiohttp.ClientError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("serve did not lead")
                await asyncio.sleep(0.5)
        await asyncio.sleep(args.settle)
        return rss_mb(extender.pid)
    finally:
        extender.terminate()
        extender.wait(10)
        server.terminate()
        server.wait(10)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--apiserver"]:
        return apiserver_main(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=15000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--settle", type=float, default=20.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(measure(args, Path(directory)))
    print(
        f"{args.nodes} nodes, {args.pods} pending pods, everything on: "
        f"RSS {result['VmRSS']:.0f} MB (peak {result['VmHWM']:.0f} MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
