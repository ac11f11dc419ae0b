"""What the default-scheduler placement's pod admission costs kube-apiserver, policy by policy.

    .venv/bin/python bench/placement_admission_bench.py                  # ~5 minutes
    .venv/bin/python bench/placement_admission_bench.py --pods 2000 --blocks 10 --json results.json
    .venv/bin/python bench/placement_admission_bench.py --plugin         # as managed clusters run it

Needs the control plane binaries (``KUBEBUILDER_ASSETS``: docs/development.md, "The real
control plane"). One kube-apiserver 1.36 and etcd as predicate mode runs them (the
RuntimeClass admission plugin off, so the policies write the whole requirement; with
``--plugin``, as Kubernetes ships it and managed clusters run it: the plugin merges the
class's selector, toleration and overhead, and the placement's policies add nothing), with
``deploy/overlays/default-scheduler`` installed and its extender running as its own
ServiceAccount (keeping the pod admission table); one RuntimeClass with a node selector,
a toleration and an overhead.

**Arms are namespaces**, as in ``bench/pod_admission_bench.py``: each pod admission
binding gets one more namespaceSelector requirement naming the arm it serves, so the
arms take turns pod by pod on one server and its noise falls on every arm alike.

- ``none``: a namespace no binding of ours selects: pod creation without our admission;
- ``shipped``: the placement's policies as shipped: the mutating policy, which labels
  each pod it admits ``runtimeclass-extender.dev/admitted``, the refusal guard, and the
  placement's guard, whose binding selects only pods without that label;
- ``annotation``: the same, with the mark an annotation and the placement's guard
  selecting every pod (its match conditions and validation read the annotation): how
  the placement was first built, to show what the label spares;
- ``no-guard``: the mutating policy and the refusal guard without the placement's guard:
  what the mutating policy costs by itself;
- ``empty-patch``: a mutating policy of the shipped one's match, param and binding
  whose patch is empty, and no guard: what kube-apiserver's work on invoking any
  mutating policy costs;
- ``one-op``: the same with one constant operation (the admitted label): what a patch
  that writes adds to that (these two are invoked for every pod of a class: their only
  match condition is the shipped policy's first);
- ``do-nothing``: one ValidatingAdmissionPolicy whose match condition is false for every
  pod: the floor of any admission policy bound to a pod on 1.36 (the pod converted for
  the match conditions).

Pods are POSTed as a ReplicaSet controller sends them (a generated name, only
``runtimeClassName`` of the pod's scheduling); every created pod of a class is checked
(its requirement, and its mark where its arm gives one). Measured per arm and kind of pod
(naming the class, naming none): ``--pods`` pods by one client, the arms taking turns pod
by pod (latency p50 and p99, and the API server's CPU seconds over them from
``/proc``, per pod); then ``--blocks`` blocks of ``--block`` pods by ``--threads``
clients, the arms taking turns block by block (pods/s and CPU per pod, medians of the
blocks). The one-client figures are the steadier: read them first.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local import cpu_model, cpu_seconds, do_nothing_policy

from tests.support.control_plane import ControlPlane, find_assets
from tests.support.install import install
from tests.support.manifests import render

Manifest = dict[str, Any]
ARMS = ("none", "shipped", "annotation", "no-guard", "empty-patch", "one-op", "do-nothing")
KINDS = ("class", "no-class")
OVERLAY = "overlays/default-scheduler"
ARM_LABEL = "bench.runtimeclass-extender.dev/arm"
MUTATING = "runtimeclass-extender-pod-admission"
REFUSAL_GUARD = "runtimeclass-extender-pod-admission-guard"
GUARD = "runtimeclass-extender-pod-admission-required"
MARK = "runtimeclass-extender.dev/admitted"
LABEL = "runtimeclass.node-restriction.kubernetes.io/gvisor"
RUNTIME_CLASS: Manifest = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "gvisor"},
    "handler": "runsc",
    "overhead": {"podFixed": {"cpu": "100m", "memory": "32Mi"}},
    "scheduling": {
        "nodeSelector": {"pool": "gvisor"},
        "tolerations": [{"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"}],
    },
}
# The mark as the mutating policy writes it, and as the first version of the
# placement wrote it (an annotation).
LABEL_MARK = (
    "[has(object.metadata.labels) "
    "? JSONPatch{op: 'add', path: '/metadata/labels/runtimeclass-extender.dev~1admitted', value: 'true'} "
    ": JSONPatch{op: 'add', path: '/metadata/labels', value: {'runtimeclass-extender.dev/admitted': 'true'}}]"
)
ANNOTATION_MARK = (
    "[has(object.metadata.annotations) "
    "? JSONPatch{op: 'add', path: '/metadata/annotations/runtimeclass-extender.dev~1admitted', value: 'true'} "
    ": JSONPatch{op: 'add', path: '/metadata/annotations', value: {'runtimeclass-extender.dev/admitted': 'true'}}]"
)


def namespace_of(arm: str) -> str:
    return f"placement-bench-{arm}"


def pod_body(kind: str) -> bytes:
    spec: Manifest = {
        "containers": [
            {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "10m"}}}
        ]
    }
    if kind == "class":
        spec["runtimeClassName"] = "gvisor"
    return json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "pod-"}, "spec": spec}
    ).encode()


def _one(docs: Sequence[Manifest], kind: str, name: str) -> Manifest:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _bound_to(binding: Manifest, arm: str, name: str | None = None) -> Manifest:
    """A copy of ``binding`` (named ``name``, for a policy of that name) serving ``arm``
    alone: one more namespaceSelector requirement."""
    copied = copy.deepcopy(binding)
    if name is not None:
        copied["metadata"] = {"name": name}
        copied["spec"]["policyName"] = name
    selector = copied["spec"].setdefault("matchResources", {}).setdefault("namespaceSelector", {})
    selector.setdefault("matchExpressions", []).append({"key": ARM_LABEL, "operator": "In", "values": [arm]})
    return copied


def arm_documents(docs: Sequence[Manifest]) -> list[Manifest]:
    """The overlay with each pod admission binding serving its arms: the shipped
    policies ``shipped`` (and, but the placement's guard, ``no-guard``); copies of the
    mutating policy and the guard with the annotation mark ``annotation``."""
    policies = {
        MUTATING: "MutatingAdmissionPolicy",
        REFUSAL_GUARD: "ValidatingAdmissionPolicy",
        GUARD: "ValidatingAdmissionPolicy",
    }
    out = [
        d
        for d in docs
        if not (d["kind"].endswith("PolicyBinding") and d["spec"]["policyName"] in policies)
    ]
    for name, kind in policies.items():
        binding = _one(docs, kind + "Binding", name)
        out.append(_bound_to(binding, "shipped"))
        if name != GUARD:
            out.append(_bound_to(binding, "no-guard", f"{name}-no-guard"))
            out.append({**copy.deepcopy(_one(docs, kind, name)), "metadata": {"name": f"{name}-no-guard"}})
    mutating = copy.deepcopy(_one(docs, "MutatingAdmissionPolicy", MUTATING))
    patch = mutating["spec"]["mutations"][0]["jsonPatch"]
    flat = " ".join(patch["expression"].split())
    if LABEL_MARK not in flat:
        raise SystemExit(f"the shipped mutating policy no longer marks pods with {LABEL_MARK}")
    patch["expression"] = flat.replace(LABEL_MARK, ANNOTATION_MARK)
    mutating["metadata"] = {"name": f"{MUTATING}-annotation"}
    guard = copy.deepcopy(_one(docs, "ValidatingAdmissionPolicy", GUARD))
    guard["metadata"] = {"name": f"{GUARD}-annotation"}
    guard["spec"]["validations"][0]["expression"] = (
        f"has(object.metadata.annotations) && '{MARK}' in object.metadata.annotations"
    )
    guard_binding = _bound_to(_one(docs, "ValidatingAdmissionPolicyBinding", GUARD), "annotation", f"{GUARD}-annotation")
    guard_binding["spec"]["matchResources"].pop("objectSelector", None)
    refusal = _one(docs, "ValidatingAdmissionPolicyBinding", REFUSAL_GUARD)
    for arm, expression in (
        ("empty-patch", f"{LABEL_MARK}.filter(p, false)"),
        ("one-op", LABEL_MARK.replace("has(object.metadata.labels)", "false")),
    ):
        floor = copy.deepcopy(_one(docs, "MutatingAdmissionPolicy", MUTATING))
        floor["metadata"] = {"name": f"{MUTATING}-{arm}"}
        floor["spec"]["variables"] = []
        floor["spec"]["matchConditions"] = floor["spec"]["matchConditions"][:1]
        floor["spec"]["mutations"][0]["jsonPatch"]["expression"] = expression
        out += [floor, _bound_to(_one(docs, "MutatingAdmissionPolicyBinding", MUTATING), arm, f"{MUTATING}-{arm}")]
    do_nothing = do_nothing_policy()
    out += [
        mutating,
        _bound_to(_one(docs, "MutatingAdmissionPolicyBinding", MUTATING), "annotation", f"{MUTATING}-annotation"),
        guard,
        guard_binding,
        {**copy.deepcopy(_one(docs, "ValidatingAdmissionPolicy", REFUSAL_GUARD)), "metadata": {"name": f"{REFUSAL_GUARD}-annotation"}},
        _bound_to(refusal, "annotation", f"{REFUSAL_GUARD}-annotation"),
        do_nothing[0],
        _bound_to(do_nothing[1], "do-nothing"),
    ]
    return out


def fault(arm: str, kind: str, pod: Manifest, *, plugin: bool) -> str:
    """What a created pod lacks of what its arm gives ("" when nothing); with ``plugin``
    a pod of the class of an arm of the placement's own policies is as the RuntimeClass
    admission plugin made it (the class's selector, no requirement, no mark)."""
    metadata, spec = pod["metadata"], pod["spec"]
    if plugin and kind == "class" and arm in ("shipped", "annotation", "no-guard"):
        if spec.get("nodeSelector") != RUNTIME_CLASS["scheduling"]["nodeSelector"]:
            return f"nodeSelector {spec.get('nodeSelector')}: not the plugin's"
        if MARK in (metadata.get("labels") or {}) or MARK in (metadata.get("annotations") or {}):
            return "marked: the mutating policy was invoked"
        return ""
    if kind == "no-class" or arm in ("none", "empty-patch", "one-op", "do-nothing"):
        if LABEL in (spec.get("nodeSelector") or {}):
            return f"nodeSelector {spec.get('nodeSelector')}"
        marked = (metadata.get("labels") or {}).get(MARK) == "true"
        if marked != (kind == "class" and arm == "one-op"):
            return f"labels {metadata.get('labels')}"
        return ""
    if (spec.get("nodeSelector") or {}).get(LABEL) != "true":
        return f"nodeSelector {spec.get('nodeSelector')}: no {LABEL}"
    where = "annotations" if arm == "annotation" else "labels"
    if (metadata.get(where) or {}).get(MARK) != "true":
        return f"{where} {metadata.get(where)}: no {MARK}"
    return ""


class Bench:
    def __init__(self, plane: ControlPlane, *, plugin: bool) -> None:
        self.plane = plane
        self.plugin = plugin
        plane.apply(RUNTIME_CLASS)
        for arm in ARMS:
            plane.ensure_namespace(namespace_of(arm), labels={ARM_LABEL: arm})
        self.installed = install(plane, arm_documents(render(OVERLAY)))
        self.apiserver_pid = next(p for p in plane.processes if p.name == "kube-apiserver").popen.pid
        deadline = time.monotonic() + 120
        for arm in ARMS:
            while not self._admits(arm):
                if time.monotonic() > deadline:
                    raise SystemExit(f"pods of {arm} not admitted as the arm admits them in 120 s")
                time.sleep(0.2)

    def _admits(self, arm: str) -> bool:
        answer = self.plane.client.request(
            "POST", f"/api/v1/namespaces/{namespace_of(arm)}/pods", pod_body("class"), query={"dryRun": "All"}
        )
        return answer.ok and not fault(arm, "class", answer.body, plugin=self.plugin)

    def cpu(self) -> float:
        return cpu_seconds(self.apiserver_pid)

    def create(self, arm: str, kind: str) -> None:
        answer = self.plane.client.request("POST", f"/api/v1/namespaces/{namespace_of(arm)}/pods", pod_body(kind))
        if answer.status != 201:
            raise SystemExit(f"{arm}: a pod {kind} refused: {answer.status} {answer.message}")
        wrong = fault(arm, kind, answer.body, plugin=self.plugin)
        if wrong:
            raise SystemExit(f"{arm}: a pod {kind} admitted wrongly: {wrong}")

    def clean(self) -> None:
        for arm in ARMS:
            self.plane.client.request(
                "DELETE", f"/api/v1/namespaces/{namespace_of(arm)}/pods", query={"gracePeriodSeconds": "0"}
            )

    def one_by_one(self, pods: int) -> dict[tuple[str, str], tuple[list[float], float]]:
        """Per arm and kind: each pod's seconds and the API server's CPU seconds over them,
        the turns taking turns pod by pod."""
        turns = [(arm, kind) for arm in ARMS for kind in KINDS]
        found: dict[tuple[str, str], tuple[list[float], float]] = {turn: ([], 0.0) for turn in turns}
        for i in range(pods):
            start = i % len(turns)
            for turn in turns[start:] + turns[:start]:
                cpu, started = self.cpu(), time.perf_counter()
                self.create(*turn)
                elapsed = time.perf_counter() - started
                times, used = found[turn]
                times.append(elapsed)
                found[turn] = (times, used + self.cpu() - cpu)
        return found

    def block(self, arm: str, kind: str, pods: int, threads: int) -> tuple[float, float]:
        """``pods`` created by ``threads`` clients: pods/s, API server CPU seconds a pod."""
        cpu, started = self.cpu(), time.perf_counter()
        with ThreadPoolExecutor(threads) as workers:
            list(workers.map(lambda _: self.create(arm, kind), range(pods)))
        return pods / (time.perf_counter() - started), (self.cpu() - cpu) / pods


def run(args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    assets = find_assets()
    if assets is None:
        raise SystemExit("no control plane binaries: set KUBEBUILDER_ASSETS (docs/development.md)")
    flags = {} if args.plugin else {"--disable-admission-plugins": "RuntimeClass"}
    with ControlPlane(assets, apiserver_flags=flags) as plane:
        bench = Bench(plane, plugin=args.plugin)
        for _ in range(args.warmup):
            for arm in ARMS:
                bench.create(arm, "class")
        single = bench.one_by_one(args.pods)
        bench.clean()
        turns = [(arm, kind) for arm in ARMS for kind in KINDS]
        blocks: dict[tuple[str, str], list[tuple[float, float]]] = {turn: [] for turn in turns}
        for b in range(args.blocks):
            start = b % len(turns)
            for turn in turns[start:] + turns[:start]:
                blocks[turn].append(bench.block(*turn, args.block, args.threads))
            bench.clean()
            print(f"  block {b + 1} of {args.blocks}", file=sys.stderr, flush=True)
        bench.installed.stop_extenders()
    results: dict[str, dict[str, dict[str, float]]] = {}
    for arm, kind in turns:
        times, used = single[arm, kind]
        ordered = sorted(times)
        results.setdefault(arm, {})[kind] = {
            "p50_ms": statistics.median(ordered) * 1e3,
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3,
            "cpu_ms_per_pod": used / len(times) * 1e3,
            "block_pods_per_s": statistics.median(rate for rate, _ in blocks[arm, kind]),
            "block_cpu_ms_per_pod": statistics.median(cpu for _, cpu in blocks[arm, kind]) * 1e3,
        }
    return results


def _measures(m: dict[str, float]) -> str:
    return (
        f"{m['p50_ms']:8.2f} {m['p99_ms']:8.2f} {m['cpu_ms_per_pod']:8.2f} "
        f"{m['block_pods_per_s']:9.1f} {m['block_cpu_ms_per_pod']:9.2f}"
    )


def report(results: dict[str, dict[str, dict[str, float]]], args: argparse.Namespace) -> None:
    plugin = "on" if args.plugin else "off"
    print(
        f"# the default-scheduler placement's pod admission, kube-apiserver 1.36.2 ({cpu_model()}, "
        f"{os.cpu_count()} CPUs), the RuntimeClass admission plugin {plugin}"
    )
    print(
        f"# {args.pods} pods per arm and kind by one client, the arms taking turns pod by pod; "
        f"{args.blocks} blocks of {args.block} by {args.threads} threads, medians of the blocks"
    )
    for kind in KINDS:
        print(f"\npods {'naming the class' if kind == 'class' else 'naming none'}:")
        print(f"  {'arm':11} {'p50 ms':>8} {'p99 ms':>8} {'cpu ms':>8} {'pods/s':>9} {'cpu ms':>9}  over none: p50, cpu")
        base = results["none"][kind]
        for arm in ARMS:
            m = results[arm][kind]
            over = (
                f"+{m['p50_ms'] - base['p50_ms']:.2f} ms, +{m['cpu_ms_per_pod'] - base['cpu_ms_per_pod']:.2f} ms"
                if arm != "none"
                else ""
            )
            print(f"  {arm:11} {_measures(m)}  {over}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000, help="pods per arm and kind, one after another")
    parser.add_argument("--blocks", type=int, default=6, help="blocks per arm and kind, by --threads clients")
    parser.add_argument("--block", type=int, default=300, help="pods per block")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=20, help="pods per arm before measuring")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--plugin", action="store_true", help="the API server runs the RuntimeClass admission plugin"
    )
    args = parser.parse_args(argv)
    if args.pods < 10 or args.block < 10 or args.blocks < 1 or args.threads < 1 or args.warmup < 0:
        parser.error("--pods and --block at least 10, --blocks and --threads at least 1, --warmup at least 0")
    results = run(args)
    report(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
