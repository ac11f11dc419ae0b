"""Predicate mode with the node labels: what the extender spends on one scheduled pod, with pod admission
by the API server's policies and by the pod webhook.

    .venv/bin/python bench/per_pod_bench.py                        # 5,000 and 15,000 nodes, both ways
    .venv/bin/python bench/per_pod_bench.py --sizes 5000 --pods 300 --pod-admission policy
    .venv/bin/python bench/per_pod_bench.py --sizes 5000 --pods 300 --before 1fe5407
    .venv/bin/python bench/per_pod_bench.py --first-labelling      # and what a fresh install costs

In predicate mode with the node labels every pod of a RuntimeClass costs the extender more
than its ``/filter`` call: every watch event of the pod reaches the informers of pending
pods, kube-scheduler calls ``/filter`` with its sample (at the adaptive percentage of the
whole cluster, all of it in the class's pool, since the derived label has narrowed the
candidates first), the bind takes the pod out of the pending set, and, where the pod
webhook admits pods, the webhook reviews it. This replays exactly that, one pod after
another, on 127.0.0.1:

- the test API server (tests/support/apiserver) in a process of its own, holding
  ``size`` nodes (bench/cluster_gen.py ``pool_nodes``: every other node in the gVisor
  pool, already carrying the derived label, so no relabel runs), the RuntimeClass
  ``gvisor`` and a namespace of pods;
- ``runtimeclass-extender serve`` as the overlay runs it (``--label-nodes``, the pod
  webhook routing pods to ``runtimeclass-scheduler`` on ``--admission-port`` over TLS,
  ``--requeue-pending-pods``, ``--leader-elect``), leading. The overlay passes the same
  flags to ``serve`` both ways but for the pod admission table (loaded into the API
  server here: ``pod_admission_policies``), so both arms run the same ``serve``;
- for each pod, by the pod admission of ``--pod-admission`` (both by default, each
  with an API server and an extender of its own, alternating):

  - ``webhook`` (the overlay's copy for an API server without
    MutatingAdmissionPolicy): its AdmissionReview (CREATE, as the API server sends it)
    to the pod webhook over a kept TLS connection (as kube-apiserver keeps its webhook
    clients), then the pod created as the webhook patched it (its ADDED event);
  - ``policy`` (the overlay as shipped): the pod POSTed as a controller sends it
    (``default-scheduler``, no overhead, no label) to an API server that has the
    overlay's pod admission policies loaded (``kubectl kustomize
    deploy/overlays/predicate-mode`` with ``components/label-nodes``: routing, overhead and node label, mutating and
    validating, from the pod admission table), which route it and add the label
    itself; no review reaches the extender. Needs kubectl;

  then ``/filter`` with the sample kube-scheduler sends at that size, and its binding
  (its DELETED event from the watch of pending pods). Both arms check that the created
  pod carries the label and the scheduler.

Pods start ``--interval`` apart (100 ms by default), the same in every run. What the
extender spends on a pod depends on the pace: on this 2-vCPU machine, alternating in
one process at 5,000 nodes, 0.9 ms back to back against 1.9 ms with 20 ms and 2.0 ms
with 100 ms between pods (each pod's work then starts on a core gone idle, caches
cold). Back to back, each run would be paced by its own API server, and the test API
server takes about 17 ms more per pod when it evaluates the policies (CEL in Python,
bench/pod_admission_bench.py): that alone would charge the policy arm more CPU per
pod than the webhook arm. ``--interval 0`` runs pods back to back, as before.

Printed per size: the extender's CPU per pod (user and system, /proc/PID/stat, over
the timed pods) each way and their difference, beside what the review alone costs the
extender (its event loop's CPU from the review's POST to its answer,
/proc/PID/schedstat), and the CPU per call of a do-nothing server answering the same
filter calls (bench/filter_bench.py's floor server: orjson, aiohttp, a failure map of
the same size) for the HTTP part. ``--before REV`` runs a second version (a git revision in a
temporary worktree) in the same run, alternating, for a before/after on one machine;
since only the API server differs between the arms (this tree's test API server runs
the policies), ``--before`` measures an older revision both ways as well.

``--first-labelling`` adds, per size, what a fresh install spends before its first
pod can bind: a new ``serve`` against the same cluster with no node labelled yet, its
CPU until it leads (start-up, the LISTs) and its CPU per node until the whole gVisor
pool carries the derived label (at the default 100 patches/s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import orjson
import trustme

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import cluster_gen  # noqa: E402
from filter_ab import checkout  # noqa: E402
from filter_bench import FLOOR_FAILURES_HEADER, num_feasible_nodes_to_find  # noqa: E402
from local import (  # noqa: E402
    Pacer,
    cpu_seconds,
    free_port,
    main_thread_cpu_seconds,
    serve_api_server,
    serve_command,
)

NAMESPACE = "runtimeclass-extender"
APPS = "apps"
SCHEDULER = "runtimeclass-scheduler"
LABEL = "runtimeclass.node-restriction.kubernetes.io/gvisor"
GVISOR = next(rc for rc in cluster_gen.RUNTIME_CLASSES if rc["metadata"]["name"] == "gvisor")
POD_ADMISSION = ("webhook", "policy")
POLICY_KINDS = (
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def cluster(size: int, *, labelled: bool = True) -> list[dict[str, Any]]:
    nodes = cluster_gen.pool_nodes(size)
    for node in nodes:
        if labelled and cluster_gen.in_gvisor_pool(node):
            node["metadata"]["labels"][LABEL] = "true"
    return nodes


# --------------------------------------------------------------------------- processes


def apiserver_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="per_pod_bench.py --apiserver")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--unlabelled", action="store_true")
    parser.add_argument("--policies", help="a JSON list of admission policies and bindings to load")
    args = parser.parse_args(argv)
    from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer

    os.nice(10)  # in a cluster the API server has cores of its own

    async def run() -> None:
        server = FakeApiServer()
        for node in cluster(args.size, labelled=not args.unlabelled):
            server.add(NODES, node)
        for runtime_class in cluster_gen.RUNTIME_CLASSES:
            server.add(RUNTIME_CLASSES, runtime_class)
        if args.policies:
            ignored = server.apply(json.loads(Path(args.policies).read_text()))
            assert ignored == [], ignored
        await serve_api_server(server, args.kubeconfig)

    asyncio.run(run())
    return 0


def pod_admission_policies() -> list[dict[str, Any]]:
    """The pod admission of predicate mode with the node labels as ``kubectl kustomize`` renders
    it (the PodAdmissionTable CRD, the policies and their bindings), and the table as the
    extender's leader writes it for the benchmark's classes under ``--label-nodes``: the
    table is written once, when the classes change, never per pod, so it is loaded
    here instead of kept by the measured extender (which then runs the same flags both
    ways, and an older revision, which has no table keeper, can be measured too)."""
    from extender.admission.pod_table import API_VERSION, KIND, table
    from extender.cluster.class_labels import ClassLabels
    from extender.cluster.objects import runtime_class_from_api
    from extender.policy_file import load_policy
    from extender.settings import DEFAULT_NODE_LABEL_PREFIX
    from tests.support.manifests import PREDICATE_LABELS, render

    docs = [
        d
        for d in render(PREDICATE_LABELS)
        if (d["kind"] in POLICY_KINDS and d["metadata"]["name"].startswith("runtimeclass-extender-pod-"))
        or d["kind"] == "CustomResourceDefinition"
    ]
    labels = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, load_policy())
    entries = table((runtime_class_from_api(rc) for rc in cluster_gen.RUNTIME_CLASSES), labels, labels)
    return [
        *docs,
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": "runtimeclass-extender"},
            "spec": {"runtimeClasses": entries},
        },
    ]


class Extender:
    """``serve`` as predicate mode with the node labels runs it, from ``code`` (a checkout) or this tree."""

    def __init__(
        self, kubeconfig: Path, certs: dict[str, Path], code: Path | None, profile: str | None = None
    ) -> None:
        self.port, self.probe_port, self.admission_port = free_port(), free_port(), free_port()
        # --profile: serve under py-spy (where the CPU goes; its own CPU figures are then
        # py-spy's, not the extender's).
        spy = ["py-spy", "record", "-f", "raw", "-r", "200", "-o", profile, "--"] if profile else []
        command = [
            *spy,
            *serve_command(),
            "serve",
            f"--kubeconfig={kubeconfig}",
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--probe-port={self.probe_port}",
            f"--admission-port={self.admission_port}",
            f"--admission-tls-cert-file={certs['cert']}",
            f"--admission-tls-key-file={certs['key']}",
            f"--route-pods-to-scheduler={SCHEDULER}",
            "--label-nodes",
            "--requeue-pending-pods",
            f"--requeue-scheduler-names={SCHEDULER}",
            "--leader-elect",
            "--leader-elect-lease-name=runtimeclass-extender",
            "--log-level=warning",
        ]
        env = {**os.environ, "POD_NAMESPACE": NAMESPACE, "POD_NAME": "bench-0"}
        if code is not None:
            env["PYTHONPATH"] = str(code)
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)

    async def ready(self, session: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stderr.read().decode() if self.proc.stderr else "serve exited")
            try:
                async with session.get(f"http://127.0.0.1:{self.probe_port}/readyz") as response:
                    body = await response.json()
                    if response.status == 200 and body.get("leader", {}).get("leading"):
                        return
            except (aiohttp.ClientError, ValueError):
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError("serve did not become ready and leading")

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def loop_cpu(self) -> float:
        return main_thread_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its samples on SIGINT
        try:
            self.proc.wait(30)
            return
        except subprocess.TimeoutExpired:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _pod(name: str) -> dict[str, Any]:
    """A pod as the API server sends it to a mutating webhook (defaults applied)."""
    pod = cluster_gen.pod_object(name, "gvisor", ())
    pod["metadata"] = {"name": name, "namespace": APPS, "uid": f"uid-{name}", "labels": {"app": "bench"}}
    pod["spec"]["schedulerName"] = "default-scheduler"
    pod.pop("status", None)
    return pod


def _review(pod: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": pod["metadata"]["uid"],
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "name": pod["metadata"]["name"],
                "namespace": APPS,
                "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": pod,
                "oldObject": None,
                "dryRun": False,
                "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            },
        }
    )


async def one_pod(
    session: aiohttp.ClientSession,
    api: str,
    token: str,
    extender: Extender,
    tls: ssl.SSLContext,
    name: str,
    sample: list[str],
    admission: str = "webhook",
) -> float:
    """One pod through the extender; the CPU its event loop spent on the review (0 when
    the policies admit it)."""
    pod = _pod(name)
    review_cpu = 0.0
    if admission == "webhook":
        before = extender.loop_cpu()
        async with session.post(
            f"https://127.0.0.1:{extender.admission_port}/admission/pods",
            data=_review(pod),
            headers={"Content-Type": "application/json"},
            ssl=tls,
        ) as response:
            answer = await response.json()
        review_cpu = extender.loop_cpu() - before
        patch = answer["response"].get("patch")
        if patch:
            import base64

            pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(patch)))
    # Otherwise as a controller sends it: the API server's policies route it and add
    # the label.
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    pod["metadata"].pop("uid")
    async with session.post(
        f"{api}/api/v1/namespaces/{APPS}/pods", data=orjson.dumps(pod), headers=auth
    ) as r:
        created = await r.json()
        assert r.status == 201, created
    spec = created["spec"]
    assert spec.get("nodeSelector", {}).get(LABEL) == "true", f"{admission}: the pod has no label requirement"
    assert spec["schedulerName"] == SCHEDULER, f"{admission}: the pod is not routed"
    body = orjson.dumps({"Pod": created, "Nodes": None, "NodeNames": sample})
    async with session.post(
        f"http://127.0.0.1:{extender.port}/filter", data=body, headers={"Content-Type": "application/json"}
    ) as response:
        decided = await response.read()
        assert b'"Error":""' in decided, decided[:200]
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": APPS},
        "target": {"apiVersion": "v1", "kind": "Node", "name": sample[0]},
    }
    async with session.post(
        f"{api}/api/v1/namespaces/{APPS}/pods/{name}/binding", data=orjson.dumps(binding), headers=auth
    ) as r:
        assert r.status == 201, await r.text()
    return review_cpu


async def floor_cost(sample: list[str], calls: int, interval: float = 0.0) -> float:
    """CPU per call of the do-nothing server answering the same filter calls, at the
    same pace as the pods."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "filter_bench.py"), "--floor-server", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/healthz"):
                        break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
            body = orjson.dumps({"Pod": _pod("floor"), "Nodes": None, "NodeNames": sample})
            headers = {"Content-Type": "application/json", FLOOR_FAILURES_HEADER: "0"}

            async def call() -> None:
                async with session.post(f"http://127.0.0.1:{port}/filter", data=body, headers=headers) as r:
                    await r.read()

            paced = Pacer(interval)
            for _ in range(20):
                await paced()
                await call()
            start = cpu_seconds(proc.pid)
            for _ in range(calls):
                await paced()
                await call()
            return (cpu_seconds(proc.pid) - start) / calls
    finally:
        proc.terminate()
        proc.wait(10)


def _start_apiserver(
    size: int, kubeconfig: Path, *, labelled: bool = True, policies: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    flags = [] if labelled else ["--unlabelled"]
    if policies is not None:
        flags += ["--policies", str(policies)]
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--apiserver",
            "--size",
            str(size),
            "--kubeconfig",
            str(kubeconfig),
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().decode().strip()


def _serving_files(directory: Path) -> tuple[dict[str, Path], ssl.SSLContext]:
    """The admission listener's certificate files, and a client context that trusts them."""
    authority = trustme.CA()
    leaf = authority.issue_cert("127.0.0.1")
    certs = {"cert": directory / "tls.crt", "key": directory / "tls.key"}
    leaf.private_key_and_cert_chain_pem.write_to_path(str(certs["cert"]))
    leaf.private_key_pem.write_to_path(str(certs["key"]))
    tls = ssl.create_default_context()
    authority.configure_trust(tls)
    return certs, tls


async def first_labelling(size: int, directory: Path) -> dict[str, float]:
    """The extender's CPU from its start until it leads, then until it has labelled a
    fresh cluster's gVisor pool (none of it labelled before): what a new install costs
    before its first pod binds."""
    certs, _ = _serving_files(directory)
    pool = sum(1 for node in cluster(size) if cluster_gen.in_gvisor_pool(node))
    server, api = _start_apiserver(size, directory / f"kubeconfig-fresh-{size}", labelled=False)
    started = time.monotonic()
    extender = Extender(directory / f"kubeconfig-fresh-{size}", certs, None)
    try:
        async with aiohttp.ClientSession() as session:
            await extender.ready(session)
            ready_cpu = extender.cpu()
            headers = {"Authorization": "Bearer fake-token"}
            while True:
                async with session.get(
                    f"{api}/api/v1/nodes", params={"labelSelector": f"{LABEL}=true"}, headers=headers
                ) as response:
                    labelled = len((await response.json())["items"])
                if labelled >= pool:
                    break
                if time.monotonic() - started > 600:
                    raise RuntimeError(f"only {labelled} of {pool} nodes labelled after 600 s")
                await asyncio.sleep(0.5)
            return {
                "pool": pool,
                "startup_cpu_s": ready_cpu,
                "labelling_cpu_ms_per_node": (extender.cpu() - ready_cpu) / pool * 1e3,
                "labelled_after_s": time.monotonic() - started,
            }
    finally:
        extender.stop()
        server.terminate()
        server.wait(10)


async def measure(
    size: int,
    pods: int,
    versions: dict[str, Path | None],
    directory: Path,
    profile: str | None = None,
    admissions: Sequence[str] = POD_ADMISSION,
    interval: float = 0.0,
) -> dict[str, Any]:
    certs, tls = _serving_files(directory)
    token = "fake-token"
    sample_size = num_feasible_nodes_to_find(size)
    pool = [n["metadata"]["name"] for n in cluster(size) if cluster_gen.in_gvisor_pool(n)]
    sample = pool[:sample_size]
    results: dict[str, Any] = {"size": size, "sample": len(sample), "pods": pods}
    policies = None
    if "policy" in admissions:
        policies = directory / "pod-admission-policies.json"
        policies.write_text(json.dumps(pod_admission_policies()))
    # Each (version, pod admission) with an API server of its own: an extender's
    # informers see every pod, and another run's pods must not count in its CPU.
    runs = [(version, admission) for version in versions for admission in admissions]
    servers: dict[tuple[str, str], tuple[subprocess.Popen[bytes], str]] = {}
    extenders: dict[tuple[str, str], Extender] = {}
    try:
        for version, admission in runs:
            key = (version, admission)
            kubeconfig = directory / f"kubeconfig-{version}-{admission}-{size}"
            servers[key] = _start_apiserver(
                size, kubeconfig, policies=policies if admission == "policy" else None
            )
            # --profile: one file per run when there are several.
            spy = profile if profile is None or len(runs) == 1 else f"{profile}.{version}-{admission}"
            extenders[key] = Extender(kubeconfig, certs, versions[version], spy)
        async with aiohttp.ClientSession() as session:
            for extender in extenders.values():
                await extender.ready(session)
            spent = dict.fromkeys(extenders, 0.0)
            reviews = dict.fromkeys(extenders, 0.0)
            # Warm-up, then rounds alternating the runs (in a rotating order), so all see
            # the same machine.
            paced = Pacer(interval)
            for (version, admission), extender in extenders.items():
                for i in range(10):
                    await paced()
                    await one_pod(
                        session,
                        servers[version, admission][1],
                        token,
                        extender,
                        tls,
                        f"warm-{i}",
                        sample,
                        admission,
                    )
            paced.late = 0
            rounds = 5
            for r in range(rounds):
                for key in runs[r % len(runs) :] + runs[: r % len(runs)]:
                    extender = extenders[key]
                    start = extender.cpu()
                    for i in range(pods // rounds):
                        await paced()
                        reviews[key] += await one_pod(
                            session, servers[key][1], token, extender, tls, f"p-{r}-{i}", sample, key[1]
                        )
                    spent[key] += extender.cpu() - start
        timed = pods // rounds * rounds
        for version, admission in runs:
            results.setdefault(version, {})[admission] = {
                "cpu_ms_per_pod": spent[version, admission] / timed * 1e3,
                "review_cpu_ms_per_pod": reviews[version, admission] / timed * 1e3,
            }
        results["interval_ms"] = interval * 1e3
        results["late_pods"] = paced.late
        results["floor_cpu_ms_per_call"] = await floor_cost(sample, pods, interval) * 1e3
        return results
    finally:
        for extender in extenders.values():
            extender.stop()
        for server, _ in servers.values():
            server.terminate()
            server.wait(10)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--apiserver"]:
        return apiserver_main(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 15000])
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument(
        "--pod-admission",
        choices=(*POD_ADMISSION, "both"),
        default="both",
        help="how pods are admitted: by the pod webhook, by the API server's policies, or both "
        "(the default: each with an API server and an extender of its own, alternating)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=100.0,
        help="milliseconds from one pod's start to the next's, the same in every run (default 100; "
        "0: each pod as soon as the last one is bound)",
    )
    parser.add_argument("--before", help="a git revision (or directory) to measure beside this tree")
    parser.add_argument("--profile", help="run serve under py-spy, its raw samples written here")
    parser.add_argument(
        "--first-labelling",
        action="store_true",
        help="also measure, per size, the CPU of a fresh extender labelling an unlabelled pool",
    )
    args = parser.parse_args(argv)
    admissions = POD_ADMISSION if args.pod_admission == "both" else (args.pod_admission,)
    interval = args.interval / 1e3
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        if args.before:
            with checkout(args.before) as before:
                for size in args.sizes:
                    versions = {"before": before, "after": None}
                    rows.append(
                        asyncio.run(measure(size, args.pods, versions, directory, None, admissions, interval))
                    )
        else:
            for size in args.sizes:
                rows.append(
                    asyncio.run(
                        measure(
                            size, args.pods, {"after": None}, directory, args.profile, admissions, interval
                        )
                    )
                )
    print(f"one pod every {args.interval:g} ms" if args.interval else "pods back to back")
    for row in rows:
        if row["late_pods"]:
            print(f"  {row['size']} nodes: {row['late_pods']} pods started late (the one before took longer)")
    print(
        "extender CPU per pod (ms) by pod admission; the review: its event loop's CPU while"
        " the webhook reviewed the pod; do-nothing server: CPU per /filter call (ms)"
    )
    print(
        f"{'nodes':>6} {'sample':>7}  {'version':<7} {'webhook':>8} {'(review)':>9} {'policy':>8}"
        f" {'webhook - policy':>17} {'do-nothing':>11}"
    )
    for row in rows:
        for version in ("before", "after"):
            if version not in row:
                continue
            ways = row[version]
            webhook, policy = ways.get("webhook"), ways.get("policy")
            cells = [
                f"{webhook['cpu_ms_per_pod']:.2f}" if webhook else "-",
                f"({webhook['review_cpu_ms_per_pod']:.2f})" if webhook else "",
                f"{policy['cpu_ms_per_pod']:.2f}" if policy else "-",
                f"{webhook['cpu_ms_per_pod'] - policy['cpu_ms_per_pod']:.2f}" if webhook and policy else "-",
            ]
            print(
                f"{row['size']:>6} {row['sample']:>7}  {version:<7} {cells[0]:>8} {cells[1]:>9} {cells[2]:>8}"
                f" {cells[3]:>17} {row['floor_cpu_ms_per_call']:>11.2f}"
            )
    if args.first_labelling:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = [asyncio.run(first_labelling(size, Path(tmp))) | {"size": size} for size in args.sizes]
        print("nodes   pool   start-up CPU (s)   labelling CPU per node (ms)   all labelled after (s)")
        for row in fresh:
            print(
                f"{row['size']:>6} {row['pool']:>6} {row['startup_cpu_s']:>14.2f}"
                f" {row['labelling_cpu_ms_per_node']:>24.2f} {row['labelled_after_s']:>24.1f}"
            )
        rows += fresh
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
