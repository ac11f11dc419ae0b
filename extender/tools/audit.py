"""The ``audit`` command: running pods on nodes that no longer fit their RuntimeClass.

``runtimeclass-extender audit`` and ``kubectl runtimeclass audit`` read the running
pods, Nodes and RuntimeClasses once (a cluster file that also holds Pods, or one LIST
each from the live cluster of the kubeconfig), judge every running pod that names a
RuntimeClass with the pure check (``extender.audit.check``) that ``serve
--audit-running-pods`` keeps current, and print the misplaced ones.

Exit status: 0 when no pod is misplaced, 1 when some are, 2 on bad input (one line on
stderr, never a trace), so a script or a CI job can gate on it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from extender.audit.check import Misplaced, audit
from extender.cluster.file_source import load_cluster_file_with_pods
from extender.cluster.pods import ScheduledPod, is_audited
from extender.cluster.snapshot import list_cluster_with_pods
from extender.cluster.state import ClusterState
from extender.tools.inputs import add_cluster_arguments, add_output_argument
from extender.tools.output import UsageError, format_table, guarded, print_structured

EXIT_CLEAN = 0
EXIT_MISPLACED = 1

HEADER = ("NAMESPACE", "POD", "RUNTIMECLASS", "NODE", "PROBLEM")


def _load(args: argparse.Namespace) -> tuple[ClusterState, list[ScheduledPod]]:
    if args.cluster_file:
        state, pods = load_cluster_file_with_pods(args.cluster_file)
        if args.namespace:
            pods = [pod for pod in pods if pod.namespace == args.namespace]
        return state, pods
    return asyncio.run(
        list_cluster_with_pods(kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace)
    )


def misplaced_to_json(item: Misplaced) -> dict[str, str]:
    return {
        "namespace": item.namespace,
        "pod": item.pod,
        "runtimeClass": item.runtime_class,
        "node": item.node,
        "problem": item.problem,
        "detail": item.detail,
    }


def audit_table(misplaced: Sequence[Misplaced], checked: int, *, wide: bool) -> str:
    """The kubectl-style table and a summary line; only the summary when all fit."""
    if not misplaced:
        return f"No misplaced pods ({checked} running pods with a RuntimeClass checked).\n"
    header = [*HEADER, "DETAIL"] if wide else list(HEADER)
    rows = [
        [m.namespace, m.pod, m.runtime_class, m.node, m.problem, *([m.detail] if wide else [])]
        for m in misplaced
    ]
    summary = f"{len(misplaced)} of {checked} running pods with a RuntimeClass are misplaced."
    return format_table(header, rows) + "\n" + summary + "\n"


def run_audit(args: argparse.Namespace) -> int:
    if args.namespace is not None and not args.namespace:
        raise UsageError("--namespace must not be empty")
    state, pods = _load(args)
    audited = [pod for pod in pods if is_audited(pod)]
    misplaced = audit(audited, state)
    if args.output in ("table", "wide"):
        sys.stdout.write(audit_table(misplaced, len(audited), wide=args.output == "wide"))
        sys.stdout.flush()
    else:
        document = {
            "checked": len(audited),
            "misplaced": [misplaced_to_json(m) for m in misplaced],
        }
        print_structured(document, args.output)
    return EXIT_MISPLACED if misplaced else EXIT_CLEAN


def add_audit_command(commands: Any, *, prog: str) -> None:
    """Register ``audit`` on an argparse subparsers object."""
    parser = commands.add_parser(
        "audit",
        help="list running pods on nodes that no longer fit their RuntimeClass (exit 1 on any)",
        description="Check every running pod that names a RuntimeClass against its node as it is now: "
        "the class was deleted (runtimeclass-deleted), the node is gone (node-not-found), the class's "
        "node-selector-term annotation is malformed (selector-invalid), the node no longer matches the "
        "class's selector (selector-mismatch), or the node has a NoExecute taint the pod does not "
        "tolerate (noexecute-taint). NoSchedule taints added after binding do not count. "
        "Exit status: 0 none misplaced, 1 some misplaced, 2 bad input.",
    )
    add_cluster_arguments(parser, with_pods=True, policy=False)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", metavar="NAME", help="only the pods of this namespace")
    scope.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="the pods of every namespace (the default: the audit is cluster-wide)",
    )
    add_output_argument(parser, wide="the DETAIL column")
    parser.set_defaults(run=guarded(run_audit), prog=prog)
