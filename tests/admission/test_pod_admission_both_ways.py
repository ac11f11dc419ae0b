"""One table of pods and RuntimeClasses, admitted both ways: the same pods come out.

Each pod of ``PODS`` is created (POST, as a controller creates it) in two test API
servers holding the same RuntimeClasses and Namespaces:

- **the policies**: the pod admission policies as an overlay renders them
  (deploy/components/pod-admission-policy, and in large-cluster mode its label-nodes
  sub-component and the pod webhook narrowed to class names over 63 characters), their
  exact CEL evaluated by the server (tests/support/apiserver/mutating_policy.py emulates
  MutatingAdmissionPolicy's JSON Patch as
  staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating applies it, params
  included);
- **the webhook**: the pod webhook as the overlay's copy for an API server without
  MutatingAdmissionPolicy renders it, called over TLS by the server
  (tests/support/apiserver/webhooks.py), answered by the extender's own admission
  listener over the same classes.

The stored pods must be equal field for field, and a refused pod refused with the same
message after each mechanism's own prefix. Three setups: predicate mode (routing and
overhead), large-cluster mode with the bundled policy (and the label requirement), and
large-cluster mode with a policy that enables the runtime-handler check, where every
class has node rules (docs/large-clusters.md's patch of ``everyClassHasNodeRules``).
So the label policy agrees with the labeller (``ClassLabels``, which the webhook asks)
for every policy the project ships.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web

from extender.admission import RoutingConfig
from extender.cluster.class_labels import ClassLabels, label_key
from extender.cluster.objects import runtime_class_from_api
from extender.cluster.state import ClusterState
from extender.http.admission_listener import create_admission_app
from extender.http.app import create_app
from extender.policy_file import load_policy
from extender.settings import DEFAULT_NODE_LABEL_PREFIX
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from policies.registry import Policy
from tests.support.apiserver import MUTATING_WEBHOOKS, RUNTIME_CLASSES, FakeApiServer, ResourceType
from tests.support.manifests import one, render, render_webhook_way
from tests.support.paths import REPO

Manifest = dict[str, Any]
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace")
SERVICE = ("runtimeclass-extender", "runtimeclass-extender-webhook", 443)
SERVER_NAME = "runtimeclass-extender-webhook.runtimeclass-extender.svc"
SCHEDULER = "runtimeclass-scheduler"
OPT_OUT = {"runtimeclass-extender.dev/webhook": "ignore"}
LONG = "sandboxed-runtime-for-untrusted-workloads-with-a-rather-long-class-name"
ADMIN_HEADERS = {"Content-Type": "application/json"}
RUNTIME_HANDLER_POLICY = """\
apiVersion: runtimeclass-extender.dev/v1alpha1
kind: Policy
predicates:
- name: RuntimeClassExists
- name: RuntimeClassNodeSelector
- name: RuntimeHandler
  options:
    nodesWithoutReport: fail
    requiredFeatures: [userNamespaces]
- name: TaintToleration
"""


def runtime_class(
    name: str,
    *,
    overhead: dict[str, str] | None = None,
    empty_overhead: bool = False,
    node_selector: dict[str, str] | None = None,
    term: str | None = None,
) -> Manifest:
    obj: Manifest = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": "runsc" if name != "kata" else "kata",
    }
    if term is not None:
        obj["metadata"]["annotations"] = {NODE_SELECTOR_TERM_ANNOTATION: term}
    if overhead is not None:
        obj["overhead"] = {"podFixed": overhead}
    elif empty_overhead:
        obj["overhead"] = {}
    if node_selector is not None:
        obj["scheduling"] = {"nodeSelector": node_selector}
    return obj


GVISOR_OVERHEAD = {"cpu": "250m", "memory": "64Mi"}
KATA_OVERHEAD = {"cpu": "250m", "memory": "160Mi"}
CLASSES = [
    # Node rules and an overhead.
    runtime_class("gvisor", overhead=GVISOR_OVERHEAD, node_selector={"sandbox.gke.io/runtime": "gvisor"}),
    # An overhead, no node rules.
    runtime_class("kata", overhead=KATA_OVERHEAD),
    # Only the node-selector-term annotation.
    runtime_class(
        "term-only",
        term='{"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["0"]}]}',
    ),
    # A malformed annotation: node rules (it fails closed), no overhead.
    runtime_class("bad-term", term="not: [a, term"),
    # Nothing at all; an empty scheduling.nodeSelector is no rule either.
    runtime_class("plain"),
    runtime_class("empty-selector", node_selector={}),
    # overhead: {} (no podFixed).
    runtime_class("empty-overhead", empty_overhead=True),
    # A name over 63 characters: a hashed label.
    runtime_class(LONG, overhead=GVISOR_OVERHEAD, node_selector={"sandbox.gke.io/runtime": "gvisor"}),
]
# Each with the label the API server gives every namespace (the namespace strategy's
# kubernetes.io/metadata.name, which the bindings' and the webhook's selectors read).
NAMESPACE_OBJECTS = [
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}},
    }
    for name, labels in (
        ("apps", {}),
        ("opted-out", OPT_OUT),
        ("kube-system", {}),
        ("runtimeclass-extender", OPT_OUT),
    )
]


@dataclass(frozen=True)
class PodCase:
    id: str
    runtime_class: str | None
    namespace: str = "apps"
    scheduler: str | None = None
    overhead: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # In large-cluster mode only (a label value that conflicts).
    large_only: bool = False

    def manifest(self) -> Manifest:
        spec: Manifest = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        if self.runtime_class is not None:
            spec["runtimeClassName"] = self.runtime_class
        if self.scheduler is not None:
            spec["schedulerName"] = self.scheduler
        if self.overhead is not None:
            spec["overhead"] = dict(self.overhead)
        if self.node_selector is not None:
            spec["nodeSelector"] = dict(self.node_selector)
        metadata: Manifest = {"name": self.id, "namespace": self.namespace}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


GVISOR_KEY = label_key(DEFAULT_NODE_LABEL_PREFIX, "gvisor")
PODS_TABLE = [
    PodCase("gvisor", "gvisor"),
    PodCase("gvisor-default-scheduler", "gvisor", scheduler="default-scheduler"),
    PodCase("gvisor-own-scheduler", "gvisor", scheduler="my-scheduler"),
    PodCase("gvisor-routed-already", "gvisor", scheduler=SCHEDULER),
    PodCase("gvisor-own-selector", "gvisor", node_selector={"topology.kubernetes.io/zone": "a"}),
    PodCase("gvisor-label-given", "gvisor", node_selector={GVISOR_KEY: "true"}),
    PodCase("gvisor-label-conflict", "gvisor", node_selector={GVISOR_KEY: "false"}, large_only=True),
    PodCase("gvisor-overhead-equal", "gvisor", overhead={"cpu": "0.25", "memory": "67108864"}),
    PodCase("gvisor-overhead-differs", "gvisor", overhead={"cpu": "500m", "memory": "64Mi"}),
    PodCase("gvisor-overhead-fewer", "gvisor", overhead={"cpu": "250m"}),
    PodCase("gvisor-opt-out-label", "gvisor", labels=OPT_OUT),
    PodCase("gvisor-opted-out-namespace", "gvisor", namespace="opted-out"),
    PodCase("gvisor-kube-system", "gvisor", namespace="kube-system"),
    PodCase("gvisor-own-namespace", "gvisor", namespace="runtimeclass-extender"),
    PodCase("kata", "kata"),
    PodCase("kata-own-scheduler-and-overhead", "kata", scheduler="batch", overhead=KATA_OVERHEAD),
    PodCase("term-only", "term-only"),
    PodCase("bad-term", "bad-term"),
    PodCase("plain", "plain"),
    PodCase("plain-with-overhead", "plain", overhead={"cpu": "100m"}),
    PodCase("empty-selector", "empty-selector"),
    PodCase("empty-overhead-with-overhead", "empty-overhead", overhead={"cpu": "100m"}),
    PodCase("empty-overhead", "empty-overhead"),
    PodCase("long-class-name", LONG),
    PodCase("long-class-name-opt-out", LONG, labels=OPT_OUT),
    PodCase("missing-class", "does-not-exist"),
    PodCase("missing-class-with-overhead", "does-not-exist", overhead={"cpu": "100m"}),
    PodCase("no-class", None),
    PodCase("empty-class", ""),
]


@dataclass(frozen=True)
class Setup:
    id: str
    overlay: str
    label_nodes: bool = False
    policy_text: str | None = None

    def policy(self) -> Policy:
        if self.policy_text is None:
            return load_policy()
        path = REPO / ".pytest-policy.yaml"
        path.write_text(self.policy_text, encoding="utf-8")
        try:
            return load_policy(path)
        finally:
            path.unlink()

    def policies_way(self) -> list[Manifest]:
        """What the overlay applies for pod admission, as shipped (with docs/large-
        clusters.md's change for a policy whose every class has node rules)."""
        docs = render(self.overlay)
        wanted = [
            copy.deepcopy(d)
            for d in docs
            if d["metadata"]["name"].startswith("runtimeclass-extender-pod-")
            or d["kind"] == "MutatingWebhookConfiguration"
        ]
        if self.policy_text is not None:
            for doc in wanted:
                if doc["kind"] in ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy") and doc[
                    "metadata"
                ]["name"].endswith("-node-label"):
                    variable = doc["spec"]["variables"][1]
                    assert variable["name"] == "everyClassHasNodeRules"
                    variable["expression"] = "true"
        return wanted

    def webhook_way(self) -> list[Manifest]:
        return [copy.deepcopy(one(render_webhook_way(self.overlay), "MutatingWebhookConfiguration"))]


SETUPS = [
    Setup("predicate-mode", "overlays/predicate-mode"),
    Setup("large-cluster", "overlays/large-cluster", label_nodes=True),
    Setup("large-cluster, runtime-handler policy", "overlays/large-cluster", True, RUNTIME_HANDLER_POLICY),
]


# --- the two API servers ------------------------------------------------------------


@dataclass
class Webhook:
    """The extender's admission listener over TLS, as the API server reaches it."""

    port: int
    ca_pem: bytes


async def _serve_webhook(setup: Setup, pki: trustme.CA) -> AsyncIterator[Webhook]:
    state = ClusterState()
    state.nodes.replace([])
    state.runtime_classes.replace(runtime_class_from_api(rc) for rc in CLASSES)
    policy = setup.policy()
    labels = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, policy) if setup.label_nodes else None
    routing = RoutingConfig(SCHEDULER, own_namespace="runtimeclass-extender", class_labels=labels)
    app = create_admission_app(create_app(state=state, policy=policy, routing=routing))
    leaf = pki.issue_cert(SERVER_NAME)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    leaf.configure_cert(context)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Webhook(port, pki.cert_pem.bytes())
    finally:
        await runner.cleanup()


async def _api_server(manifests: list[Manifest], webhook: Webhook) -> FakeApiServer:
    server = FakeApiServer(call_webhooks=True)
    server.register(NAMESPACES)
    for namespace in NAMESPACE_OBJECTS:
        server.add(NAMESPACES, namespace)
    for rc in CLASSES:
        server.add(RUNTIME_CLASSES, rc)
    for doc in manifests:
        if doc["kind"] == "MutatingWebhookConfiguration":
            for hook in doc["webhooks"]:
                hook["clientConfig"]["caBundle"] = base64.b64encode(webhook.ca_pem).decode()
            server.add(MUTATING_WEBHOOKS, doc)
    ignored = server.apply([d for d in manifests if d["kind"] != "MutatingWebhookConfiguration"])
    assert ignored == []
    server.webhook_addresses[SERVICE] = ("127.0.0.1", webhook.port)
    await server.start()
    return server


@dataclass(frozen=True)
class Admitted:
    status: int
    pod: Manifest | None
    message: str


_STAMPED = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
_PREFIXES = (
    'admission webhook "pods.runtimeclass-extender.dev" denied the request: ',
    "with binding '",
)


def _message(status: Manifest) -> str:
    """The refusal after the mechanism's own words (a webhook's, a policy's)."""
    message = str(status.get("message", ""))
    webhook = _PREFIXES[0]
    if webhook in message:
        return message.split(webhook, 1)[1]
    if "ValidatingAdmissionPolicy '" in message:
        return message.split("' denied request: ", 1)[1]
    return message


async def _create(session: aiohttp.ClientSession, server: FakeApiServer, pod: Manifest) -> Admitted:
    namespace = pod["metadata"]["namespace"]
    async with session.post(
        f"{server.url}/api/v1/namespaces/{namespace}/pods",
        data=json.dumps(pod),
        headers={**ADMIN_HEADERS, "Authorization": f"Bearer {server.token}"},
    ) as response:
        body = await response.json()
    if response.status != 201:
        return Admitted(response.status, None, _message(body))
    stored = copy.deepcopy(body)
    for key in _STAMPED:
        stored["metadata"].pop(key, None)
    return Admitted(201, stored, "")


# --- the comparison ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki() -> trustme.CA:
    return trustme.CA()


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.id)
async def test_every_pod_of_the_table_comes_out_the_same_both_ways(setup: Setup, pki: trustme.CA) -> None:
    webhooks = _serve_webhook(setup, pki)
    webhook = await anext(webhooks)
    policies = await _api_server(setup.policies_way(), webhook)
    webhook_only = await _api_server(setup.webhook_way(), webhook)
    try:
        async with aiohttp.ClientSession() as session:
            for case in PODS_TABLE:
                if case.large_only and not setup.label_nodes:
                    continue
                by_policy = await _create(session, policies, case.manifest())
                by_webhook = await _create(session, webhook_only, case.manifest())
                assert by_policy == by_webhook, case.id
                EXPECTED[case.id](setup, by_policy)
                _agrees_with_the_labeller(setup, case, by_policy)
    finally:
        await policies.stop()
        await webhook_only.stop()
        await webhooks.aclose()


async def test_with_the_extender_stopped_the_policies_still_admit_every_pod_but_long_class_names(
    pki: trustme.CA,
) -> None:
    """No replica answers: the webhook way refuses every pod of a RuntimeClass; the
    policies admit each one exactly as with the extender up, but a pod whose class name
    is over 63 characters (large-cluster mode's narrowed webhook, Fail)."""
    setup = SETUPS[1]
    webhooks = _serve_webhook(setup, pki)
    webhook = await anext(webhooks)
    up = await _api_server(setup.policies_way(), webhook)
    async with aiohttp.ClientSession() as session:
        expected = {case.id: await _create(session, up, case.manifest()) for case in PODS_TABLE}
    await up.stop()
    await webhooks.aclose()  # every replica stopped: nothing listens on the port
    down = await _api_server(setup.policies_way(), webhook)
    webhook_down = await _api_server(setup.webhook_way(), webhook)
    try:
        async with aiohttp.ClientSession() as session:
            for case in PODS_TABLE:
                got = await _create(session, down, case.manifest())
                refused = await _create(session, webhook_down, case.manifest())
                if case.runtime_class == LONG and case.namespace == "apps":
                    assert got.status == 500 and "failed calling webhook" in got.message, case.id
                else:
                    assert got == expected[case.id], case.id
                if case.runtime_class and case.namespace == "apps":
                    assert refused.status == 500, case.id
                    assert 'failed calling webhook "pods.runtimeclass-extender.dev"' in refused.message
    finally:
        await down.stop()
        await webhook_down.stop()


# --- what each pod must be (the same both ways, so said once) ------------------------------


def _spec(admitted: Admitted) -> Manifest:
    assert admitted.status == 201 and admitted.pod is not None, admitted
    spec: Manifest = admitted.pod["spec"]
    return spec


def _label(setup: Setup, class_name: str) -> dict[str, str]:
    return {label_key(DEFAULT_NODE_LABEL_PREFIX, class_name): "true"} if setup.label_nodes else {}


def _routed(scheduler: str = SCHEDULER) -> Callable[[Setup, Admitted], None]:
    def check(setup: Setup, admitted: Admitted) -> None:
        assert _spec(admitted)["schedulerName"] == scheduler

    return check


def _pod(
    *,
    scheduler: str = SCHEDULER,
    overhead: dict[str, str] | None = None,
    selector: Callable[[Setup], dict[str, str]] = lambda setup: {},
) -> Callable[[Setup, Admitted], None]:
    def check(setup: Setup, admitted: Admitted) -> None:
        spec = _spec(admitted)
        assert spec["schedulerName"] == scheduler
        assert spec.get("overhead") == overhead
        assert spec.get("nodeSelector", {}) == selector(setup)

    return check


def _refused(message: str) -> Callable[[Setup, Admitted], None]:
    def check(setup: Setup, admitted: Admitted) -> None:
        assert (admitted.status, admitted.message) == (422, message), admitted

    return check


def _agrees_with_the_labeller(setup: Setup, case: PodCase, admitted: Admitted) -> None:
    """A pod of an existing class, admitted, not opted out, whose class name fits a
    label, requires its class's label exactly when the labeller labels nodes for the
    class (``ClassLabels.has_node_rules`` under the setup's policy)."""
    if not setup.label_nodes or admitted.pod is None or case.labels or case.namespace != "apps":
        return
    source = next((rc for rc in CLASSES if rc["metadata"]["name"] == case.runtime_class), None)
    if source is None or case.node_selector:
        return
    labels = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, setup.policy())
    required = labels.key(source["metadata"]["name"]) in admitted.pod["spec"].get("nodeSelector", {})
    assert required == labels.has_node_rules(runtime_class_from_api(source)), case.id


MISMATCH = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
WITHOUT = "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"


def _rules_label(class_name: str) -> Callable[[Setup], dict[str, str]]:
    """The class's label where it has node rules only by the policy (RuntimeHandler)."""
    return lambda setup: _label(setup, class_name) if setup.policy_text else {}


EXPECTED: dict[str, Callable[[Setup, Admitted], None]] = {
    "gvisor": _pod(overhead=GVISOR_OVERHEAD, selector=lambda s: _label(s, "gvisor")),
    "gvisor-default-scheduler": _pod(overhead=GVISOR_OVERHEAD, selector=lambda s: _label(s, "gvisor")),
    "gvisor-own-scheduler": _pod(
        scheduler="my-scheduler", overhead=GVISOR_OVERHEAD, selector=lambda s: _label(s, "gvisor")
    ),
    "gvisor-routed-already": _pod(overhead=GVISOR_OVERHEAD, selector=lambda s: _label(s, "gvisor")),
    "gvisor-own-selector": _pod(
        overhead=GVISOR_OVERHEAD,
        selector=lambda s: {"topology.kubernetes.io/zone": "a", **_label(s, "gvisor")},
    ),
    "gvisor-label-given": _pod(overhead=GVISOR_OVERHEAD, selector=lambda s: {GVISOR_KEY: "true"}),
    "gvisor-label-conflict": _refused(
        f"conflict: RuntimeClass gvisor requires {GVISOR_KEY} = true; pod.spec.nodeSelector[{GVISOR_KEY}] = false"
    ),
    # Equal by value: kept as the pod wrote it.
    "gvisor-overhead-equal": _pod(
        overhead={"cpu": "0.25", "memory": "67108864"}, selector=lambda s: _label(s, "gvisor")
    ),
    "gvisor-overhead-differs": _refused(MISMATCH),
    "gvisor-overhead-fewer": _refused(MISMATCH),
    # Not routed, no label; the overhead all the same.
    "gvisor-opt-out-label": _pod(scheduler="default-scheduler", overhead=GVISOR_OVERHEAD),
    # Left out entirely.
    "gvisor-opted-out-namespace": _pod(scheduler="default-scheduler"),
    "gvisor-kube-system": _pod(scheduler="default-scheduler"),
    "gvisor-own-namespace": _pod(scheduler="default-scheduler"),
    "kata": _pod(overhead=KATA_OVERHEAD, selector=_rules_label("kata")),
    "kata-own-scheduler-and-overhead": _pod(
        scheduler="batch", overhead=KATA_OVERHEAD, selector=_rules_label("kata")
    ),
    "term-only": _pod(selector=lambda s: _label(s, "term-only")),
    "bad-term": _pod(selector=lambda s: _label(s, "bad-term")),
    "plain": _pod(selector=_rules_label("plain")),
    "plain-with-overhead": _refused(WITHOUT),
    "empty-selector": _pod(selector=_rules_label("empty-selector")),
    "empty-overhead-with-overhead": _refused(MISMATCH),
    "empty-overhead": _pod(selector=_rules_label("empty-overhead")),
    # The hashed label, from the webhook alone (the policies cannot compute it).
    "long-class-name": _pod(overhead=GVISOR_OVERHEAD, selector=lambda s: _label(s, LONG)),
    "long-class-name-opt-out": _pod(scheduler="default-scheduler", overhead=GVISOR_OVERHEAD),
    # Routed, so that the extender keeps it pending until the class exists; nothing else.
    "missing-class": _pod(),
    "missing-class-with-overhead": _pod(overhead={"cpu": "100m"}),
    "no-class": _pod(scheduler="default-scheduler"),
    "empty-class": _pod(scheduler="default-scheduler"),
}


def test_the_table_says_what_every_pod_must_be() -> None:
    assert set(EXPECTED) == {case.id for case in PODS_TABLE}


# --- a webhook that sets runtimeClassName after pod admission ran ---------------------------


async def _injector(pki: trustme.CA) -> AsyncIterator[Manifest]:
    """A mutating webhook, as kata's injects ``runtimeClassName`` into pods labelled for
    it, named to be called after the extender's (configurations are called in name
    order); its configuration, with the caBundle, is yielded."""

    async def inject(request: web.Request) -> web.Response:
        review = await request.json()
        pod = review["request"]["object"]
        patch = []
        if (pod["metadata"].get("labels") or {}).get("inject-runtimeclass") and not pod["spec"].get(
            "runtimeClassName"
        ):
            patch = [{"op": "add", "path": "/spec/runtimeClassName", "value": "gvisor"}]
        response: Manifest = {"uid": review["request"]["uid"], "allowed": True}
        if patch:
            response |= {
                "patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
            }
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )

    app = web.Application()
    app.router.add_post("/inject", inject)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    pki.issue_cert("127.0.0.1").configure_cert(context)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "zz-runtimeclass-injector"},
            "webhooks": [
                {
                    "name": "inject.runtimeclass.example",
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                            "operations": ["CREATE"],
                        }
                    ],
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/inject",
                        "caBundle": base64.b64encode(pki.cert_pem.bytes()).decode(),
                    },
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "reinvocationPolicy": "IfNeeded",
                }
            ],
        }
    finally:
        await runner.cleanup()


async def test_a_class_set_by_a_later_webhook_gets_the_policies_but_not_the_webhook(pki: trustme.CA) -> None:
    """The policies decide in their expressions, so the API server evaluates them again
    after a webhook sets ``runtimeClassName`` (reinvocation): the pod is routed and
    given its overhead and label. The pod webhook is not called again, since it was not
    called at first (its matchCondition: no class yet): the pod is left as the injector
    made it, which is why the webhook's docs ask for such a webhook to be called first."""
    setup = SETUPS[1]
    webhooks = _serve_webhook(setup, pki)
    webhook = await anext(webhooks)
    injectors = _injector(pki)
    injector = await anext(injectors)
    policies = await _api_server([*setup.policies_way(), copy.deepcopy(injector)], webhook)
    webhook_only = await _api_server([*setup.webhook_way(), copy.deepcopy(injector)], webhook)
    pod = PodCase("injected", None, labels={"inject-runtimeclass": "gvisor"}).manifest()
    try:
        async with aiohttp.ClientSession() as session:
            by_policy = await _create(session, policies, pod)
            by_webhook = await _create(session, webhook_only, pod)
        spec = _spec(by_policy)
        assert spec["runtimeClassName"] == "gvisor"
        assert spec["schedulerName"] == SCHEDULER
        assert spec["overhead"] == GVISOR_OVERHEAD
        assert spec["nodeSelector"] == {GVISOR_KEY: "true"}
        spec = _spec(by_webhook)
        assert spec["runtimeClassName"] == "gvisor"
        assert (spec["schedulerName"], spec.get("overhead"), spec.get("nodeSelector")) == (
            "default-scheduler",
            None,
            None,
        )
    finally:
        await policies.stop()
        await webhook_only.stop()
        await injectors.aclose()
        await webhooks.aclose()
