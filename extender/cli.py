"""Console entry point: ``runtimeclass-extender serve | filter | explain | classes | replay``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from extender import __version__
from extender.app import create_app
from extender.capture import capture_writer, install_capture
from extender.cluster.file_source import ClusterFileError, load_cluster_file
from extender.cluster.objects import ObjectError, describe_validation_error
from extender.cluster.state import ClusterState
from extender.commands_tools import add_tool_commands
from extender.filtering import decide
from extender.logs import setup_logging
from extender.policy_file import load_policy
from extender.protocol import ExtenderArgs
from extender.settings import SERVE_SETTINGS, SettingsError, add_arguments, resolve
from extender.tls import install_certificate_reloader, server_context, tls_files
from policies.registry import PolicyError

if TYPE_CHECKING:
    from extender.cluster.live import LiveCluster

log = logging.getLogger("extender")

EXIT_USAGE = 2


class CliError(Exception):
    """A problem the user can fix; printed without a trace, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runtimeclass-extender",
        description="A RuntimeClass-aware kube-scheduler extender.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="serve the extender over HTTP (POST /filter, GET /healthz, GET /readyz)",
        description="Serve the extender over HTTP. Settings can also come from the environment "
        "or a --config file; each setting has the same name in all three.",
    )
    add_arguments(serve, SERVE_SETTINGS)
    serve.set_defaults(run=run_serve)

    filt = commands.add_parser(
        "filter",
        help="answer one captured filter request offline and print the response JSON",
        description="Decide one ExtenderArgs request (as kube-scheduler sends it) against a cluster file "
        "and print the ExtenderFilterResult.",
    )
    filt.add_argument("request", metavar="REQUEST.json", help="the request body; - reads standard input")
    filt.add_argument("--cluster-file", required=True, metavar="PATH", help="Nodes and RuntimeClasses")
    filt.add_argument("--policy-file", metavar="PATH", help="policy file (default: the bundled policy)")
    filt.set_defaults(run=run_filter)
    add_tool_commands(commands)
    return parser


def _read_input(path: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc}") from None


def run_filter(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy_file)
    state = load_cluster_file(args.cluster_file)
    body = _read_input(args.request)
    try:
        request = ExtenderArgs.model_validate_json(body)
        decision = decide(request, state, policy)
    except ValidationError as exc:
        raise CliError(
            f"{args.request}: malformed ExtenderArgs: {describe_validation_error(exc, 'request')}"
        ) from None
    except ObjectError as exc:
        raise CliError(f"{args.request}: malformed ExtenderArgs: {exc}") from None
    pretty = orjson.dumps(orjson.loads(decision.result.to_json()), option=orjson.OPT_INDENT_2)
    sys.stdout.buffer.write(pretty + b"\n")
    return 0


async def _serve(settings: dict[str, Any]) -> None:
    if settings["requeue_pending_pods"] and settings["cluster_file"]:
        from extender.requeue import CLUSTER_FILE_ERROR

        raise CliError(CLUSTER_FILE_ERROR)
    tls = tls_files(settings)
    ssl_context = server_context(tls) if tls is not None else None  # fail fast on bad TLS files
    policy = load_policy(settings["policy_file"])
    state = ClusterState()
    if settings["cluster_file"]:
        load_cluster_file(settings["cluster_file"], state)
        log.info(
            "loaded cluster file",
            extra={
                "path": settings["cluster_file"],
                "nodes": len(state.nodes),
                "runtimeClasses": len(state.runtime_classes),
            },
        )
    live = None
    if not settings["cluster_file"]:
        live = await _connect_live(settings, state)
    app = create_app(
        state=state,
        policy=policy,
        max_body_bytes=settings["max_body_bytes"],
        max_nodes_per_request=settings["max_nodes_per_request"],
        body_read_timeout=settings["body_read_timeout"],
        source_stats=live.source_stats if live is not None else None,
    )
    if live is not None:
        live.attach(app)
        if settings["requeue_pending_pods"]:
            from extender.requeue import requeuer_from_settings

            requeuer_from_settings(live.api, state, settings).attach(app)
    if settings["capture_dir"]:
        install_capture(app, capture_writer(settings))
    if tls is not None and ssl_context is not None:
        install_certificate_reloader(app, ssl_context, tls)
    # What is loaded by now lives as long as the process: keep the cyclic collector
    # from re-scanning it on every full collection (a pause some filter call waits out).
    gc.freeze()
    # No access log: one line per scheduler call costs time on every pod's critical path.
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings["host"], settings["port"], ssl_context=ssl_context)
    await site.start()
    addresses = [f"{addr[0]}:{addr[1]}" for addr in runner.addresses]
    log.info(
        "serving",
        extra={
            "listen": ",".join(addresses),
            "scheme": "https" if ssl_context else "http",
            "clientCertificates": bool(settings["client_ca_file"]),
            "predicates": ",".join(policy.names),
        },
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await runner.cleanup()


async def _connect_live(settings: dict[str, Any], state: ClusterState) -> LiveCluster:
    """Live cluster mode: exits at once (status 2) when no API server is configured."""
    # Imported here: kubernetes-asyncio takes about a second to import, and only
    # live mode needs it.
    from extender.cluster.kube import KubeConfigError, connect
    from extender.cluster.live import LiveCluster, LiveOptions

    try:
        connection = await connect(kubeconfig=settings["kubeconfig"], context=settings["context"])
    except KubeConfigError as exc:
        raise CliError(str(exc)) from None
    log.info("watching the API server", extra={"server": connection.host, "config": connection.source})
    return LiveCluster(
        connection.api, state, options=LiveOptions(unhealthy_after=settings["unhealthy_after"])
    )


def run_serve(args: argparse.Namespace) -> int:
    settings = resolve(args, SERVE_SETTINGS)
    setup_logging(settings["log_level"], settings["log_format"])
    try:
        # Optional (the `speed` extra): a faster event loop shortens every round trip.
        import uvloop
    except ImportError:
        asyncio.run(_serve(settings))
    else:
        uvloop.run(_serve(settings))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
        return status
    except (CliError, SettingsError, PolicyError, ClusterFileError) as exc:
        print(f"runtimeclass-extender: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
