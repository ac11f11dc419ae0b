"""CLI start-up benchmark: how long the commands take before doing any work.

    .venv/bin/python bench/cli_startup.py              # 15 runs of each invocation
    .venv/bin/python bench/cli_startup.py --runs 30

Runs each invocation as a fresh process (as a shell would: the installed console
scripts, so the entry-point wrappers count), and prints min, median and max wall time,
with the bare interpreter (``python -c pass``) as the floor. Target (issue 20):
``--version`` and ``--help`` under 0.2 s. Timings on a shared machine vary from run to
run: read the medians, compare against the floor of the same run, never turn them into
pass/fail checks.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
EXAMPLE_CLUSTER = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "cluster.yaml"

INVOCATIONS = {
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "runtimeclass-extender --version": [str(BIN / "runtimeclass-extender"), "--version"],
    "runtimeclass-extender --help": [str(BIN / "runtimeclass-extender"), "--help"],
    "runtimeclass-extender serve --help": [str(BIN / "runtimeclass-extender"), "serve", "--help"],
    "kubectl-runtimeclass --help": [str(BIN / "kubectl-runtimeclass"), "--help"],
    # A command that works: it loads what it needs (for comparison, no target).
    "runtimeclass-extender classes --cluster-file": [
        str(BIN / "runtimeclass-extender"),
        "classes",
        "--cluster-file",
        str(EXAMPLE_CLUSTER),
    ],
}


def time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of each invocation (default 15)")
    args = parser.parse_args()
    width = max(len(name) for name in INVOCATIONS)
    print(f"{'invocation':<{width}}   min      median   max     (seconds, {args.runs} runs)")
    for name, argv in INVOCATIONS.items():
        time_once(argv)  # warm the file cache
        times = sorted(time_once(argv) for _ in range(args.runs))
        print(f"{name:<{width}}   {times[0]:.3f}    {statistics.median(times):.3f}    {times[-1]:.3f}")


if __name__ == "__main__":
    main()
