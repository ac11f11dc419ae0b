"""``serve --leader-elect`` wiring: the election runs beside the app, /readyz names the
holder, the leader gauge reads 1 on the leader, and without the flag nothing of it
exists (no Lease request, no gauge, no readyz field)."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.cli import main
from extender.http.serve import build_app
from extender.settings import SettingsError, default_serve_settings
from tests.support.apiserver import (
    LEASES,
    NODES,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_runtime_class,
)
from tests.support.apps import ClientFactory
from tests.support.waiting import eventually

GAUGE = "runtimeclass_extender_leader"


@pytest.mark.parametrize("enabled", [False, True], ids=["flag-off", "flag-on"])
async def test_leader_election_only_with_the_flag(
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    aiohttp_client: ClientFactory,
    monkeypatch: pytest.MonkeyPatch,
    enabled: bool,
) -> None:
    monkeypatch.setenv("POD_NAME", "extender-0")
    fake_apiserver.add(NODES, make_node("n1"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    settings = default_serve_settings(
        kubeconfig=str(fake_kubeconfig),
        requeue_pending_pods=True,
        audit_running_pods=True,
        leader_elect=enabled,
        leader_elect_lease_namespace="runtimeclass-extender",
        leader_elect_lease_duration=1.0,
        leader_elect_renew_deadline=0.6,
        leader_elect_retry_period=0.1,
    )
    app, _ = await build_app(settings)
    client = await aiohttp_client(app)

    async def ready() -> bool:
        return (await client.get("/readyz")).status == 200

    await eventually(ready, what="ready")
    if enabled:

        async def leading() -> bool:
            body = await (await client.get("/readyz")).json()
            return bool(body["leader"]["leading"])

        await eventually(leading, what="leading")
        body = await (await client.get("/readyz")).json()
        leader = body["leader"]
        assert leader["identity"].startswith("extender-0_") and leader["holder"] == leader["identity"]
        assert leader["lease"] == "runtimeclass-extender/runtimeclass-extender"
        lease = fake_apiserver.get(LEASES, "runtimeclass-extender", namespace="runtimeclass-extender")
        assert lease is not None and lease["spec"]["holderIdentity"] == leader["identity"]
        assert f"{GAUGE} 1.0" in await (await client.get("/metrics")).text()
    else:
        body = await (await client.get("/readyz")).json()
        assert "leader" not in body
        assert GAUGE not in await (await client.get("/metrics")).text()
        assert not [r for r in fake_apiserver.requests if "/leases" in r.path]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"leader_elect_lease_duration": 10.0}, "must be greater than --leader-elect-renew-deadline"),
        ({"leader_elect_renew_deadline": 2.0}, "must be greater than 1.2 x --leader-elect-retry-period"),
    ],
)
def test_durations_are_checked_as_client_go_checks_them(overrides: dict[str, float], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        default_serve_settings(**overrides)


def test_leader_elect_needs_a_live_cluster(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    assert main(["serve", "--port", "0", "--cluster-file", str(cluster), "--leader-elect"]) == 2
    err = capsys.readouterr().err
    assert "--leader-elect needs a live cluster" in err and "Traceback" not in err
