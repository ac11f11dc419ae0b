"""The arguments the operator commands share: which cluster, how long to wait for it, and
the output format.

Light on purpose: the parsers of every command are built from these before any command
runs (``--help`` included), so nothing here imports the modules that do the work.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from extender.kube.defaults import DEFAULT_REQUEST_TIMEOUT as _REQUEST_TIMEOUT_SECONDS
from extender.settings import GivenOnce

# Per request of a live LIST (each page of it), when --request-timeout is not given.
# kubectl's own default is "0" (no limit), which leaves its connect (30 s) and TLS
# handshake (10 s) bounded by client-go's transport, but waits forever for a server that
# accepts the connection and then never answers. A one-shot tool that scripts and CI jobs
# gate on should fail instead: 30 s is what these commands always allowed per request,
# far above what a LIST page of 500 objects takes on a healthy API server. As a flag's
# text, so that the help says "30s".
DEFAULT_REQUEST_TIMEOUT = f"{_REQUEST_TIMEOUT_SECONDS:g}s"

_GO_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # µ (micro sign)
    "\u03bcs": 1e-6,  # μ (Greek mu)
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_GO_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_request_timeout(text: str) -> float:
    """Seconds to wait for one request, 0 for no limit, read as kubectl reads its
    ``--request-timeout`` (client-go ``clientcmd.ParseTimeout``,
    staging/src/k8s.io/client-go/tools/clientcmd/helpers.go): a whole number of seconds,
    or a Go duration such as ``1s``, ``2m``, ``1m30s``, ``500ms``. Negative values, which
    mean nothing as a timeout, are refused."""
    value = text.strip()
    if value.isdigit():
        return float(value)
    parts = _GO_DURATION_PART.findall(value)
    if value and "".join(number + unit for number, unit in parts) == value:
        return sum(float(number) * _GO_DURATION_UNITS[unit] for number, unit in parts)
    raise argparse.ArgumentTypeError(
        f"invalid value {text!r}: a whole number of seconds, or a number with a time unit "
        "(e.g. 1s, 2m, 3h; 0 waits without a limit)"
    )


_T = TypeVar("_T")


def setting_type(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """A parser of ``extender.settings`` as an argparse ``type``: a flag the commands
    share with ``serve`` (``--node-label-prefix``) is read by ``serve``'s own parser, and
    its ValueError becomes argparse's one-line usage error with the parser's reason
    (argparse shows the reason of an ArgumentTypeError only)."""

    def convert(text: str) -> _T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: {exc}") from None

    return convert


class _Version(argparse.Action):
    """``--version``: prints ``PROG VERSION`` and exits, reading the version only then."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(
            option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help="show the version and exit"
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from extender import version

        # On stdout, as argparse's own version action prints it.
        print(f"{parser.prog} {version()}")
        parser.exit()


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage error is two lines: the command's usage, short (the
    positional arguments, ``[options]`` for the rest: serve's full usage is 45 lines,
    which bury the error), and the error. ``--help`` prints the full usage as before.
    Subcommand parsers are of the class of their parent (``add_subparsers``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.short_usage()}\n{self.prog}: error: {message}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's check of a value against its choices, and a misspelt command or
        choice followed by the one it most likely means: ``invalid choice: 'chek' (did
        you mean 'check'?) (choose from ...)``."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            names = [choice for choice in action.choices or () if isinstance(choice, str)]
            close = _closest(str(value), names)
            if close is None:
                raise
            message = exc.message.replace(repr(value), f"{value!r} (did you mean {close!r}?)", 1)
            raise argparse.ArgumentError(action, message) from None

    def short_usage(self) -> str:
        """``usage: PROG [options] POSITIONALS (--help lists the options)``, on one line."""
        positionals = [a for a in self._actions if not a.option_strings and a.help != argparse.SUPPRESS]
        formatter = self._get_formatter()
        formatter.add_usage(None, positionals, [], prefix="")
        # The formatter wraps at the terminal's width: one line, whatever the width.
        arguments = " ".join(formatter.format_help().split())[len(self.prog) :]
        return f"usage: {self.prog} [options]{arguments} (--help lists the options)"


def suggestion(word: str, parser: argparse.ArgumentParser) -> str | None:
    """The option of ``parser`` that ``word`` (``--warning-as-errors``, or
    ``--flag=value``) is most likely a misspelling of, if one is close (difflib)."""
    if not word.startswith("-"):
        return None
    name = word.split("=", 1)[0]
    return _closest(name, [option for action in parser._actions for option in action.option_strings])


def _closest(word: str, candidates: list[str]) -> str | None:
    """The candidate ``word`` is most likely a misspelling of, if one is close (difflib)."""
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.75)
    return close[0] if close else None


def mark_commands(commands: Any) -> None:
    """Give each command of an argparse subparsers object its own parser in its
    namespace (``command_parser``), for ``parse_command_line``."""
    for command in commands.choices.values():
        command.set_defaults(command_parser=command)


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, but an argument no parser knows is the command's
    usage error: argparse's own would print the program's usage (``COMMAND ...``), not
    the usage of the command the flag was given to. A misspelt option is followed by
    the one it most likely means: ``--warning-as-errors (did you mean
    --warnings-as-errors?)``."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command_parser: argparse.ArgumentParser = getattr(args, "command_parser", parser)
        words = [
            f"{word} (did you mean {hint}?)" if (hint := suggestion(word, command_parser)) else word
            for word in unknown
        ]
        command_parser.error(f"unrecognized arguments: {' '.join(words)}")
    return args


def add_version_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action=_Version)


def add_cluster_arguments(
    parser: argparse.ArgumentParser,
    *,
    with_pods: bool = False,
    policy: bool = True,
    live_only: bool = False,
    title: str | None = None,
) -> None:
    """--cluster-file (unless ``live_only``), --kubeconfig, --context and
    --request-timeout (and --policy-file with ``policy``); ``title`` replaces the group's
    heading."""
    what = "a cluster file with pods" if with_pods else "a cluster file"
    source = parser.add_argument_group(
        title or f"cluster ({what}, or else the live cluster of the kubeconfig)"
    )
    if not live_only:
        source.add_argument(
            "--cluster-file",
            metavar="PATH",
            action=GivenOnce,
            help="Nodes, RuntimeClasses and Pods (kubectl get nodes,runtimeclasses,pods -A -o yaml)"
            if with_pods
            else "Nodes and RuntimeClasses (kubectl get nodes,runtimeclasses -o yaml)",
        )
    source.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig (default: $KUBECONFIG, then the in-cluster service account, then ~/.kube/config)",
    )
    source.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    source.add_argument(
        "--request-timeout",
        metavar="DURATION",
        type=parse_request_timeout,
        default=parse_request_timeout(DEFAULT_REQUEST_TIMEOUT),
        help="how long to wait for each request to the API server before giving up, as kubectl's "
        "--request-timeout: seconds, or a number with a unit (1s, 2m, 3h); 0 waits without a limit "
        f"(default: {DEFAULT_REQUEST_TIMEOUT})",
    )
    if policy:
        parser.add_argument("--policy-file", metavar="PATH", help="policy file (default: the bundled policy)")


def add_output_argument(
    parser: argparse.ArgumentParser, *, wide: str = "more columns", names: str | None = None
) -> None:
    """-o table|wide|json|yaml (and name, when ``names`` says what it prints), and
    --no-headers; ``wide`` says what -o wide adds."""
    choices = ["table", "wide", "json", "yaml"]
    name_help = ""
    if names is not None:
        choices.append("name")
        name_help = f", name ({names}, one per line, as kubectl's -o name)"
    parser.add_argument(
        "-o",
        "--output",
        choices=choices,
        default="table",
        help=f"output format: table, wide (a table with {wide}, as kubectl's -o wide), json, yaml"
        f"{name_help} (default: table)",
    )
    parser.add_argument(
        "--no-headers",
        action="store_true",
        help="with table or wide output, print no header line (as kubectl's --no-headers)",
    )
