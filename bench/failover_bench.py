"""Failover: time from the leader's stop to the first nudge by the new leader.

    .venv/bin/python bench/failover_bench.py                       # kube-scheduler's durations (15/10/2 s)
    .venv/bin/python bench/failover_bench.py --lease 1 --renew 0.6 --retry 0.1 --trials 5

Runs on 127.0.0.1 only: the test API server (tests/support/apiserver), two replicas of
the extender's requeuer with leader election, each over its own API connection through
a TCP proxy (tests/support/replicas.py), exactly as ``serve --leader-elect
--requeue-pending-pods`` wires them. Each trial: 200 pending pods, a RuntimeClass
change, the leader patching at the production rate (20/s) and, once it has nudged a
few, stopped in one of two ways:

* ``released``: a graceful stop (SIGTERM, a rolling update, a drain): the leader drains
  its queue for up to ``drain_timeout`` (5 s), stops acting, and releases the Lease;
  the other replica takes it at its next retry;
* ``cut-off``: the leader loses the API server (its connection black-holed: requests
  hang): it stops acting within the renew deadline, and the other replica takes the
  Lease once it has seen no renewal for the lease duration.

Printed per mode: from the stop to the new leader's first nudge, and the gap in
nudges (the old leader's last applied nudge to the new leader's first), min / median /
max over the trials. Every pod must be nudged exactly once per trial (exit 1 if not).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from extender.leader.gate import ElectionOptions
from extender.requeue.requeuer import RequeueOptions
from tests.support.apiserver import PODS, RUNTIME_CLASSES, FakeApiServer, make_pod, make_runtime_class
from tests.support.replicas import FAST_REFLECTOR, SCHED, Replica, nudges, start_replica

SENT = "runtimeclass_extender_requeue_nudges_sent_total"
PODS_PER_TRIAL = 200


async def _until(condition: object, timeout: float, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


async def trial(mode: str, election: ElectionOptions, number: int) -> tuple[float, float]:
    server = FakeApiServer()
    await server.start()
    started: list[Replica] = []
    try:
        with tempfile.TemporaryDirectory() as directory:
            # The production requeue settings, test-speed reflector reconnects.
            options = replace(RequeueOptions(scheduler_names=(SCHED,)), reflector=FAST_REFLECTOR)
            for i in range(PODS_PER_TRIAL):
                server.add(PODS, make_pod(f"p{i:03}", runtime_class="gvisor", scheduler_name=SCHED))
            wait = election.lease_duration * 3 + 30
            first = await start_replica(
                server, Path(directory), f"a{number}", requeue=options, election=election
            )
            started.append(first)
            await _until(lambda: first.leading, wait, "a leader")
            second = await start_replica(
                server, Path(directory), f"b{number}", requeue=options, election=election
            )
            started.append(second)
            await _until(lambda: second.synced() and second.gate.holder == first.gate.identity, wait, "b")
            server.add(RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc"))
            await _until(lambda: first.metric(SENT) >= 10, wait, "the first nudges")
            stopped_at = time.monotonic()
            if mode == "released":
                await first.stop()
            else:
                first.proxy.blackhole()
            old_last = time.monotonic()
            seen = first.metric(SENT)
            while second.metric(SENT) < 1:
                if first.metric(SENT) != seen:
                    seen, old_last = first.metric(SENT), time.monotonic()
                if time.monotonic() - stopped_at > wait:
                    raise TimeoutError("the new leader never nudged")
                await asyncio.sleep(0.001)
            first_new = time.monotonic()
            await _until(lambda: len(nudges(server)) == PODS_PER_TRIAL, wait + PODS_PER_TRIAL, "every pod")
            counts = [len(v) for v in nudges(server).values()]
            if any(c != 1 for c in counts):
                raise AssertionError(f"a pod was nudged more than once: {sorted(counts)[-5:]}")
            return first_new - stopped_at, first_new - old_last
    finally:
        for replica in started:
            replica.proxy.restore()
            await replica.stop()
        await server.stop()


def _summary(values: list[float]) -> str:
    return f"min {min(values):.3f} s, median {statistics.median(values):.3f} s, max {max(values):.3f} s"


async def run(args: argparse.Namespace) -> int:
    election = ElectionOptions(
        lease_name="runtimeclass-extender",
        namespace="runtimeclass-extender",
        lease_duration=args.lease,
        renew_deadline=args.renew,
        retry_period=args.retry,
    )
    print(
        f"lease {args.lease:g} s, renew deadline {args.renew:g} s, retry {args.retry:g} s; "
        f"{PODS_PER_TRIAL} pending pods, requeue rate 20/s; {args.trials} trial(s) per mode"
    )
    for mode in ("released", "cut-off"):
        to_first, gaps = [], []
        for number in range(args.trials):
            since_stop, gap = await trial(mode, election, number)
            to_first.append(since_stop)
            gaps.append(gap)
        print(f"{mode:9} stop -> new leader's first nudge: {_summary(to_first)}")
        print(f"{'':9} gap without nudges:               {_summary(gaps)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lease", type=float, default=15.0, help="lease duration, seconds (default 15)")
    parser.add_argument("--renew", type=float, default=10.0, help="renew deadline, seconds (default 10)")
    parser.add_argument("--retry", type=float, default=2.0, help="retry period, seconds (default 2)")
    parser.add_argument("--trials", type=int, default=3, help="trials per mode (default 3)")
    # The cut-off leader's failed Lease reads are expected here, not news.
    logging.getLogger("kubernetes_asyncio").setLevel(logging.CRITICAL)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
