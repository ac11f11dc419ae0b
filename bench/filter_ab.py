"""Two versions of the extender over HTTP, call for call, each against the floor.

    .venv/bin/python bench/filter_ab.py --before 9c90b44                  # that commit against the working tree
    .venv/bin/python bench/filter_ab.py --before main --after HEAD --sizes 15000 --calls 600

What ``filter_bench.py`` measures for one version, for two at once, so that a change is
judged in one run rather than across two runs on a shared machine (whose speed moves
by more than most changes between one minute and the next). For each cluster size it
writes the call-shape cluster (``cluster_gen.pool_nodes``), starts ``serve`` from each
version (a git revision, checked out in a temporary worktree, or a directory; the
dependencies installed here are shared) and the floor server, then for each call shape
of ``filter_bench.SHAPES`` sends every body to both versions, alternating which goes
first, each call followed by the same call to the floor server. The two answers must
agree (passing names compared sorted), or it stops. It prints, per shape and version,
the p50 and p99 of the ratio's two sides (ours over the floor calls that followed it)
and our p50 in ms, and the server's CPU time per call (user and system, from
/proc/PID/stat around the timed calls) as a ratio to the floor server's: less moved by
the other processes of a shared machine than wall times are.

Timings on a shared machine: compare the two columns of one run, never turn them into
pass/fail checks.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import http.client
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import cluster_gen  # noqa: E402
import filter_bench  # noqa: E402
from filter_bench import percentile  # noqa: E402
from local import cpu_seconds  # noqa: E402


@contextlib.contextmanager
def checkout(version: str) -> Iterator[Path]:
    """``version`` as a directory: itself if it is one, else a temporary worktree."""
    if Path(version).is_dir():
        yield Path(version).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="filter-ab-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), version],
            check=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


class Caller:
    """One keep-alive connection per server; a call's wall time and answer."""

    def __init__(self, servers: dict[str, filter_bench.Server]) -> None:
        self.conns = {
            name: http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            for name, server in servers.items()
        }

    def __call__(self, name: str, body: bytes, rejected: int) -> tuple[float, bytes]:
        headers = {"Content-Type": "application/json", filter_bench.FLOOR_FAILURES_HEADER: str(rejected)}
        conn = self.conns[name]
        start = time.perf_counter()
        conn.request("POST", "/filter", body, headers)
        response = conn.getresponse()
        answer = response.read()
        elapsed = time.perf_counter() - start
        if response.status != 200:
            raise RuntimeError(f"{name}: HTTP {response.status}: {answer[:300]!r}")
        return elapsed, answer


def normalised(answer: bytes) -> dict[str, Any]:
    decoded: dict[str, Any] = orjson.loads(answer)
    decoded["NodeNames"] = sorted(decoded["NodeNames"] or [])
    return decoded


def compare(size: int, calls: int, trees: dict[str, Path]) -> list[str]:
    node_objects = cluster_gen.pool_nodes(size)
    cluster_file = filter_bench.OUT / f"pools-{size}.json"
    cluster_file.parent.mkdir(exist_ok=True)
    cluster_file.write_bytes(orjson.dumps(cluster_gen.cluster_list(node_objects)))
    servers = {name: filter_bench.Server(cluster_file, code=tree) for name, tree in trees.items()}
    servers["floor"] = filter_bench.Server(None)
    lines = []
    try:
        call = Caller(servers)
        versions = list(trees)
        for shape, _, _ in filter_bench.SHAPES:
            bodies = filter_bench.shape_requests(node_objects, shape)
            rejected = []
            for body in bodies:
                answers = [normalised(call(name, body, 0)[1]) for name in versions]
                if answers[0] != answers[1]:
                    raise SystemExit(f"{size} nodes, {shape}: the two versions answer differently")
                first = answers[0]
                rejected.append(len(first["FailedNodes"]) + len(first["FailedAndUnresolvableNodes"]))
            # What the client holds (the generated cluster) lives to the end: keep its own
            # collector from pausing inside timed calls.
            gc.collect()
            gc.freeze()
            times: dict[str, list[float]] = {name: [] for name in versions}
            floors: dict[str, list[float]] = {name: [] for name in versions}
            cpu_before = {name: cpu_seconds(server.proc.pid) for name, server in servers.items()}
            for i in range(calls):
                index = i % len(bodies)
                for name in versions if i % 2 else reversed(versions):
                    times[name].append(call(name, bodies[index], rejected[index])[0])
                    floors[name].append(call("floor", bodies[index], rejected[index])[0])
            # CPU per call: the floor answered the calls of both versions.
            cpu = {name: cpu_seconds(server.proc.pid) - cpu_before[name] for name, server in servers.items()}
            floor_cpu = cpu["floor"] / (calls * len(versions))
            cells = []
            for name in versions:
                p50 = percentile(times[name], 50) / percentile(floors[name], 50)
                p99 = percentile(times[name], 99) / percentile(floors[name], 99)
                ours = percentile(times[name], 50) * 1e3
                # CPU time comes in clock ticks (10 ms): a short run may see none.
                cpu_ratio = f"{cpu[name] / calls / floor_cpu:.2f}" if floor_cpu else "n/a"
                cells.append(f"{p50:.2f} / {p99:.2f} | {cpu_ratio} ({ours:.3f} ms)")
            lines.append(f"| {size} | {shape} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="a git revision or a directory")
    parser.add_argument(
        "--after", default=str(ROOT), help="a git revision or a directory (default: this tree)"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 15000])
    parser.add_argument("--calls", type=int, default=300, help="calls per shape and version")
    args = parser.parse_args()
    with checkout(args.before) as before, checkout(args.after) as after:
        print(
            f"before: {args.before}, after: {args.after}; per version: HTTP ratio to the floor"
            " p50 / p99, then server CPU per call as a ratio to the floor's (and our p50)"
        )
        print("| nodes | call | before p50 / p99 | before CPU | after p50 / p99 | after CPU |")
        print("|---|---|---|---|---|---|")
        for size in args.sizes:
            compare(size, args.calls, {"before": before, "after": after})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
