"""Every alert expression and every dashboard query, on a real Prometheus scraping a real
extender.

``runtimeclass-extender serve`` runs as a process in live mode against the test API
server, with every feature that exports metrics turned on (leader election, requeue,
the audit, node labels and their events, both webhooks with self-managed certificates,
capture, the probe listener Prometheus scrapes). The test drives it as a cluster would:
filter calls replayed from deploy/examples/ and from kube-scheduler's captured requests
(tests/data/fixtures/), a call whose nodes kube-scheduler's sampling hid, a replayed
call, a malformed one; the API server's captured AdmissionReviews (tests/data/admission/)
and malformed ones; a misplaced running pod; a pending pod whose RuntimeClass changes; a
pending pod of a class no node fits; nodes the labeller labels.

Prometheus (Debian's ``prometheus``, started here on a free port with a scrape every
second) scrapes the probe port under the job and labels the PodMonitor gives, and loads
the PrometheusRule's rule file. Then, through Prometheus' HTTP API:

- every alert expression, with its threshold comparison taken off, and every series
  selector in it returns at least one series;
- every dashboard query, with the variables set from the dashboard's own variable
  queries, and every selector in it returns at least one series;
- every metric name an expression or query names is one Prometheus scraped from the
  extender (``up`` aside, Prometheus' own), so a misspelt or unexported metric fails;
- every rule evaluates without error.

No metric is exempt: each one the alerts and the dashboard read is produced here. A
check that is shown to fail on a metric the extender does not export keeps the test
honest. Prometheus and promtool are skipped where missing, except under CI.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import ssl
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from extender.http.admission import PATH as RUNTIMECLASS_REVIEW_PATH
from extender.http.admission import POD_PATH as POD_REVIEW_PATH
from tests.support.apiserver import (
    NODES,
    PODS,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_pod,
    make_runtime_class,
)
from tests.support.apps import free_port
from tests.support.monitoring import (
    SCRAPE_SERIES,
    alert_rules,
    dashboard,
    metric_names,
    queries,
    tool,
    variables,
    write_rule_file,
)
from tests.support.paths import (
    ADMISSION_CLUSTER,
    ADMISSION_DATA,
    EXAMPLE_CLUSTER,
    EXAMPLES,
    KUBE_SCHEDULER_FIXTURES,
    REPO,
)
from tests.support.waiting import eventually
from tests.support.webhook_certificates import DNS_NAME, NAMESPACE, add_webhook_configurations, ca_bundles

# The job and labels the PodMonitor gives the scrape (deploy/components/monitoring).
JOB = "runtimeclass-scheduler"
POD = "runtimeclass-scheduler-7d4b9c6f5-kq2lm"
SCHEDULER = "runtimeclass-scheduler"
# Grafana's $__rate_interval: at least four scrape intervals; the run lasts longer.
RATE_INTERVAL = "1m"
# Each expression ends in its threshold: `> 0`, `== 0`, `< 30 * 86400`, ...
THRESHOLD = re.compile(r"\s*(?:==|!=|>=|<=|>|<)\s*[\d.\s*]+$")
# A series selector: an extender metric (with its matchers, if any), or Prometheus' `up{...}`.
SELECTOR = re.compile(rf"\b(?:runtimeclass_extender_\w+|{SCRAPE_SERIES}(?=\{{))(?:\{{[^}}]*\}})?")
LABEL_VALUES = re.compile(r"^label_values\((?:(.+), )?(\w+)\)$")
# Nodes offered to a gVisor pod, none of them gVisor nodes: kube-scheduler's sampling
# stops after 100 feasible nodes, and the extender counts such calls from 100 on.
POOL = [f"pool-{i:03d}" for i in range(100)]
STARTUP_SECONDS = 30.0
SERIES_SECONDS = 60.0


def _cluster_items(path: Path) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(path.read_text(encoding="utf-8"))["items"]
    return items


def _seed(server: FakeApiServer) -> None:
    """The example cluster, the webhook configurations, and the objects that make the
    leader actors act."""
    for item in _cluster_items(EXAMPLE_CLUSTER):
        server.add(NODES if item["kind"] == "Node" else RUNTIME_CLASSES, item)
    # The class the captured pod reviews name, with its Pod Overhead.
    (kata,) = [
        i
        for i in _cluster_items(ADMISSION_CLUSTER)
        if i["kind"] == "RuntimeClass" and i["metadata"]["name"] == "kata"
    ]
    server.add(RUNTIME_CLASSES, kata)
    # A class no node fits: its pending pod gets the event, the class the FitsNoNode alert.
    server.add(RUNTIME_CLASSES, make_runtime_class("ghost", node_selector={"pool": "ghost"}))
    for name in POOL:
        server.add(NODES, make_node(name, labels={"kubernetes.io/os": "linux"}))
    # A gVisor pod running on a runc node: misplaced (selector-mismatch).
    server.add(PODS, make_pod("sandboxed-db-0", node_name="runc-1", runtime_class="gvisor", phase="Running"))
    server.add(PODS, make_pod("waiting-ghost", runtime_class="ghost", scheduler_name=SCHEDULER))
    server.add(PODS, make_pod("waiting-kata", runtime_class="kata-containers", scheduler_name=SCHEDULER))
    add_webhook_configurations(server)


def _serve_args(kubeconfig: Path, ports: dict[str, int], captures: Path) -> list[str]:
    return [
        "serve",
        "--host=127.0.0.1",
        f"--port={ports['filter']}",
        "--probe-host=127.0.0.1",
        f"--probe-port={ports['probes']}",
        "--admission-host=127.0.0.1",
        f"--admission-port={ports['admission']}",
        f"--kubeconfig={kubeconfig}",
        "--webhook-certificate-secret=runtimeclass-extender-webhook-certificate",
        f"--route-pods-to-scheduler={SCHEDULER}",
        f"--capture-dir={captures}",
        "--requeue-pending-pods",
        f"--requeue-scheduler-names={SCHEDULER}",
        "--requeue-window=0.1",
        "--audit-running-pods",
        "--label-nodes",
        "--leader-elect",
        f"--leader-elect-lease-namespace={NAMESPACE}",
        "--leader-elect-lease-duration=1",
        "--leader-elect-renew-deadline=0.6",
        "--leader-elect-retry-period=0.1",
    ]


@contextlib.asynccontextmanager
async def _process(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A process writing its output to ``log``, terminated (then killed) on the way out."""
    with log.open("wb") as output:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=REPO, env=env, stdout=output, stderr=asyncio.subprocess.STDOUT
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), 10)
                except TimeoutError:
                    process.kill()
                    await process.wait()


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])


class Prometheus:
    """Prometheus' HTTP API (instant queries, label values, rules)."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

    async def _get(self, path: str, params: list[tuple[str, str]]) -> Any:
        async with self.session.get(self.url + path, params=params) as response:
            body = await response.json()
        assert body["status"] == "success", (path, params, body)
        return body["data"]

    async def query(self, expr: str) -> list[dict[str, Any]]:
        data = await self._get("/api/v1/query", [("query", expr)])
        assert data["resultType"] == "vector", (expr, data["resultType"])
        result: list[dict[str, Any]] = data["result"]
        return result

    async def label_values(self, label: str, match: str | None = None) -> list[str]:
        values: list[str] = await self._get(
            f"/api/v1/label/{label}/values", [("match[]", match)] if match else []
        )
        return values

    async def rules(self) -> list[dict[str, Any]]:
        data = await self._get("/api/v1/rules", [])
        return [rule for group in data["groups"] for rule in group["rules"]]


def _prometheus_config(target: str) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [
            {
                "job_name": JOB,
                "static_configs": [{"targets": [target], "labels": {"namespace": NAMESPACE, "pod": POD}}],
            }
        ],
    }


async def _drive(session: aiohttp.ClientSession, server: FakeApiServer, ports: dict[str, int]) -> None:
    """The calls and changes a cluster makes, so that every series exists."""
    filter_url = f"http://127.0.0.1:{ports['filter']}/filter"
    requests = [json.loads(path.read_bytes()) for path in sorted(EXAMPLES.glob("filter-request*.json"))]
    requests += [
        json.loads(path.read_bytes()) for path in sorted(KUBE_SCHEDULER_FIXTURES.glob("filter-node*.json"))
    ]
    example = json.loads((EXAMPLES / "filter-request.json").read_bytes())
    # A kata pod offered nodes none of which runs kata: a runtime rejection.
    requests.append(
        {
            **example,
            "Pod": _with_class(example["Pod"], "kata-containers"),
            "NodeNames": ["runc-1", "gvisor-1"],
        }
    )
    # A gVisor pod offered 100 nodes, none gVisor, while gVisor nodes fit: sampling hid them.
    requests.append({**example, "NodeNames": POOL})
    for body in requests:
        async with session.post(filter_url, json=body) as response:
            assert response.status == 200, (response.status, await response.text())
    async with session.post(
        filter_url, json=example, headers={"X-Runtimeclass-Extender-Replay": "1"}
    ) as response:
        assert response.status == 200
    async with session.post(
        filter_url, data=b"{not json", headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 400

    # Both webhooks, over TLS as the API server calls them: once the caBundles trust the
    # certificate the extender made, verified against them.
    admission = f"https://127.0.0.1:{ports['admission']}"

    async def trusted() -> bool:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(admission + "/readyz", ssl=False) as response:
                return response.status == 200
        return False

    await eventually(
        trusted, timeout=STARTUP_SECONDS, what="the webhook caBundles trusting the served certificate"
    )
    context = ssl.create_default_context(cadata=next(iter(ca_bundles(server).values())).decode())
    reviews = [
        (RUNTIMECLASS_REVIEW_PATH, (ADMISSION_DATA / "plugin-off" / "00-runtimeclasses.json").read_bytes()),
        (POD_REVIEW_PATH, (ADMISSION_DATA / "plugin-off" / "03-pods.json").read_bytes()),
        (POD_REVIEW_PATH, (ADMISSION_DATA / "plugin-on" / "04-pods.json").read_bytes()),
    ]
    for path, body in reviews:
        async with session.post(
            admission + path,
            data=body,
            ssl=context,
            server_hostname=DNS_NAME,
            headers={"Content-Type": "application/json"},
        ) as response:
            assert response.status == 200, (path, await response.text())
    for path in (RUNTIMECLASS_REVIEW_PATH, POD_REVIEW_PATH):
        async with session.post(
            admission + path,
            data=b"{}",
            ssl=context,
            server_hostname=DNS_NAME,
            headers={"Content-Type": "application/json"},
        ) as response:
            assert response.status == 400

    # A scheduling change of the class a pending pod names: the leader nudges the pod.
    server.modify(
        RUNTIME_CLASSES,
        "kata-containers",
        lambda rc: rc["scheduling"]["nodeSelector"].update({"katacontainers.io/kata-runtime": "yes"}),
    )


def _with_class(pod: dict[str, Any], runtime_class: str) -> dict[str, Any]:
    return {**pod, "spec": {**pod["spec"], "runtimeClassName": runtime_class}}


def _alert_checks() -> list[tuple[str, str]]:
    checks = []
    for rule in alert_rules():
        expr = rule["expr"]
        without_threshold = THRESHOLD.sub("", expr)
        assert without_threshold != expr, f"{rule['alert']}: no threshold comparison at the end of {expr}"
        checks.append((f"alert {rule['alert']}", without_threshold))
        checks += [(f"alert {rule['alert']}, selector", selector) for selector in SELECTOR.findall(expr)]
    return checks


async def _variable_values(prometheus: Prometheus) -> tuple[dict[str, str], list[str]]:
    """The dashboard's variables as Grafana sets them from their queries: the namespace,
    and every pod and RuntimeClass ("All" as the values it stands for); and the
    variables whose query found no value."""
    values: dict[str, str] = {}
    empty = []
    for name, variable in variables(dashboard()).items():
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.match(_substitute(variable["query"], values))
        assert match, variable["query"]
        selector, label = match.groups()
        found = await prometheus.label_values(label, selector)
        if not found:
            empty.append(f"variable {name}: no values for {variable['query']}")
        values[name] = (
            "(" + "|".join(map(_regex_escape, found)) + ")" if variable.get("multi") else "".join(found[:1])
        )
    return values, empty


def _regex_escape(value: str) -> str:
    """A value inside a PromQL regex string, escaped as Grafana's Prometheus data source
    escapes a multi-value variable (a backslash, doubled for the string literal)."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def _substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name, value in sorted(values.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(f"${name}", value)
    return expr


def _dashboard_checks(values: dict[str, str]) -> list[tuple[str, str]]:
    checks = []
    for title, expr in queries(dashboard()):
        query = _substitute(expr, values)
        assert "$" not in query, (title, query)
        checks.append((f"panel {title!r}", query))
        checks += [(f"panel {title!r}, selector", selector) for selector in SELECTOR.findall(query)]
    return checks


async def _without_series(prometheus: Prometheus, checks: Iterable[tuple[str, str]]) -> list[str]:
    return [f"{what}: no series for {expr}" for what, expr in checks if not await prometheus.query(expr)]


def _unexported(names: set[str], exprs: Iterable[tuple[str, str]]) -> list[str]:
    return [
        f"{what}: {sorted(metric_names(expr) - names)} not scraped from the extender"
        for what, expr in exprs
        if metric_names(expr) - names
    ]


async def test_every_alert_and_dashboard_query_returns_series_from_a_real_extender(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path, tmp_path: Path
) -> None:
    prometheus_binary = tool("prometheus")
    _seed(fake_apiserver)
    ports = {name: free_port() for name in ("filter", "probes", "admission", "prometheus")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTIMECLASS_EXTENDER_")}
    env |= {"POD_NAME": POD, "POD_NAMESPACE": NAMESPACE}
    extender_log, prometheus_log = tmp_path / "extender.log", tmp_path / "prometheus.log"
    serve = [sys.executable, "-m", "extender", *_serve_args(fake_kubeconfig, ports, tmp_path / "captures")]
    config = tmp_path / "prometheus"
    config.mkdir()
    write_rule_file(config / "rules.yaml")
    (config / "prometheus.yml").write_text(
        yaml.safe_dump(_prometheus_config(f"127.0.0.1:{ports['probes']}")), encoding="utf-8"
    )
    prometheus_argv = [
        prometheus_binary,
        f"--config.file={config / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
        "--log.level=warn",
    ]
    async with (
        aiohttp.ClientSession() as session,
        _process(serve, extender_log, env) as extender,
        _process(prometheus_argv, prometheus_log) as prometheus_process,
    ):
        prometheus = Prometheus(session, f"http://127.0.0.1:{ports['prometheus']}")

        async def up(url: str, process: asyncio.subprocess.Process, log: Path) -> bool:
            assert process.returncode is None, f"exited with {process.returncode}:\n{_tail(log)}"
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url) as response:
                    return response.status == 200
            return False

        await eventually(
            lambda: up(f"http://127.0.0.1:{ports['probes']}/readyz", extender, extender_log),
            timeout=STARTUP_SECONDS,
            what="the extender ready",
        )
        await eventually(
            lambda: up(prometheus.url + "/-/ready", prometheus_process, prometheus_log),
            timeout=STARTUP_SECONDS,
            what="Prometheus ready",
        )
        await _drive(session, fake_apiserver, ports)

        # The drive reached the extender, and the scrape brought it to Prometheus.
        activity = {
            f'runtimeclass_extender_leader{{pod="{POD}"}} == 1': "this replica leads",
            'runtimeclass_extender_misplaced_pods{runtime_class="gvisor", problem="selector-mismatch"} == 1': "the misplaced pod",
            "runtimeclass_extender_filter_fitting_nodes_not_offered_total > 0": "the sampled call",
            "runtimeclass_extender_runtime_rejections_total > 0": "the runtime rejection",
            "runtimeclass_extender_webhook_certificate_trusted == 1": "the trusted certificate",
            "runtimeclass_extender_pod_admission_patches_total > 0": "the pod review's patches",
            "runtimeclass_extender_node_labels_added_total > 0": "the node labels",
            'runtimeclass_extender_runtimeclass_events_total{result=~"written|existing"} > 0': "the event",
            "runtimeclass_extender_requeue_nudges_sent_total > 0": "the nudge",
            'runtimeclass_extender_captures_total{result="written"} > 0': "the captures",
        }
        alerts = _alert_checks()
        pending: list[str] = []

        async def everything_scraped() -> bool:
            nonlocal pending
            values, pending = await _variable_values(prometheus)
            checks = [*[(what, expr) for expr, what in activity.items()], *alerts, *_dashboard_checks(values)]
            pending += await _without_series(prometheus, checks)
            return not pending

        try:
            await eventually(everything_scraped, timeout=SERIES_SECONDS, what="every series scraped")
        except AssertionError as failed:
            raise AssertionError(
                f"{failed}\n"
                + "\n".join(pending)
                + f"\n--- extender log:\n{_tail(extender_log)}\n--- prometheus log:\n{_tail(prometheus_log)}"
            ) from None

        # Each metric an expression names is one the extender exports, as scraped.
        scraped = set(await prometheus.label_values("__name__", f'{{job="{JOB}"}}'))
        assert SCRAPE_SERIES in scraped
        values, empty = await _variable_values(prometheus)
        assert empty == []
        # The variables found the labels the scrape gives, as a PodMonitor's would.
        assert (values["namespace"], values["pod"]) == (NAMESPACE, f"({POD})")
        named = (
            alerts
            + _dashboard_checks(values)
            + [(name, v["query"]) for name, v in variables(dashboard()).items()]
        )
        assert _unexported(scraped, named) == []

        # ... and the checks see one that is not: a misspelt metric has no series and is
        # not among the scraped names.
        misspelt = [("misspelt", "sum by (outcome) (rate(runtimeclass_extender_filter_request_total[1m]))")]
        assert await _without_series(prometheus, misspelt) and _unexported(scraped, misspelt)

        # Every rule evaluates on the real series without an error.
        async def evaluated() -> bool:
            return all(rule["health"] != "unknown" for rule in await prometheus.rules())

        await eventually(evaluated, timeout=10, what="every rule evaluated")
        broken = [(r["name"], r.get("lastError")) for r in await prometheus.rules() if r["health"] != "ok"]
        assert broken == []
        assert {rule["name"] for rule in await prometheus.rules()} == {
            rule["alert"] for rule in alert_rules()
        }
