"""The ``explain`` and ``classes`` commands: which nodes a RuntimeClass (or a pod) fits,
and why not the others; every class with its node counts.

Each reads the cluster (a cluster file or a one-shot LIST, ``extender.tools.inputs``),
hands it to the pure ``extender.explain`` and prints a kubectl-style table (summary
sentence on stderr, as kubectl prints its footers), ``-o name``, JSON or YAML.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from extender.cluster.class_nodes import ClassNodeCounts, class_node_counts
from extender.cluster.state import ClusterState
from extender.explain import Explanation, explain, explanation_to_json, runtime_class_pod
from extender.policy_file import load_policy
from extender.startup_checks import empty_cluster_file
from extender.tools.inputs import load_state, read_pod
from extender.tools.output import (
    UsageError,
    explanation_table,
    guarded,
    print_names,
    print_structured,
    print_table,
)
from extender.view_json import runtime_class_to_json
from policies.objects import RuntimeClassView
from policies.registry import Policy

# kubectl's -o name forms: `kubectl get nodes -o name`, `kubectl get runtimeclasses -o name`.
NODE_NAME_PREFIX = "node/"
RUNTIME_CLASS_NAME_PREFIX = "runtimeclass.node.k8s.io/"


# ----- explain ----------------------------------------------------------------------


@guarded
def run_explain(args: argparse.Namespace) -> int:
    if args.pod is None and args.runtimeclass is None:
        raise UsageError("name a RUNTIMECLASS, or give a pod with --pod FILE")
    policy = load_policy(args.policy_file)
    pod = read_pod(args.pod) if args.pod is not None else None
    state = load_state(args)
    if pod is None:
        if args.runtimeclass not in state.runtime_classes:
            known = ", ".join(sorted(state.runtime_classes)) or "none"
            message = f'RuntimeClass "{args.runtimeclass}" not found (known: {known})'
            # As serve warns of it: the file may be the mistake, not the name.
            if args.cluster_file and (holds := empty_cluster_file(args.cluster_file, state)):
                message += f": {holds}"
            raise UsageError(message)
        pod = runtime_class_pod(args.runtimeclass)
    elif args.runtimeclass is not None:
        pod = dataclasses.replace(pod, runtime_class_name=args.runtimeclass)
    explanation = explain(pod, state, policy)
    if args.output in ("table", "wide"):
        nodes = state.nodes if args.output == "wide" else None
        header, rows = explanation_table(explanation, wide_nodes=nodes)
        print_table(header, rows, headers=not args.no_headers, footer=explanation.summary)
    elif args.output == "name":
        print_names(NODE_NAME_PREFIX + node.node for node in explanation.nodes if node.fits)
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


def nothing_to_list(args: argparse.Namespace) -> str:
    where = f"cluster file {args.cluster_file}" if args.cluster_file else "the cluster"
    return f"{where} holds no RuntimeClass: nothing to list"


@guarded
def run_classes(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy_file)
    state = load_state(args)
    summaries = class_summaries(state, policy)
    total = len(state.nodes)
    if not summaries and args.output != "json" and args.output != "yaml":
        # No header over no rows: say so on stderr, as kubectl says "No resources found",
        # and exit 0 (nothing failed; -o json|yaml print an empty list).
        print(nothing_to_list(args), file=sys.stderr)
        return 0
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
        print_table(header, rows, headers=not args.no_headers)
    elif args.output == "name":
        print_names(RUNTIME_CLASS_NAME_PREFIX + rc.name for rc, _, _ in summaries)
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
