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

Prometheus (Debian's ``prometheus``, started on a free port with a scrape every second:
tests/support/prometheus.py) scrapes the probe port under the job and labels the
PodMonitor gives, and loads the PrometheusRule's rule file. Then, through Prometheus' HTTP API:

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

import contextlib
import os
import re
import ssl
import sys
from pathlib import Path

import aiohttp

from extender.http.admission import PATH as RUNTIMECLASS_REVIEW_PATH
from extender.http.admission import POD_PATH as POD_REVIEW_PATH
from tests.support.apiserver import RUNTIME_CLASSES, FakeApiServer
from tests.support.monitoring import SCRAPE_SERIES, alert_rules, dashboard, variables
from tests.support.paths import ADMISSION_DATA
from tests.support.ports import free_port
from tests.support.prometheus import (
    JOB,
    SCHEDULER,
    SELECTOR,
    STARTUP_SECONDS,
    Target,
    dashboard_checks,
    filter_requests,
    process,
    running_prometheus,
    seed_cluster,
    tail,
    unexported,
    up,
    variable_values,
    without_series,
)
from tests.support.waiting import eventually
from tests.support.webhook_certificates import DNS_NAME, NAMESPACE, add_webhook_configurations, ca_bundles

# The labels the PodMonitor gives the scrape (deploy/components/monitoring).
POD = "runtimeclass-scheduler-7d4b9c6f5-kq2lm"
# Each expression ends in its threshold: `> 0`, `== 0`, `< 30 * 86400`, ...
THRESHOLD = re.compile(r"\s*(?:==|!=|>=|<=|>|<)\s*[\d.\s*]+$")
SERIES_SECONDS = 60.0


def _seed(server: FakeApiServer) -> None:
    """The example cluster, the objects that make the leader actors act, and the webhook
    configurations."""
    seed_cluster(server)
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
        "--pod-admission-table=runtimeclass-extender",
        "--leader-elect",
        f"--leader-elect-lease-namespace={NAMESPACE}",
        "--leader-elect-lease-duration=1",
        "--leader-elect-renew-deadline=0.6",
        "--leader-elect-retry-period=0.1",
    ]


async def _drive(session: aiohttp.ClientSession, server: FakeApiServer, ports: dict[str, int]) -> None:
    """The calls and changes a cluster makes, so that every series exists."""
    filter_url = f"http://127.0.0.1:{ports['filter']}/filter"
    example, requests = filter_requests()
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


def _alert_checks() -> list[tuple[str, str]]:
    checks = []
    for rule in alert_rules():
        expr = rule["expr"]
        without_threshold = THRESHOLD.sub("", expr)
        assert without_threshold != expr, f"{rule['alert']}: no threshold comparison at the end of {expr}"
        checks.append((f"alert {rule['alert']}", without_threshold))
        checks += [(f"alert {rule['alert']}, selector", selector) for selector in SELECTOR.findall(expr)]
    return checks


async def test_every_alert_and_dashboard_query_returns_series_from_a_real_extender(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path, tmp_path: Path
) -> None:
    _seed(fake_apiserver)
    ports = {name: free_port() for name in ("filter", "probes", "admission", "prometheus")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTIMECLASS_EXTENDER_")}
    env |= {"POD_NAME": POD, "POD_NAMESPACE": NAMESPACE}
    extender_log = tmp_path / "extender.log"
    serve = [sys.executable, "-m", "extender", *_serve_args(fake_kubeconfig, ports, tmp_path / "captures")]
    target = Target(f"127.0.0.1:{ports['probes']}", NAMESPACE, POD)
    async with (
        aiohttp.ClientSession() as session,
        process(serve, extender_log, env) as extender,
        running_prometheus(session, [target], tmp_path, ports["prometheus"]) as prometheus,
    ):
        await eventually(
            lambda: up(session, f"http://127.0.0.1:{ports['probes']}/readyz", extender, extender_log),
            timeout=STARTUP_SECONDS,
            what="the extender ready",
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
            values, pending = await variable_values(prometheus, dashboard())
            checks = [
                *[(what, expr) for expr, what in activity.items()],
                *alerts,
                *dashboard_checks(dashboard(), values),
            ]
            pending += await without_series(prometheus, checks)
            return not pending

        try:
            await eventually(everything_scraped, timeout=SERIES_SECONDS, what="every series scraped")
        except AssertionError as failed:
            raise AssertionError(
                f"{failed}\n"
                + "\n".join(pending)
                + f"\n--- extender log:\n{tail(extender_log)}\n--- prometheus log:\n{tail(prometheus.log)}"
            ) from None

        # Each metric an expression names is one the extender exports, as scraped.
        scraped = set(await prometheus.label_values("__name__", f'{{job="{JOB}"}}'))
        assert SCRAPE_SERIES in scraped
        values, empty = await variable_values(prometheus, dashboard())
        assert empty == []
        # The variables found the labels the scrape gives, as a PodMonitor's would.
        assert (values["namespace"], values["pod"]) == (NAMESPACE, f"({POD})")
        named = (
            alerts
            + dashboard_checks(dashboard(), values)
            + [(name, v["query"]) for name, v in variables(dashboard()).items()]
        )
        assert unexported(scraped, named) == []

        # ... and the checks see one that is not: a misspelt metric has no series and is
        # not among the scraped names.
        misspelt = [("misspelt", "sum by (outcome) (rate(runtimeclass_extender_filter_request_total[1m]))")]
        assert await without_series(prometheus, misspelt) and unexported(scraped, misspelt)

        # Every rule evaluates on the real series without an error.
        async def evaluated() -> bool:
            return all(rule["health"] != "unknown" for rule in await prometheus.rules())

        await eventually(evaluated, timeout=10, what="every rule evaluated")
        broken = [(r["name"], r.get("lastError")) for r in await prometheus.rules() if r["health"] != "ok"]
        assert broken == []
        assert {rule["name"] for rule in await prometheus.rules()} == {
            rule["alert"] for rule in alert_rules()
        }
