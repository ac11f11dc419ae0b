"""How long the admission webhook takes to review a RuntimeClass, by cluster size.

    .venv/bin/python bench/admission_bench.py                 # 500 and 5,000 nodes
    .venv/bin/python bench/admission_bench.py --nodes 15000 --rounds 200

The review answers from the watch cache only, so its cost is the check of one class
against every node (selector, taints, runtime handlers) plus decoding the review. The
API server waits for it on every RuntimeClass create and update (timeoutSeconds: 5 in
deploy/components/admission-webhook). Each round reviews every RuntimeClass of the
generated cluster (bench/cluster_gen.py) once, as a CREATE, through the same function
the HTTP handler calls; printed: p50/p99/max per review, in-process (no HTTP).

Numbers on a shared machine: compare within one run, never as pass/fail checks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import orjson

# Run as a script: the review builder is the tests' (tests/support/admission.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_gen import RUNTIME_CLASSES, cluster_list, nodes  # bench/, beside this script
from local import cpu_model

from extender.admission import review
from extender.cluster.file_source import parse_cluster
from extender.cluster.state import ClusterState
from tests.support.admission import body, request


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
    samples.sort()
    return {
        "p50": statistics.median(samples),
        "p99": samples[int(len(samples) * 0.99) - 1],
        "max": samples[-1],
        "reviews": len(samples),
        "warned": results.count("warned"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    print("| nodes | reviews | warned | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for count in args.nodes:
        r = measure(count, args.rounds)
        print(
            f"| {count} | {r['reviews']:.0f} | {r['warned']:.0f} | {r['p50']:.3f} | {r['p99']:.3f} "
            f"| {r['max']:.3f} |"
        )
    print(f"\n{cpu_model()}")


if __name__ == "__main__":
    main()
