"""Per-name costs of a names-mode call where every name passes, in one process.

    .venv/bin/python bench/name_costs.py [NODES] [--cold]    # default 15000; a gVisor pod, its pool

Interleaved medians over 300 rounds, in ns per offered name: what the floor pays
(``orjson.loads`` of the request, ``orjson.dumps`` of the names), what validation adds,
and what answering adds (Python's hash of each fresh name string alone; the two ways of
checking the names against the entry's passing set: a probe per name, and a set of the
request against which the passing set is walked; and ``Entry.partition`` itself).

``--cold`` reads 16 MB before each timed step, so that it starts with the CPU caches
holding none of the entry's sets, as a call in a serving process does (the HTTP
server, the client and the other processes run in between): a hot loop flatters
whatever reads memory at random, and the two modes can rank the ways differently.
Timings on a shared machine: read them as proportions, never as pass/fail checks.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import cluster_gen  # noqa: E402


def main() -> int:
    from extender.cluster.file_source import load_cluster_file
    from extender.decision_cache import DecisionCache
    from extender.policy_file import load_policy
    from extender.protocol import ExtenderArgs

    numbers = [arg for arg in sys.argv[1:] if arg.isdigit()]
    size = int(numbers[0]) if numbers else 15000
    node_objects = cluster_gen.pool_nodes(size)
    path = HERE / "out" / f"pools-{size}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(orjson.dumps(cluster_gen.cluster_list(node_objects)))
    state = load_cluster_file(path)
    pod = next(p for p in cluster_gen.pods() if p["metadata"]["labels"]["app"] == "sandboxed")
    names = [n["metadata"]["name"] for n in node_objects if cluster_gen.in_gvisor_pool(n)]
    random.Random(1).shuffle(names)
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
    args = ExtenderArgs.model_validate_json(body)
    entry = DecisionCache(state).entry(
        load_policy(None), args.Pod.view(), state.runtime_classes.get("gvisor")
    )
    assert entry is not None
    steps: dict[str, Callable[[list[str]], Any]] = {
        "orjson.loads (request)": lambda _: orjson.loads(body),
        "orjson.dumps (names)": orjson.dumps,
        "model_validate_json (request)": lambda _: ExtenderArgs.model_validate_json(body),
        "hash of each name": lambda fresh: list(map(hash, fresh)),
        "probe each name into the passing set": lambda fresh: entry.fitting.issuperset(fresh),
        "set of the request, passing set walked": lambda fresh: set(fresh).difference_update(entry.fitting),
        "Entry.partition": entry.partition,
    }
    cold = "--cold" in sys.argv[1:]
    evict = bytes(16 << 20)
    times: dict[str, list[float]] = {step: [] for step in steps}
    for _ in range(300):
        for step, run in steps.items():
            fresh = orjson.loads(body)["NodeNames"]  # new strings, as every request's
            if cold:
                evict.count(b"x")  # reads it all: the caches now hold none of the entry
            t0 = time.perf_counter()
            run(fresh)
            times[step].append(time.perf_counter() - t0)
    mode = "cold" if cold else "hot"
    print(f"{size} nodes, {len(names)} names offered, every one passing, {mode}; ns per name (median):")
    for step, values in times.items():
        print(f"  {step:36s} {statistics.median(values) * 1e9 / len(names):7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
