"""One table of pods and RuntimeClasses, admitted both ways: the same pods come out.

Each pod of ``PODS`` is created (POST, as a controller creates it) in two test API
servers holding the same RuntimeClasses and Namespaces:

- **the policies**: the pod admission policies as an overlay renders them
  (deploy/components/pod-admission-policy), their exact CEL evaluated by the server
  (tests/support/apiserver/mutating_policy.py emulates MutatingAdmissionPolicy's JSON
  Patch as staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating applies
  it, params included), reading the pod admission table as the extender's leader
  writes it for those classes (extender/admission/pod_table.py);
- **the webhook**: the pod webhook as the overlay's copy for an API server without
  MutatingAdmissionPolicy renders it, called over TLS by the server
  (tests/support/apiserver/webhooks.py), answered by the extender's own admission
  listener over the same classes.

The stored pods must be equal field for field, and a refused pod refused with the same
message after each mechanism's own prefix. Three setups: predicate mode (routing and
overhead), predicate mode with the node labels with the bundled policy (and the label requirement), and
predicate mode with the node labels with a policy that enables the runtime-handler check, where every
class has node rules. So the table's labels agree with the labeller (``ClassLabels``,
which the webhook asks) for every policy the project ships. tests/real/ admits the
same table on kube-apiserver itself.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web

from extender.admission import RoutingConfig
from extender.cluster.objects import runtime_class_from_api
from extender.cluster.state import ClusterState
from extender.http.admission_listener import create_admission_app
from extender.http.app import create_app
from tests.support.apiserver import (
    MUTATING_WEBHOOKS,
    RUNTIME_CLASSES,
    FakeApiServer,
)
from tests.support.pod_cases import (
    CLASSES,
    EXPECTED,
    NAMESPACE_OBJECTS,
    NAMESPACES,
    PODS_TABLE,
    SCHEDULER,
    SETUPS,
    TABLES,
    PodCase,
    Setup,
    admitted_as_it_came,
    agrees_with_the_labeller,
    create_pod,
    injector_configuration,
    injector_patch,
    marked_admitted,
    spec_of,
)

Manifest = dict[str, Any]
SERVICE = ("runtimeclass-extender", "runtimeclass-extender-webhook", 443)
SERVER_NAME = "runtimeclass-extender-webhook.runtimeclass-extender.svc"
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
    routing = RoutingConfig(
        SCHEDULER, own_namespace="runtimeclass-extender", class_labels=setup.labels(), node_rules=setup.rules()
    )
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
    server.register(TABLES)
    for namespace in NAMESPACE_OBJECTS:
        server.add(NAMESPACES, namespace)
    for rc in CLASSES:
        server.add(RUNTIME_CLASSES, rc)
    for doc in manifests:
        if doc["kind"] == "MutatingWebhookConfiguration":
            for hook in doc["webhooks"]:
                hook["clientConfig"]["caBundle"] = base64.b64encode(webhook.ca_pem).decode()
            server.add(MUTATING_WEBHOOKS, doc)
        elif doc["kind"] == TABLES.kind:
            server.add(TABLES, doc)
    ignored = server.apply([d for d in manifests if d["kind"] not in ("MutatingWebhookConfiguration", TABLES.kind)])
    assert ignored == []
    server.webhook_addresses[SERVICE] = ("127.0.0.1", webhook.port)
    await server.start()
    return server


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
                by_policy = await create_pod(session, policies, case.manifest())
                by_webhook = await create_pod(session, webhook_only, case.manifest())
                assert by_policy == marked_admitted(by_webhook), case.id
                EXPECTED[case.id](setup, by_webhook)
                agrees_with_the_labeller(setup, case, by_policy)
    finally:
        await policies.stop()
        await webhook_only.stop()
        await webhooks.aclose()


async def test_with_the_extender_stopped_the_policies_still_admit_every_pod(pki: trustme.CA) -> None:
    """No replica answers: the webhook way refuses every pod of a RuntimeClass; the
    policies admit each one exactly as with the extender up, from the table its leader
    last wrote (class names over 63 characters included: the table names their hashed
    label)."""
    setup = SETUPS[1]
    webhooks = _serve_webhook(setup, pki)
    webhook = await anext(webhooks)
    up = await _api_server(setup.policies_way(), webhook)
    async with aiohttp.ClientSession() as session:
        expected = {case.id: await create_pod(session, up, case.manifest()) for case in PODS_TABLE}
    await up.stop()
    await webhooks.aclose()  # every replica stopped: nothing listens on the port
    down = await _api_server(setup.policies_way(), webhook)
    webhook_down = await _api_server(setup.webhook_way(), webhook)
    try:
        async with aiohttp.ClientSession() as session:
            for case in PODS_TABLE:
                got = await create_pod(session, down, case.manifest())
                refused = await create_pod(session, webhook_down, case.manifest())
                assert got == expected[case.id], case.id
                if case.runtime_class and case.namespace == "apps":
                    assert refused.status == 500, case.id
                    assert 'failed calling webhook "pods.runtimeclass-extender.dev"' in refused.message
    finally:
        await down.stop()
        await webhook_down.stop()


async def test_while_the_table_is_missing_every_pod_is_admitted_as_it_came(pki: trustme.CA) -> None:
    """Before the leader's first write (or after the table is deleted) the mutating
    policy is skipped (parameterNotFoundAction Allow: the param is looked up before its
    match conditions, so Deny would refuse every pod of the namespace), nothing marks a
    pod for the guard, and every pod is admitted as it came, as before the install: a pod
    of a class without its routing, overhead, label requirement and tolerations, one the
    table would have refused too. Every other pod comes out as with the table."""
    setup = SETUPS[1]
    webhooks = _serve_webhook(setup, pki)
    webhook = await anext(webhooks)
    with_table = await _api_server(setup.policies_way(), webhook)
    without = await _api_server(setup.policies_way()[1:], webhook)
    assert setup.policies_way()[0]["kind"] == TABLES.kind
    try:
        async with aiohttp.ClientSession() as session:
            for case in PODS_TABLE:
                got = await create_pod(session, without, case.manifest())
                if admitted_as_it_came(case):
                    assert got.status == 201 and got.pod is not None, case.id
                    asked = case.manifest()
                    assert got.pod["spec"] == {"schedulerName": "default-scheduler", **asked["spec"]}, case.id
                    for field in ("labels", "annotations"):
                        assert got.pod["metadata"].get(field) == asked["metadata"].get(field), case.id
                else:
                    assert got == await create_pod(session, with_table, case.manifest()), case.id
    finally:
        await with_table.stop()
        await without.stop()
        await webhooks.aclose()


# --- what each pod must be (the same both ways, so said once) ------------------------------


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
        patch = injector_patch(pod)
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
        yield injector_configuration(f"https://127.0.0.1:{port}/inject", pki.cert_pem.bytes())
    finally:
        await runner.cleanup()


async def test_a_class_set_by_a_later_webhook_gets_nothing_from_pod_admission(pki: trustme.CA) -> None:
    """A webhook called after pod admission that sets ``runtimeClassName`` (as kata's
    injector does): neither way was invoked for the pod at first (it named no class), and
    the API server evaluates again only what it invoked
    (staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/dispatcher.go, and
    the webhook's reinvocation alike), so the pod gets nothing from either. Keeping the
    policies for it would cost every pod of the cluster an evaluation. Left unrouted,
    both ways admit it to default-scheduler as it came, the same; an injector that also
    routes the pod (docs/pod-webhook.md) has it admitted both ways, the same."""
    setup = SETUPS[1]
    webhooks = _serve_webhook(setup, pki)
    webhook = await anext(webhooks)
    injectors = _injector(pki)
    injector = await anext(injectors)
    policies = await _api_server([*setup.policies_way(), copy.deepcopy(injector)], webhook)
    webhook_only = await _api_server([*setup.webhook_way(), copy.deepcopy(injector)], webhook)
    unrouted = PodCase("injected", None, labels={"inject-runtimeclass": "gvisor"}).manifest()
    routed = PodCase(
        "injected-routed", None, labels={"inject-runtimeclass": "gvisor", "inject-scheduler": SCHEDULER}
    ).manifest()
    try:
        async with aiohttp.ClientSession() as session:
            by_policy = await create_pod(session, policies, unrouted)
            by_webhook = await create_pod(session, webhook_only, unrouted)
            routed_by_policy = await create_pod(session, policies, routed)
            routed_by_webhook = await create_pod(session, webhook_only, routed)
        assert by_policy == by_webhook
        spec = spec_of(by_webhook)
        assert spec["runtimeClassName"] == "gvisor"
        assert (spec["schedulerName"], spec.get("overhead"), spec.get("nodeSelector")) == (
            "default-scheduler",
            None,
            None,
        )
        assert routed_by_policy == routed_by_webhook
        spec = spec_of(routed_by_policy)
        assert (spec["runtimeClassName"], spec["schedulerName"], spec.get("overhead")) == ("gvisor", SCHEDULER, None)
    finally:
        await policies.stop()
        await webhook_only.stop()
        await injectors.aclose()
        await webhooks.aclose()
