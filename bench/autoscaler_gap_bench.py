"""The registration gap: a new node without its RuntimeClass label, and what cluster-autoscaler does in it.

    .venv/bin/python bench/autoscaler_gap_bench.py                       # 2,000 nodes relabelled
    .venv/bin/python bench/autoscaler_gap_bench.py --nodes 5000 --ready-after 10
    .venv/bin/python bench/autoscaler_gap_bench.py --arms none --json gap.json

A cloud node registers through its kubelet, which cannot set labels under
``node-restriction.kubernetes.io/``: a new node of a RuntimeClass's node group arrives
without the class's derived label, and the leader adds it when its write's turn comes.
Here that turn comes late on purpose: ``--nodes`` nodes of another class (cordoned:
nothing lands there) are relabelled by an edit of that class just before the pending pod
asks for a node, so the new node's write waits behind theirs at the labeller's rate
(``--rate``, 100 a second by default, as shipped). The node turns Ready ``--ready-after``
seconds after it appears (0: at once, as the kwok provider's nodes; a cloud node's kubelet
takes tens of seconds).

Needs the control plane binaries with kube-scheduler and cluster-autoscaler (kwok
provider) in ``KUBEBUILDER_ASSETS`` (tests/support/autoscaler.py). One kube-apiserver 1.36
as predicate mode runs it, predicate mode with the node labels (overlays/predicate-mode and components/label-nodes) installed with its extender as its own
ServiceAccount, its kube-scheduler, and cluster-autoscaler (``--scan-interval=5s``) with
two node groups, ``gvisor`` (its template labelled as ``node-template`` says) and
``plain``. Per arm, one pending pod of class gvisor:

- ``taint``: the group's nodes register with the startup taint
  (``startup-taint.cluster-autoscaler.kubernetes.io/runtimeclass-labels``), which the
  labeller removes in the write that labels the node;
- ``none``: without it.

Reported per arm: the gap (the node Ready to its label), the scale-ups cluster-autoscaler
made (``gvisor 0->1`` is the one needed; each more is a node nobody asked for), and when
the pod was bound, in seconds after the autoscaler started. Numbers on a shared machine:
the gap follows the backlog and the rate; the scale-ups are what the autoscaler decided.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local import cpu_model

from extender.settings import DEFAULT_STARTUP_TAINT
from tests.support.autoscaler import (
    Registration,
    autoscaling,
    node_of,
    restricted_label_stripping,
    scheduler_configuration,
    start_scheduler,
    template,
)
from tests.support.control_plane import ControlPlane, find_assets
from tests.support.install import install
from tests.support.manifests import PREDICATE_LABELS, render
from tests.support.waiting import wait_for

Manifest = dict[str, Any]
ARMS = ("taint", "none")
NAMESPACE = "bench"
LABEL = "runtimeclass.node-restriction.kubernetes.io/gvisor"
SELECTOR = {"runtime/gvisor": "true"}


def runtime_class(name: str, selector: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": "runsc",
        "scheduling": {"nodeSelector": selector},
    }


def load_nodes(plane: ControlPlane, count: int) -> None:
    """``count`` cordoned nodes that RuntimeClass kata will select once edited."""

    def create(i: int) -> None:
        plane.client.request(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"load-{i:05d}", "labels": {"pool": "load"}},
                "spec": {"unschedulable": True},
            },
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))


def metric(text: str, name: str) -> float:
    """One sample of the extender's /metrics (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def arm(plane: ControlPlane, name: str, args: argparse.Namespace) -> Manifest:
    """One pending pod, the relabel of every load node under way, the autoscaler started."""
    taint = name == "taint"
    registration = Registration(
        plane, startup_taint=DEFAULT_STARTUP_TAINT if taint else None, ready_after=args.ready_after
    ).start()
    pod = f"sandboxed-{name}"
    try:
        plane.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": NAMESPACE},
                "spec": {
                    "runtimeClassName": "gvisor",
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                },
            }
        )
        wait_for(
            lambda: any(
                c.get("reason") == "Unschedulable"
                for c in plane.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}")["status"].get(
                    "conditions", []
                )
            ),
            timeout=60,
            what="the pod unschedulable",
        )
        # The relabel: kata's selector flips between the load nodes' pool and none, so
        # every load node's label is written (removed, or added back): --nodes writes.
        current = plane.client.get("/apis/node.k8s.io/v1/runtimeclasses/kata")["scheduling"]["nodeSelector"]
        plane.apply(runtime_class("kata", {"pool": "elsewhere" if current["pool"] == "load" else "load"}))
        taints = [{"key": DEFAULT_STARTUP_TAINT, "effect": "NoSchedule"}] if taint else []
        gvisor = template("gvisor", labels={**SELECTOR, LABEL: "true"}, taints=taints, max_count=10)
        with autoscaling(plane, [gvisor, template("plain")]) as scaler:
            bound = wait_for(
                lambda: node_of(plane, NAMESPACE, pod), timeout=args.timeout, what="the pod bound"
            )
            seconds = time.monotonic() - scaler.started
            # Let it scan a little longer: a scale-up decided late shows up here.
            time.sleep(args.linger)
            made = registration.made()
            gaps = [a.labelled - a.ready for a in made if a.labelled is not None and a.ready is not None]
            return {
                "arm": name,
                "scaleUps": [f"{g} {a}->{b}" for g, a, b in scaler.scale_ups()],
                "nodesMade": len(made),
                "gapSeconds": [round(g, 1) for g in gaps],
                "boundTo": bound,
                "boundAfterSeconds": round(seconds, 1),
            }
    finally:
        registration.stop()
        plane.client.request(
            "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}", query={"gracePeriodSeconds": "0"}
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=2000, help="nodes of another class relabelled meanwhile")
    parser.add_argument("--rate", type=float, default=100.0, help="the labeller's writes per second")
    parser.add_argument("--ready-after", type=float, default=0.0, help="seconds from a new node to Ready")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the pod's binding")
    parser.add_argument("--linger", type=float, default=15.0, help="seconds to keep watching after it")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    assets = find_assets()
    if (
        assets is None
        or assets.binary("cluster-autoscaler") is None
        or assets.binary("kube-scheduler") is None
    ):
        print("needs KUBEBUILDER_ASSETS with kube-apiserver, etcd, kube-scheduler and cluster-autoscaler")
        return 2
    results = []
    with ControlPlane(assets, apiserver_flags={"--disable-admission-plugins": "RuntimeClass"}) as plane:
        plane.apply_all(restricted_label_stripping())
        plane.apply(runtime_class("gvisor", SELECTOR))
        plane.apply(runtime_class("kata", {"pool": "load"}))
        plane.ensure_namespace(NAMESPACE)
        plane.add_ready_node("plain-a", cpu="8")
        started = time.monotonic()
        load_nodes(plane, args.nodes)
        print(f"{args.nodes} load nodes created in {time.monotonic() - started:.0f} s", flush=True)
        docs = render(PREDICATE_LABELS)
        done = install(plane, docs, extra_flags=[f"--label-nodes-rate={args.rate:g}"])
        extender = done.extender
        wait_for(
            lambda: metric(extender.metrics(), "runtimeclass_extender_node_labels_added_total") >= args.nodes,
            timeout=args.nodes / args.rate * 3 + 60,
            what="the load nodes labelled",
        )
        scheduler = start_scheduler(
            plane, scheduler_configuration(docs), namespace=done.namespace, extender_port=done.extender.port
        )
        try:
            for name in args.arms:
                wait_for(
                    lambda: (
                        metric(extender.metrics(), "runtimeclass_extender_node_label_writes_pending") == 0
                    ),
                    timeout=args.nodes / args.rate * 3 + 60,
                    what="the last relabel done",
                )
                result = arm(plane, name, args)
                results.append(result)
                print(json.dumps(result), flush=True)
        finally:
            scheduler.stop()
    print()
    print(
        f"cpu: {cpu_model()}; {args.nodes} nodes relabelled at {args.rate:g}/s; Ready {args.ready_after:g} s after"
    )
    print(f"{'arm':6} {'scale-ups':28} {'nodes made':>10} {'gap (s)':>12} {'bound after (s)':>16}")
    for r in results:
        print(
            f"{r['arm']:6} {', '.join(r['scaleUps']):28} {r['nodesMade']:>10} "
            f"{','.join(str(g) for g in r['gapSeconds']):>12} {r['boundAfterSeconds']:>16}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
