"""Filter benchmark: in-process and over HTTP, against the cost of just reading and
writing the message.

    .venv/bin/python bench/filter_bench.py            # full run (500 / 5,000 / 15,000 nodes)
    .venv/bin/python bench/filter_bench.py --quick    # CI: small sizes, few iterations (< ~60 s)

For each cluster size it

* generates a realistic cluster (``bench/cluster_gen.py``) and writes it as a cluster
  file under ``bench/out/``;
* times in-process filter calls exactly as the HTTP handler makes them (validate the
  body, decide, serialise the answer) in names mode naming every node (what
  kube-scheduler sends with ``percentageOfNodesToScore: 100``), names mode naming the
  adaptive default's sample (``sample``: 500 of 5,000 nodes), and full-nodes mode, and in the
  same loop the *floor* for the same request: ``orjson.loads`` of the request bytes
  plus ``orjson.dumps`` of the response. The ratio ours/floor is what to compare
  across machines: both sides suffer the same noise;
* starts the real ``runtimeclass-extender serve --cluster-file ...`` as a subprocess
  and drives it from a separate client process over loopback with keep-alive
  connections: p50/p99 of sequential calls (kube-scheduler's pattern: one call at a
  time) and throughput with a few concurrent callers;
* reads the server's RSS (VmRSS, and the VmHWM peak) from /proc;
* then the same for the other call shapes kube-scheduler sends (``SHAPES``: the adaptive
  sample, a RuntimeClass's pool, a sample of it, every node; answers passing every name
  and mixed ones) on a second cluster (``cluster_gen.pool_nodes``: no taints, EKS-style
  names, every other node in the gVisor pool), over HTTP each call alternating with a
  floor server answering as many passing and rejected names.

Requests rotate through a mix of pods (no RuntimeClass, runc, gVisor, Kata with its
own toleration, GPU, Windows, a spot-tolerating pod, and a class that does not exist)
and the node order is shuffled per request, as kube-scheduler's is.

It prints one table and writes it as JSON (``bench/out/results.json`` or ``--json``).
The numbers are timings on a shared machine: compare ratios, repeat runs, and never
turn them into pass/fail checks.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import cluster_gen  # noqa: E402
from local import cpu_model, free_port, rss_mb, serve_command  # noqa: E402

OUT = HERE / "out"


# --------------------------------------------------------------------------- requests


def names_requests(node_objects: list[dict[str, Any]], count: int, seed: int = 1) -> list[bytes]:
    """Names-mode bodies (nodeCacheCapable: true), one per pod of the mix, shuffled nodes."""
    rng = random.Random(seed)
    names = [n["metadata"]["name"] for n in node_objects]
    bodies = []
    for i in range(count):
        pod = cluster_gen.pods()[i % len(cluster_gen.POD_MIX)]
        order = names[:]
        rng.shuffle(order)
        bodies.append(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": order}))
    return bodies


def num_feasible_nodes_to_find(nodes: int, percentage: int = 0) -> int:
    """How many nodes kube-scheduler offers the extender at most: pkg/scheduler/
    schedule_one.go, numFeasibleNodesToFind (minFeasibleNodesToFind 100,
    minFeasibleNodesPercentageToFind 5; percentage 0 is the adaptive default)."""
    if nodes < 100:
        return nodes
    if percentage == 0:
        percentage = max(5, 50 - nodes // 125)
    return max(100, nodes * percentage // 100)


def sample_requests(node_objects: list[dict[str, Any]], count: int, seed: int = 1) -> list[bytes]:
    """Names-mode bodies naming the adaptive default's sample, as kube-scheduler sends
    them without ``percentageOfNodesToScore: 100`` (the names mode rows name every node)."""
    size = num_feasible_nodes_to_find(len(node_objects))
    return [
        orjson.dumps({**(doc := orjson.loads(body)), "NodeNames": doc["NodeNames"][:size]})
        for body in names_requests(node_objects, count, seed)
    ]


# The call shapes kube-scheduler sends besides the whole-cluster one, on the
# ``cluster_gen.pool_nodes`` cluster (taint-free, every other node in the gVisor pool):
# (row name, pod of cluster_gen.POD_MIX, which names are offered). "all" is every node,
# "pool" the gVisor pool's nodes (what kube-scheduler's own filters leave for a gVisor
# pod: RuntimeClass admission puts the class's nodeSelector on the pod); "sample" the
# adaptive default's share of those (numFeasibleNodesToFind of the whole cluster, as
# kube-scheduler counts it). A pod without a class passes every node; a gVisor pod
# offered nodes outside its pool gets a mixed answer, about half rejected.
SHAPES: tuple[tuple[str, str, str], ...] = (
    ("sample, no class", "web", "all sample"),
    ("pool, gVisor", "sandboxed", "pool"),
    ("pool sample, gVisor", "sandboxed", "pool sample"),
    ("sample, gVisor (mixed)", "sandboxed", "all sample"),
    ("every node, no class", "web", "all"),
    ("every node, gVisor (mixed)", "sandboxed", "all"),
)
SHAPE_BODIES = 4  # distinct shuffles per shape, rotated


def shape_requests(node_objects: list[dict[str, Any]], shape: str, seed: int = 1) -> list[bytes]:
    """Names-mode bodies of one of ``SHAPES`` on a ``cluster_gen.pool_nodes`` cluster."""
    _, pod_name, offered = next(entry for entry in SHAPES if entry[0] == shape)
    pod = next(pod for pod in cluster_gen.pods() if pod["metadata"]["labels"]["app"] == pod_name)
    names = [n["metadata"]["name"] for n in node_objects]
    if offered.startswith("pool"):
        names = [n["metadata"]["name"] for n in node_objects if cluster_gen.in_gvisor_pool(n)]
    size = num_feasible_nodes_to_find(len(node_objects)) if offered.endswith("sample") else len(names)
    rng = random.Random(f"{seed}:{shape}")
    bodies = []
    for _ in range(SHAPE_BODIES):
        order = names[:]
        rng.shuffle(order)
        bodies.append(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": order[:size]}))
    return bodies


def nodes_requests(node_objects: list[dict[str, Any]], count: int, seed: int = 1) -> list[bytes]:
    """Full-nodes bodies (nodeCacheCapable: false): Node objects with managedFields."""
    rng = random.Random(seed)
    bodies = []
    for i in range(count):
        pod = cluster_gen.pods()[i % len(cluster_gen.POD_MIX)]
        order = node_objects[:]
        rng.shuffle(order)
        # kube-scheduler sends the NodeList without kind/apiVersion, items with them stripped too.
        items = [{k: v for k, v in n.items() if k not in ("kind", "apiVersion")} for n in order]
        bodies.append(
            orjson.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})
        )
    return bodies


# --------------------------------------------------------------------------- in-process


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


STAGES = ("validate", "decide", "serialize")


def handler_path(
    state: Any, policy: Any, stages: dict[str, list[float]] | None = None
) -> Callable[[bytes], bytes]:
    """What ``extender.http.app.filter_handler`` does with a body, without the HTTP around it.

    With ``stages``, each call also appends the time of each step (validate the body,
    decide, serialise the answer): the profile of where the ratio comes from.
    """
    from extender.decision_cache import DecisionCache
    from extender.filtering import decide
    from extender.protocol import ExtenderArgs

    cache = DecisionCache(state)

    def handle(body: bytes) -> bytes:
        t0 = time.perf_counter()
        args = ExtenderArgs.model_validate_json(body)
        t1 = time.perf_counter()
        decision = decide(args, state, policy, cache=cache)
        t2 = time.perf_counter()
        out = decision.to_json()
        t3 = time.perf_counter()
        if stages is not None:
            for name, seconds in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                stages[name].append(seconds)
        return out

    return handle


def measure_inprocess(
    handle: Callable[[bytes], bytes],
    bodies: list[bytes],
    iterations: int,
    stages: dict[str, list[float]],
) -> dict[str, float]:
    # Warm-up: one call per distinct body, so the per-pod caches exist (steady state;
    # the cold cost is reported separately).
    responses = []
    cold: list[float] = []
    for body in bodies:
        t0 = time.perf_counter()
        responses.append(handle(body))
        cold.append(time.perf_counter() - t0)
    decoded = [orjson.loads(r) for r in responses]
    for times in stages.values():
        times.clear()
    ours: list[float] = []
    floor: list[float] = []
    loads: list[float] = []
    ratios: list[float] = []
    for i in range(iterations):
        body = bodies[i % len(bodies)]
        expected = decoded[i % len(bodies)]
        # Alternate which goes first so neither always pays for the other's garbage.
        if i % 2:
            t0 = time.perf_counter()
            handle(body)
            t1 = time.perf_counter()
            orjson.loads(body)
            orjson.dumps(expected)
            t2 = time.perf_counter()
            o, f = t1 - t0, t2 - t1
        else:
            t0 = time.perf_counter()
            orjson.loads(body)
            tl = time.perf_counter()
            orjson.dumps(expected)
            t1 = time.perf_counter()
            handle(body)
            t2 = time.perf_counter()
            f, o = t1 - t0, t2 - t1
            loads.append(tl - t0)
        ours.append(o)
        floor.append(f)
        ratios.append(o / f)
    return {
        "ours_p50_ms": percentile(ours, 50) * 1e3,
        "ours_p99_ms": percentile(ours, 99) * 1e3,
        "floor_p50_ms": percentile(floor, 50) * 1e3,
        "floor_p99_ms": percentile(floor, 99) * 1e3,
        # Median of per-call ratios: each pair ran back to back, under the same load.
        "ratio": statistics.median(ratios),
        "cold_max_ms": max(cold) * 1e3,
        "calls": iterations,
        # Where the time goes (medians): our three steps, and the floor's parse.
        **{f"{name}_p50_ms": percentile(times, 50) * 1e3 for name, times in stages.items()},
        "loads_p50_ms": percentile(loads, 50) * 1e3,
    }


# --------------------------------------------------------------------------- HTTP


def client_main(argv: Sequence[str]) -> int:
    """The load generator, run as its own process: keep-alive connections, like Go's client."""
    parser = argparse.ArgumentParser(prog="filter_bench.py --client")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--floor-port", type=int, help="also time the HTTP floor server, call for call")
    parser.add_argument("bodies", nargs="+")
    args = parser.parse_args(argv)
    bodies = [Path(p).read_bytes() for p in args.bodies]
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    # Per body, how many nodes our answer rejects: the floor server answers a failure
    # map of the same size (FLOOR_FAILURES_HEADER), so both send as many bytes.
    failures = [0] * len(bodies)

    def call(conn: http.client.HTTPConnection, body: bytes, extra: dict[str, str] | None = None) -> bytes:
        conn.request("POST", "/filter", body=body, headers={**headers, **(extra or {})})
        response = conn.getresponse()
        data = response.read()
        if response.status != 200 or b'"Error":""' not in data:
            raise SystemExit(f"bad answer: {response.status} {data[:200]!r}")
        return data

    def timed(conn: http.client.HTTPConnection, body: bytes, extra: dict[str, str] | None = None) -> float:
        t0 = time.perf_counter()
        call(conn, body, extra)
        return time.perf_counter() - t0

    def run(worker: int, calls: int, latencies: list[float], floor: list[float] | None = None) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
        floor_conn = (
            http.client.HTTPConnection("127.0.0.1", args.floor_port, timeout=60)
            if floor is not None
            else None
        )
        for i in range(calls):
            index = (i + worker) % len(bodies)
            latencies.append(timed(conn, bodies[index]))
            if floor_conn is not None and floor is not None:
                floor.append(timed(floor_conn, bodies[index], {FLOOR_FAILURES_HEADER: str(failures[index])}))
        conn.close()
        if floor_conn is not None:
            floor_conn.close()

    # Warm-up on one connection (first-call cache builds are not steady state), which
    # also learns the size of each answer's failure map.
    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
    for index, body in enumerate(bodies):
        answer = orjson.loads(call(conn, body))
        failures[index] = len(answer["FailedNodes"]) + len(answer["FailedAndUnresolvableNodes"])
    conn.close()
    if args.floor_port and args.concurrency == 1:
        # Sequential, alternating with the floor server so both see the same load.
        latencies: list[float] = []
        floor: list[float] = []
        t0 = time.perf_counter()
        run(0, args.calls, latencies, floor)
        wall = time.perf_counter() - t0
        print(
            json.dumps(
                {
                    "p50_ms": percentile(latencies, 50) * 1e3,
                    "p99_ms": percentile(latencies, 99) * 1e3,
                    "floor_p50_ms": percentile(floor, 50) * 1e3,
                    "floor_p99_ms": percentile(floor, 99) * 1e3,
                    "rps": len(latencies) / (wall - sum(floor)),
                    "calls": len(latencies),
                }
            )
        )
        return 0
    per_worker: list[list[float]] = [[] for _ in range(args.concurrency)]
    threads = [
        threading.Thread(target=run, args=(w, args.calls // args.concurrency, per_worker[w]))
        for w in range(args.concurrency)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    latencies = [x for worker in per_worker for x in worker]
    print(
        json.dumps(
            {
                "p50_ms": percentile(latencies, 50) * 1e3,
                "p99_ms": percentile(latencies, 99) * 1e3,
                "rps": len(latencies) / wall,
                "calls": len(latencies),
            }
        )
    )
    return 0


FLOOR_FAILURES_HEADER = "X-Floor-Failures"


def floor_server_main(argv: Sequence[str]) -> int:
    """The HTTP floor: the same aiohttp server and event loop, and a handler that only
    does the floor's work: orjson.loads of the request, orjson.dumps of an answer of the
    same shape and size, its failure map as large as ours (the client says how large in
    FLOOR_FAILURES_HEADER; built with one C-level dict.fromkeys). What it costs is
    transport and noise, not filtering."""
    import asyncio

    from aiohttp import web

    port = int(argv[0])
    reason = "node(s) didn't match RuntimeClass"

    async def handle(request: web.Request) -> web.Response:
        args = orjson.loads(await request.read())
        rejected = int(request.headers.get(FLOOR_FAILURES_HEADER, "0"))
        if args.get("NodeNames") is not None:
            names = args["NodeNames"]
            nodes, passing = None, names[rejected:]
        else:
            items = (args.get("Nodes") or {}).get("items") or []
            names = [item["metadata"]["name"] for item in items]
            nodes, passing = {"metadata": {}, "items": items[rejected:]}, None
        answer = {
            "Nodes": nodes,
            "NodeNames": passing,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": dict.fromkeys(names[:rejected], reason),
            "Error": "",
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def ready(request: web.Request) -> web.Response:
        return web.json_response({"status": "ready"})

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/filter", handle)
    app.router.add_get("/readyz", ready)
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    runner(web._run_app(app, host="127.0.0.1", port=port, access_log=None, print=None))
    return 0


def write_bodies(bodies: list[bytes], stem: str) -> list[Path]:
    """The request bodies as files under ``OUT`` (the HTTP client process reads them)."""
    paths = []
    for i, body in enumerate(bodies):
        path = OUT / f"request-{stem}-{i}.json"
        path.write_bytes(body)
        paths.append(path)
    return paths


class Server:
    """``runtimeclass-extender serve`` on a free loopback port."""

    def __init__(self, cluster_file: Path | None, *, code: Path | None = None) -> None:
        """The extender serving ``cluster_file``; None starts the HTTP floor server.
        ``code``: a checkout whose ``extender`` and ``policies`` to run instead of this
        one's (put first on PYTHONPATH; the installed dependencies are shared)."""
        self.port = free_port()
        if cluster_file is None:
            command = [sys.executable, __file__, "--floor-server", str(self.port)]
        else:
            command = [
                *serve_command(),
                "serve",
                "--cluster-file",
                str(cluster_file),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
            ]
        env = None if code is None else {**os.environ, "PYTHONPATH": str(code)}
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}"
                )
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become ready")

    def load(
        self, bodies: list[Path], calls: int, concurrency: int, floor: Server | None = None
    ) -> dict[str, float]:
        floor_args = ["--floor-port", str(floor.port)] if floor is not None else []
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--client",
                "--port",
                str(self.port),
                *floor_args,
                "--calls",
                str(calls),
                "--concurrency",
                str(concurrency),
                *map(str, bodies),
            ],
            check=True,
            capture_output=True,
        )
        result: dict[str, float] = json.loads(out.stdout)
        return result

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# --------------------------------------------------------------------------- driver


def machine() -> dict[str, Any]:
    cpu = cpu_model()
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "loadavg": os.getloadavg()[0],
        "event_loop": loop,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from extender.policy_file import load_policy

    OUT.mkdir(exist_ok=True)
    policy = load_policy(None)
    rows: list[dict[str, Any]] = []
    for size in args.sizes:
        sized: list[dict[str, Any]] = []
        cluster_file = None if args.shapes_only else measure_mixed(args, size, policy, sized)
        shapes = [] if args.mixed_only else measure_shapes(args, size, policy, sized)
        rows += sized
        if args.no_http:
            continue
        print(f"# {size} nodes: HTTP", file=sys.stderr, flush=True)
        floor_server = Server(None)
        try:
            if cluster_file is not None:
                measure_http(
                    args, cluster_file, [row for row in sized if row["cluster"] == "mixed"], floor_server
                )
            if shapes:
                measure_http(
                    args, shapes[0], [row for row in sized if row["cluster"] == "pools"], floor_server
                )
        finally:
            floor_server.stop()
    for row in rows:
        row.pop("body_files", None)
    return {"machine": machine(), "command": " ".join(["bench/filter_bench.py", *args.argv]), "rows": rows}


def measure_mixed(args: argparse.Namespace, size: int, policy: Any, rows: list[dict[str, Any]]) -> Path:
    """The rows on the mixed cluster (``cluster_gen.nodes``), in process; returns its file."""
    from extender.cluster.file_source import load_cluster_file

    print(f"# {size} nodes: generating", file=sys.stderr, flush=True)
    mix = len(cluster_gen.POD_MIX)
    node_objects = cluster_gen.nodes(size, args.seed)
    cluster_file = OUT / f"cluster-{size}.json"
    cluster_file.write_bytes(orjson.dumps(cluster_gen.cluster_list(node_objects)))
    state = load_cluster_file(cluster_file)
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    handle = handler_path(state, policy, stages)
    modes = ["names", "sample"] + (["nodes"] if size <= args.max_full_nodes else [])
    for mode in modes:
        print(f"# {size} nodes, {mode}: in-process", file=sys.stderr, flush=True)
        make = {"names": names_requests, "sample": sample_requests, "nodes": nodes_requests}[mode]
        bodies = make(node_objects, mix, args.seed)
        iterations = args.iterations if mode != "nodes" else max(mix, args.iterations * 500 // (size * 10))
        row: dict[str, Any] = {
            "nodes": size,
            "cluster": "mixed",
            "mode": mode,
            "request_mb": len(bodies[2]) / 1e6,
        }
        row.update(measure_inprocess(handle, bodies, iterations, stages))
        row["body_files"] = write_bodies(bodies, f"{mode}-{size}")
        rows.append(row)
        del bodies
        gc.collect()
    del state, handle, node_objects
    gc.collect()
    return cluster_file


def measure_http(
    args: argparse.Namespace, cluster_file: Path, rows: list[dict[str, Any]], floor: Server
) -> None:
    """The rows' HTTP columns from a server on ``cluster_file``: sequential calls, each
    alternating with the floor server, and (mixed cluster only) concurrent callers."""
    mix = len(cluster_gen.POD_MIX)
    server = Server(cluster_file)
    try:
        for row in rows:
            calls = (
                args.http_calls if row["mode"] != "nodes" else max(mix, args.http_calls * 50 // row["nodes"])
            )
            seq = server.load(row["body_files"], calls, 1, floor)
            row["http_p50_ms"], row["http_p99_ms"] = seq["p50_ms"], seq["p99_ms"]
            row["http_floor_p50_ms"], row["http_floor_p99_ms"] = seq["floor_p50_ms"], seq["floor_p99_ms"]
            row["http_seq_rps"] = seq["rps"]
            if row["cluster"] == "mixed":
                conc = server.load(row["body_files"], calls, args.concurrency)
                row["http_conc_rps"] = conc["rps"]
                row["http_conc_p99_ms"] = conc["p99_ms"]
        # After the full-nodes calls too: the RSS a server holding the cluster settles
        # at, and its peak while parsing the largest requests.
        mem = rss_mb(server.proc.pid)
        for row in rows:
            row["rss_mb"], row["rss_peak_mb"] = mem.get("VmRSS"), mem.get("VmHWM")
    finally:
        server.stop()


def measure_shapes(
    args: argparse.Namespace, size: int, policy: Any, rows: list[dict[str, Any]]
) -> list[Path]:
    """The ``SHAPES`` rows of one size, in process; returns the cluster file they use
    (in a list: empty when there are no such rows)."""
    from extender.cluster.file_source import load_cluster_file

    node_objects = cluster_gen.pool_nodes(size, args.seed)
    cluster_file = OUT / f"pools-{size}.json"
    cluster_file.write_bytes(orjson.dumps(cluster_gen.cluster_list(node_objects)))
    state = load_cluster_file(cluster_file)
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    handle = handler_path(state, policy, stages)
    for index, (shape, _, _) in enumerate(SHAPES):
        print(f"# {size} nodes, {shape}: in-process", file=sys.stderr, flush=True)
        bodies = shape_requests(node_objects, shape, args.seed)
        answer = orjson.loads(handle(bodies[0]))
        row: dict[str, Any] = {
            "nodes": size,
            "cluster": "pools",
            "mode": shape,
            "offered": len(orjson.loads(bodies[0])["NodeNames"]),
            "rejected": len(answer["FailedNodes"]) + len(answer["FailedAndUnresolvableNodes"]),
            "request_mb": len(bodies[0]) / 1e6,
        }
        row.update(measure_inprocess(handle, bodies, args.iterations, stages))
        row["body_files"] = write_bodies(bodies, f"shape{index}-{size}")
        rows.append(row)
    del state, handle, node_objects
    gc.collect()
    return [cluster_file]


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table(results: dict[str, Any]) -> str:
    columns = [
        ("nodes", lambda r: str(r["nodes"])),
        ("mode", lambda r: r["mode"]),
        ("request MB", lambda r: _fmt(r["request_mb"])),
        ("in-proc p50 ms", lambda r: _fmt(r["ours_p50_ms"], 3)),
        ("in-proc p99 ms", lambda r: _fmt(r["ours_p99_ms"], 3)),
        ("floor p50 ms", lambda r: _fmt(r["floor_p50_ms"], 3)),
        ("ratio", lambda r: _fmt(r["ratio"])),
        ("HTTP seq p50 ms", lambda r: _fmt(r.get("http_p50_ms"), 3)),
        ("HTTP seq p99 ms", lambda r: _fmt(r.get("http_p99_ms"), 3)),
        (
            "HTTP floor p50 / p99 ms",
            lambda r: f"{_fmt(r.get('http_floor_p50_ms'), 3)} / {_fmt(r.get('http_floor_p99_ms'), 3)}",
        ),
        ("HTTP conc req/s", lambda r: _fmt(r.get("http_conc_rps"), 0)),
        (
            "RSS MB (peak)",
            lambda r: (
                f"{_fmt(r.get('rss_mb'), 0)} ({_fmt(r.get('rss_peak_mb'), 0)})" if r.get("rss_mb") else "-"
            ),
        ),
    ]
    lines = [
        "| " + " | ".join(name for name, _ in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    mixed = [row for row in results["rows"] if row.get("cluster", "mixed") == "mixed"]
    for row in mixed:
        lines.append("| " + " | ".join(cell(row) for _, cell in columns) + " |")
    lines += [
        "",
        "In-process p50 by step, ms (ours: validate + decide + serialize; floor: orjson.loads + dumps):",
        "",
        "| nodes | mode | validate | decide | serialize | orjson.loads | orjson floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        cells = [r.get(f"{name}_p50_ms") for name in (*STAGES, "loads")] + [r["floor_p50_ms"]]
        lines.append(f"| {r['nodes']} | {r['mode']} | " + " | ".join(_fmt(c, 3) for c in cells) + " |")
    shapes = [row for row in results["rows"] if row.get("cluster") == "pools"]
    if shapes:
        lines += [
            "",
            "Call shapes (taint-free cluster, every other node in the gVisor pool):",
            "",
            *shape_table(shapes),
        ]
    return "\n".join(lines)


def _ratio(ours: float | None, floor: float | None) -> float | None:
    return ours / floor if ours is not None and floor else None


def shape_table(rows: list[dict[str, Any]]) -> list[str]:
    """The call-shape rows: HTTP against the floor server answering as many passing and
    rejected names, call for call (the ratios are what the targets are about)."""
    lines = [
        "| nodes | call | names offered | rejected | in-proc p50 ms | in-proc ratio "
        "| HTTP p50 / p99 ms | HTTP floor p50 / p99 ms | HTTP ratio p50 / p99 | RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        http = f"{_fmt(r.get('http_p50_ms'), 3)} / {_fmt(r.get('http_p99_ms'), 3)}"
        floor = f"{_fmt(r.get('http_floor_p50_ms'), 3)} / {_fmt(r.get('http_floor_p99_ms'), 3)}"
        p50 = _ratio(r.get("http_p50_ms"), r.get("http_floor_p50_ms"))
        p99 = _ratio(r.get("http_p99_ms"), r.get("http_floor_p99_ms"))
        cells = [
            str(r["nodes"]),
            r["mode"],
            str(r["offered"]),
            str(r["rejected"]),
            _fmt(r["ours_p50_ms"], 3),
            _fmt(r["ratio"]),
            http,
            floor,
            f"{_fmt(p50)} / {_fmt(p99)}",
            _fmt(r.get("rss_mb"), 0),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--client":
        return client_main(argv[1:])
    if argv and argv[0] == "--floor-server":
        return floor_server_main(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, few iterations (CI)")
    parser.add_argument("--sizes", type=int, nargs="+", help="cluster sizes (default 500 5000 15000)")
    parser.add_argument("--iterations", type=int, help="in-process names-mode calls per size")
    parser.add_argument("--http-calls", type=int, help="HTTP names-mode calls per size and load")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent HTTP callers")
    parser.add_argument("--max-full-nodes", type=int, help="largest size measured in full-nodes mode")
    parser.add_argument("--no-http", action="store_true", help="in-process only")
    parser.add_argument("--shapes-only", action="store_true", help="only the call-shape rows (SHAPES)")
    parser.add_argument("--mixed-only", action="store_true", help="only the mixed cluster's rows")
    parser.add_argument("--seed", type=int, default=585)
    parser.add_argument("--json", type=Path, default=OUT / "results.json", help="where to write the results")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.quick:
        args.sizes = args.sizes or [500, 5000]
        args.iterations = args.iterations or 100
        args.http_calls = args.http_calls or 200
        args.max_full_nodes = 500 if args.max_full_nodes is None else args.max_full_nodes
    else:
        args.sizes = args.sizes or [500, 5000, 15000]
        args.iterations = args.iterations or 1000
        args.http_calls = args.http_calls or 2000
        args.max_full_nodes = 5000 if args.max_full_nodes is None else args.max_full_nodes
    results = run(args)
    print(table(results))
    m = results["machine"]
    print(
        f"\n{m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, {m['event_loop']}, load {m['loadavg']:.1f}"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
