"""Operator commands: ``explain``, ``classes``, ``replay`` and ``audit`` (also the kubectl plugin).

``runtimeclass-extender explain|classes|replay|audit`` and ``kubectl runtimeclass
explain|classes|replay|audit`` (the ``kubectl-runtimeclass`` executable) share these
parsers; ``audit`` lives in ``extender.tools.audit``.
Each command reads its inputs (a cluster file or a one-shot LIST of a live cluster, a
pod file, capture files), hands them to the pure modules (``extender.explain``,
``extender.capture.replay``) and prints. Problems the user can fix print one line on stderr
and exit with status 2, never a trace.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from pydantic import ValidationError

from extender import __version__
from extender.capture.format import REPLAY_HEADER, Capture, state_fingerprint
from extender.capture.replay import (
    capture_files,
    captured_state,
    compare,
    load_capture,
    redecide,
)
from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.class_nodes import ClassNodeCounts, class_node_counts
from extender.cluster.file_source import load_cluster_file
from extender.cluster.objects import ObjectError, describe_validation_error
from extender.cluster.snapshot import list_cluster
from extender.cluster.state import ClusterState
from extender.documents import DocumentError, load_document
from extender.explain import Explanation, explain, explanation_to_json, runtime_class_pod
from extender.filtering import decide
from extender.policy_file import load_policy
from extender.protocol import ExtenderArgs, PodModel, check_pod_document
from extender.tools.audit import add_audit_command
from extender.tools.output import (
    UsageError,
    explanation_table,
    format_table,
    guarded,
    print_structured,
)
from extender.view_json import runtime_class_to_json
from policies.objects import PodView, RuntimeClassView
from policies.registry import Policy

KUBECTL_PROG = "kubectl runtimeclass"


# ----- inputs -----------------------------------------------------------------------


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("cluster (a cluster file, or else the live cluster of the kubeconfig)")
    source.add_argument(
        "--cluster-file",
        metavar="PATH",
        help="Nodes and RuntimeClasses (kubectl get nodes,runtimeclasses -o yaml)",
    )
    source.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig (default: $KUBECONFIG, then the in-cluster service account, then ~/.kube/config)",
    )
    source.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    parser.add_argument("--policy-file", metavar="PATH", help="policy file (default: the bundled policy)")


def _add_output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml"),
        default="table",
        help="output format: table, wide (a table with more columns, as kubectl's -o wide), json or yaml "
        "(default: table)",
    )


def _load_cluster_file(path: str) -> ClusterState:
    return _warn_about_annotations(load_cluster_file(path))


def _load_state(args: argparse.Namespace) -> ClusterState:
    if args.cluster_file:
        return _load_cluster_file(args.cluster_file)
    return _warn_about_annotations(
        asyncio.run(list_cluster(kubeconfig=args.kubeconfig, context=args.context))
    )


def _warn_about_annotations(state: ClusterState) -> ClusterState:
    """One warning per class whose node-selector-term annotation is unusable, worded as
    ``serve`` logs it: such a class fits no node, which the output alone does not say."""
    errors = SelectorErrorLog()
    for rc in state.runtime_classes.values():
        if rc.selector_error is not None:
            errors.report(
                name=rc.name, resource_version=rc.resource_version, annotation="", error=rc.selector_error
            )
    return state


def _read_pod(path: str) -> PodView:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    try:
        document = load_document(text)
        check_pod_document(document)
    except (DocumentError, ObjectError) as exc:
        raise UsageError(f"{path}: {exc}") from None
    try:
        # Through JSON: YAML decodes timestamps to datetimes, which the strict model refuses.
        return PodModel.model_validate_json(orjson.dumps(document, default=str)).view()
    except ValidationError as exc:
        raise UsageError(f"{path}: malformed Pod: {describe_validation_error(exc, 'pod')}") from None


# ----- filter -----------------------------------------------------------------------


def _read_input(path: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def run_filter(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy_file)
    state = _load_cluster_file(args.cluster_file)
    body = _read_input(args.request)
    try:
        request = ExtenderArgs.model_validate_json(body)
        decision = decide(request, state, policy)
    except ValidationError as exc:
        raise UsageError(
            f"{args.request}: malformed ExtenderArgs: {describe_validation_error(exc, 'request')}"
        ) from None
    except ObjectError as exc:
        raise UsageError(f"{args.request}: malformed ExtenderArgs: {exc}") from None
    pretty = orjson.dumps(orjson.loads(decision.result.to_json()), option=orjson.OPT_INDENT_2)
    sys.stdout.buffer.write(pretty + b"\n")
    return 0


# ----- explain ----------------------------------------------------------------------


def run_explain(args: argparse.Namespace) -> int:
    if args.pod is None and args.runtimeclass is None:
        raise UsageError("name a RUNTIMECLASS, or give a pod with --pod FILE")
    policy = load_policy(args.policy_file)
    pod = _read_pod(args.pod) if args.pod is not None else None
    state = _load_state(args)
    if pod is None:
        if args.runtimeclass not in state.runtime_classes:
            known = ", ".join(sorted(state.runtime_classes)) or "none"
            raise UsageError(f'RuntimeClass "{args.runtimeclass}" not found (known: {known})')
        pod = runtime_class_pod(args.runtimeclass)
    elif args.runtimeclass is not None:
        pod = dataclasses.replace(pod, runtime_class_name=args.runtimeclass)
    explanation = explain(pod, state, policy)
    if args.output in ("table", "wide"):
        nodes = state.nodes if args.output == "wide" else None
        sys.stdout.write(explanation_table(explanation, wide_nodes=nodes))
    else:
        print_structured(explanation_to_json(explanation), args.output)
    return 0


# ----- classes ----------------------------------------------------------------------


def _selector_text(rc: RuntimeClassView) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(rc.node_selector.items())) or "<none>"


def _expressions_text(rc: RuntimeClassView) -> str:
    if rc.selector_error is not None:
        return f"<invalid: {rc.selector_error}>"
    parts = []
    for field in ("match_expressions", "match_fields"):
        for req in getattr(rc, field, None) or ():
            values = ",".join(getattr(req, "values", ()))
            prefix = "field " if field == "match_fields" else ""
            operator = getattr(req, "operator", "")
            parts.append(f"{prefix}{req.key} {operator}" + (f" ({values})" if values else ""))
    return ", ".join(parts) or "<none>"


def class_summaries(
    state: ClusterState, policy: Policy
) -> list[tuple[RuntimeClassView, ClassNodeCounts, Explanation]]:
    counts = class_node_counts(state.runtime_classes.values(), state.nodes.values(), policy)
    return [
        (rc, counts[name], explain(runtime_class_pod(name), state, policy))
        for name, rc in sorted(state.runtime_classes.items())
    ]


def run_classes(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy_file)
    state = _load_state(args)
    summaries = class_summaries(state, policy)
    total = len(state.nodes)
    if args.output in ("table", "wide"):
        header = ["NAME", "HANDLER", "SELECTED", "FITTING"]
        rows = [
            [rc.name, rc.handler, f"{c.selected}/{total}", f"{c.fitting}/{total}"] for rc, c, _ in summaries
        ]
        if args.output == "wide":
            header += ["NODE-SELECTOR", "TOLERATIONS", "EXPRESSIONS"]
            for row, (rc, _, _) in zip(rows, summaries, strict=True):
                row += [
                    _selector_text(rc),
                    ",".join(str(t) for t in rc.tolerations) or "<none>",
                    _expressions_text(rc),
                ]
        sys.stdout.write(format_table(header, rows))
    else:
        document = {
            "nodeCount": total,
            "runtimeClasses": [
                {
                    **runtime_class_to_json(rc),
                    "selected": c.selected,
                    "fitting": c.fitting,
                    "summary": e.summary,
                }
                for rc, c, e in summaries
            ],
        }
        print_structured(document, args.output)
    return 0


# ----- replay -----------------------------------------------------------------------


def _check_url(url: str) -> None:
    """Refuse a --url that cannot name an extender, before any capture is sent."""
    scheme, separator, _ = url.partition("://")
    if not separator:
        raise UsageError(f"--url {url}: the scheme is missing: start it with http:// or https://")
    if scheme.lower() not in ("http", "https"):
        raise UsageError(f"--url {url}: {scheme}:// is not supported: use http:// or https://")
    try:
        host = urllib.parse.urlsplit(url).hostname
    except ValueError as exc:
        raise UsageError(f"--url {url}: not a URL ({exc})") from None
    if not host:
        raise UsageError(f"--url {url}: no host")


def _is_filter_result(answer: Any) -> bool:
    return isinstance(answer, dict) and "Error" in answer and ("NodeNames" in answer or "Nodes" in answer)


async def _post_all(url: str, captures: Sequence[Capture]) -> list[dict[str, Any]]:
    """POST each captured request to a running extender; its answers, in order.

    Each request carries REPLAY_HEADER, so a capturing server does not capture it
    again. A URL that has no filter verb (404, 405) or answers 200 with something that
    is not an ExtenderFilterResult is not an extender at all: a UsageError, not a
    changed decision per capture.
    """
    endpoint = url.rstrip("/") + "/filter"
    headers = {"Content-Type": "application/json", REPLAY_HEADER: "1"}
    answers: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        for capture in captures:
            try:
                async with session.post(endpoint, data=capture.request_json, headers=headers) as response:
                    body = await response.read()
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                raise UsageError(f"cannot reach the extender at {endpoint}: {exc}") from None
            if response.status in (404, 405):
                raise UsageError(
                    f"{url} is not a RuntimeClass extender (HTTP {response.status}): POST {endpoint}"
                )
            try:
                answer = orjson.loads(body) if response.status == 200 else None
            except orjson.JSONDecodeError:
                answer = None
            if response.status == 200 and not _is_filter_result(answer):
                raise UsageError(
                    f"{url} is not a RuntimeClass extender (HTTP 200): POST {endpoint} did not answer "
                    "with an ExtenderFilterResult"
                )
            if not isinstance(answer, dict):
                text = body.decode("utf-8", "replace")[:200]
                answer = {"Error": f"HTTP {response.status}: {text}"}
            answers.append(answer)
    return answers


def run_replay(args: argparse.Namespace) -> int:
    if args.url:
        _check_url(args.url)
    directory = Path(args.dir)
    try:
        paths = capture_files(directory)
    except OSError as exc:
        raise UsageError(f"cannot read capture directory {directory}: {exc}") from None
    if not paths:
        raise UsageError(f"no capture files (capture-*.json) in {directory}")
    captures = [load_capture(path) for path in paths]
    policy = load_policy(args.policy_file)

    if args.url:
        against = f"the extender at {args.url}"
        answers = asyncio.run(_post_all(args.url, captures))
        fingerprint = None
    elif args.cluster_file:
        against = f"cluster file {args.cluster_file}"
        state = _load_cluster_file(args.cluster_file)
        answers = [redecide(c, state, policy) for c in captures]
        fingerprint = state_fingerprint(state.nodes, state.runtime_classes)
    else:
        against = "the captured state"
        answers = [redecide(c, captured_state(c), policy) for c in captures]
        fingerprint = None

    changed = 0
    other_state = 0
    for capture, answer in zip(captures, answers, strict=True):
        if fingerprint is not None and capture.fingerprint != fingerprint:
            other_state += 1
        changes = compare(capture.response, answer)
        if not changes:
            continue
        changed += 1
        rc = capture.runtime_class_name or "<none>"
        print(f"CHANGED {capture.path.name}  pod {capture.pod_name or '<unnamed>'}  RuntimeClass {rc}")
        for line in changes:
            print(f"  {line}")
    summary = f"replayed {len(captures)} capture(s) against {against}: {len(captures) - changed} unchanged, {changed} changed"
    if fingerprint is not None:
        summary += (
            f" ({other_state} captured against a different state than the file's, fingerprint {fingerprint})"
        )
    print(summary)
    return 1 if changed else 0


# ----- wiring -----------------------------------------------------------------------


def add_filter_command(commands: Any, *, prog: str = "runtimeclass-extender") -> None:
    filt = commands.add_parser(
        "filter",
        help="answer one captured filter request offline and print the response JSON",
        description="Decide one ExtenderArgs request (as kube-scheduler sends it) against a cluster file "
        "and print the ExtenderFilterResult.",
    )
    filt.add_argument("request", metavar="REQUEST.json", help="the request body; - reads standard input")
    filt.add_argument("--cluster-file", required=True, metavar="PATH", help="Nodes and RuntimeClasses")
    filt.add_argument("--policy-file", metavar="PATH", help="policy file (default: the bundled policy)")
    filt.set_defaults(run=guarded(run_filter), prog=prog)


def add_tool_commands(commands: Any, *, prog: str = "runtimeclass-extender") -> None:
    """Register explain, classes, replay and audit on an argparse subparsers object."""
    exp = commands.add_parser(
        "explain",
        help="which nodes can run a RuntimeClass (or a pod), and why not the others",
        description="Run every predicate on every node for a pod naming RUNTIMECLASS (with no tolerations of "
        "its own), or for the pod in --pod FILE (its tolerations count; RUNTIMECLASS, if given, replaces its "
        "runtimeClassName). The summary uses kube-scheduler's FailedScheduling wording.",
    )
    exp.add_argument("runtimeclass", metavar="RUNTIMECLASS", nargs="?", help="the RuntimeClass to explain")
    exp.add_argument("--pod", metavar="FILE", help="a Pod (YAML or JSON; - reads standard input)")
    _add_cluster_arguments(exp)
    _add_output_argument(exp)
    exp.set_defaults(run=guarded(run_explain), prog=prog)

    cls = commands.add_parser(
        "classes",
        help="list RuntimeClasses with their handler, constraints and how many nodes fit each",
        description="List RuntimeClasses: handler, scheduling.nodeSelector, tolerations, the expressive "
        "selector annotation, and how many nodes a pod naming the class (with no tolerations of its own) fits.",
    )
    _add_cluster_arguments(cls)
    _add_output_argument(cls)
    cls.set_defaults(run=guarded(run_classes), prog=prog)

    rep = commands.add_parser(
        "replay",
        help="re-decide captured filter requests and show changed decisions (exit 1 on any)",
        description="Re-decide every capture file in DIR (written by serve --capture-dir) against the state "
        "captured with it, a cluster file, or a running extender, and print each changed decision. "
        "Exit status: 0 all unchanged, 1 some changed, 2 bad input.",
    )
    rep.add_argument("dir", metavar="DIR", help="the capture directory")
    target = rep.add_mutually_exclusive_group()
    target.add_argument("--cluster-file", metavar="PATH", help="decide against this cluster file instead")
    target.add_argument("--url", metavar="URL", help="POST to the extender at URL (its urlPrefix) instead")
    rep.add_argument("--policy-file", metavar="PATH", help="policy file (default: the bundled policy)")
    rep.set_defaults(run=guarded(run_replay), prog=prog)

    # Running pods on nodes that no longer fit their RuntimeClass (extender.tools.audit).
    add_audit_command(commands, prog=prog)


def build_kubectl_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=KUBECTL_PROG,
        description="RuntimeClass scheduling tools (runtimeclass-extender as a kubectl plugin).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_tool_commands(commands, prog=KUBECTL_PROG)
    return parser


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """The ``kubectl-runtimeclass`` executable: ``kubectl runtimeclass explain gvisor``."""
    args = build_kubectl_parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(kubectl_main())
