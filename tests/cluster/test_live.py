"""Live cluster mode end to end: the HTTP app, wired as ``serve`` wires it, over the fake API server.

The production code connects through an ordinary kubeconfig file; nothing of ours is
patched. Waits are bounded polls, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from extender.cli import main
from extender.cluster.live import LiveCluster, LiveOptions
from extender.cluster.node_lookup import LookupOptions, NodeLookup
from extender.cluster.state import ClusterState
from extender.filtering import ERROR_NOT_SYNCED
from extender.http.app import create_app
from extender.http.wiring import attach_live
from extender.kube.connect import KubeConfigError, choose_source, connect
from extender.policy_file import load_policy
from extender.tasks import stop as stop_task
from policies.verdict import REASON_NODE_UNKNOWN, REASON_RUNTIMECLASS_MISMATCH
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.apps import ClientFactory
from tests.support.reflectors import fast_reflector
from tests.support.waiting import eventually

FAST_REFLECTOR = fast_reflector(page_size=50)


@pytest.fixture
def live_client(aiohttp_client: Any, tmp_path: Path) -> ClientFactory:
    """Builds the live-mode app exactly as ``serve`` does, against ``server``."""

    async def build(
        server: FakeApiServer,
        *,
        unhealthy_after: float = 180.0,
        lookup: LookupOptions | None = None,
    ) -> TestClient[web.Request, web.Application]:
        connection = await connect(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        state = ClusterState()
        live = LiveCluster(
            connection.api,
            state,
            options=LiveOptions(
                unhealthy_after=unhealthy_after,
                reflector=FAST_REFLECTOR,
                lookup=lookup or LookupOptions(timeout=2.0, negative_ttl=0.5, ttl=0.5),
            ),
        )
        app = create_app(state=state, policy=load_policy(), source_stats=live.source_stats)
        attach_live(app, live)
        client: TestClient[web.Request, web.Application] = await aiohttp_client(app)
        return client

    return build


def gvisor_cluster(server: FakeApiServer) -> None:
    server.add(
        RUNTIME_CLASSES,
        make_runtime_class("gvisor", handler="runsc", node_selector={"sandbox": "gvisor"}),
    )
    server.add(RUNTIME_CLASSES, make_runtime_class("runc"))
    server.add(NODES, make_node("sandbox-1", labels={"sandbox": "gvisor"}))
    server.add(NODES, make_node("plain-1"))


def filter_body(node_names: list[str], runtime_class: str | None = "gvisor") -> bytes:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "pause"}]}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": spec}
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names})


async def post_filter(
    client: TestClient[web.Request, web.Application], names: list[str], runtime_class: str | None = "gvisor"
) -> dict[str, Any]:
    resp = await client.post(
        "/filter", data=filter_body(names, runtime_class), headers={"Content-Type": "application/json"}
    )
    assert resp.status == 200
    answer: dict[str, Any] = await resp.json()
    # Every asked node is answered exactly once.
    answered = (
        list(answer["NodeNames"] or [])
        + list(answer["FailedNodes"])
        + list(answer["FailedAndUnresolvableNodes"])
    )
    if not answer["Error"]:
        assert sorted(answered) == sorted(set(names))
    return answer


async def ready(client: TestClient[web.Request, web.Application]) -> bool:
    resp = await client.get("/readyz")
    return resp.status == 200


async def test_not_ready_until_first_list_then_ready(live_client: ClientFactory, tmp_path: Path) -> None:
    server = FakeApiServer()
    await server.start()
    await server.stop()  # the port is known; the API server is down at start
    gvisor_cluster(server)
    client = await live_client(server)
    resp = await client.get("/readyz")
    assert resp.status == 503
    assert sorted((await resp.json())["unsynced"]) == ["nodes", "runtimeclasses"]
    answer = await post_filter(client, ["sandbox-1"])
    assert answer["Error"] == ERROR_NOT_SYNCED
    # Down for a moment is not unhealthy (the window is minutes by default).
    assert (await client.get("/healthz")).status == 200
    await server.start()
    try:
        await eventually(lambda: ready(client), what="/readyz 200")
        answer = await post_filter(client, ["sandbox-1", "plain-1"])
        assert answer["NodeNames"] == ["sandbox-1"]
        assert answer["FailedAndUnresolvableNodes"] == {"plain-1": REASON_RUNTIMECLASS_MISMATCH}
    finally:
        await server.stop()


async def test_changes_reach_filter_answers(
    fake_apiserver: FakeApiServer, live_client: ClientFactory
) -> None:
    gvisor_cluster(fake_apiserver)
    client = await live_client(fake_apiserver)
    await eventually(lambda: ready(client), what="sync")

    async def passing(names: list[str], runtime_class: str | None = "gvisor") -> list[str]:
        return list((await post_filter(client, names, runtime_class))["NodeNames"])

    # A node added: judged on its labels as soon as its event arrives.
    fake_apiserver.add(NODES, make_node("sandbox-2", labels={"sandbox": "gvisor"}))

    async def sandbox_2_passes() -> bool:
        return await passing(["sandbox-2"]) == ["sandbox-2"]

    await eventually(sandbox_2_passes, what="ADDED node passing")

    # A label change flips the decision, both ways.
    fake_apiserver.modify(NODES, "sandbox-1", {"metadata": {"labels": {"sandbox": None}}})

    async def sandbox_1_fails() -> bool:
        answer = await post_filter(client, ["sandbox-1"])
        return bool(answer["FailedAndUnresolvableNodes"] == {"sandbox-1": REASON_RUNTIMECLASS_MISMATCH})

    await eventually(sandbox_1_fails, what="label removal rejecting the node")
    fake_apiserver.modify(NODES, "plain-1", {"metadata": {"labels": {"sandbox": "gvisor"}}})

    async def plain_1_passes() -> bool:
        return await passing(["plain-1"]) == ["plain-1"]

    await eventually(plain_1_passes, what="label addition admitting the node")

    # A RuntimeClass edit reaches pending pods: the selector now asks for another label.
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"sandbox": "other"}}})

    async def none_pass() -> bool:
        return await passing(["plain-1", "sandbox-2"]) == []

    await eventually(none_pass, what="RuntimeClass selector change")

    # A deleted RuntimeClass: every node fails with the class named.
    fake_apiserver.delete(RUNTIME_CLASSES, "gvisor")

    async def class_gone() -> bool:
        answer = await post_filter(client, ["plain-1"])
        return bool(answer["FailedAndUnresolvableNodes"] == {"plain-1": 'RuntimeClass "gvisor" not found'})

    await eventually(class_gone, what="RuntimeClass deletion")

    # A deleted node: unknown to the cache and to the API server -> FailedNodes, never a pass.
    fake_apiserver.delete(NODES, "sandbox-2")

    async def node_gone() -> bool:
        answer = await post_filter(client, ["sandbox-2"], runtime_class=None)
        return bool(answer["FailedNodes"] == {"sandbox-2": REASON_NODE_UNKNOWN})

    await eventually(node_gone, what="node deletion")


async def test_unseen_node_is_fetched_directly(
    fake_apiserver: FakeApiServer, live_client: ClientFactory
) -> None:
    gvisor_cluster(fake_apiserver)
    client = await live_client(fake_apiserver)
    await eventually(lambda: ready(client), what="sync")
    await fake_apiserver.wait_for_watchers(NODES, 1)
    # The watch lags (stalled): the scheduler already knows a node we have not seen.
    fake_apiserver.stall_watches()
    fake_apiserver.add(NODES, make_node("new-sandbox", labels={"sandbox": "gvisor"}))
    fake_apiserver.add(NODES, make_node("new-plain"))
    answer = await post_filter(client, ["sandbox-1", "new-sandbox", "new-plain"])
    assert sorted(answer["NodeNames"]) == ["new-sandbox", "sandbox-1"]  # in any order
    assert answer["FailedAndUnresolvableNodes"] == {"new-plain": REASON_RUNTIMECLASS_MISMATCH}
    gets = [r.path for r in fake_apiserver.requests if r.verb == "get"]
    assert sorted(gets) == ["/api/v1/nodes/new-plain", "/api/v1/nodes/new-sandbox"]
    # Remembered briefly: an immediate second call does not GET again.
    await post_filter(client, ["new-sandbox"])
    assert len([r for r in fake_apiserver.requests if r.verb == "get"]) == 2
    fake_apiserver.resume_watches()


async def test_unknown_node_and_failed_lookup_go_to_failed_nodes(
    fake_apiserver: FakeApiServer, live_client: ClientFactory
) -> None:
    gvisor_cluster(fake_apiserver)
    client = await live_client(fake_apiserver)
    await eventually(lambda: ready(client), what="sync")
    # Not on the API server either.
    answer = await post_filter(client, ["sandbox-1", "ghost"])
    assert answer["NodeNames"] == ["sandbox-1"]
    assert answer["FailedNodes"] == {"ghost": REASON_NODE_UNKNOWN}
    # The lookup itself fails (API server error): still a reasoned rejection.
    fake_apiserver.fail_next(1, status=500, verbs={"get"})
    answer = await post_filter(client, ["broken"], runtime_class=None)
    assert answer["NodeNames"] == []
    assert answer["FailedNodes"] == {"broken": REASON_NODE_UNKNOWN}
    assert answer["Error"] == ""


async def test_lookup_failures_and_budget_when_the_server_is_down(
    fake_apiserver: FakeApiServer, live_client: ClientFactory
) -> None:
    gvisor_cluster(fake_apiserver)
    client = await live_client(fake_apiserver, lookup=LookupOptions(timeout=0.2, max_names_per_call=2))
    await eventually(lambda: ready(client), what="sync")
    await fake_apiserver.stop()  # GETs now fail to connect
    answer = await post_filter(client, ["sandbox-1", "a", "b", "c"])
    # The cache keeps serving known nodes; unknown ones are rejected with a reason.
    assert answer["NodeNames"] == ["sandbox-1"]
    assert answer["FailedNodes"] == {name: REASON_NODE_UNKNOWN for name in ("a", "b", "c")}
    await fake_apiserver.start()


async def test_healthz_turns_unhealthy_after_the_window(
    fake_apiserver: FakeApiServer, live_client: ClientFactory
) -> None:
    gvisor_cluster(fake_apiserver)
    client = await live_client(fake_apiserver, unhealthy_after=0.2)
    await eventually(lambda: ready(client), what="sync")
    assert (await client.get("/healthz")).status == 200
    await fake_apiserver.stop()

    async def unhealthy() -> bool:
        return (await client.get("/healthz")).status == 503

    await eventually(unhealthy, what="/healthz 503")
    body = await (await client.get("/healthz")).json()
    assert body["status"] == "unhealthy"
    kinds = {entry["kind"] for entry in body["failing"]}
    assert kinds <= {"nodes", "runtimeclasses"} and kinds
    entry = body["failing"][0]
    assert entry["since"].endswith("Z") and entry["seconds"] >= 0.2 and entry["error"]
    # The last good state keeps serving while the API server is away.
    assert (await client.get("/readyz")).status == 200
    assert (await post_filter(client, ["sandbox-1"]))["NodeNames"] == ["sandbox-1"]
    await fake_apiserver.start()

    async def healthy() -> bool:
        return (await client.get("/healthz")).status == 200

    await eventually(healthy, what="/healthz 200 again")


def test_serve_without_any_cluster_exits_with_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("CLUSTER_FILE", "KUBECONFIG", "CONTEXT", "CONFIG"):
        monkeypatch.delenv(f"RUNTIMECLASS_EXTENDER_{name}", raising=False)
    assert main(["serve", "--port", "0"]) == 2
    message = capsys.readouterr().err
    for hint in ("--kubeconfig", "KUBECONFIG", "--context", "--cluster-file"):
        assert hint in message
    assert "Traceback" not in message

    assert main(["serve", "--port", "0", "--kubeconfig", str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_bad_context_is_a_usage_error(
    fake_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RUNTIMECLASS_EXTENDER_CLUSTER_FILE", raising=False)
    assert main(["serve", "--port", "0", "--kubeconfig", str(fake_kubeconfig), "--context", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "Traceback" not in err


async def test_exec_plugin_tokens_are_refreshed_for_long_watches(tmp_path: Path) -> None:
    """A kubeconfig whose user is an exec plugin (EKS/GKE style) with expiring tokens."""
    token_file = tmp_path / "token"
    token_file.write_text("first")
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(
        "#!/bin/sh\n"
        'printf \'{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",'
        f'"status":{{"token":"%s","expirationTimestamp":"2000-01-01T00:00:00Z"}}}}\' "$(cat {token_file})"\n'
    )
    plugin.chmod(0o755)
    server = FakeApiServer(token="first")
    await server.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        orjson.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server.url}}],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1beta1",
                                "command": str(plugin),
                            }
                        },
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        ).decode()
    )
    connection = await connect(kubeconfig=str(kubeconfig))
    state = ClusterState()
    live = LiveCluster(connection.api, state, options=LiveOptions(reflector=FAST_REFLECTOR))
    watch_task = asyncio.create_task(live.watch.run())
    try:
        server.add(NODES, make_node("a"))
        server.add(RUNTIME_CLASSES, make_runtime_class("runc"))

        async def synced() -> bool:
            return state.synced

        await eventually(synced, what="sync with the first token")
        await server.wait_for_watchers(NODES, 1)
        # The credential rotates; the next connection must present the new token.
        server.token = "second"
        token_file.write_text("second")
        server.drop_watches()
        server.add(NODES, make_node("b"))

        async def has_b() -> bool:
            return "b" in state.nodes

        await eventually(has_b, what="watch resumed with the rotated token")
    finally:
        await stop_task(watch_task)
        await connection.api.close()
        await server.stop()
        await _children_reaped()


async def _children_reaped(timeout: float = 10.0) -> None:
    """Until every run of the credential plugin has been reaped, and the loop has
    handled the reports: asyncio closes a subprocess's transport when its child
    watcher reports the exit, and one still open when the test's loop is closed raises,
    once collected, in whichever test runs then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while _plugin_children() and loop.time() < deadline:
        await asyncio.sleep(0.02)
    for _ in range(3):
        await asyncio.sleep(0)


def _plugin_children() -> list[str]:
    """This process's children named credential-plugin (/proc/PID/stat: the name as
    the kernel keeps it, 15 characters, then the state and the parent's pid)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().rsplit(")", 1)
        except OSError:
            continue  # exited and reaped meanwhile
        if name.endswith("(credential-plug") and rest.split()[1] == str(os.getpid()):
            found.append(stat.parent.name)
    return found


async def test_serve_command_in_live_mode(fake_apiserver: FakeApiServer, fake_kubeconfig: Path) -> None:
    """The real ``serve`` process: connects, becomes ready, answers, stops on SIGTERM."""
    gvisor_cluster(fake_apiserver)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTIMECLASS_EXTENDER_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "extender",
        "serve",
        "--kubeconfig",
        str(fake_kubeconfig),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--log-format",
        "json",
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stderr is not None
    try:
        listen = ""
        while not listen:
            line = await asyncio.wait_for(proc.stderr.readline(), 30)
            assert line, "serve exited before listening"
            record = orjson.loads(line)
            if record.get("msg") == "serving":
                listen = record["listen"]
        async with aiohttp.ClientSession() as http:
            base = f"http://{listen}"

            async def is_ready() -> bool:
                async with http.get(base + "/readyz") as resp:
                    return resp.status == 200

            await eventually(is_ready, what="/readyz 200 from the serve process")
            async with http.post(
                base + "/filter",
                data=filter_body(["sandbox-1", "plain-1"]),
                headers={"Content-Type": "application/json"},
            ) as resp:
                answer = await resp.json()
            assert answer["NodeNames"] == ["sandbox-1"]
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_lookup_caches_briefly_and_shares_concurrent_gets(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path
) -> None:
    clock = FakeClock()
    connection = await connect(kubeconfig=str(fake_kubeconfig))
    lookup = NodeLookup(connection.api, options=LookupOptions(ttl=10, negative_ttl=2), timer=clock)
    try:
        fake_apiserver.add(NODES, make_node("real", labels={"zone": "a"}))

        def gets(name: str) -> int:
            return sum(1 for r in fake_apiserver.requests if r.verb == "get" and r.path.endswith("/" + name))

        # Concurrent filter calls asking for the same names share one GET each.
        first, second = await asyncio.gather(
            lookup.lookup(["real", "ghost"]), lookup.lookup(["ghost", "real"])
        )
        for result in (first, second):
            assert dict(result.nodes["real"].labels)["zone"] == "a"
            assert set(result.unknown) == {"ghost"} and "API server" in result.unknown["ghost"]
        assert gets("real") == 1 and gets("ghost") == 1

        # "Not found" is remembered only briefly: the node may join any moment.
        fake_apiserver.add(NODES, make_node("ghost"))
        assert "ghost" in (await lookup.lookup(["ghost"])).unknown
        clock.now += 2.5
        assert "ghost" in (await lookup.lookup(["ghost"])).nodes
        assert gets("ghost") == 2
        # Found nodes for longer.
        assert "real" in (await lookup.lookup(["real"])).nodes
        assert gets("real") == 1
        clock.now += 10
        await lookup.lookup(["real"])
        assert gets("real") == 2
        # A name that is no valid node name is simply unknown (it is quoted into the
        # path by the client, so it cannot address another resource).
        result = await lookup.lookup(["../namespaces/x"])
        assert set(result.unknown) == {"../namespaces/x"} and not result.nodes
    finally:
        await lookup.close()
        await connection.api.close()


def test_configuration_sources_in_order(tmp_path: Path) -> None:
    flag, env_a, env_b, default = (tmp_path / n for n in ("flag", "env-a", "env-b", "home/.kube/config"))
    default.parent.mkdir(parents=True)
    for path in (flag, env_b, default):
        path.write_text("{}")
    token = tmp_path / "token"
    token.write_text("t")
    pod_env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    home = tmp_path / "home"

    def choose(
        kubeconfig: str | None = None, context: str | None = None, **env: str
    ) -> tuple[str, str | None]:
        return choose_source(
            kubeconfig=kubeconfig, context=context, environ=env, home=home, token_file=str(token)
        )

    assert choose(str(flag), KUBECONFIG=str(env_b), **pod_env) == ("kubeconfig", str(flag))
    # KUBECONFIG lists: missing entries are skipped, as kubectl skips them.
    assert choose(KUBECONFIG=f"{env_a}:{env_b}", **pod_env) == ("kubeconfig", str(env_b))
    assert choose(**pod_env) == ("in-cluster", None)
    # A context only exists in a kubeconfig: in-cluster is skipped.
    assert choose(context="prod", **pod_env) == ("kubeconfig", str(default))
    assert choose() == ("kubeconfig", str(default))
    default.unlink()
    with pytest.raises(KubeConfigError, match="--cluster-file"):
        choose()
    with pytest.raises(KubeConfigError, match="KUBECONFIG"):
        choose(KUBECONFIG=str(env_a))
    with pytest.raises(KubeConfigError, match="--context prod"):
        choose(context="prod", **pod_env)
