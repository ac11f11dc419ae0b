"""Pod creation latency through the API server: pod admission by policies or by the webhook.

    .venv/bin/python bench/pod_admission_bench.py                          # 300 pods an arm, 3 classes
    .venv/bin/python bench/pod_admission_bench.py --pods 1000 --classes 10
    .venv/bin/python bench/pod_admission_bench.py --overlay predicate-mode
    .venv/bin/python bench/pod_admission_bench.py --arms webhook webhook-new-connection

One client creates pods one after another (POST, as a ReplicaSet controller creates
them: ``generateName``, the defaulted template, no overhead, no node label), each pod
naming one of ``--classes`` RuntimeClasses in turn (each class with an overhead and node
rules), through the test API server (tests/support/apiserver), in a process of its own
so that the client and the server do not share an event loop. Arms, each with an API
server of its own holding the same RuntimeClasses:

- ``none``: no pod admission at all (the floor: what creating a pod costs the server);
- ``policy``: the pod admission objects of ``kubectl kustomize deploy/overlays/<overlay>``
  as shipped (the MutatingAdmissionPolicies, the ValidatingAdmissionPolicies and their
  bindings; in large-cluster mode also the pod webhook narrowed to class names over 63
  characters, whose matchConditions the server evaluates for every pod and which calls
  it for none of these);
- ``webhook``: the same overlay the webhook way (tests/support/manifests.py
  ``render_webhook_way``: components/pod-webhook in place of the policies, as
  docs/pod-webhook.md tells an API server without MutatingAdmissionPolicy to install
  it), its MutatingWebhookConfiguration with a ``caBundle``, called over TLS and
  answered by a real ``runtimeclass-extender serve`` admission listener;
- ``webhook-new-connection`` (not run by default): the webhook arm as the test API
  server calls webhooks by itself, with a new TCP connection, TLS handshake and TLS
  context for every call.

Every arm runs the same ``serve`` beside its API server, watching it, with the flags the
overlay's Deployment passes (read from the rendered manifests: the policy way's for
``none`` and ``policy``, the webhook way's for the webhooks), but for addresses, ports
and the listener's certificate, which come from files (trustme) where the overlay has
the extender keep them in a Secret. So each API server sends the same watch events to
the same informers whatever the arm, and only pod admission differs. The extender
watches its API server rather than reading a cluster file because ``--label-nodes``,
``--requeue-pending-pods`` and ``--leader-elect`` (all three in the large-cluster
overlay) need a live cluster.

The test API server keeps one webhook client per webhook in this benchmark (its
``tests/support/apiserver/webhooks.py`` opens a new connection for every call;
``keep_webhook_connections`` below), as kube-apiserver does: its webhook
``ClientManager`` (staging/src/k8s.io/apiserver/pkg/util/webhook/client.go) caches a
REST client per client configuration, whose HTTP/1.1 transport keeps its connections.
The ``webhook-new-connection`` arm shows what the test server's own way costs.

Rounds alternate the arms (in a rotating order), a few warm-up pods each first, so that
every arm sees the same machine. Every created pod is checked: routed to
``runtimeclass-scheduler``, its class's overhead, in large-cluster mode its class's
node label, and in the ``none`` arm none of these, so that an arm that admits wrongly
fails instead of reporting a time. Printed per arm: p50, p99 and mean latency (ms, from
the POST to the whole answer read), the API server's CPU per pod, the CEL evaluations
per pod (each policy variable, match condition, patch and validation, each webhook
matchCondition the server evaluated: what a pod costs whatever the evaluator), and the
ratios policy/webhook and policy/none. Pods go one after another as soon as the last
is answered (a controller's burst); ``--interval MS`` spaces them instead. The
extender's CPU per pod is bench/per_pod_bench.py's to measure: it depends on how far
apart pods come, and here each arm sets its own pace.

What the policy arm's time is: the test API server evaluates CEL with the Python ``cel``
package (PyPI common-expression-language, cel-rust's bindings; tests/support/apiserver
/cel_env.py), converting the pod and each param into CEL values for every expression,
in Python (and copying every RuntimeClass for each policy that takes one as its
param), where kube-apiserver runs cel-go over typed objects from its informers' caches.
So the policy arm's absolute cost here is that evaluator's and the fake's, not
kube-apiserver's, and it
grows with ``--classes`` (one invocation per class for each policy that takes the
class as its param). The comparison that decides (pod creation p99 with the policies
no slower than with the webhook) is checked on a real control plane; this shows that
both ways admit every pod alike and how each arm's cost moves with the number of
classes. Needs kubectl (to render the overlays). Numbers on a shared machine: compare
arms within one run, never as pass/fail checks.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import trustme

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from local import Pacer, cpu_model, cpu_seconds, free_port, serve_api_server, serve_command  # noqa: E402

NAMESPACE = "runtimeclass-extender"
APPS = "apps"
SCHEDULER = "runtimeclass-scheduler"
SERVICE = (NAMESPACE, "runtimeclass-extender-webhook", 443)
SERVER_NAME = "runtimeclass-extender-webhook.runtimeclass-extender.svc"
LABEL_PREFIX = "runtimeclass.node-restriction.kubernetes.io"
ARMS = ("none", "policy", "webhook", "webhook-new-connection")
DEFAULT_ARMS = ("none", "policy", "webhook")
CLASS_NAMES = ("gvisor", "kata-qemu", "kata-clh", "kata-fc", "nvidia", "wasmtime")
# serve's flags the benchmark sets itself (addresses, ports, logs) or replaces (the
# self-managed certificate: files here, so no Secret and no caBundle to keep).
LOCAL_FLAGS = (
    "--host",
    "--port",
    "--probe-port",
    "--probe-host",
    "--log-format",
    "--admission-port",
    "--admission-host",
    "--webhook-certificate-secret",
    "--webhook-mutating-configuration",
)

Manifest = dict[str, Any]


# --------------------------------------------------------------------------- the cluster


def runtime_classes(count: int) -> list[Manifest]:
    """``count`` RuntimeClasses, each with an overhead and node rules (a nodeSelector and
    a toleration), so every pod gets all the changes pod admission makes."""
    classes = []
    for i in range(count):
        name = CLASS_NAMES[i] if i < len(CLASS_NAMES) else f"sandbox-{i:03d}"
        classes.append(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": name},
                "handler": name.split("-")[0],
                "overhead": {"podFixed": {"cpu": "250m", "memory": f"{64 + 32 * (i % 8)}Mi"}},
                "scheduling": {
                    "nodeSelector": {"sandbox.example.com/runtime": name},
                    "tolerations": [
                        {
                            "key": "sandbox.example.com/runtime",
                            "operator": "Equal",
                            "value": name,
                            "effect": "NoSchedule",
                        }
                    ],
                },
            }
        )
    return classes


def controller_pod(runtime_class: str) -> Manifest:
    """A pod as a ReplicaSet controller POSTs it: a name to generate, its (defaulted)
    template; no overhead, no node label, the default scheduler."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{runtime_class}-web-7d9f8c6b5-",
            "namespace": APPS,
            "labels": {"app": f"{runtime_class}-web", "pod-template-hash": "7d9f8c6b5"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{runtime_class}-web-7d9f8c6b5",
                    "uid": "0b7a9c1e-4f3d-4d6a-9e55-2f1c0d9b8a71",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "runtimeClassName": runtime_class,
            "containers": [
                {
                    "name": "web",
                    "image": "ghcr.io/example/web:2026.11.1",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"memory": "256Mi"},
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "enableServiceLinks": True,
        },
    }


def check_admitted(arm: str, pod: Manifest, runtime_class: Manifest, label_nodes: bool) -> None:
    """The created pod is what its arm must make of it (AssertionError otherwise)."""
    spec = pod["spec"]
    name = runtime_class["metadata"]["name"]
    want: tuple[str, Any, Any]
    if arm == "none":
        want = ("default-scheduler", None, None)
    else:
        selector = {f"{LABEL_PREFIX}/{name}": "true"} if label_nodes else None
        want = (SCHEDULER, runtime_class["overhead"]["podFixed"], selector)
    got = (spec.get("schedulerName"), spec.get("overhead"), spec.get("nodeSelector"))
    assert got == want, f"{arm}: pod {pod['metadata'].get('name')} of {name} admitted as {got}, want {want}"


# --------------------------------------------------------------------------- the overlay


def arm_manifests(overlay: str, arm: str) -> tuple[list[Manifest], list[str]]:
    """What ``arm`` loads into its API server for pod admission, and serve's flags from
    the overlay's Deployment (the ``extender`` container), without those in LOCAL_FLAGS."""
    from tests.support.manifests import render, render_webhook_way

    docs = (
        render_webhook_way(f"overlays/{overlay}")
        if arm.startswith("webhook")
        else render(f"overlays/{overlay}")
    )
    policy_kinds = (
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    )
    admission = [
        copy.deepcopy(d)
        for d in docs
        if arm != "none"
        and (
            d["kind"] == "MutatingWebhookConfiguration"
            or (d["kind"] in policy_kinds and d["metadata"]["name"].startswith("runtimeclass-extender-pod-"))
        )
    ]
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == SCHEDULER)
    container = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    )
    args = list(container["args"])
    assert args[0] == "serve", args
    flags = [a for a in args[1:] if a.split("=", 1)[0] not in LOCAL_FLAGS]
    return admission, flags


# --------------------------------------------------------------------------- the API server


def keep_webhook_connections() -> None:
    """In this process, have the test API server call webhooks as kube-apiserver does:
    one client per webhook configuration, its TLS context made once and its connections
    kept (util/webhook/client.go ``ClientManager.HookClient``), instead of a new session,
    TLS context and handshake for every call. Only the transport changes: what is sent,
    how the certificate is verified against the caBundle and every error's wording stay
    tests/support/apiserver/webhooks.py's."""
    import functools
    import ssl
    import types

    from tests.support.apiserver import webhooks

    shared: list[aiohttp.ClientSession] = []

    class KeptSession:
        def __init__(self, *, timeout: aiohttp.ClientTimeout | None = None) -> None:
            self.timeout = timeout

        async def __aenter__(self) -> KeptSession:
            if not shared:
                shared.append(aiohttp.ClientSession())
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

        def post(self, url: str, **kwargs: Any) -> Any:
            return shared[0].post(url, timeout=self.timeout, **kwargs)

    @functools.lru_cache(maxsize=64)
    def context_for(cadata: str | None) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=cadata)

    def create_default_context(*, cadata: str | None = None) -> ssl.SSLContext:
        return context_for(cadata)

    kept_aiohttp = types.SimpleNamespace(**{**vars(aiohttp), "ClientSession": KeptSession})
    kept_ssl = types.SimpleNamespace(**{**vars(ssl), "create_default_context": create_default_context})
    webhooks.aiohttp = kept_aiohttp  # type: ignore[assignment,attr-defined]
    webhooks.ssl = kept_ssl  # type: ignore[assignment,attr-defined]


def apiserver_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="pod_admission_bench.py --apiserver")
    parser.add_argument(
        "--setup", required=True, help="JSON: classes, admission, webhook_port, keep_connections"
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--counts", required=True, help="written on exit: CEL evaluations and pods")
    args = parser.parse_args(argv)
    from tests.support.apiserver import (
        MUTATING_WEBHOOKS,
        PODS,
        RUNTIME_CLASSES,
        FakeApiServer,
        admission_policy,
        webhooks,
    )

    setup = json.loads(Path(args.setup).read_text())
    if setup["keep_connections"]:
        keep_webhook_connections()
    # Every CEL evaluation (a policy's variable, condition, patch or validation, a
    # webhook's matchCondition), counted: what a pod costs, whatever the evaluator.
    evaluations = [0]

    def counting(execute: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            evaluations[0] += 1
            return execute(*args, **kwargs)

        return counted

    admission_policy.execute = counting(admission_policy.execute)  # type: ignore[attr-defined]
    webhooks.execute = counting(webhooks.execute)  # type: ignore[attr-defined]
    server = FakeApiServer(call_webhooks=True)
    for runtime_class in setup["classes"]:
        server.add(RUNTIME_CLASSES, runtime_class)
    hooks = [d for d in setup["admission"] if d["kind"] == "MutatingWebhookConfiguration"]
    for doc in hooks:
        server.add(MUTATING_WEBHOOKS, doc)
    ignored = server.apply([d for d in setup["admission"] if d not in hooks])
    assert ignored == [], ignored
    server.webhook_addresses[SERVICE] = ("127.0.0.1", setup["webhook_port"])
    try:
        asyncio.run(serve_api_server(server, args.kubeconfig))
    except KeyboardInterrupt:
        pass
    finally:
        counts = {"cel_evaluations": evaluations[0], "pods": len(server.objects(PODS))}
        Path(args.counts).write_text(json.dumps(counts))
    return 0


# --------------------------------------------------------------------------- one arm


class Arm:
    """One arm: its API server and the extender beside it, as processes."""

    def __init__(
        self,
        name: str,
        overlay: str,
        classes: list[Manifest],
        authority: trustme.CA,
        directory: Path,
    ) -> None:
        self.name = name
        admission, flags = arm_manifests(overlay, name)
        self.flags = flags
        self.label_nodes = "--label-nodes" in flags
        ca_bundle = base64.b64encode(authority.cert_pem.bytes()).decode()
        for doc in admission:
            for hook in doc.get("webhooks", ()):
                hook["clientConfig"]["caBundle"] = ca_bundle
        self.port, self.probe_port, self.admission_port = free_port(), free_port(), free_port()
        setup = directory / f"setup-{name}.json"
        setup.write_text(
            json.dumps(
                {
                    "classes": classes,
                    "admission": admission,
                    "webhook_port": self.admission_port,
                    "keep_connections": name != "webhook-new-connection",
                }
            )
        )
        kubeconfig = directory / f"kubeconfig-{name}"
        self.counts = directory / f"counts-{name}.json"
        # Logs to files: a pipe nobody reads would stall a process once it is full.
        self.logs = directory / f"apiserver-{name}.log", directory / f"serve-{name}.log"
        self.apiserver = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--apiserver",
                "--setup",
                str(setup),
                "--kubeconfig",
                str(kubeconfig),
                "--counts",
                str(self.counts),
            ],
            stdout=subprocess.PIPE,
            stderr=self.logs[0].open("wb"),
        )
        assert self.apiserver.stdout is not None
        self.url = self.apiserver.stdout.readline().decode().strip()
        if not self.url:
            raise RuntimeError(f"the {name} API server did not start: {self.logs[0].read_text()}")
        cert, key = directory / "tls.crt", directory / "tls.key"
        command = [
            *serve_command(),
            "serve",
            *flags,
            f"--kubeconfig={kubeconfig}",
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--probe-port={self.probe_port}",
            f"--admission-port={self.admission_port}",
            f"--admission-tls-cert-file={cert}",
            f"--admission-tls-key-file={key}",
            "--log-level=warning",
        ]
        env = {
            **os.environ,
            "POD_NAMESPACE": NAMESPACE,
            "POD_NAME": f"bench-{name}",
            "RUNTIMECLASS_EXTENDER_NAMESPACE": NAMESPACE,
        }
        self.extender = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=self.logs[1].open("wb"), env=env
        )
        self.latencies: list[float] = []
        self.apiserver_cpu = 0.0

    async def ready(self, session: aiohttp.ClientSession) -> None:
        leading = "--leader-elect" in self.flags
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.extender.poll() is not None:
                raise RuntimeError(f"serve of the {self.name} arm exited: {self.logs[1].read_text()}")
            try:
                async with session.get(f"http://127.0.0.1:{self.probe_port}/readyz") as response:
                    body = await response.json()
                    if response.status == 200 and (not leading or body.get("leader", {}).get("leading")):
                        return
            except (aiohttp.ClientError, ValueError):
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError(f"serve of the {self.name} arm did not become ready")

    async def create(self, session: aiohttp.ClientSession, runtime_class: Manifest) -> float:
        """Create one pod; the seconds from the POST to its whole answer."""
        body = orjson.dumps(controller_pod(runtime_class["metadata"]["name"]))
        headers = {"Authorization": "Bearer fake-token", "Content-Type": "application/json"}
        start = time.perf_counter()
        async with session.post(f"{self.url}/api/v1/namespaces/{APPS}/pods", data=body, headers=headers) as r:
            answer = await r.read()
            status = r.status
        elapsed = time.perf_counter() - start
        assert status == 201, f"{self.name}: {status} {answer[:500]!r}"
        check_admitted(self.name, orjson.loads(answer), runtime_class, self.label_nodes)
        return elapsed

    def cpu(self) -> float:
        return cpu_seconds(self.apiserver.pid)

    def stop(self) -> None:
        for proc in (self.extender, self.apiserver):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in (self.extender, self.apiserver):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def cel_evaluations_per_pod(self) -> float | None:
        """From the API server's counts, once it has stopped."""
        try:
            counts = json.loads(self.counts.read_text())
        except (OSError, ValueError):
            return None
        return counts["cel_evaluations"] / counts["pods"] if counts["pods"] else None


def percentile(ordered: list[float], q: float) -> float:
    """Nearest rank: the smallest sample with at least ``q`` of all at or below it."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def measure(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    classes = runtime_classes(args.classes)
    authority = trustme.CA()
    leaf = authority.issue_cert(SERVER_NAME)
    leaf.private_key_and_cert_chain_pem.write_to_path(str(directory / "tls.crt"))
    leaf.private_key_pem.write_to_path(str(directory / "tls.key"))
    arms: list[Arm] = []
    paced = Pacer(args.interval / 1e3)
    try:
        for name in args.arms:
            arms.append(Arm(name, args.overlay, classes, authority, directory))
        per_round = max(1, args.pods // args.rounds)
        # One connection per API server, kept (a controller's client keeps its own).
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit_per_host=1)) as session:
            for arm in arms:
                await arm.ready(session)
            for arm in arms:
                for i in range(args.warmup):
                    await paced()
                    await arm.create(session, classes[i % len(classes)])
            paced.late = 0
            for r in range(args.rounds):
                order = arms[r % len(arms) :] + arms[: r % len(arms)]
                for arm in order:
                    before = arm.cpu()
                    for _ in range(per_round):
                        # Each arm the same sequence of classes.
                        runtime_class = classes[len(arm.latencies) % len(classes)]
                        await paced()
                        arm.latencies.append(await arm.create(session, runtime_class))
                    arm.apiserver_cpu += arm.cpu() - before
    finally:
        for arm in arms:
            arm.stop()
    results: dict[str, Any] = {
        "overlay": args.overlay,
        "classes": args.classes,
        "pods_per_arm": per_round * args.rounds,
        "rounds": args.rounds,
        "interval_ms": args.interval,
        "late_pods": paced.late,
        "cpu": cpu_model(),
        "load_average": os.getloadavg()[0],
        "arms": {},
    }
    for arm in arms:
        ordered = sorted(arm.latencies)
        n = len(ordered)
        results["arms"][arm.name] = {
            "p50_ms": percentile(ordered, 0.50) * 1e3,
            "p99_ms": percentile(ordered, 0.99) * 1e3,
            "mean_ms": statistics.fmean(ordered) * 1e3,
            "max_ms": ordered[-1] * 1e3,
            "apiserver_cpu_ms_per_pod": arm.apiserver_cpu / n * 1e3,
            "cel_evaluations_per_pod": arm.cel_evaluations_per_pod(),
            "serve_flags": arm.flags,
        }
    return results


def report(results: dict[str, Any]) -> None:
    arms = results["arms"]
    pace = (
        f", one every {results['interval_ms']:g} ms ({results['late_pods']} late)"
        if results["interval_ms"]
        else ""
    )
    print(
        f"overlay {results['overlay']}, {results['classes']} RuntimeClasses,"
        f" {results['pods_per_arm']} pods an arm in {results['rounds']} alternating rounds{pace};"
        f" {results['cpu'] or 'unknown CPU'}, load average {results['load_average']:.2f}"
    )
    print(
        f"{'arm':<24} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'max ms':>8}"
        f" {'API server CPU/pod':>19} {'CEL evaluations/pod':>20}"
    )
    for name, row in arms.items():
        evaluations = row["cel_evaluations_per_pod"]
        latency = " ".join(f"{row[key]:>8.2f}" for key in ("p50_ms", "p99_ms", "mean_ms", "max_ms"))
        print(
            f"{name:<24} {latency} {row['apiserver_cpu_ms_per_pod']:>16.2f} ms"
            f" {'?' if evaluations is None else f'{evaluations:.1f}':>20}"
        )
    for other in ("webhook", "none"):
        if "policy" in arms and other in arms:
            ratios = ", ".join(
                f"{key[:-3]} {arms['policy'][key] / arms[other][key]:.2f}"
                for key in ("p50_ms", "p99_ms", "mean_ms")
            )
            print(f"policy/{other}: {ratios}")
    if "webhook" in arms and "webhook-new-connection" in arms:
        ratios = ", ".join(
            f"{key[:-3]} {arms['webhook-new-connection'][key] / arms['webhook'][key]:.2f}"
            for key in ("p50_ms", "p99_ms", "mean_ms")
        )
        print(f"webhook-new-connection/webhook: {ratios}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--apiserver"]:
        return apiserver_main(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=300, help="timed pods per arm (default 300)")
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds the pods are spread over")
    parser.add_argument("--warmup", type=int, default=20, help="untimed pods per arm first")
    parser.add_argument("--classes", type=int, default=3, help="RuntimeClasses, the pods spread over them")
    parser.add_argument(
        "--interval",
        type=float,
        default=0.0,
        help="milliseconds from one pod's POST to the next's (default 0: each as soon as the last is "
        "answered, as a controller creates a burst)",
    )
    parser.add_argument(
        "--overlay",
        choices=("large-cluster", "predicate-mode"),
        default="large-cluster",
        help="whose pod admission: large-cluster (routing, overhead and the node label; the default) "
        "or predicate-mode (routing and overhead)",
    )
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(DEFAULT_ARMS))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if shutil.which("kubectl") is None:
        parser.error("kubectl is needed to render the overlays (kubectl kustomize)")
    if args.classes < 1 or args.pods < 1 or args.rounds < 1:
        parser.error("--classes, --pods and --rounds must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        results = asyncio.run(measure(args, Path(tmp)))
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
