"""Each Helm chart setup's dashboard, on a real Prometheus scraping the extender that
setup runs: every query returns a series.

For each setup of the chart's ``ci/`` (deploy/helm/runtimeclass-extender/ci/
*-values.yaml) with ``monitoring.enabled=true``, rendered as for a Kubernetes 1.36 API
server (tests/support/helm.py's SERVER_1_36: podAdmission auto chooses the policies)
into a namespace of its own, ``runtimeclass-extender serve`` runs with the args the
chart gives the extender container, adapted only where a test is not a pod:

- each listener on a free port of 127.0.0.1;
- each file of a mounted Secret (``/etc/runtimeclass-extender/...``) one trustme
  issued: the loopback listener's pair, its CA and kube-scheduler's client pair
  (``tls``), cert-manager's pair for the webhook Service's DNS name (``certManager``);
- ``--kubeconfig`` for a test API server of its own (tests/support/apiserver), seeded
  with the example cluster, the chart's webhook configurations and the pods the leader
  actors act on; the environment the Deployment's fieldRefs give (POD_NAME, ...).

Every extender, fresh (before any call), exports the counters labelled by RuntimeClass
at 0 for each class in its cache, ``none`` and ``unknown``. Then each is driven as its
cluster would drive it: filter calls with nodes rejected for several reasons (over
mutual TLS where the setup has it), a replayed and a malformed call; a RuntimeClass
review, a class with a malformed node-selector-term annotation refused by the
RuntimeClass webhook, a malformed review; the pod webhook's reviews where the setup has
the pod webhook; an edit of a class a pending pod names. One Prometheus scrapes all
six, each under the namespace and pod the PodMonitor labels it with; for each setup,
every query of the dashboard the chart installs for it, its variables as Grafana sets
them (the namespace that setup's), and every selector in it, returns a series.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import ssl
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from prometheus_client.parser import text_string_to_metric_families

from extender.http.admission import PATH as RUNTIMECLASS_REVIEW_PATH
from extender.http.admission import POD_PATH as POD_REVIEW_PATH
from policies.verdict import REASON_LABELS
from tests.support.admission import body, request, runtime_class
from tests.support.apiserver import RUNTIME_CLASSES, FakeApiServer
from tests.support.helm import CHART, template
from tests.support.monitoring import extender_args, installed_dashboard, queries, setup_features
from tests.support.paths import ADMISSION_DATA
from tests.support.ports import free_port
from tests.support.prometheus import (
    STARTUP_SECONDS,
    Target,
    dashboard_checks,
    filter_requests,
    process,
    regex_escape,
    running_prometheus,
    seed_cluster,
    tail,
    up,
    variable_values,
    without_series,
)
from tests.support.waiting import eventually

SETUP_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
POD = "runtimeclass-scheduler-7d4b9c6f5-kq2lm"
# Where the Deployment mounts the Secrets of the loopback TLS and of cert-manager.
MOUNTS = "/etc/runtimeclass-extender/"
LISTENERS = {"--port": "filter", "--probe-port": "probes", "--admission-port": "admission"}
HOSTS = ("--host", "--probe-host", "--admission-host")
WEBHOOK_CONFIGURATIONS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
# What each setup's extender reads of its own install: the webhook configurations whose
# caBundle it keeps, and the pod admission table's kind.
APPLIED = (*WEBHOOK_CONFIGURATIONS, "CustomResourceDefinition")
# The counters labelled by RuntimeClass (with each reason, for the rejected nodes).
BY_CLASS = (
    *(("runtimeclass_extender_nodes_rejected_total", {"reason": reason}) for reason in REASON_LABELS),
    ("runtimeclass_extender_filter_requests_by_runtimeclass_total", {}),
    ("runtimeclass_extender_runtime_rejections_total", {}),
    ("runtimeclass_extender_filter_fitting_nodes_not_offered_total", {}),
)
SERIES_SECONDS = 60.0


@dataclass
class Pki:
    """One CA for every setup: the loopback listener's pair and kube-scheduler's client
    pair (tls), and cert-manager's webhook pairs (one per namespace's Service name)."""

    ca: trustme.CA = field(default_factory=trustme.CA)

    def write(self, directory: Path, webhook_dns_name: str) -> None:
        """The files of the two Secrets the Deployment mounts, under ``directory``."""
        tls, webhook = directory / "tls", directory / "webhook-tls"
        for folder in (tls, webhook):
            folder.mkdir(parents=True)
            self.ca.cert_pem.write_to_path(str(folder / "ca.crt"))
        for leaf, folder, stem in (
            (self.ca.issue_cert("127.0.0.1"), tls, "tls"),
            (self.ca.issue_cert("runtimeclass-scheduler"), tls, "client"),
            (self.ca.issue_cert(webhook_dns_name), webhook, "tls"),
        ):
            (folder / f"{stem}.crt").write_bytes(b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
            leaf.private_key_pem.write_to_path(str(folder / f"{stem}.key"))


@dataclass
class Setup:
    """One chart setup: its rendering, and the extender it runs."""

    values: Path
    directory: Path
    ports: dict[str, int] = field(default_factory=lambda: {name: free_port() for name in LISTENERS.values()})
    server: FakeApiServer = field(default_factory=FakeApiServer)

    def __post_init__(self) -> None:
        self.name = self.values.name.removesuffix("-values.yaml")
        # A namespace of its own; short, as the self-managed certificate's common name is
        # the webhook Service's DNS name, which holds it (64 characters at most).
        self.namespace = f"sched-{self.name}"
        self.docs = template({"monitoring.enabled": "true"}, files=[self.values], namespace=self.namespace)
        self.dashboard = installed_dashboard(self.docs)
        self.features = setup_features(self.docs)
        (service,) = [doc for doc in self.docs if doc["kind"] == "Service"]
        self.webhook_dns_name = f"{service['metadata']['name']}.{self.namespace}.svc"
        self.log = self.directory / "extender.log"

    @property
    def flags(self) -> set[str]:
        return {arg.split("=", 1)[0] for arg in extender_args(self.docs)}

    def argv(self, kubeconfig: Path) -> list[str]:
        """The extender container's args, adapted to the test (see the module doc)."""
        command, *args = extender_args(self.docs)
        assert command == "serve"
        adapted = []
        for arg in args:
            flag, equals, value = arg.partition("=")
            if flag in LISTENERS:
                value = str(self.ports[LISTENERS[flag]])
            elif flag in HOSTS:
                value = "127.0.0.1"
            elif value.startswith(MOUNTS):
                path = self.directory / "mounts" / value.removeprefix(MOUNTS)
                assert path.is_file(), f"{self.name}: {arg}: no such file in the test's mounts"
                value = str(path)
            adapted.append(f"{flag}{equals}{value}" if equals else arg)
        return [sys.executable, "-m", "extender", command, *adapted, f"--kubeconfig={kubeconfig}"]

    def env(self) -> dict[str, str]:
        """The process environment, and the extender container's from its fieldRefs."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTIMECLASS_EXTENDER_")}
        (deployment,) = [doc for doc in self.docs if doc["kind"] == "Deployment"]
        (container,) = [
            c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
        ]
        fields = {"metadata.name": POD, "metadata.namespace": self.namespace}
        for variable in container["env"]:
            env[variable["name"]] = fields[variable["valueFrom"]["fieldRef"]["fieldPath"]]
        return env

    def target(self) -> Target:
        return Target(f"127.0.0.1:{self.ports['probes']}", self.namespace, POD)

    def client_context(self) -> ssl.SSLContext | None:
        """What kube-scheduler presents on the loopback listener: with tls, HTTPS and its
        client certificate; else plain HTTP."""
        if "--tls-cert-file" not in self.flags:
            return None
        context = ssl.create_default_context(cafile=str(self.directory / "mounts" / "tls" / "ca.crt"))
        context.load_cert_chain(
            self.directory / "mounts" / "tls" / "client.crt", self.directory / "mounts" / "tls" / "client.key"
        )
        return context

    def webhook_context(self) -> ssl.SSLContext:
        """The API server's trust in the webhooks: the caBundle the extender keeps in the
        webhook configuration (self-managed), or cert-manager's CA (here trustme's)."""
        if "selfManagedCertificates" not in self.features:
            return ssl.create_default_context(
                cafile=str(self.directory / "mounts" / "webhook-tls" / "ca.crt")
            )
        (configuration,) = [doc for doc in self.docs if doc["kind"] == "ValidatingWebhookConfiguration"]
        stored = self.server.get("validatingwebhookconfigurations", configuration["metadata"]["name"])
        assert stored is not None
        bundle = base64.b64decode(stored["webhooks"][0]["clientConfig"]["caBundle"]).decode()
        return ssl.create_default_context(cadata=bundle)


def _fresh_series(text: str, classes: set[str]) -> list[str]:
    """The series labelled by RuntimeClass an extender's /metrics lacks, or has at
    another value than 0, for every class of ``classes``."""
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    wrong = []
    for name_of_class in sorted(classes):
        for name, labels in BY_CLASS:
            key = (name, tuple(sorted({**labels, "runtime_class": name_of_class}.items())))
            if samples.get(key) != 0:
                wrong.append(f"{name}{dict(key[1])}: {samples.get(key, 'missing')}")
    return wrong


async def _post(
    session: aiohttp.ClientSession, url: str, data: bytes, context: ssl.SSLContext | None, **kwargs: Any
) -> tuple[int, Any]:
    async with session.post(
        url,
        data=data,
        ssl=context if context is not None else True,
        headers={"Content-Type": "application/json"},
        **kwargs,
    ) as response:
        return response.status, await response.read()


async def _drive(session: aiohttp.ClientSession, setup: Setup) -> None:
    """The calls and changes a cluster makes, so that the setup's series exist."""
    context = setup.client_context()
    filter_url = f"{'https' if context else 'http'}://127.0.0.1:{setup.ports['filter']}/filter"
    example, requests = filter_requests()
    for request_body in requests:
        status, answer = await _post(session, filter_url, json.dumps(request_body).encode(), context)
        assert status == 200, (setup.name, status, answer)
    replay = {"X-Runtimeclass-Extender-Replay": "1", "Content-Type": "application/json"}
    async with session.post(
        filter_url, data=json.dumps(example).encode(), ssl=context or True, headers=replay
    ) as response:
        assert response.status == 200
    assert (await _post(session, filter_url, b"{not json", context))[0] == 400

    # The webhooks, over TLS as the API server calls them, once it would trust them.
    admission = f"https://127.0.0.1:{setup.ports['admission']}"

    async def ready() -> bool:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(admission + "/readyz", ssl=False) as response:
                return response.status == 200
        return False

    await eventually(ready, timeout=STARTUP_SECONDS, what=f"{setup.name}: the webhooks trusted")
    webhook = setup.webhook_context()
    server_name = {"server_hostname": setup.webhook_dns_name}
    reviews = [
        (RUNTIMECLASS_REVIEW_PATH, (ADMISSION_DATA / "plugin-off" / "00-runtimeclasses.json").read_bytes())
    ]
    if "podWebhook" in setup.features:
        reviews += [
            (POD_REVIEW_PATH, (ADMISSION_DATA / "plugin-off" / "03-pods.json").read_bytes()),
            (POD_REVIEW_PATH, (ADMISSION_DATA / "plugin-on" / "04-pods.json").read_bytes()),
        ]
    for path, review in reviews:
        status, answer = await _post(session, admission + path, review, webhook, **server_name)
        assert status == 200, (setup.name, path, answer)
    # A class whose node-selector-term annotation is malformed: refused at kubectl apply.
    malformed_class = body(request(runtime_class("broken", annotation="matchExpressions: 3")))
    status, answer = await _post(
        session, admission + RUNTIMECLASS_REVIEW_PATH, malformed_class, webhook, **server_name
    )
    assert status == 200 and json.loads(answer)["response"]["allowed"] is False, (setup.name, answer)
    paths = [RUNTIMECLASS_REVIEW_PATH] + ([POD_REVIEW_PATH] if "podWebhook" in setup.features else [])
    for path in paths:
        assert (await _post(session, admission + path, b"{}", webhook, **server_name))[0] == 400

    # A scheduling change of the class a pending pod names (the requeuer nudges it).
    setup.server.modify(
        RUNTIME_CLASSES,
        "kata-containers",
        lambda rc: rc["scheduling"]["nodeSelector"].update({"katacontainers.io/kata-runtime": "yes"}),
    )


async def test_every_query_of_each_chart_setups_dashboard_returns_a_series(tmp_path: Path) -> None:
    assert len(SETUP_FILES) >= 6
    pki = Pki()
    setups = [Setup(values, tmp_path / values.name.removesuffix("-values.yaml")) for values in SETUP_FILES]
    # What the setups show between them: every feature but capture, which no release has.
    assert set().union(*(setup.features for setup in setups)) == {
        "always",
        "requeue",
        "labelNodes",
        "audit",
        "podWebhook",
        "leaderElection",
        "selfManagedCertificates",
    }
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession())
        for setup in setups:
            pki.write(setup.directory / "mounts", setup.webhook_dns_name)
            await setup.server.start()
            stack.push_async_callback(setup.server.stop)
            seed_cluster(setup.server)
            setup.server.apply([doc for doc in setup.docs if doc["kind"] in APPLIED])
        extenders = [
            await stack.enter_async_context(
                process(
                    setup.argv(setup.server.write_kubeconfig(setup.directory / "kubeconfig")),
                    setup.log,
                    setup.env(),
                )
            )
            for setup in setups
        ]
        prometheus = await stack.enter_async_context(
            running_prometheus(session, [setup.target() for setup in setups], tmp_path, free_port())
        )

        async def fresh(setup: Setup, extender: asyncio.subprocess.Process) -> None:
            probes = f"http://127.0.0.1:{setup.ports['probes']}"
            try:
                await eventually(
                    lambda: up(session, probes + "/readyz", extender, setup.log),
                    timeout=STARTUP_SECONDS,
                    what=f"{setup.name}: the extender ready",
                )
            except AssertionError as failed:
                raise AssertionError(f"{failed}\n--- {setup.name} log:\n{tail(setup.log)}") from None
            # Before any call: a series at 0 for each class in the cache, none and unknown.
            async with session.get(probes + "/metrics") as response:
                text = await response.text()
            classes = {item["metadata"]["name"] for item in setup.server.objects(RUNTIME_CLASSES)}
            assert len(classes) > 4
            assert _fresh_series(text, classes | {"none", "unknown"}) == [], setup.name

        await asyncio.gather(
            *(fresh(setup, extender) for setup, extender in zip(setups, extenders, strict=True))
        )
        missing: dict[str, list[str]] = {}

        async def every_query_has_a_series() -> bool:
            for setup in setups:
                values, empty = await variable_values(prometheus, setup.dashboard, namespace=setup.namespace)
                empty += await without_series(prometheus, dashboard_checks(setup.dashboard, values))
                missing[setup.name] = empty
            return not any(missing.values())

        async def every_query_has_had_a_series(when: str) -> None:
            try:
                await eventually(
                    every_query_has_a_series, timeout=SERIES_SECONDS, what=f"every series {when}"
                )
            except AssertionError as failed:
                raise AssertionError(
                    f"{failed}\n"
                    + "\n".join(f"{name}: {line}" for name, lines in missing.items() for line in lines)
                    + "".join(f"\n--- {s.name} log:\n{tail(s.log)}" for s in setups if missing[s.name])
                    + f"\n--- prometheus log:\n{tail(prometheus.log)}"
                ) from None

        # As installed, before any call: no panel says "No data".
        await every_query_has_had_a_series("before any call")
        await asyncio.gather(*(_drive(session, setup) for setup in setups))

        # The drive reached each extender, and the scrape brought it to Prometheus; the
        # series are all still there.
        async def driven() -> bool:
            for setup in setups:
                scope = f'namespace="{setup.namespace}"'
                for expr in (
                    f'runtimeclass_extender_nodes_rejected_total{{{scope}, reason="runtimeclass_not_found"}} > 0',
                    f'runtimeclass_extender_admission_reviews_total{{{scope}, result="denied"}} > 0',
                ):
                    if not await prometheus.query(expr):
                        return False
            return True

        await eventually(driven, timeout=SERIES_SECONDS, what="the drive scraped")
        await every_query_has_had_a_series("after the drive")

        # The variables found this setup's own pod only, and the classes of its cluster (with
        # none and unknown; not the class a pod named that does not exist).
        for setup in setups:
            values, _ = await variable_values(prometheus, setup.dashboard, namespace=setup.namespace)
            assert values["pod"] == f"({POD})", setup.name
            classes = {item["metadata"]["name"] for item in setup.server.objects(RUNTIME_CLASSES)}
            shown = set(values["runtime_class"].strip("()").split("|"))
            assert shown == {regex_escape(name) for name in classes | {"none", "unknown"}}, setup.name
            assert len(queries(setup.dashboard)) >= 20, setup.name


@pytest.mark.parametrize("values", SETUP_FILES, ids=lambda path: path.name)
def test_each_setups_args_are_run_as_rendered_but_where_a_test_is_not_a_pod(
    values: Path, tmp_path: Path
) -> None:
    """The adaptation touches the listeners and the mounted files only, and adds the
    kubeconfig: every other flag is run as the chart renders it."""
    setup = Setup(values, tmp_path)
    Pki().write(tmp_path / "mounts", setup.webhook_dns_name)
    rendered = extender_args(setup.docs)[1:]
    argv = setup.argv(tmp_path / "kubeconfig")
    assert argv[:4] == [sys.executable, "-m", "extender", "serve"]
    adapted = argv[4:]
    assert adapted[-1] == f"--kubeconfig={tmp_path / 'kubeconfig'}"
    pairs = list(zip(rendered, adapted[:-1], strict=True))
    changed = {before.split("=", 1)[0] for before, after in pairs if before != after}
    mounted = {before.split("=", 1)[0] for before, _ in pairs if MOUNTS in before}
    # Every listener is moved to a free port (on loopback), the mounted files to the
    # test's; nothing else changes.
    assert set(LISTENERS) | mounted <= changed <= {*LISTENERS, *HOSTS} | mounted
    assert all(MOUNTS not in after for _, after in pairs)
