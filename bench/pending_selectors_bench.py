"""Pending pods: what the converter keeps of pods that are gone, and what alike pods cost.

    .venv/bin/python bench/pending_selectors_bench.py --before /tmp/before     # both trees
    .venv/bin/python bench/pending_selectors_bench.py --rounds 10 --pods 2000

The informer of pending pods (extender/cluster/pending_pods.py) decodes every pod event
through one converter, which shares alike nodeSelectors (and sets of required derived
labels) between pods. This runs, through the real converter and store
(``PendingPods``), ``--rounds`` rounds of ``--pods`` pods with a nodeSelector of their
own each (every other pod naming a RuntimeClass, those requiring its derived label),
each round created (ADDED events) and then deleted (bound), and prints after each
round what is left that nobody needs: the selector sets still alive (counted by the
garbage collector, whoever holds them) and the bytes still allocated since the start
(tracemalloc, after a full collection). Then ``--alike`` pending pods of one class with
one selector, held: the bytes each costs, which the sharing keeps low.

With ``--before TREE`` (a directory such as ``git worktree add /tmp/before HEAD``,
or a git revision, checked out in a temporary worktree) the same runs in a process
importing ``extender`` from that tree, then in one importing this one.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PREFIX = "runtimeclass.node-restriction.kubernetes.io"
ROUND_KEY = "bench.runtimeclass-extender.dev/round"


def pod_object(name: str, runtime_class: str | None, selector: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "runtimeclass-scheduler",
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        "nodeSelector": selector,
    }
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": spec,
    }


def selectors_alive() -> int:
    return sum(
        1
        for obj in gc.get_objects()
        if type(obj) is frozenset
        and any(isinstance(item, tuple) and item[:1] == (ROUND_KEY,) for item in obj)
    )


def retained() -> int:
    gc.collect()
    return sum(stat.size for stat in tracemalloc.take_snapshot().statistics("filename"))


def worker(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(args.tree))
    import extender
    from extender.cluster.pending_pods import PendingPods, pending_pod_converter

    assert Path(extender.__file__ or "").resolve().is_relative_to(Path(args.tree).resolve()), (
        extender.__file__
    )
    convert = pending_pod_converter(PREFIX)
    store = PendingPods()
    label = {f"{PREFIX}/gvisor": "true"}
    tracemalloc.start()
    start = retained()
    rounds = []
    for round_ in range(args.rounds):
        names = []
        for i in range(args.pods):
            name = f"p-{round_}-{i}"
            runtime_class = "gvisor" if i % 2 else None
            selector = {ROUND_KEY: f"{round_}-{i}", **(label if runtime_class else {})}
            store.upsert(convert(pod_object(name, runtime_class, selector)))
            names.append(f"default/{name}")
        for name in names:
            store.delete(name)
        rounds.append({"selectors": selectors_alive(), "bytes": retained() - start})
    before_alike = retained()
    for i in range(args.alike):
        store.upsert(convert(pod_object(f"alike-{i}", "gvisor", {"pool": "sandbox", **label})))
    per_pod = (retained() - before_alike) / max(1, args.alike)
    tracemalloc.stop()
    return {"rounds": rounds, "alike_bytes_per_pod": per_pod}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pods", type=int, default=1000, help="per round, each with a selector of its own")
    parser.add_argument("--alike", type=int, default=10000, help="pods of one class and one selector, held")
    parser.add_argument("--before", help="a directory (a worktree) or a git revision, measured as before")
    parser.add_argument("--after", help="the same, measured as after (default: this tree)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.tree = Path(args.worker)
        print(json.dumps(worker(args)), flush=True)
        return 0

    sys.path.insert(0, str(HERE))
    from filter_ab import checkout

    results: dict[str, dict[str, Any]] = {}
    with (
        checkout(args.before) if args.before else _nothing() as before,
        checkout(args.after) if args.after else _nothing() as after,
    ):
        trees = {"after": after or ROOT} if before is None else {"before": before, "after": after or ROOT}
        for version, tree in trees.items():
            command = [
                sys.executable,
                __file__,
                "--worker",
                str(tree),
                *("--rounds", str(args.rounds), "--pods", str(args.pods), "--alike", str(args.alike)),
            ]
            out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=tree)
            results[version] = json.loads(out.stdout.splitlines()[-1])
    print(
        f"{args.rounds} rounds of {args.pods} pods with a selector of their own (half naming a class), "
        "each created and deleted; then "
        f"{args.alike} alike pods held"
    )
    print("version   " + "  ".join(f"round {r + 1:<13}" for r in range(args.rounds)) + "  alike pods")
    for version, result in results.items():
        cells = "  ".join(f"{r['selectors']:>5} {r['bytes'] / 2**20:>6.2f} MiB" for r in result["rounds"])
        print(f"{version:<9} {cells}  {result['alike_bytes_per_pod']:.0f} B/pod")
    print("(each round: selector sets still alive, bytes still allocated since the start)")
    return 0


class _nothing:
    def __enter__(self) -> Path | None:
        return None

    def __exit__(self, *_exc: object) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())
