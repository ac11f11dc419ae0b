"""Operator commands: ``explain``, ``classes``, ``replay``, ``audit`` and ``check`` (also the kubectl plugin).

``runtimeclass-extender explain|classes|replay|audit|check`` and ``kubectl runtimeclass
explain|classes|replay|audit|check`` (the ``kubectl-runtimeclass`` executable) share these
parsers, registered here; ``replay`` lives in ``extender.tools.replay``, ``audit`` in
``extender.tools.audit``, ``check`` in ``extender.tools.check``, what they read in
``extender.tools.inputs``.
Each command reads its inputs (a cluster file or a one-shot LIST of a live cluster, a
pod file, capture files), hands them to the pure modules (``extender.explain``,
``extender.capture.replay``) and prints. Problems the user can fix print one line on stderr
and exit with status 2, never a trace.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from extender import __version__
from extender.cluster.class_nodes import ClassNodeCounts, class_node_counts
from extender.cluster.objects import ObjectError, describe_validation_error
from extender.cluster.state import ClusterState
from extender.explain import Explanation, explain, explanation_to_json, runtime_class_pod
from extender.filtering import decide
from extender.policy_file import load_policy
from extender.protocol import ExtenderArgs
from extender.tools.audit import add_audit_command
from extender.tools.check import add_check_command
from extender.tools.inputs import (
    add_cluster_arguments,
    add_output_argument,
    load_state,
    read_cluster_file,
    read_pod,
)
from extender.tools.output import (
    UsageError,
    explanation_table,
    format_table,
    guarded,
    print_structured,
)
from extender.tools.replay import run_replay
from extender.view_json import runtime_class_to_json
from policies.objects import RuntimeClassView
from policies.registry import Policy

KUBECTL_PROG = "kubectl runtimeclass"


# ----- filter -----------------------------------------------------------------------


def _read_input(path: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def run_filter(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy_file)
    state = read_cluster_file(args.cluster_file)
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
    pretty = orjson.dumps(orjson.loads(decision.to_json()), option=orjson.OPT_INDENT_2)
    sys.stdout.buffer.write(pretty + b"\n")
    return 0


# ----- explain ----------------------------------------------------------------------


def run_explain(args: argparse.Namespace) -> int:
    if args.pod is None and args.runtimeclass is None:
        raise UsageError("name a RUNTIMECLASS, or give a pod with --pod FILE")
    policy = load_policy(args.policy_file)
    pod = read_pod(args.pod) if args.pod is not None else None
    state = load_state(args)
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
    state = load_state(args)
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
    """Register explain, classes, replay, audit and check on an argparse subparsers object."""
    exp = commands.add_parser(
        "explain",
        help="which nodes can run a RuntimeClass (or a pod), and why not the others",
        description="Run every predicate on every node for a pod naming RUNTIMECLASS (with no tolerations of "
        "its own), or for the pod in --pod FILE (its tolerations count; RUNTIMECLASS, if given, replaces its "
        "runtimeClassName). The summary uses kube-scheduler's FailedScheduling wording.",
    )
    exp.add_argument("runtimeclass", metavar="RUNTIMECLASS", nargs="?", help="the RuntimeClass to explain")
    exp.add_argument("--pod", metavar="FILE", help="a Pod (YAML or JSON; - reads standard input)")
    add_cluster_arguments(exp)
    add_output_argument(exp)
    exp.set_defaults(run=guarded(run_explain), prog=prog)

    cls = commands.add_parser(
        "classes",
        help="list RuntimeClasses with their handler, constraints and how many nodes fit each",
        description="List RuntimeClasses: handler, scheduling.nodeSelector, tolerations, the expressive "
        "selector annotation, and how many nodes a pod naming the class (with no tolerations of its own) fits.",
    )
    add_cluster_arguments(cls)
    add_output_argument(cls)
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

    # RuntimeClass manifests judged before they reach a cluster (extender.tools.check).
    add_check_command(commands, prog=prog)


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
