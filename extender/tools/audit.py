"""The ``audit`` command: running pods on nodes that no longer fit their RuntimeClass.

``runtimeclass-extender audit`` and ``kubectl runtimeclass audit`` read the running
pods, Nodes and RuntimeClasses once (a cluster file that also holds Pods, or one LIST
each from the live cluster of the kubeconfig), judge every running pod that names a
RuntimeClass with the pure check (``extender.audit.misplaced``) that ``serve
--audit-running-pods`` keeps current, and print the misplaced ones.

Exit status: 0 when no pod is misplaced, 1 when some are, 2 on bad input (one line on
stderr, never a trace), so a script or a CI job can gate on it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from extender.audit.misplaced import Misplaced, audit
from extender.cluster.file_source import load_cluster_file_with_pods
from extender.cluster.pod_views import ScheduledPod, is_audited
from extender.cluster.snapshot import list_cluster_with_pods
from extender.cluster.state import ClusterState
from extender.tools.output import UsageError, guarded, print_names, print_structured, print_table

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
        list_cluster_with_pods(
            kubeconfig=args.kubeconfig,
            context=args.context,
            namespace=args.namespace,
            request_timeout=args.request_timeout,
        )
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


def audit_rows(misplaced: Sequence[Misplaced], *, wide: bool) -> tuple[list[str], list[list[str]]]:
    """The kubectl-style table's header and rows."""
    header = [*HEADER, "DETAIL"] if wide else list(HEADER)
    rows = [
        [m.namespace, m.pod, m.runtime_class, m.node, m.problem, *([m.detail] if wide else [])]
        for m in misplaced
    ]
    return header, rows


def audit_summary(misplaced: Sequence[Misplaced], checked: int) -> str:
    if not misplaced:
        return f"No misplaced pods ({checked} running pods with a RuntimeClass checked)."
    return f"{len(misplaced)} of {checked} running pods with a RuntimeClass are misplaced."


@guarded
def run_audit(args: argparse.Namespace) -> int:
    if args.namespace is not None and not args.namespace:
        raise UsageError("--namespace must not be empty")
    state, pods = _load(args)
    audited = [pod for pod in pods if is_audited(pod)]
    misplaced = audit(audited, state)
    if args.output in ("table", "wide"):
        summary = audit_summary(misplaced, len(audited))
        if misplaced:
            header, rows = audit_rows(misplaced, wide=args.output == "wide")
            print_table(header, rows, headers=not args.no_headers, footer=summary)
        else:
            # Like kubectl's "No resources found": no table at all, the sentence on stderr.
            print(summary, file=sys.stderr)
    elif args.output == "name":
        # As `kubectl get pods -A -o name`: pod/NAME, without the namespace.
        print_names(f"pod/{m.pod}" for m in misplaced)
    else:
        document = {
            "checked": len(audited),
            "misplaced": [misplaced_to_json(m) for m in misplaced],
        }
        print_structured(document, args.output)
    return EXIT_MISPLACED if misplaced else EXIT_CLEAN
