"""Sustained load: a fixed rate of filter calls from a separate process, every answer checked.

    .venv/bin/python bench/load.py                            # 1,000 calls/s, 500 nodes, 60 s
    .venv/bin/python bench/load.py --seconds 5                # CI
    .venv/bin/python bench/load.py --rate 500 --nodes 5000 --seconds 30

What it does, on 127.0.0.1 only, and it stops by itself:

1. generates a ``--nodes`` cluster with bench/cluster_gen.py (realistic labels and
   taints, the five RuntimeClasses of the benchmark) and writes it as a cluster file;
2. starts ``runtimeclass-extender serve --cluster-file <file>`` on a free loopback port
   and waits for ``/readyz``;
3. starts a *separate client process* (this script with ``--client``) that sends
   names-mode filter requests (the benchmark's pod mix: no class, runc, gVisor, Kata,
   GPU, Windows, a spot pod, a class that does not exist; node order shuffled per
   body) on an open-loop schedule: call ``i`` is due at ``start + i / rate``, whatever
   happened to earlier calls, over ``--connections`` keep-alive connections;
4. reads the server's RSS (``VmRSS`` in /proc/<pid>/status) after start, after a
   warm-up second, and at the end (and the peak, ``VmHWM``).

An **error** is a failed connection, a timeout, a non-200 status, a non-empty
``Error``, or an answer that differs from tests/support/reference_model.py evaluated on the
generated cluster. Latency is reported twice: from the moment the request was sent
(service time) and from the moment it was due (includes any queueing when the client
or server falls behind, so a stall cannot hide: no coordinated omission).

Prints a JSON report; exit status 1 if any call erred. Falling short of the rate is
reported (``achieved_rate``), not an error: on a shared machine it measures the
machine as much as the extender.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import cluster_gen  # noqa: E402
from local import cpu_model, cpu_seconds, free_port, serve_command  # noqa: E402

from tests.support.reference_model import answer_names, class_from_api, node_from_api, normalise  # noqa: E402

WARMUP_SECONDS = 1.0


# --------------------------------------------------------------------------- requests


def make_bodies(node_objects: list[dict[str, Any]], count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    names = [n["metadata"]["name"] for n in node_objects]
    pods = cluster_gen.pods()
    bodies = []
    for i in range(count):
        order = names[:]
        rng.shuffle(order)
        bodies.append(orjson.dumps({"Pod": pods[i % len(pods)], "Nodes": None, "NodeNames": order}))
    return bodies


def expected_answers(cluster: dict[str, Any], bodies: list[bytes]) -> list[dict[str, Any]]:
    nodes = {n["name"]: n for n in map(node_from_api, (o for o in cluster["items"] if o["kind"] == "Node"))}
    classes = {
        c["name"]: c
        for c in map(class_from_api, (o for o in cluster["items"] if o["kind"] == "RuntimeClass"))
    }
    answers = []
    for body in bodies:
        request = orjson.loads(body)
        answers.append(dict(normalise(answer_names(request["Pod"], request["NodeNames"], nodes, classes))))
    return answers


# --------------------------------------------------------------------------- client process


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {
        "p50_ms": at(0.50),
        "p90_ms": at(0.90),
        "p99_ms": at(0.99),
        "p999_ms": at(0.999),
        "max_ms": at(1.0),
    }


async def run_client(
    port: int, rate: float, seconds: float, connections: int, work_dir: Path
) -> dict[str, Any]:
    """Open-loop calls over ``connections`` keep-alive HTTP/1.1 connections.

    A minimal HTTP/1.1 client on asyncio streams (prebuilt request bytes, a
    Content-Length response): a general client costs more CPU per call than the
    extender does, and on a small machine the load generator would measure itself.
    """
    bodies = [p.read_bytes() for p in sorted(work_dir.glob("body-*.json"))]
    requests = [
        b"POST /filter HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
        for body in bodies
    ]
    expected = orjson.loads((work_dir / "expected.json").read_bytes())
    verified: dict[int, bytes] = {}
    service: list[float] = []
    from_due: list[float] = []
    errors: dict[str, int] = {}
    first_errors: list[str] = []

    def error(kind: str, text: str) -> None:
        errors[kind] = errors.get(kind, 0) + 1
        if len(first_errors) < 5:
            first_errors.append(f"{kind}: {text[:300]}")

    def check(index: int, status: int, data: bytes) -> None:
        if status != 200:
            error(f"status {status}", data.decode(errors="replace"))
            return
        if verified.get(index) == data:
            return
        answer = orjson.loads(data)
        if answer.get("Error"):
            error("Error", answer["Error"])
        elif dict(normalise(answer)) != expected[index]:
            error("wrong answer", f"body {index}")
        else:
            verified[index] = data

    async def exchange(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
    ) -> tuple[int, bytes]:
        writer.write(request)
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionResetError("connection closed")
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await reader.readexactly(length)

    queue: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()

    async def worker() -> None:
        streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while (item := await queue.get()) is not None:
            i, due = item
            index = i % len(bodies)
            sent = time.perf_counter()
            try:
                if streams is None:
                    streams = await asyncio.open_connection("127.0.0.1", port)
                status, data = await asyncio.wait_for(exchange(*streams, requests[index]), 10)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError, IndexError) as exc:
                error("connection", repr(exc))
                if streams is not None:
                    streams[1].close()
                streams = None
                continue
            done = time.perf_counter()
            service.append(done - sent)
            from_due.append(done - due)
            check(index, status, data)
        if streams is not None:
            streams[1].close()

    total = int(rate * seconds)
    workers = [asyncio.create_task(worker()) for _ in range(connections)]
    start = time.perf_counter() + 0.05
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((i, due))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    elapsed = time.perf_counter() - start
    completed = len(service)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "client_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "calls": total,
        "completed": completed,
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "first_errors": first_errors,
        "target_rate": rate,
        "achieved_rate": round(completed / elapsed, 1),
        "elapsed_s": round(elapsed, 2),
        "latency_from_send": percentiles(service),
        "latency_from_due": percentiles(from_due),
    }


def client_main(args: argparse.Namespace) -> int:
    result = asyncio.run(
        run_client(args.port, args.rate, args.seconds, args.connections, Path(args.work_dir))
    )
    print(json.dumps(result))
    return 0


# --------------------------------------------------------------------------- driver


def memory_mb(pid: int) -> dict[str, float]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = round(int(value.split()[0]) / 1024, 1)
    return values


def wait_ready(proc: subprocess.Popen[bytes], port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited before it was ready")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not become ready")


def client(port: int, rate: float, seconds: float, connections: int, work_dir: Path) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--client",
        "--port",
        str(port),
        "--rate",
        str(rate),
        "--seconds",
        str(seconds),
        "--connections",
        str(connections),
        "--work-dir",
        str(work_dir),
    ]
    out = subprocess.run(command, check=True, capture_output=True, timeout=seconds + 120)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def machine() -> dict[str, Any]:
    model = cpu_model()
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="load-") as tmp:
        work = Path(tmp)
        node_objects = cluster_gen.nodes(args.nodes, args.seed)
        cluster = cluster_gen.cluster_list(node_objects)
        cluster_file = work / f"cluster-{args.nodes}.json"
        cluster_file.write_bytes(orjson.dumps(cluster))
        bodies = make_bodies(node_objects, len(cluster_gen.POD_MIX) * 2, args.seed)
        for i, body in enumerate(bodies):
            (work / f"body-{i:03d}.json").write_bytes(body)
        (work / "expected.json").write_bytes(orjson.dumps(expected_answers(cluster, bodies)))

        port = free_port()
        proc = subprocess.Popen(
            [
                *serve_command(),
                "serve",
                "--cluster-file",
                str(cluster_file),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_ready(proc, port)
            rss_start = memory_mb(proc.pid)
            warmup = client(port, args.rate, WARMUP_SECONDS, args.connections, work)
            rss_warm = memory_mb(proc.pid)
            cpu_before = cpu_seconds(proc.pid)
            result = client(port, args.rate, args.seconds, args.connections, work)
            server_cpu = cpu_seconds(proc.pid) - cpu_before
            rss_end = memory_mb(proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    return {
        "command": " ".join(["bench/load.py", *sys.argv[1:]]),
        "nodes": args.nodes,
        "connections": args.connections,
        "machine": machine(),
        "warmup_errors": warmup["errors"],
        **result,
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_ms_per_call": round(1000 * server_cpu / max(1, result["completed"]), 3),
        "server_rss_mb": {
            "start": rss_start.get("VmRSS"),
            "after_warmup": rss_warm.get("VmRSS"),
            "end": rss_end.get("VmRSS"),
            "peak": rss_end.get("VmHWM"),
        },
        "server_stderr_lines": len([line for line in stderr.splitlines() if line.strip()]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="filter calls per second (default 1000)")
    parser.add_argument("--seconds", type=float, default=60.0, help="duration (default 60)")
    parser.add_argument("--nodes", type=int, default=500, help="cluster size (default 500)")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections (default 8)")
    parser.add_argument("--seed", type=int, default=585)
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 0 < args.rate <= 20_000 or not 0 < args.seconds <= 3600 or not 1 <= args.nodes <= 20_000:
        parser.error("bounded: 0 < --rate <= 20000, 0 < --seconds <= 3600, 1 <= --nodes <= 20000")
    if args.client:
        return client_main(args)
    report = run(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if report["errors"] or report["warmup_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
