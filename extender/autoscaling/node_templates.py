"""What a node group's template must carry for an autoscaler to add nodes of a RuntimeClass.

cluster-autoscaler adds a node to a group when the group's *template* passes
kube-scheduler's in-tree filters for a pending pod; Karpenter launches a node when a
NodePool's template satisfies the pod's requirements. Neither calls the extender, so in
predicate mode with the node labels a pod of a class is seen to fit a group only when the group's template
carries the class's derived label (``runtimeclass.node-restriction.kubernetes.io/<class>:
"true"``), which the pod requires. The template is copied from a live node of the group
when there is one (the labeller has labelled it), and taken from configuration when the
group has none (scale from zero): there the operator must put the label in, as each
provider takes it (docs/autoscaling.md).

``judge`` answers, for a template (a Node: its labels, taints and runtime handlers):

- which classes its nodes will run: those whose node rules its labels pass (the
  labeller's own test, ``ClassLabels.passes``), and the label each needs in the template;
- labels under the prefix that the template carries but should not (a class its nodes
  cannot run, or no class at all): the labeller removes them from every node that
  arrives with them, and meanwhile the autoscaler believes the group can run that class;
- the taints of the template that a pod of a class must tolerate itself for the
  autoscaler to pick the group: it judges a pod's own tolerations. In predicate mode with the node labels
  pod admission gives each pod its class's tolerations for NoSchedule taints (as the
  in-tree plugin merges them: extender.admission.pod_table), so those are the NoExecute
  taints and the NoSchedule ones the class does not tolerate.

``snippets`` writes the labels (and the startup taint, ``extender.autoscaling.startup_taint``)
as each provider takes them. Pure: a node view, classes and a policy in, data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from extender.autoscaling.startup_taint import AUTOSCALER_STARTUP_PREFIX
from extender.cluster.class_labels import LABEL_VALUE, ClassLabels
from policies.objects import NodeView, RuntimeClassView, Taint
from policies.tolerations import tolerated_by_any

# Taints an autoscaler leaves out of a template (cluster-autoscaler/utils/taints/taints.go:
# startup, ignore and status prefixes), and the ones the node lifecycle controller
# manages: none is a constraint on where a pod may run for the simulation.
_NOT_TEMPLATE_TAINTS = (
    AUTOSCALER_STARTUP_PREFIX,
    "ignore-taint.cluster-autoscaler.kubernetes.io/",
    "status-taint.cluster-autoscaler.kubernetes.io/",
    "node.kubernetes.io/",
    "node.cloudprovider.kubernetes.io/",
)
_PLACEMENT_EFFECTS = ("NoSchedule", "NoExecute")
PROVIDERS = ("node", "aws", "cluster-api", "karpenter", "gke-aks")


@dataclass(frozen=True)
class ClassVerdict:
    """One RuntimeClass against the template."""

    name: str
    runs: bool
    # The derived label the template must carry (a class it runs, with node rules that
    # are not in its pods already).
    label: str | None = None
    # The class's scheduling.nodeSelector, which the RuntimeClass admission plugin puts
    # into its pods in place of the label requirement (a class whose rules are that
    # selector alone, where the plugin runs): the template already carries it.
    selector: dict[str, str] | None = None
    # Why its nodes cannot run it: the class's node rules, in words.
    rules: str = ""
    # The template's taints a pod of the class must tolerate in its own spec.
    taints: tuple[str, ...] = ()


@dataclass(frozen=True)
class TemplateVerdict:
    classes: list[ClassVerdict]
    # The labels the template must carry; those of them it does not carry yet; those
    # under the prefix it carries and must not.
    labels: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    stray: list[str] = field(default_factory=list)


def placement_taints(node: NodeView) -> list[Taint]:
    """The template's taints that constrain where a pod may run in the simulation."""
    return [
        t
        for t in node.taints
        if t.effect in _PLACEMENT_EFFECTS and not t.key.startswith(_NOT_TEMPLATE_TAINTS)
    ]


def judge(
    node: NodeView, classes: Iterable[RuntimeClassView], rules: ClassLabels, *, admission_plugin: bool = False
) -> TemplateVerdict:
    """Which classes the template's nodes run, and what the template must carry.
    ``admission_plugin``: the API server runs the RuntimeClass admission plugin, which
    puts a class's scheduling.nodeSelector and tolerations into its pods, so that a
    class whose rules are that selector alone needs no derived label (pod admission
    requires none of its pods: extender.admission.pod_table's ``unlessNodeSelector``)."""
    verdicts: list[ClassVerdict] = []
    labels: dict[str, str] = {}
    taints = placement_taints(node)
    for runtime_class in sorted(classes, key=lambda rc: rc.name):
        if not rules.passes(runtime_class, node):
            verdicts.append(ClassVerdict(runtime_class.name, False, rules=rules.describe(runtime_class)))
            continue
        selector = rules.visible_selector(runtime_class) if admission_plugin else None
        ruled = rules.has_node_rules(runtime_class) and selector is None
        label = rules.key(runtime_class.name) if ruled else None
        if label is not None:
            labels[label] = LABEL_VALUE
        own = tuple(
            str(t) for t in taints if not merged_toleration(t, runtime_class, admission_plugin=admission_plugin)
        )
        kept = dict(selector) if selector else None
        verdicts.append(ClassVerdict(runtime_class.name, True, label=label, selector=kept, taints=own))
    owned = rules.owned(node.labels)
    return TemplateVerdict(
        verdicts,
        labels,
        missing={k: v for k, v in labels.items() if owned.get(k) != v},
        stray=sorted(key for key in owned if key not in labels),
    )


def merged_toleration(taint: Taint, runtime_class: RuntimeClassView, *, admission_plugin: bool = False) -> bool:
    """Admission puts a toleration of ``taint`` into the class's pods: the RuntimeClass
    admission plugin, where it runs, every toleration of the class; pod admission, with
    the node labels, the class's tolerations for NoSchedule taints (a NoExecute taint
    then needs the pod's own)."""
    if admission_plugin and tolerated_by_any(taint, list(runtime_class.tolerations)):
        return True
    honoured = [t for t in runtime_class.tolerations if t.effect in ("", "NoSchedule")]
    return taint.effect == "NoSchedule" and tolerated_by_any(taint, honoured)


# The label domains a kubelet's --node-labels refuses (cmd/kubelet/app/options/options.go,
# ValidateNodeLabels with kubeletapis.IsKubeletLabel): kubernetes.io and k8s.io and their
# subdomains, but for the kubelet's own kubelet.kubernetes.io and node.kubernetes.io.
_KUBELET_REFUSED_DOMAINS: Final = ("kubernetes.io", "k8s.io")
_KUBELET_OWN_DOMAINS: Final = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _in_domain(prefix: str, domains: tuple[str, ...]) -> bool:
    return any(prefix == domain or prefix.endswith("." + domain) for domain in domains)


def kubelet_refuses(prefix: str) -> bool:
    """Whether a kubelet refuses labels under ``prefix`` in its --node-labels, through
    which GKE and AKS node pools label their nodes (the default prefix, under
    node-restriction.kubernetes.io, is refused: that is what protects it)."""
    return _in_domain(prefix, _KUBELET_REFUSED_DOMAINS) and not _in_domain(prefix, _KUBELET_OWN_DOMAINS)


def _gke_aks(pairs: list[tuple[str, str]], startup_taint: str) -> str:
    """GKE and AKS node pools: their labels reach the nodes through the kubelet's
    --node-labels (and their taints through its --register-with-taints), so a prefix the
    kubelet refuses cannot be set there. The commands take a taint as KEY=VALUE:EFFECT;
    the extender matches the startup taint by its key alone, so its value is free."""
    prefixes = sorted({key.split("/", 1)[0] for key, _ in pairs})
    taint = f"{startup_taint}=true:NoSchedule" if startup_taint else ""
    refused = [prefix for prefix in prefixes if kubelet_refuses(prefix)]
    if refused:
        lines = [
            f"# A node pool label under {refused[0]}/ cannot be set: the kubelet refuses it",
            "# (a pool's labels reach its nodes through the kubelet's --node-labels). Keep the pool at one node",
            "# or more (its live node, labelled by the extender, is the template), or run the extender with a",
            "# --node-label-prefix of your own domain and give node-template the same: it then prints the pool's",
            "# --node-labels.",
        ]
        if taint:
            lines.append(f"# Its startup taint: --node-taints={taint} (GKE), --node-taints {taint} (AKS)")
        return "\n".join(lines)
    gke = f"gcloud container node-pools create POOL --cluster=CLUSTER --node-labels={','.join(f'{k}={v}' for k, v in pairs)}"
    aks = (
        "az aks nodepool add --resource-group GROUP --cluster-name CLUSTER --name POOL "
        f"--labels {' '.join(f'{k}={v}' for k, v in pairs)}"
    )
    if taint:
        gke += f" --node-taints={taint}"
        aks += f" --node-taints {taint}"
    return "\n".join(["# GKE (POOL, CLUSTER: yours)", gke, "# AKS (GROUP, CLUSTER, POOL: yours)", aks])


def snippets(labels: Mapping[str, str], startup_taint: str) -> dict[str, str]:
    """The labels a template needs (and the startup taint its nodes register with),
    written as each provider takes them; empty labels: no snippets."""
    if not labels:
        return {}
    pairs = sorted(labels.items())
    taint = f"{startup_taint}=:NoSchedule" if startup_taint else ""
    found: dict[str, str] = {}
    # A Node (the kwok provider's template ConfigMap, and what the labeller makes of a node).
    node = ["metadata:", "  labels:"] + [f'    {k}: "{v}"' for k, v in pairs]
    if startup_taint:
        node += ["spec:", "  taints:", f"  - {{key: {startup_taint}, effect: NoSchedule}}"]
    found["node"] = "\n".join(node)
    # AWS Auto Scaling group tags (cluster-autoscaler/cloudprovider/aws/README.md,
    # "Auto-Discovery Setup": node-template/label tags are read for scale from zero).
    aws = [f"k8s.io/cluster-autoscaler/node-template/label/{k}: {v}" for k, v in pairs]
    if taint:
        aws.append(f"# and the kubelet of the launch template: --register-with-taints={taint}")
    found["aws"] = "\n".join(aws)
    # Cluster API: an annotation of the MachineDeployment or MachineSet
    # (cluster-autoscaler/cloudprovider/clusterapi/clusterapi_unstructured.go).
    capi = [
        "metadata:",
        "  annotations:",
        "    capacity.cluster-autoscaler.kubernetes.io/labels: " + ",".join(f"{k}={v}" for k, v in pairs),
    ]
    if taint:
        capi.append(f"# and the kubelet (KubeadmConfigTemplate nodeRegistration.taints): {taint}")
    found["cluster-api"] = "\n".join(capi)
    # Karpenter: a NodePool; the node-restriction.kubernetes.io domain is allowed there
    # (LabelDomainExceptions, kubernetes-sigs/karpenter pkg/apis/v1/labels.go).
    karpenter = ["spec:", "  template:", "    metadata:", "      labels:"]
    karpenter += [f'        {k}: "{v}"' for k, v in pairs]
    if startup_taint:
        karpenter += [
            "    spec:",
            "      startupTaints:",
            f"      - {{key: {startup_taint}, effect: NoSchedule}}",
        ]
    found["karpenter"] = "\n".join(karpenter)
    found["gke-aks"] = _gke_aks(pairs, startup_taint)
    return found
