"""Pod creation through a real kube-apiserver: pod admission by policies, by the webhook, or none.

    .venv/bin/python bench/pod_admission_bench.py                        # 1, 3, 20, 100 classes
    .venv/bin/python bench/pod_admission_bench.py --classes 20 --blocks 20
    .venv/bin/python bench/pod_admission_bench.py --arms none policies mutating
    .venv/bin/python bench/pod_admission_bench.py --kinds no-class --pods 5000   # a steadier p99
    .venv/bin/python bench/pod_admission_bench.py --json results.json

Needs the control plane binaries (``KUBEBUILDER_ASSETS``, as tests/real/ finds them:
docs/development.md, "The real control plane"). For each number of RuntimeClasses, one
kube-apiserver 1.36 (and etcd) as predicate mode runs it (RuntimeClass admission off),
with predicate mode and the node labels (``overlays/predicate-mode``, ``components/label-nodes``) installed both ways at once (its pod admission policies
and components/pod-webhook, as the chart's ``podAdmission.mode: both``) and its
extender running as its own ServiceAccount, keeping the policies' table, its webhook
certificate and the node labels. Each class has an overhead and a node selector (so its
pods get the overhead and the node label).

**Arms are namespaces**, one per arm, labelled ``bench.runtimeclass-extender.dev/arm``;
each binding and the webhook configuration get one more namespaceSelector requirement
naming the arms they admit, so every pod is admitted by its arm's mechanism alone, and
the arms can be interleaved pod by pod on one server (the machine's noise, the API
server's garbage collections and the extender's background work fall on every arm
alike):

- ``none``: a namespace no binding and no webhook selects: what creating a pod costs
  the server without admission of ours (every object is installed; what a pod of this
  namespace pays for them is the bindings' namespace selectors, as any pod of an
  opted-out namespace pays);
- ``webhook``: the pod webhook (its configuration as the extender keeps it, caBundle
  set), answered by the extender's admission listener bound on the webhook Service's
  ClusterIP, as a pod behind kube-proxy is reached;
- ``policies``: the MutatingAdmissionPolicy (reading the table) and the
  ValidatingAdmissionPolicy (the guard, no param, bound to the pods the mutating policy
  marks to refuse) as shipped;
- ``floor``: two policies of the same shape as the shipped ones, doing nothing useful: a
  MutatingAdmissionPolicy with the shipped one's match and param, evaluated for the
  same pods, whose patch only routes, and a ValidatingAdmissionPolicy with the guard's
  match and binding (so invoked for no pod here) whose one validation is ``true``: what
  the API server's own work of invoking the policies the job needs costs;
- ``same-pod``: the floor with a mutating patch that writes what the shipped policy
  writes into these pods (the scheduler, the class's overhead and node label from the
  table), as constant operations with no variables and no conditions: the floor for
  the pod the shipped policies make (the webhook's pods carry the same fields);
- ``mutating`` (not run by default): the shipped mutating policy alone, to see what the
  guard's binding adds.

For pods that name a class (each class in turn) and pods that name none: ``--pods`` pods
created one after another by one client, the arms taking turns pod by pod (latency p50
and p99, from the POST to the whole answer read); then ``--blocks`` blocks of
``--block`` pods created by ``--threads`` clients at once, the arms taking turns block
by block (pods per second and the API server's CPU per pod, from /proc: the median of the
blocks). Every created pod
is checked (routed, its class's overhead and node label where the arm admits it;
untouched in ``none``), so an arm that admits wrongly fails instead of reporting a time.
Pods are deleted between blocks (not timed). Numbers on a shared machine: compare arms
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
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local import cpu_model

from extender.admission.pod_table import API_VERSION, PLURAL
from extender.cluster.class_labels import label_key
from extender.settings import DEFAULT_NODE_LABEL_PREFIX
from tests.support.control_plane import ControlPlane, find_assets
from tests.support.install import install
from tests.support.manifests import PREDICATE_LABELS, render

Manifest = dict[str, Any]
ARMS = ("none", "webhook", "policies", "floor", "same-pod")
ARMS_ALL = (*ARMS, "mutating")
KINDS = ("class", "no-class")
NAMESPACE = "bench"
SCHEDULER = "runtimeclass-scheduler"
POD_ADMISSION = "runtimeclass-extender-pod-admission"
GUARD = "runtimeclass-extender-pod-admission-guard"
FLOOR = "runtimeclass-extender-pod-admission-floor"
SAME_POD = "runtimeclass-extender-pod-admission-same-pod"
# What the shipped policies write into a bench pod (no overhead, no node selector of its
# own), the table's entry read without a condition.
_SAME_POD_PATCH = (
    f"[JSONPatch{{op: 'add', path: '/spec/schedulerName', value: '{SCHEDULER}'}}, "
    "JSONPatch{op: 'add', path: '/spec/overhead', "
    "value: params.spec.runtimeClasses[object.spec.runtimeClassName].overhead}, "
    "JSONPatch{op: 'add', path: '/spec/nodeSelector', "
    "value: {params.spec.runtimeClasses[object.spec.runtimeClassName].nodeLabel: 'true'}}]"
)
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


def pod_body(arm: str, runtime_class: str | None) -> bytes:
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
        "metadata": {"generateName": "bench-", "namespace": namespace_of(arm)},
        "spec": spec,
    }
    return json.dumps(pod).encode()


def floor_policy(policy: Manifest, binding: Manifest, arm: str) -> list[Manifest]:
    """The shipped mutating policy's shape (match, param, reinvocation) with a patch of
    constant operations and no variables: for ``floor`` one that only routes, for
    ``same-pod`` one that writes what the shipped policies write (see the module doc);
    bound to the arm's namespace alone."""
    expression = (
        f"[JSONPatch{{op: 'add', path: '/spec/schedulerName', value: '{SCHEDULER}'}}]"
        if arm == "floor"
        else _SAME_POD_PATCH
    )
    spec = {"variables": [], "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]}
    return _for_arm(policy, binding, FLOOR if arm == "floor" else SAME_POD, arm, spec)


def floor_guard(guard: Manifest, binding: Manifest, arm: str) -> list[Manifest]:
    """The guard's shape (match, binding, no param) with one validation that always
    passes, bound to the arm's namespace alone."""
    return _for_arm(guard, binding, f"{GUARD}-{arm}", arm, {"validations": [{"expression": "true"}]})


def _for_arm(policy: Manifest, binding: Manifest, name: str, arm: str, spec: Manifest) -> list[Manifest]:
    """A copy of ``policy`` named ``name`` with ``spec`` over its own, and of its
    ``binding`` (whose last namespace requirement names the arms) bound to ``arm`` alone."""
    copied = copy.deepcopy(policy)
    copied["metadata"] = {"name": name}
    copied["spec"].update(copy.deepcopy(spec))
    copied_binding = copy.deepcopy(binding)
    copied_binding["metadata"] = {"name": name}
    copied_binding["spec"]["policyName"] = name
    copied_binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][-1]["values"] = [arm]
    return [copied, copied_binding]


ARM_LABEL = "bench.runtimeclass-extender.dev/arm"


def select_arms(selector: Manifest, arms: Sequence[str]) -> None:
    """One more requirement in a namespaceSelector: the namespace is one of ``arms``."""
    selector.setdefault("matchExpressions", []).append(
        {"key": ARM_LABEL, "operator": "In", "values": list(arms)}
    )


class Bench:
    def __init__(
        self, plane: ControlPlane, classes: list[Manifest], arms: Sequence[str], kinds: Sequence[str]
    ) -> None:
        self.plane = plane
        self.arms = list(arms)
        self.kinds = list(kinds)
        self.classes = [rc["metadata"]["name"] for rc in classes]
        self.labels = {name: label_key(DEFAULT_NODE_LABEL_PREFIX, name) for name in self.classes}
        self.apiserver_pid = next(p for p in plane.processes if p.name == "kube-apiserver").popen.pid
        for arm in ARMS_ALL:
            plane.ensure_namespace(namespace_of(arm), labels={ARM_LABEL: arm})
        plane.apply_all(classes)
        docs = render(PREDICATE_LABELS, "components/pod-webhook")
        # Each mechanism admits the namespaces of the arms it belongs to.
        mutating = self._one(docs, "MutatingAdmissionPolicyBinding", POD_ADMISSION)
        guard = self._one(docs, "ValidatingAdmissionPolicyBinding", GUARD)
        webhook = self._one(docs, "MutatingWebhookConfiguration", WEBHOOK)
        select_arms(mutating["spec"]["matchResources"]["namespaceSelector"], ["policies", "mutating"])
        # The guard refuses pods of a class left unrouted: the policies' own.
        select_arms(guard["spec"]["matchResources"]["namespaceSelector"], ["policies"])
        select_arms(webhook["webhooks"][0]["namespaceSelector"], ["webhook"])
        shipped = self._one(docs, "MutatingAdmissionPolicy", POD_ADMISSION)
        shipped_guard = self._one(docs, "ValidatingAdmissionPolicy", GUARD)
        floor = [
            doc
            for arm in ("floor", "same-pod")
            for doc in floor_policy(shipped, mutating, arm) + floor_guard(shipped_guard, guard, arm)
        ]
        edited = {(d["kind"], d["metadata"]["name"]): d for d in (mutating, guard, webhook)}
        applied = [edited.get((d["kind"], d["metadata"]["name"]), d) for d in docs] + floor
        self.installed = install(plane, applied, on_service_address=True)
        self._wait(self._table_written, "the table written")
        self._wait(self._ca_bundle_set, "the webhook's caBundle set")
        for arm in self.arms:
            self._wait(partial(self._admits, arm), f"pods admitted by {arm}")

    # -- the cluster ------------------------------------------------------------------

    @staticmethod
    def _one(docs: Sequence[Manifest], kind: str, name: str) -> Manifest:
        (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
        return copy.deepcopy(found)

    def _table_written(self) -> bool:
        answer = self.plane.client.request("GET", f"/apis/{API_VERSION}/{PLURAL}/runtimeclass-extender")
        return answer.ok and len((answer.body.get("spec") or {}).get("runtimeClasses") or {}) == len(
            self.classes
        )

    def _ca_bundle_set(self) -> bool:
        webhook = self.plane.client.get(f"{WEBHOOKS}/{WEBHOOK}")
        return bool(webhook["webhooks"][0]["clientConfig"].get("caBundle"))

    @staticmethod
    def _wait(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.1)

    def _admits(self, arm: str) -> bool:
        """A dry-run pod of a class comes out of ``arm`` as it should."""
        answer = self.plane.client.request(
            "POST",
            f"/api/v1/namespaces/{namespace_of(arm)}/pods",
            pod_body(arm, self.classes[0]),
            query={"dryRun": "All"},
        )
        if not answer.ok:
            return False
        try:
            self.check(arm, answer.body)
        except AssertionError:
            return False
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
        for arm in self.arms:
            self.plane.client.request(
                "DELETE", f"/api/v1/namespaces/{namespace_of(arm)}/pods", query={"gracePeriodSeconds": "0"}
            )
        for arm in self.arms:
            self._wait(partial(self._empty, arm), "the pods deleted")

    def _empty(self, arm: str) -> bool:
        return not self.plane.client.get(f"/api/v1/namespaces/{namespace_of(arm)}/pods", limit="1").get(
            "items"
        )

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.apiserver_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # -- measuring --------------------------------------------------------------------

    def create(self, arm: str, body: bytes) -> float:
        started = time.perf_counter()
        answer = self.plane.client.request("POST", f"/api/v1/namespaces/{namespace_of(arm)}/pods", body)
        elapsed = time.perf_counter() - started
        assert answer.status == 201, (answer.status, answer.message)
        self.check(arm, answer.body)
        return elapsed

    def bodies(self, arm: str, kind: str, count: int) -> list[bytes]:
        names: itertools.cycle[str | None] = itertools.cycle(self.classes if kind == "class" else [None])
        return [pod_body(arm, next(names)) for _ in range(count)]

    def latencies(self, pods: int, warmup: int) -> dict[tuple[str, str], list[float]]:
        """Pods one after another, the arms (and kinds) taking turns pod by pod."""
        turns = [(arm, kind) for arm in self.arms for kind in self.kinds]
        bodies = {turn: self.bodies(*turn, warmup + pods) for turn in turns}
        found: dict[tuple[str, str], list[float]] = {turn: [] for turn in turns}
        for i in range(warmup + pods):
            start = i % len(turns)
            for turn in turns[start:] + turns[:start]:
                elapsed = self.create(turn[0], bodies[turn][i])
                if i >= warmup:
                    found[turn].append(elapsed)
        return found

    def block(self, arm: str, kind: str, pods: int, threads: int) -> tuple[float, float]:
        """``pods`` created by ``threads`` clients at once: (seconds, API server CPU seconds)."""
        bodies = self.bodies(arm, kind, pods)
        cpu, started = self.cpu(), time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda body: self.create(arm, body), bodies))
        return time.perf_counter() - started, self.cpu() - cpu


def namespace_of(arm: str) -> str:
    return f"{NAMESPACE}-{arm}"


def run(count: int, args: argparse.Namespace) -> dict[str, Any]:
    assets = find_assets()
    if assets is None:
        raise SystemExit("no control plane binaries: set KUBEBUILDER_ASSETS (docs/development.md)")
    with ControlPlane(assets, apiserver_flags={"--disable-admission-plugins": "RuntimeClass"}) as plane:
        bench = Bench(plane, runtime_classes(count), args.arms, args.kinds)
        latencies = bench.latencies(args.pods, args.warmup)
        bench.clean()
        turns = [(arm, kind) for arm in args.arms for kind in args.kinds]
        blocks: dict[tuple[str, str], list[tuple[float, float]]] = {turn: [] for turn in turns}
        for b in range(args.blocks):
            start = b % len(turns)
            for arm, kind in turns[start:] + turns[:start]:
                blocks[arm, kind].append(bench.block(arm, kind, args.block, args.threads))
            bench.clean()
            print(f"  {count} classes: block {b + 1} of {args.blocks}", file=sys.stderr, flush=True)
        bench.installed.stop_extenders()
    results: dict[str, Any] = {}
    for arm, kind in turns:
        ordered = sorted(latencies[arm, kind])
        # Medians of the blocks: a garbage collection or a neighbour's burst during one
        # block moves its figure, not the arm's.
        results.setdefault(arm, {})[kind] = {
            "p50_ms": statistics.median(ordered) * 1e3,
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3,
            "pods_per_s": statistics.median(args.block / t for t, _ in blocks[arm, kind]),
            "cpu_ms_per_pod": statistics.median(c / args.block for _, c in blocks[arm, kind]) * 1e3,
        }
    return results


def report(results: dict[int, dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"# pod creation through kube-apiserver 1.36.2 ({cpu_model()}, {os.cpu_count()} CPUs)")
    print(
        f"# arms interleaved; per arm and kind {args.pods} pods by one client (p50, p99), the arms taking turns "
        f"pod by pod, and {args.blocks} blocks of {args.block} pods by {args.threads} threads (pods/s, API server "
        "CPU per pod, medians of the blocks), the arms taking turns block by block"
    )
    for count, arms in results.items():
        for kind in args.kinds:
            print(f"\n{count} RuntimeClasses, pods {'naming a class' if kind == 'class' else 'naming none'}:")
            print(f"  {'arm':10} {'p50 ms':>8} {'p99 ms':>8} {'pods/s':>8} {'cpu ms/pod':>11}  ratios")
            for arm in args.arms:
                m = arms[arm][kind]
                ratios = []
                for base in ("none", "webhook", "floor", "same-pod"):
                    b = arms.get(base, {}).get(kind)
                    if b is not None and base != arm and not (base in ("floor", "same-pod") and arm != "policies"):
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
    parser.add_argument("--pods", type=int, default=300, help="pods per arm and kind, one after another")
    parser.add_argument(
        "--blocks", type=int, default=10, help="blocks per arm and kind, by --threads clients"
    )
    parser.add_argument("--block", type=int, default=100, help="pods per block")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--arms", nargs="+", choices=ARMS_ALL, default=list(ARMS))
    parser.add_argument(
        "--kinds", nargs="+", choices=KINDS, default=list(KINDS), help="pods naming a class, naming none"
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if min(args.classes) < 1 or args.blocks < 1 or args.block < 10 or args.pods < 10 or args.threads < 1:
        parser.error("--classes, --blocks, --threads at least 1, --pods and --block at least 10")
    results: dict[int, dict[str, Any]] = {}
    for count in args.classes:
        results[count] = run(count, args)
        report({count: results[count]}, args)  # as each ends: a long run's part is kept
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
