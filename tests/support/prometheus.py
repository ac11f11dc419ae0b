"""A real Prometheus (Debian's ``prometheus``) scraping real extenders, for the tests that
evaluate the alerts and the dashboard's queries: the processes (each writing its output
to a log, terminated on the way out), the configuration (a scrape every second, under
the job and with the labels the PodMonitor gives), Prometheus' HTTP API, the
dashboard's queries as Grafana sends them (its variables set from their own queries),
and a cluster that makes every series exist (the objects seeded, the filter calls).

Shared by tests/monitoring/test_prometheus.py (every feature on, every alert and query)
and tests/monitoring/test_chart_setups.py (each chart setup's dashboard).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.support.apiserver import (
    NODES,
    PODS,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_pod,
    make_runtime_class,
)
from tests.support.monitoring import SCRAPE_SERIES, metric_names, queries, tool, variables, write_rule_file
from tests.support.paths import (
    ADMISSION_CLUSTER,
    DEPLOY,
    EXAMPLE_CLUSTER,
    EXAMPLES,
    KUBE_SCHEDULER_FIXTURES,
    REPO,
)
from tests.support.waiting import eventually

# The job the PodMonitor gives the scrape (deploy/components/monitoring): the pods'
# app.kubernetes.io/name.
JOB = "runtimeclass-scheduler"
# Grafana's $__rate_interval: at least four scrape intervals; the runs last longer.
RATE_INTERVAL = "1m"
# A series selector: an extender metric (with its matchers, if any), or Prometheus' `up{...}`.
SELECTOR = re.compile(rf"\b(?:runtimeclass_extender_\w+|{SCRAPE_SERIES}(?=\{{))(?:\{{[^}}]*\}})?")
LABEL_VALUES = re.compile(r"^label_values\((?:(.+), )?(\w+)\)$")
STARTUP_SECONDS = 30.0


@contextlib.asynccontextmanager
async def process(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A process writing its output to ``log``, terminated (then killed) on the way out."""
    with log.open("wb") as output:
        started = await asyncio.create_subprocess_exec(
            *argv, cwd=REPO, env=env, stdout=output, stderr=asyncio.subprocess.STDOUT
        )
        try:
            yield started
        finally:
            if started.returncode is None:
                started.terminate()
                try:
                    await asyncio.wait_for(started.wait(), 10)
                except TimeoutError:
                    started.kill()
                    await started.wait()


def tail(log: Path) -> str:
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])


async def up(
    session: aiohttp.ClientSession, url: str, running: asyncio.subprocess.Process, log: Path
) -> bool:
    """``url`` answers 200; the process behind it must still run."""
    assert running.returncode is None, f"exited with {running.returncode}:\n{tail(log)}"
    with contextlib.suppress(aiohttp.ClientError):
        async with session.get(url) as response:
            return response.status == 200
    return False


class Prometheus:
    """Prometheus' HTTP API (instant queries, label values, rules)."""

    def __init__(self, session: aiohttp.ClientSession, url: str, log: Path) -> None:
        self.session = session
        self.url = url
        self.log = log

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


@dataclass(frozen=True)
class Target:
    """An extender's probe listener, and the labels the PodMonitor's scrape gives it."""

    address: str
    namespace: str
    pod: str


def _config(targets: Iterable[Target]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [
            {
                "job_name": JOB,
                "static_configs": [
                    {
                        "targets": [target.address],
                        "labels": {"namespace": target.namespace, "pod": target.pod},
                    }
                    for target in targets
                ],
            }
        ],
    }


@contextlib.asynccontextmanager
async def running_prometheus(
    session: aiohttp.ClientSession, targets: Iterable[Target], directory: Path, port: int
) -> AsyncIterator[Prometheus]:
    """A Prometheus on ``port`` scraping ``targets`` every second, with the
    PrometheusRule's rule file loaded; ready when yielded. Skipped where Debian's
    ``prometheus`` is missing, except under CI."""
    binary = tool("prometheus")
    config = directory / "prometheus"
    config.mkdir()
    write_rule_file(config / "rules.yaml")
    (config / "prometheus.yml").write_text(yaml.safe_dump(_config(targets)), encoding="utf-8")
    argv = [
        binary,
        f"--config.file={config / 'prometheus.yml'}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    log = directory / "prometheus.log"
    async with process(argv, log) as started:
        prometheus = Prometheus(session, f"http://127.0.0.1:{port}", log)
        await eventually(
            lambda: up(session, prometheus.url + "/-/ready", started, log),
            timeout=STARTUP_SECONDS,
            what="Prometheus ready",
        )
        yield prometheus


def regex_escape(value: str) -> str:
    """A value inside a PromQL regex string, escaped as Grafana's Prometheus data source
    escapes a multi-value variable (a backslash, doubled for the string literal)."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name, value in sorted(values.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(f"${name}", value)
    return expr


async def variable_values(
    prometheus: Prometheus, board: dict[str, Any], *, namespace: str | None = None
) -> tuple[dict[str, str], list[str]]:
    """The dashboard's variables as Grafana sets them from their queries: the namespace
    (``namespace`` where given, as a viewer picks one of those its query offers), and
    every pod and RuntimeClass ("All" as the values it stands for); and the variables
    whose query found no value (or not ``namespace``)."""
    values: dict[str, str] = {}
    empty = []
    for name, variable in variables(board).items():
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.match(substitute(variable["query"], values))
        assert match, variable["query"]
        selector, label = match.groups()
        found = await prometheus.label_values(label, selector)
        if name == "namespace" and namespace is not None:
            if namespace not in found:
                empty.append(f"variable {name}: {namespace} not among {found}")
            found = [namespace]
        if not found:
            empty.append(f"variable {name}: no values for {variable['query']}")
        values[name] = (
            "(" + "|".join(map(regex_escape, found)) + ")" if variable.get("multi") else "".join(found[:1])
        )
    return values, empty


def dashboard_checks(board: dict[str, Any], values: dict[str, str]) -> list[tuple[str, str]]:
    """Every query of ``board`` with ``values`` for its variables, and each selector in it."""
    checks = []
    for title, expr in queries(board):
        query = substitute(expr, values)
        assert "$" not in query, (title, query)
        checks.append((f"panel {title!r}", query))
        checks += [(f"panel {title!r}, selector", selector) for selector in SELECTOR.findall(query)]
    return checks


async def without_series(prometheus: Prometheus, checks: Iterable[tuple[str, str]]) -> list[str]:
    return [f"{what}: no series for {expr}" for what, expr in checks if not await prometheus.query(expr)]


def unexported(names: set[str], exprs: Iterable[tuple[str, str]]) -> list[str]:
    return [
        f"{what}: {sorted(metric_names(expr) - names)} not scraped from the extender"
        for what, expr in exprs
        if metric_names(expr) - names
    ]


# --- a cluster that makes every series exist ---------------------------------------------

# The scheduler the chart's profile and pod routing name (deploy/base/scheduler-config.yaml).
SCHEDULER = "runtimeclass-scheduler"
# Nodes offered to a gVisor pod, none of them gVisor nodes: kube-scheduler's sampling
# stops after 100 feasible nodes, and the extender counts such calls from 100 on.
POOL = [f"pool-{i:03d}" for i in range(100)]


def _cluster_items(path: Path) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(path.read_text(encoding="utf-8"))["items"]
    return items


def seed_cluster(server: FakeApiServer) -> None:
    """The example cluster, the objects that make the leader actors act, and the pod
    admission table's kind (the CRD of components/pod-admission-policy)."""
    server.apply(yaml.safe_load_all((DEPLOY / "components" / "pod-admission-policy" / "crd.yaml").read_text()))
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


def _with_class(pod: dict[str, Any], runtime_class: str) -> dict[str, Any]:
    return {**pod, "spec": {**pod["spec"], "runtimeClassName": runtime_class}}


def filter_requests() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The example request, and the filter calls a cluster makes: the examples and
    kube-scheduler's captured requests, a runtime rejection, a call whose fitting nodes
    sampling hid, and one of a class that does not exist; nodes rejected for every
    reason the example cluster gives (mismatch, taints, a missing class)."""
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
    # A pod naming a class that does not exist: counted as unknown.
    requests.append({**example, "Pod": _with_class(example["Pod"], "no-such-class")})
    return example, requests
