"""What holding cluster files to the API server's rules costs when loading them.

    .venv/bin/python bench/cluster_file_bench.py                  # 5,000 and 15,000 nodes
    .venv/bin/python bench/cluster_file_bench.py --nodes 500 --rounds 5

A cluster file's objects are checked (``extender.cluster.validation``: unknown fields,
enums, label and DNS syntax) after they are parsed. The file is generated
(bench/cluster_gen.py: full Node objects with managedFields, a dozen labels and the
usual taints, and its RuntimeClasses) and parsed from its JSON text by
``parse_cluster``, the function behind every ``--cluster-file``; printed per size: the
median seconds to parse it with the checks, without them (the same parse with the check
replaced by one returning nothing), and the checks' share. The watch never runs the
checks (objects from the API server are valid), so this cost is paid only by files.

Numbers on a shared machine: compare within one run, never as pass/fail checks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_gen import cluster_list, nodes  # bench/, beside this script
from local import cpu_model

from extender.cluster import file_source
from extender.cluster.validation import object_problems


def _no_checks(obj: Any, memo: Any = None) -> list[Any]:
    return []


def _seconds(text: str) -> float:
    start = time.perf_counter()
    file_source.parse_cluster(text)
    return time.perf_counter() - start


def measure(node_count: int, rounds: int) -> dict[str, float]:
    text = orjson.dumps(cluster_list(nodes(node_count))).decode()
    checked: list[float] = []
    unchecked: list[float] = []
    # Alternated, so both see the same machine load and the same heap.
    for _ in range(rounds):
        checked.append(_seconds(text))
        file_source.object_problems = _no_checks  # type: ignore[attr-defined]
        try:
            unchecked.append(_seconds(text))
        finally:
            file_source.object_problems = object_problems  # type: ignore[attr-defined]
    return {
        "checked": statistics.median(checked),
        "unchecked": statistics.median(unchecked),
        "mb": len(text) / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, action="append", help="cluster sizes (default: 5000 and 15000)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"cpu: {cpu_model()}")
    for count in args.nodes or [5000, 15000]:
        r = measure(count, args.rounds)
        share = (r["checked"] - r["unchecked"]) / r["unchecked"] * 100
        print(
            f"{count:>6} nodes ({r['mb']:.1f} MB): parse with checks {r['checked']:.3f} s, "
            f"without {r['unchecked']:.3f} s, checks +{share:.0f}%"
        )


if __name__ == "__main__":
    main()
