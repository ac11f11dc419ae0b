"""Pod creation through a real kube-apiserver: pod admission by policies, by the webhook, or none.

    .venv/bin/python bench/pod_admission_bench.py                        # 1, 3, 20, 100 classes
    .venv/bin/python bench/pod_admission_bench.py --classes 20 --rounds 5 --pods 600
    .venv/bin/python bench/pod_admission_bench.py --json results.json

Needs the control plane binaries (``KUBEBUILDER_ASSETS``, as tests/real/ finds them:
docs/development.md, "The real control plane"). For each number of RuntimeClasses, one
kube-apiserver 1.36 (and etcd) as predicate mode runs it (RuntimeClass admission off),
with ``overlays/large-cluster`` installed both ways at once (its pod admission policies
and components/pod-webhook, as the chart's ``podAdmission.mode: both``) and its
extender running as its own ServiceAccount, keeping the policies' table, its webhook
certificate and the node labels, in every arm. Each class has an overhead and a node
selector (so its pods get the overhead and the node label). The arms switch what admits
pods by creating and deleting bindings and the webhook configuration, and each is
checked with a probe pod before it is measured:

- ``none``: neither the policies' bindings nor the webhook configuration: what creating
  a pod costs the server without admission of ours;
- ``webhook``: the pod webhook alone (the webhook configuration as the extender keeps
  it, its caBundle set), answered by the extender's admission listener bound on the
  webhook Service's ClusterIP, as a pod behind kube-proxy is reached;
- ``policies``: the MutatingAdmissionPolicy and ValidatingAdmissionPolicy as shipped,
  reading the table;
- ``floor``: one MutatingAdmissionPolicy of the same shape as the shipped one (the same
  match, the same param, evaluated for the same pods) whose patch only routes: what the
  API server's own work of invoking one mutating policy that changes the pod costs.

Rounds alternate the arms in a rotating order, so that every arm sees the same machine.
In each arm-round, for pods that name a class (each class in turn) and pods that name
none: ``--pods`` created one after another by one client (latency p50 and p99, from the
POST to the whole answer read), then ``--pods`` by ``--threads`` clients at once (pods
per second, and the API server's CPU per pod from /proc). Every created pod is checked
(routed, its class's overhead and node label where the arm admits it; untouched in
``none``), so an arm that admits wrongly fails instead of reporting a time. Pods are
deleted between arm-rounds (not timed). Numbers on a shared machine: compare arms
within one run, never as pass/fail checks.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local import cpu_model  # noqa: E402

from extender.admission.pod_table import API_VERSION, PLURAL  # noqa: E402
from extender.cluster.class_labels import label_key  # noqa: E402
from extender.settings import DEFAULT_NODE_LABEL_PREFIX  # noqa: E402
from tests.support.control_plane import ControlPlane, find_assets  # noqa: E402
from tests.support.install import install  # noqa: E402
from tests.support.manifests import render  # noqa: E402

Manifest = dict[str, Any]
ARMS = ("none", "webhook", "policies", "floor")
KINDS = ("class", "no-class")
NAMESPACE = "bench"
SCHEDULER = "runtimeclass-scheduler"
POD_ADMISSION = "runtimeclass-extender-pod-admission"
FLOOR = "runtimeclass-extender-pod-admission-floor"
WEBHOOK = "runtimeclass-extender"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
OVERHEAD = {"cpu": "250m", "memory": "64Mi"}


def runtime_classes(count: int) -> list[Manifest]:
    return [
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": f"sandbox-{i}"},
            "handler": "runsc",
            "overhead": {"podFixed": dict(OVERHEAD)},
            "scheduling": {"nodeSelector": {f"sandbox.example/class-{i}": "true"}},
        }
        for i in range(count)
    ]


def pod_body(runtime_class: str | None) -> bytes:
    """A pod as a ReplicaSet controller creates it: generateName, no scheduler, no overhead."""
    spec: Manifest = {
        "containers": [
            {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "10m"}}}
        ]
    }
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "bench-", "namespace": NAMESPACE},
        "spec": spec,
    }
    return json.dumps(pod).encode()


def floor_policy(policy: Manifest, binding: Manifest) -> list[Manifest]:
    """The shipped mutating policy's shape (match, param, reinvocation) with a patch that
    only routes: one constant operation, no variables."""
    floor = copy.deepcopy(policy)
    floor["metadata"] = {"name": FLOOR}
    floor["spec"]["variables"] = []
    floor["spec"]["mutations"] = [
        {
            "patchType": "JSONPatch",
            "jsonPatch": {
                "expression": f"[JSONPatch{{op: 'add', path: '/spec/schedulerName', value: '{SCHEDULER}'}}]"
            },
        }
    ]
    floor_binding = copy.deepcopy(binding)
    floor_binding["metadata"] = {"name": FLOOR}
    floor_binding["spec"]["policyName"] = FLOOR
    return [floor, floor_binding]


class Bench:
    def __init__(self, plane: ControlPlane, classes: list[Manifest]) -> None:
        self.plane = plane
        self.classes = [rc["metadata"]["name"] for rc in classes]
        self.apiserver_pid = next(p for p in plane.processes if p.name == "kube-apiserver").popen.pid
        plane.ensure_namespace(NAMESPACE)
        plane.apply_all(classes)
        docs = render("overlays/large-cluster", "components/pod-webhook")
        self.installed = install(plane, docs, on_service_address=True)
        self._wait(self._table_written, "the table written")
        self._wait(self._ca_bundle_set, "the webhook's caBundle set")
        self.webhook = self._get(f"{WEBHOOKS}/{WEBHOOK}")
        for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
            self.webhook["metadata"].pop(key, None)
        self.bindings = [
            self._one(docs, "MutatingAdmissionPolicyBinding", POD_ADMISSION),
            self._one(docs, "ValidatingAdmissionPolicyBinding", POD_ADMISSION),
        ]
        self.floor = floor_policy(self._one(docs, "MutatingAdmissionPolicy", POD_ADMISSION), self.bindings[0])
        self.labels = {name: label_key(DEFAULT_NODE_LABEL_PREFIX, name) for name in self.classes}
        self.arm = "both"

    # -- the cluster ------------------------------------------------------------------

    @staticmethod
    def _one(docs: Sequence[Manifest], kind: str, name: str) -> Manifest:
        (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
        return copy.deepcopy(found)

    def _get(self, path: str) -> Manifest:
        return self.plane.client.get(path)

    def _table_written(self) -> bool:
        answer = self.plane.client.request("GET", f"/apis/{API_VERSION}/{PLURAL}/runtimeclass-extender")
        return answer.ok and len((answer.body.get("spec") or {}).get("runtimeClasses") or {}) == len(
            self.classes
        )

    def _ca_bundle_set(self) -> bool:
        webhook = self._get(f"{WEBHOOKS}/{WEBHOOK}")
        return bool(webhook["webhooks"][0]["clientConfig"].get("caBundle"))

    @staticmethod
    def _wait(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.1)

    def switch(self, arm: str) -> None:
        """Make ``arm`` the only way pods are admitted, and see it admit a probe pod so."""
        plane = self.plane
        for obj in [self.webhook, *self.bindings, *self.floor]:
            plane.delete(obj)
        if arm == "webhook":
            plane.apply(self.webhook)
        elif arm == "policies":
            plane.apply_all(self.bindings)
        elif arm == "floor":
            plane.apply_all(self.floor)
        self.arm = arm
        self._wait(lambda: self._admitted_as(arm), f"pods admitted by {arm}")
        time.sleep(1.0)  # the API server's other caches settle

    def _admitted_as(self, arm: str) -> bool:
        answer = self.plane.client.request(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod_body(self.classes[0]), query={"dryRun": "All"}
        )
        if not answer.ok:
            return False
        try:
            self.check(arm, answer.body)
        except AssertionError:
            return False
        # The policies' and the webhook's pods are the same: tell them apart by who refuses.
        if arm in ("policies", "webhook"):
            wrong = json.loads(pod_body(self.classes[0]))
            wrong["spec"]["overhead"] = {"cpu": "1"}
            refused = self.plane.client.request(
                "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", wrong, query={"dryRun": "All"}
            )
            by = "policies" if "ValidatingAdmissionPolicy" in refused.message else "webhook"
            return not refused.ok and by == arm
        return True

    def check(self, arm: str, pod: Manifest) -> None:
        """What ``arm`` must make of a pod (see the module doc)."""
        spec = pod["spec"]
        runtime_class = spec.get("runtimeClassName")
        if runtime_class is None or arm == "none":
            assert spec["schedulerName"] == "default-scheduler", spec
            assert "overhead" not in spec and "nodeSelector" not in spec, spec
            return
        assert spec["schedulerName"] == SCHEDULER, spec
        if arm == "floor":
            assert "overhead" not in spec, spec
            return
        assert spec.get("overhead") == OVERHEAD, spec
        assert spec.get("nodeSelector") == {self.labels[runtime_class]: "true"}, spec

    def clean(self) -> None:
        self.plane.client.request(
            "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"gracePeriodSeconds": "0"}
        )
        self._wait(
            lambda: not self._get(f"/api/v1/namespaces/{NAMESPACE}/pods").get("items"), "the pods deleted"
        )

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.apiserver_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # -- measuring --------------------------------------------------------------------

    def create(self, body: bytes) -> float:
        started = time.perf_counter()
        answer = self.plane.client.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body)
        elapsed = time.perf_counter() - started
        assert answer.status == 201, (answer.status, answer.message)
        self.check(self.arm, answer.body)
        return elapsed

    def bodies(self, kind: str, count: int) -> list[bytes]:
        names: itertools.cycle[str | None] = itertools.cycle(self.classes if kind == "class" else [None])
        return [pod_body(next(names)) for _ in range(count)]

    def measure(self, kind: str, pods: int, threads: int, warmup: int) -> dict[str, float]:
        for body in self.bodies(kind, warmup):
            self.create(body)
        latencies = sorted(self.create(body) for body in self.bodies(kind, pods))
        bodies = self.bodies(kind, pods)
        cpu, started = self.cpu(), time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(self.create, bodies))
        elapsed = time.perf_counter() - started
        return {
            "p50_ms": statistics.median(latencies) * 1e3,
            "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e3,
            "pods_per_s": pods / elapsed,
            "cpu_ms_per_pod": (self.cpu() - cpu) / pods * 1e3,
        }


def run(count: int, args: argparse.Namespace) -> dict[str, Any]:
    assets = find_assets()
    if assets is None:
        raise SystemExit("no control plane binaries: set KUBEBUILDER_ASSETS (docs/development.md)")
    with ControlPlane(assets, apiserver_flags={"--disable-admission-plugins": "RuntimeClass"}) as plane:
        bench = Bench(plane, runtime_classes(count))
        rounds: dict[str, dict[str, list[dict[str, float]]]] = {
            arm: {k: [] for k in KINDS} for arm in args.arms
        }
        for r in range(args.rounds):
            order = args.arms[r % len(args.arms) :] + args.arms[: r % len(args.arms)]
            for arm in order:
                bench.switch(arm)
                for kind in KINDS:
                    rounds[arm][kind].append(bench.measure(kind, args.pods, args.threads, args.warmup))
                    bench.clean()
                print(f"  {count} classes, round {r + 1}: {arm} done", file=sys.stderr, flush=True)
        bench.installed.stop_extenders()
    return {
        arm: {
            kind: {key: statistics.median(m[key] for m in runs) for key in runs[0]}
            for kind, runs in kinds.items()
        }
        for arm, kinds in rounds.items()
    }


def report(results: dict[int, dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"# pod creation through kube-apiserver 1.36.2 ({cpu_model()}, {os.cpu_count()} CPUs)")
    print(
        f"# {args.rounds} rounds, arms alternated; per arm-round and kind {args.pods} pods by one client "
        f"(p50, p99) and {args.pods} by {args.threads} threads (pods/s, API server CPU per pod); medians of rounds"
    )
    for count, arms in results.items():
        for kind in KINDS:
            print(f"\n{count} RuntimeClasses, pods {'naming a class' if kind == 'class' else 'naming none'}:")
            print(f"  {'arm':10} {'p50 ms':>8} {'p99 ms':>8} {'pods/s':>8} {'cpu ms/pod':>11}  ratios")
            for arm in args.arms:
                m = arms[arm][kind]
                ratios = []
                for base in ("none", "webhook", "floor"):
                    b = arms.get(base, {}).get(kind)
                    if b is not None and base != arm and not (base == "floor" and arm != "policies"):
                        ratios.append(
                            f"vs {base}: pods/s {m['pods_per_s'] / b['pods_per_s']:.2f}x"
                            f" p50 {m['p50_ms'] / b['p50_ms']:.2f}x p99 {m['p99_ms'] / b['p99_ms']:.2f}x"
                        )
                print(
                    f"  {arm:10} {m['p50_ms']:8.2f} {m['p99_ms']:8.2f} {m['pods_per_s']:8.1f} "
                    f"{m['cpu_ms_per_pod']:11.2f}  {'; '.join(ratios)}"
                )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--classes", type=int, nargs="+", default=[1, 3, 20, 100], help="RuntimeClass counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pods", type=int, default=300, help="pods per arm-round, kind and mode")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if min(args.classes) < 1 or args.rounds < 1 or args.pods < 10 or args.threads < 1:
        parser.error("--classes, --rounds, --threads at least 1, --pods at least 10")
    results: dict[int, dict[str, Any]] = {}
    for count in args.classes:
        results[count] = run(count, args)
        report({count: results[count]}, args)  # as each ends: a long run's part is kept
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
