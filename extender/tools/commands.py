"""Operator commands: the parsers of ``filter``, ``explain``, ``classes``, ``replay``,
``audit``, ``check``, ``check-pod-admission`` and ``node-template`` (also the kubectl
plugin).

``runtimeclass-extender explain|classes|replay|audit|check`` and ``kubectl runtimeclass
explain|classes|replay|audit|check`` (the ``kubectl-runtimeclass`` executable) share these
parsers, registered here. What each command does lives in its own module, imported only
when it runs: ``filter`` in ``extender.tools.filter``, ``explain`` and ``classes`` in
``extender.tools.explain``, ``replay`` in ``extender.tools.replay``, ``audit`` in
``extender.tools.audit``, ``check`` in ``extender.tools.check``; what they read in
``extender.tools.inputs``. So ``--help``,
``--version`` and a mistyped flag load none of aiohttp, kubernetes-asyncio or pydantic
(tests/test_operator_edges.py checks it). A new command follows the same pattern: its
parser here (light imports only), its work behind a runner that imports it.
``filter`` is the console's only (``extender.cli``); the kubectl plugin has the other five.

Each command reads its inputs (a cluster file or a one-shot LIST of a live cluster, a
pod file, capture files, manifests), hands them to the pure modules
(``extender.filtering``, ``extender.explain``, ``extender.capture.replay``,
``extender.audit.misplaced``, ``extender.admission``) and prints. Problems the user can fix print one line on stderr
and exit with status 2, never a trace.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from extender.settings import (
    DEFAULT_CLUSTER_AUTOSCALER_STATUS,
    DEFAULT_NODE_LABEL_PREFIX,
    DEFAULT_STARTUP_TAINT,
    GivenOnce,
    configmap_reference,
    label_prefix,
)
from extender.tools.arguments import (
    CommandParser,
    add_cluster_arguments,
    add_output_argument,
    add_version_argument,
    mark_commands,
    parse_command_line,
    setting_type,
)

KUBECTL_PROG = "kubectl runtimeclass"


# ----- runners: each imports its command when it runs --------------------------------


def _run_filter(args: argparse.Namespace) -> int:
    from extender.tools.filter import run_filter

    return run_filter(args)


def _run_explain(args: argparse.Namespace) -> int:
    from extender.tools.explain import run_explain

    return run_explain(args)


def _run_classes(args: argparse.Namespace) -> int:
    from extender.tools.explain import run_classes

    return run_classes(args)


def _run_replay(args: argparse.Namespace) -> int:
    from extender.tools.replay import run_replay

    return run_replay(args)


def _run_audit(args: argparse.Namespace) -> int:
    from extender.tools.audit import run_audit

    return run_audit(args)


def _run_check(args: argparse.Namespace) -> int:
    from extender.tools.check import run_check

    return run_check(args)


def _run_node_template(args: argparse.Namespace) -> int:
    from extender.tools.node_template import run_node_template

    return run_node_template(args)


def _run_check_pod_admission(args: argparse.Namespace) -> int:
    from extender.tools.pod_admission import run_check_pod_admission

    return run_check_pod_admission(args)


# ----- parsers ----------------------------------------------------------------------


def add_filter_command(commands: Any, *, prog: str = "runtimeclass-extender") -> None:
    filt = commands.add_parser(
        "filter",
        help="answer one captured filter request offline and print the response JSON",
        description="Decide one ExtenderArgs request (as kube-scheduler sends it) against a cluster file "
        "and print the ExtenderFilterResult.",
    )
    filt.add_argument("request", metavar="REQUEST.json", help="the request body; - reads standard input")
    filt.add_argument(
        "--cluster-file", required=True, metavar="PATH", action=GivenOnce, help="Nodes and RuntimeClasses"
    )
    filt.add_argument("--policy-file", metavar="PATH", help="policy file (default: the bundled policy)")
    filt.set_defaults(run=_run_filter, prog=prog)


def add_tool_commands(commands: Any, *, prog: str = "runtimeclass-extender") -> None:
    """Register explain, classes, replay, audit, check and check-pod-admission on an argparse
    subparsers object."""
    exp = commands.add_parser(
        "explain",
        help="which nodes can run a RuntimeClass (or a pod), and why not the others",
        description="Run every predicate on every node for a pod naming RUNTIMECLASS (with no tolerations of "
        "its own), or for the pod in --pod FILE (its tolerations count; RUNTIMECLASS, if given, replaces its "
        "runtimeClassName). The summary uses kube-scheduler's FailedScheduling wording; with table output "
        "it is printed on stderr, after the table.",
    )
    exp.add_argument("runtimeclass", metavar="RUNTIMECLASS", nargs="?", help="the RuntimeClass to explain")
    exp.add_argument("--pod", metavar="FILE", help="a Pod (YAML or JSON; - reads standard input)")
    add_cluster_arguments(exp)
    add_output_argument(exp, names="node/NAME of each node that fits")
    exp.set_defaults(run=_run_explain, prog=prog)

    cls = commands.add_parser(
        "classes",
        help="list RuntimeClasses with their handler, constraints and how many nodes fit each",
        description="List RuntimeClasses: handler, scheduling.nodeSelector, tolerations, the expressive "
        "selector annotation, and how many nodes a pod naming the class (with no tolerations of its own) fits.",
    )
    add_cluster_arguments(cls)
    add_output_argument(cls, names="runtimeclass.node.k8s.io/NAME of each class")
    cls.set_defaults(run=_run_classes, prog=prog)

    rep = commands.add_parser(
        "replay",
        help="re-decide captured filter requests and show changed decisions (exit 1 on any)",
        description="Re-decide every capture file in DIR (written by serve --capture-dir) against the state "
        "captured with it, a cluster file, or a running extender, and print each changed decision. "
        "Exit status: 0 all unchanged, 1 some changed, 2 bad input.",
    )
    rep.add_argument("dir", metavar="DIR", help="the capture directory")
    target = rep.add_mutually_exclusive_group()
    target.add_argument(
        "--cluster-file",
        metavar="PATH",
        action=GivenOnce,
        help="decide against this cluster file instead",
    )
    target.add_argument("--url", metavar="URL", help="POST to the extender at URL (its urlPrefix) instead")
    rep.add_argument("--policy-file", metavar="PATH", help="policy file (default: the bundled policy)")
    rep.set_defaults(run=_run_replay, prog=prog)

    # Running pods on nodes that no longer fit their RuntimeClass (extender.tools.audit).
    add_audit_command(commands, prog=prog)

    # RuntimeClass manifests judged before they reach a cluster (extender.tools.check).
    add_check_command(commands, prog=prog)

    # The live cluster's pod admission against the pod webhook's (extender.tools.pod_admission).
    add_check_pod_admission_command(commands, prog=prog)

    # What a node group's template must carry for the autoscalers (extender.tools.node_template).
    add_node_template_command(commands, prog=prog)


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
    add_output_argument(parser, wide="the DETAIL column", names="pod/NAME of each misplaced pod")
    parser.set_defaults(run=_run_audit, prog=prog)


def add_check_command(commands: Any, *, prog: str) -> None:
    """Register ``check`` on an argparse subparsers object (extender.tools.check)."""
    parser = commands.add_parser(
        "check",
        # No "server" here: the plugin's command list must not look like it offers `serve`.
        help="judge RuntimeClass manifests before kubectl apply, as the admission webhook would (exit 1 on "
        "a denial, 2 on bad input)",
        description="Read RuntimeClass manifests (files, directories recursively, - for standard input; "
        "multi-document YAML, JSON, Lists; other kinds are skipped with a note, and in a directory so are "
        "kustomize patches, Helm chart templates and files of no Kubernetes object; empty input is bad "
        "input) and judge each: what the API "
        "server would refuse in the fields the extender reads (unknown fields, enum values, label and name "
        "syntax), then the validating webhook's answer (a malformed node-selector-term annotation is denied; "
        "with nodes from --cluster-file or --kubeconfig, a class no node can run gets warnings). "
        "Exit status: 0 nothing denied, 1 a class would be denied (or warned about, with "
        "--warnings-as-errors), 2 bad input.",
    )
    parser.add_argument("paths", nargs="+", metavar="FILE|DIR|-", help="manifests to check")
    add_cluster_arguments(
        parser,
        policy=False,
        title="nodes for the node checks (a cluster file, or a live cluster with --kubeconfig/--context; "
        "without either the node checks are skipped)",
    )
    parser.add_argument(
        "--warnings-as-errors",
        action="store_true",
        help="exit 1 when the webhook would warn about a class, as when it would deny one",
    )
    autoscaling = parser.add_argument_group(
        "node autoscalers (with a live cluster: a warning for each class with node rules that "
        "cluster-autoscaler or Karpenter, found running, cannot see in its pods; docs/autoscaling.md)"
    )
    autoscaling.add_argument(
        "--label-nodes",
        action="store_true",
        help="the extender keeps the derived node labels (the default-scheduler mode, or predicate mode "
        "with them): every class's label is in its pods (default: what the pod admission table says)",
    )
    _add_plugin_argument(autoscaling)
    autoscaling.add_argument(
        "--pod-admission-table",
        default="runtimeclass-extender",
        metavar="NAME",
        help="the extender's PodAdmissionTable, which says whether it keeps the node labels and whether "
        "the API server runs the RuntimeClass admission plugin (read if it can be; default: "
        "runtimeclass-extender)",
    )
    autoscaling.add_argument(
        "--cluster-autoscaler-status",
        default=DEFAULT_CLUSTER_AUTOSCALER_STATUS,
        type=setting_type(configmap_reference),
        metavar="NAMESPACE/NAME",
        help=f"cluster-autoscaler's status ConfigMap (default: {DEFAULT_CLUSTER_AUTOSCALER_STATUS}; "
        "empty: not looked for)",
    )
    _add_label_prefix_argument(autoscaling)
    parser.add_argument(
        "-o",
        "--output",
        choices=("json", "yaml"),
        default=None,
        help="print one JSON or YAML document with a result per object instead of lines",
    )
    parser.set_defaults(run=_run_check, prog=prog)


def add_check_pod_admission_command(commands: Any, *, prog: str) -> None:
    """Register ``check-pod-admission`` on an argparse subparsers object."""
    parser = commands.add_parser(
        "check-pod-admission",
        help="create a dry-run pod of each RuntimeClass and check that admission gives it what the pod "
        "webhook would (exit 1 on a difference)",
        description="List the live cluster's RuntimeClasses and create one pod of each in NAMESPACE with "
        "dryRun=All (admitted, stored nowhere). Each pod the API server answers must be what the install "
        "promises: after the API server's RuntimeClass admission plugin where it runs (found out with one "
        "more dry-run pod, of a class that does not exist), routed to --scheduler-name (or, with the "
        "default-scheduler placement, which the extender's namespace says, not routed and marked admitted), "
        "given the class's Pod Overhead, and where the extender keeps the node labels (the pod admission "
        "table says) the class's node-label requirement. This proves that the admission policies "
        "(components/pod-admission-policy) run, not only that the API server accepted them, and that they "
        "agree with the policy file. Needs create on pods in NAMESPACE (a dry run is authorized as the "
        "create), list on RuntimeClasses, and get on the table and the extender's namespace. "
        "Exit status: 0 every class as expected, 1 some not, 2 bad input or no cluster.",
    )
    add_cluster_arguments(
        parser, live_only=True, title="cluster (the live cluster of the kubeconfig; the check creates pods)"
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default="default",
        metavar="NAME",
        help="where the probe pods are created (a dry run: nothing is stored); a namespace workloads run in, "
        "not one left out of pod admission (default: default)",
    )
    parser.add_argument(
        "--runtimeclass",
        action="append",
        metavar="NAME",
        help="check this RuntimeClass (repeat for more; default: every one)",
    )
    parser.add_argument(
        "--scheduler-name",
        default="runtimeclass-scheduler",
        metavar="NAME",
        help="the scheduler pods should be routed to, the extender's --route-pods-to-scheduler "
        "(default: runtimeclass-scheduler, the profile of deploy/)",
    )
    parser.add_argument(
        "--extender-namespace",
        default="runtimeclass-extender",
        metavar="NAME",
        help="the namespace the extender is installed in, whose label says who places the pods "
        "(default: runtimeclass-extender)",
    )
    _add_label_prefix_argument(parser)
    _add_table_output_argument(parser)
    parser.set_defaults(run=_run_check_pod_admission, prog=prog)


def _add_label_prefix_argument(parser: Any) -> None:
    parser.add_argument(
        "--node-label-prefix",
        default=DEFAULT_NODE_LABEL_PREFIX,
        type=setting_type(label_prefix),
        metavar="PREFIX",
        help=f"the extender's --node-label-prefix (default: {DEFAULT_NODE_LABEL_PREFIX})",
    )


def _add_plugin_argument(parser: Any) -> None:
    parser.add_argument(
        "--runtimeclass-admission-plugin",
        choices=("auto", "on", "off"),
        nargs="?",
        const="on",
        default="auto",
        metavar="auto|on|off",
        help="whether the API server runs the RuntimeClass admission plugin, which puts a class's "
        "scheduling.nodeSelector and tolerations into its pods (managed clusters and kubeadm run it). "
        "auto (the default): what the extender found out, from its pod admission table; without the "
        "table (a cluster file, no extender yet), on, as kube-apiserver ships it. The flag alone: on",
    )


def _add_table_output_argument(parser: Any) -> None:
    parser.add_argument(
        "--pod-admission-table",
        default="runtimeclass-extender",
        metavar="NAME",
        help="the PodAdmissionTable the admission policies read, the extender's --pod-admission-table: "
        "a class admitted otherwise than it should be is said to have a stale or missing entry there "
        "when it has (read if it can be; default: runtimeclass-extender)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="output format (default: table)",
    )


def add_node_template_command(commands: Any, *, prog: str) -> None:
    """Register ``node-template`` on an argparse subparsers object."""
    parser = commands.add_parser(
        "node-template",
        help="which RuntimeClasses a node group's nodes will run, and the labels its template needs for "
        "cluster-autoscaler and Karpenter (exit 1 when it carries one it must not)",
        description="Judge a node group's template (a Node manifest with --node, or its labels and taints "
        "with --label and --taint) against the RuntimeClasses (from --cluster-file or the live cluster) as "
        "the node labeller would: which classes its nodes will run, the derived label each needs "
        "in the template for an autoscaler to scale the group from zero, labels under the prefix it must "
        "not carry, and taints pods must tolerate themselves; then the labels as each provider takes them "
        "(AWS Auto Scaling group tags, the Cluster API annotation, a Karpenter NodePool, a Node, the gcloud "
        "and az commands of a GKE or AKS node pool, whose kubelets refuse labels under node-restriction."
        "kubernetes.io), with the "
        "startup taint its nodes should register with (docs/autoscaling.md). "
        "Exit status: 0; 1 the template carries a label under the prefix that its nodes must not; 2 bad "
        "input.",
    )
    template = parser.add_argument_group("the node group's template")
    template.add_argument(
        "--node", metavar="FILE", help="a Node manifest (YAML or JSON; - reads standard input)"
    )
    template.add_argument(
        "--label",
        action="append",
        metavar="KEY=VALUE",
        help="a label of the template's nodes (repeat for more)",
    )
    template.add_argument(
        "--taint",
        action="append",
        metavar="KEY[=VALUE]:EFFECT",
        help="a taint of the template's nodes, as kubectl taint writes it (repeat for more)",
    )
    add_cluster_arguments(
        parser,
        title="RuntimeClasses (a cluster file, such as deploy/examples/runtimeclasses.yaml, or else the "
        "live cluster of the kubeconfig)",
    )
    _add_label_prefix_argument(parser)
    _add_plugin_argument(parser)
    parser.add_argument(
        "--startup-taint",
        default=DEFAULT_STARTUP_TAINT,
        metavar="KEY",
        help=f"the extender's --startup-taint, shown in the snippets (default: {DEFAULT_STARTUP_TAINT}; "
        "empty: none)",
    )
    parser.add_argument(
        "--provider",
        choices=("all", "node", "aws", "cluster-api", "karpenter", "gke-aks"),
        default="all",
        help="which provider's snippet to print (default: all)",
    )
    _add_table_output_argument(parser)
    parser.set_defaults(run=_run_node_template, prog=prog)


def build_kubectl_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=KUBECTL_PROG,
        description="RuntimeClass scheduling tools (runtimeclass-extender as a kubectl plugin).",
    )
    add_version_argument(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_tool_commands(commands, prog=KUBECTL_PROG)
    mark_commands(commands)
    return parser


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """The ``kubectl-runtimeclass`` executable: ``kubectl runtimeclass explain gvisor``."""
    args = parse_command_line(build_kubectl_parser(), argv)
    try:
        status: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(kubectl_main())
