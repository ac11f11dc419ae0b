"""Console entry point: ``runtimeclass-extender serve | filter | explain | classes | replay | audit | check``.

Parsing only: ``serve`` resolves its settings and runs ``extender.http.serve``; the
other commands are ``extender.tools.commands``.

Building the parser imports nothing of the server: ``serve`` imports it when it runs,
and each tool command its own modules (``extender.tools.commands``), so ``--version``,
``--help`` and a mistyped flag answer at once instead of after loading aiohttp,
kubernetes-asyncio and pydantic (bench/cli_startup.py measures it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from extender.settings import SERVE_SETTINGS, add_arguments
from extender.tools.arguments import CommandParser, add_version_argument, mark_commands, parse_command_line
from extender.tools.commands import add_filter_command, add_tool_commands

PROG = "runtimeclass-extender"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog=PROG, description="A RuntimeClass-aware kube-scheduler extender.")
    add_version_argument(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_parser = commands.add_parser(
        "serve",
        help="serve the extender over HTTP (POST /filter, POST /explain, GET /explain/runtimeclasses/NAME, "
        "POST /admission/runtimeclasses, POST /admission/pods, GET /metrics, GET /healthz, GET /readyz)",
        description="Serve the extender over HTTP: POST /filter (kube-scheduler's extender verb), "
        "POST /explain and GET /explain/runtimeclasses/NAME, POST /admission/runtimeclasses (the "
        "validating webhook) and POST /admission/pods (the pod webhook), GET /metrics (Prometheus), "
        "GET /healthz and GET /readyz (probes). "
        "Settings can also come from the environment "
        "or a --config file; each setting has the same name in all three.",
    )
    add_arguments(serve_parser, SERVE_SETTINGS)
    serve_parser.set_defaults(run=run_serve)
    add_filter_command(commands, prog=PROG)
    add_tool_commands(commands, prog=PROG)
    mark_commands(commands)
    return parser


def run_serve(args: argparse.Namespace) -> int:
    # The server and everything it serves with, imported only to serve.
    import asyncio

    from extender.cluster.file_source import ClusterFileError
    from extender.http.serve import ServeError, serve
    from extender.logs import setup_logging
    from extender.settings import SettingsError, resolve_serve
    from extender.tools.output import UsageError, print_error
    from policies.registry import PolicyError

    try:
        settings = resolve_serve(args)
        setup_logging(settings.log_level, settings.log_format)
        try:
            # Optional (the `speed` extra): a faster event loop shortens every round trip.
            import uvloop
        except ImportError:
            asyncio.run(serve(settings))
        else:
            uvloop.run(serve(settings))
    except (ServeError, UsageError, SettingsError, PolicyError, ClusterFileError) as exc:
        return print_error(PROG, exc)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_command_line(build_parser(), argv)
    try:
        status: int = args.run(args)
        return status
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
