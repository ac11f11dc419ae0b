"""The ``node-template`` command: what a node group's template must carry, for the autoscalers.

``runtimeclass-extender node-template`` (and ``kubectl runtimeclass node-template``) reads
the RuntimeClasses (``--cluster-file``, or the live cluster of the kubeconfig, as
``classes`` reads them) and a node group's template: a Node manifest (``--node FILE``,
as the kwok provider's templates are written and as ``kubectl get node NAME -o yaml``
prints a live one), or its labels and taints one by one (``--label``, ``--taint``, as an
Auto Scaling group's tags or a node pool's settings list them). It prints which classes
the group's nodes will run and the label each needs in the template, in large-cluster
mode (``extender.autoscaling.node_templates`` decides), then the labels written as each
provider takes them (``--provider``), with the startup taint its nodes should register
with (docs/autoscaling.md).

Exit status: 0; 1 when the template carries a label under the prefix that its nodes must
not (a class they cannot run: the autoscaler would believe the group runs it, and the
labeller removes it from every node that arrives with it); 2 on bad input.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any, Final

import orjson

from extender.autoscaling.node_templates import PROVIDERS, ClassVerdict, TemplateVerdict, judge, snippets
from extender.cluster.class_labels import ClassLabels
from extender.cluster.objects import ObjectError, node_from_api
from extender.documents import DocumentError, load_document
from extender.policy_file import load_policy
from extender.protocol import check_kind
from extender.tools.inputs import empty_input, load_state, read_text
from extender.tools.installed import AUTO, Installed, installed_in
from extender.tools.output import UsageError, guarded, print_structured, print_table
from policies.node_affinity import label_key_errors
from policies.objects import NodeView, Taint

EXIT_OK: Final = 0
EXIT_STRAY: Final = 1
HEADER: Final = ("RUNTIMECLASS", "RUNS", "TEMPLATE LABEL")
_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TITLES: Final = {
    "node": "A Node (the kwok provider's template ConfigMap)",
    "aws": "AWS Auto Scaling group tags (scale from zero)",
    "cluster-api": "Cluster API MachineDeployment or MachineSet (scale from zero)",
    "karpenter": "Karpenter NodePool",
    "gke-aks": "GKE and AKS node pools",
}


def read_template(args: argparse.Namespace) -> NodeView:
    """The template: ``--node FILE`` (a Node manifest), or ``--label``/``--taint``."""
    if args.node and (args.label or args.taint):
        raise UsageError("give either --node or --label/--taint, not both")
    if args.node:
        text = read_text(args.node)
        try:
            document = load_document(text)
            if document is None:  # nothing, blank lines or comments only
                raise empty_input(args.node, "a Node (YAML or JSON)")
            check_kind(document, "Node")
            document.setdefault("metadata", {}).setdefault("name", "template")
            # Through JSON: YAML decodes timestamps to datetimes, which the model refuses.
            return node_from_api(orjson.loads(orjson.dumps(document, default=str)))
        except (DocumentError, ObjectError) as exc:
            raise UsageError(f"{args.node}: {exc}") from None
    if not args.label:
        raise UsageError("give the template: --node FILE, or its labels with --label KEY=VALUE (repeated)")
    labels = dict(_label(text) for text in args.label)
    return NodeView("template", labels=labels, taints=tuple(_taint(text) for text in args.taint or ()))


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    errors = label_key_errors(key) if sep else ["expected KEY=VALUE"]
    if errors:
        raise UsageError(f"--label {text}: " + "; ".join(errors))
    return key, value


def _taint(text: str) -> Taint:
    """KEY[=VALUE]:EFFECT, as kubectl taint writes one."""
    head, sep, effect = text.rpartition(":")
    key, _, value = head.partition("=")
    if not sep or not key or effect not in _EFFECTS or label_key_errors(key):
        raise UsageError(f"--taint {text}: expected KEY[=VALUE]:EFFECT, EFFECT one of {', '.join(_EFFECTS)}")
    return Taint(key, effect, value)


def _document(verdict: TemplateVerdict, found: dict[str, str], node: NodeView) -> dict[str, Any]:
    return {
        "template": {"labels": dict(node.labels), "taints": [str(t) for t in node.taints]},
        "runtimeClasses": [
            {
                "name": v.name,
                "runs": v.runs,
                "label": v.label,
                "selector": v.selector,
                "rules": v.rules,
                "podMustTolerate": list(v.taints),
            }
            for v in verdict.classes
        ],
        "labels": verdict.labels,
        "missing": verdict.missing,
        "stray": verdict.stray,
        "snippets": found,
    }


@guarded
def run_node_template(args: argparse.Namespace) -> int:
    if args.cluster_file and (args.kubeconfig or args.context):
        raise UsageError("give either --cluster-file or --kubeconfig/--context, not both")
    node = read_template(args)
    rules = ClassLabels(args.node_label_prefix, load_policy(args.policy_file))
    state = load_state(args)
    installed = installed_in(args)
    plugin = installed.plugin(args.runtimeclass_admission_plugin)
    verdict = judge(node, state.runtime_classes.values(), rules, admission_plugin=plugin)
    providers = PROVIDERS if args.provider == "all" else (args.provider,)
    found = {p: text for p, text in snippets(verdict.labels, args.startup_taint).items() if p in providers}
    if args.output != "table":
        print_structured({**_document(verdict, found, node), "runtimeClassAdmissionPlugin": plugin}, args.output)
        return EXIT_STRAY if verdict.stray else EXIT_OK
    rows = []
    for v in verdict.classes:
        if v.runs:
            rows.append(
                [
                    v.name,
                    "yes",
                    _template_label(v, verdict.labels),
                ]
            )
        else:
            rows.append([v.name, "no", f"(needs {v.rules})"])
    running = sum(1 for v in verdict.classes if v.runs)
    print_table(
        HEADER,
        rows,
        footer=f"Its nodes run {running} of {len(verdict.classes)} RuntimeClasses."
        if verdict.classes
        else "No RuntimeClasses.",
    )
    lines = [_plugin_note(plugin, installed, args.runtimeclass_admission_plugin)]
    if verdict.missing:
        lines.append("The template must carry, and does not yet: " + _pairs(verdict.missing))
    elif verdict.labels:
        lines.append("The template carries every label its nodes need.")
    elif any(v.runs and v.selector for v in verdict.classes):
        lines.append(
            "The template needs no derived label: the pods of the classes its nodes run carry their "
            "class's scheduling.nodeSelector, which its labels match."
        )
    for key in verdict.stray:
        lines.append(
            f"The template must not carry {key}: its nodes cannot run that class (the extender removes it)."
        )
    for v in verdict.classes:
        if v.runs and v.taints:
            lines.append(
                f"Pods of {v.name} must tolerate in their own spec, for an autoscaler to pick the group "
                "(their class does not give them a toleration of it): " + ", ".join(v.taints)
            )
    for provider, text in found.items():
        lines += ["", f"# {_TITLES[provider]}", text]
    if lines:
        print("\n" + "\n".join(lines).lstrip("\n"))
    return EXIT_STRAY if verdict.stray else EXIT_OK


def _template_label(verdict: ClassVerdict, labels: dict[str, str]) -> str:
    if verdict.label:
        return f"{verdict.label}={labels[verdict.label]}"
    if verdict.selector:
        return f"(none: its pods carry scheduling.nodeSelector {_pairs(verdict.selector)})"
    return "(none: no node rules)"


def _plugin_note(plugin: bool, installed: Installed, choice: str) -> str:
    """Which way the classes' rules reach their pods was taken, and why."""
    if choice != AUTO:
        why = f"--runtimeclass-admission-plugin={choice}"
    elif installed.admission_plugin is not None:
        why = "the extender found it out"
    else:
        why = "as kube-apiserver ships it; --runtimeclass-admission-plugin=off if yours does not"
    runs = "runs" if plugin else "does not run"
    return f"The API server {runs} the RuntimeClass admission plugin ({why})."


def _pairs(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
