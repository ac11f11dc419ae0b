"""The pod admission table: what admitting a pod of each RuntimeClass adds, in one object.

The admission policies of deploy/components/pod-admission-policy route pods that name a
RuntimeClass, give them their class's Pod Overhead and, with the node labels, their
class's node-label requirement, inside kube-apiserver. What they read of each class is
this table, one ``PodAdmissionTable`` object (a cluster-scoped custom resource,
runtimeclass-extender.dev/v1alpha1) that the extender's leader keeps equal to the
RuntimeClasses (``extender.podtable``), and that the mutating policy takes as its one
param, by name (the guard, the validating policy, takes none: it reads what the
mutating policy wrote into the pod; the default-scheduler placement's guard takes the
extender's own Namespace, below).

Why a table, and not the RuntimeClasses themselves: a policy whose param is "every
RuntimeClass" is invoked once per class for every pod, so it costs every pod of the
cluster more the more classes there are (staging/src/k8s.io/apiserver/pkg/admission/
plugin/policy/generic/policy_dispatcher.go: one invocation per binding and param); one
param by name is one invocation, whatever the number of classes, and a match condition
that is false for pods naming no class makes it none for them.

Why a custom resource, and not a ConfigMap: kube-apiserver 1.36 serves a built-in
paramKind from its shared informer factory and stops that informer for good once no
binding names the kind, unless something else of the API server runs it
(kubernetes/kubernetes#130887): after an uninstall and a reinstall every pod of a class
would be admitted as if the table were missing until the API server restarts, or
against a table frozen at the old content. A custom resource's param informer is its
own, started again when a binding names it again (checked on kube-apiserver 1.36.2:
tests/real/).

One entry per class, under the class's name, the same whatever the mode (so a table
written in one mode serves the policies of another the moment its manifests are
applied: docs/upgrading.md):

    spec:
      labelNodes: true
      runtimeClassAdmissionPlugin: true
      runtimeClasses:
        gvisor: {overhead: {cpu: 250m, memory: 64Mi}, nodeLabel: runtimeclass.node-restriction.kubernetes.io/gvisor}
        runc: {}

- ``overhead``: the class's ``overhead.podFixed``, absent when the class has no
  ``overhead`` and ``{}`` when it has one without podFixed (the in-tree plugin tells
  the two apart: a pod that brings an overhead is refused with a different message);
- ``nodeLabel``: for a class with node rules (``ClassLabels.has_node_rules`` under the
  extender's policy), the derived node label its pods may be made to require, hashed
  past 63 characters as the labeller names it (a policy cannot hash). The policies
  require it where the nodes carry it (``labelNodes``, or the default-scheduler
  placement); in predicate mode without it, a class with node rules is one whose pods
  get ``AUTOSCALER_ANNOTATIONS``: each is added to a pod of the class that does not set
  it (and is not opted out), so that cluster-autoscaler and Karpenter never remove the
  node it runs on. They decide where a pod could go by kube-scheduler's in-tree filters
  alone, never the extender (kubernetes/autoscaler#506), so a pod whose class's rules
  are not in its spec "can be moved" to any node with room, one that cannot run the
  class included; its node would be drained and removed, and the pod left pending.
- ``tolerations``: the class's tolerations as the extender honours them (for
  NoSchedule taints: one without an effect becomes one for NoSchedule, and NoExecute
  and PreferNoSchedule ones are left out); where the label is required, each is added
  to a pod of the class that does not carry it (and is not opted out), as the in-tree
  RuntimeClass plugin merges them. cluster-autoscaler and Karpenter judge a node
  group's taints by a pod's own tolerations: without them a tainted group (a GKE
  Sandbox-style pool) is never picked for the class's pods. Absent when the class has
  none of these.
- ``unlessNodeSelector``: the class's ``scheduling.nodeSelector`` when that is all of
  its node rules: a pod whose ``nodeSelector`` holds every entry (the in-tree
  RuntimeClass admission plugin merged it, as it does on every cluster that runs it;
  or its author wrote it) is held to the class's nodes by its own selector, which
  also shows the autoscalers where it can run: it gets no annotations and no label
  requirement. The derived label would add nothing for it (its merged selector pins
  the class's rules of its admission, as the label does), and a node group's template
  lacks that label where its nodes register through a kubelet (GKE, AKS): without it,
  an autoscaler scales such a group from zero for the pod.

A class that is not in the table (created while no replica ran) gets routing and
nothing else, as a class that does not exist (docs/pod-webhook.md, "The window").

Pure: views in, dicts out. The pod webhook decides the same from the same views
(``extender.admission.pod_review``); a test admits one table of pods both ways.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from extender.cluster.class_labels import ClassLabels
from policies.objects import RuntimeClassView

__all__ = [
    "ADMITTED_BY_PLUGIN_ANNOTATION",
    "ADMITTED_LABEL",
    "API_VERSION",
    "AUTOSCALER_ANNOTATIONS",
    "KIND",
    "MISSING_CRD_HINT",
    "NAMESPACE_PATH",
    "PLACEMENT_LABEL",
    "PLURAL",
    "TABLES",
    "TABLE_PATH",
    "admitted_by_plugin",
    "entries_of",
    "entry",
    "pod_tolerations",
    "table",
    "table_spec",
]

GROUP: Final = "runtimeclass-extender.dev"
API_VERSION: Final = f"{GROUP}/v1alpha1"
KIND: Final = "PodAdmissionTable"
PLURAL: Final = "podadmissiontables"
# The kind's collection (cluster-scoped), and one table in it.
TABLES: Final = f"/apis/{API_VERSION}/{PLURAL}"
TABLE_PATH: Final = TABLES + "/{name}"
# What to do when the API server does not serve the kind (its log line, /readyz,
# check-pod-admission).
MISSING_CRD_HINT: Final = (
    f"install the PodAdmissionTable CustomResourceDefinition {PLURAL}.{GROUP} "
    "(kubectl apply -f deploy/components/pod-admission-policy/crd.yaml, or helm upgrade with the chart): "
    "until then pod admission admits the pods of every RuntimeClass as they came"
)
# A label, on a pod of a class the mutating policy admitted, with the default-scheduler
# placement: the guard's binding selects the pods without it, so an admitted pod never
# invokes the guard.
ADMITTED_LABEL: Final = "runtimeclass-extender.dev/admitted"
# The extender's own Namespace, which the default-scheduler placement's guard takes as
# its param: unlike the table, the Namespace is in the manifests, so it exists from the
# moment they are applied, and the guard can tell "no table yet" from "a class the
# RuntimeClass admission plugin constrains". (A Namespace, and not a ConfigMap:
# kube-apiserver already runs a Namespace informer for its NamespaceLifecycle plugin, so
# the param needs no informer of its own, which 1.36 would stop for good on an
# uninstall, kubernetes/kubernetes#130887.) Its label says who places the pods: the
# manifests set it, and the guard selects its param by it, so it follows an install's
# placement the moment it is applied (absent: the RuntimeClass scheduler). Its
# annotation names the classes ``admitted_by_plugin`` lists, comma-separated: the leader
# writes it, and it is absent until the leader's first write.
PLACEMENT_LABEL: Final = f"{GROUP}/placement"
ADMITTED_BY_PLUGIN_ANNOTATION: Final = f"{GROUP}/admitted-by-plugin"
NAMESPACE_PATH: Final = "/api/v1/namespaces/{name}"
# A pod the autoscalers must not move: cluster-autoscaler never removes a node running a
# pod with the first (FAQ, "What types of pods can prevent CA from removing a node?"),
# Karpenter never disrupts one with the second (its disruption docs, "Pod-Level
# Controls").
AUTOSCALER_ANNOTATIONS: Final = (
    ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"),
    ("karpenter.sh/do-not-disrupt", "true"),
)


def entry(runtime_class: RuntimeClassView, rules: ClassLabels) -> dict[str, Any]:
    """The class's entry (see the module doc); ``rules`` says which classes have node
    rules under the extender's policy, and names their labels."""
    found: dict[str, Any] = {}
    if runtime_class.overhead is not None:
        found["overhead"] = dict(runtime_class.overhead)
    if rules.has_node_rules(runtime_class):
        found["nodeLabel"] = rules.key(runtime_class.name)
        visible = rules.visible_selector(runtime_class)
        if visible is not None:
            found["unlessNodeSelector"] = dict(visible)
    if tolerations := pod_tolerations(runtime_class):
        found["tolerations"] = tolerations
    return found


def pod_tolerations(runtime_class: RuntimeClassView) -> list[dict[str, str]]:
    """The class's tolerations as the extender honours them at /filter (NoSchedule taints
    alone: policies/predicates.py), as API objects (empty fields left out)."""
    found: list[dict[str, str]] = []
    for toleration in runtime_class.tolerations:
        if toleration.effect not in ("", "NoSchedule"):
            continue
        item = {
            "key": toleration.key,
            "operator": toleration.operator,
            "value": toleration.value,
            "effect": "NoSchedule",
        }
        written = {k: v for k, v in item.items() if v}
        if written not in found:
            found.append(written)
    return found


def table(classes: Iterable[RuntimeClassView], rules: ClassLabels) -> dict[str, dict[str, Any]]:
    """Every class's entry, by class name: the object's ``spec.runtimeClasses``."""
    return {runtime_class.name: entry(runtime_class, rules) for runtime_class in classes}


def admitted_by_plugin(entries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The classes whose pods the in-tree RuntimeClass admission plugin, where it runs,
    constrains as fully as pod admission would: every node rule of theirs is their
    ``scheduling.nodeSelector`` (or they have none), which the plugin merges into the
    pod with their tolerations and overhead, from the live class. With the
    default-scheduler placement, the mutating policy adds nothing to a pod of such a
    class that shows the selector (it is not invoked: its match conditions turn the pod
    away), and the guard lets it pass unmarked; sorted, for the annotation the guard
    reads (``ADMITTED_BY_PLUGIN``)."""
    return sorted(
        name for name, found in entries.items() if "nodeLabel" not in found or "unlessNodeSelector" in found
    )


def entries_of(obj: Any) -> dict[str, dict[str, Any]] | None:
    """A table object's ``spec.runtimeClasses``, the entries that are objects (None:
    there is no object; ``{}``: an object without entries)."""
    if not isinstance(obj, dict):
        return None
    spec = obj.get("spec")
    found = spec.get("runtimeClasses") if isinstance(spec, dict) else None
    return {str(k): v for k, v in found.items() if isinstance(v, dict)} if isinstance(found, dict) else {}


def table_spec(
    entries: dict[str, dict[str, Any]], *, label_nodes: bool = False, admission_plugin: bool = False
) -> dict[str, Any]:
    """The table object's ``spec``: the entries, and what the API server and the extender
    do besides.

    - ``labelNodes``: the extender's leader keeps the derived labels on the nodes
      (``serve --label-nodes``), so the policies that route pods to the RuntimeClass
      scheduler also require the class's label and add its tolerations (large-cluster
      mode); the default-scheduler placement requires them whatever this says (without
      it, its pods wait for the labels of the leader that follows: docs/upgrading.md).
    - ``runtimeClassAdmissionPlugin``: the API server runs the RuntimeClass admission
      plugin (found by the extender, ``extender.admission.plugin_probe``), before any
      policy: it sets and checks each pod's overhead from the live class, so the
      policy leaves the overhead alone (an entry behind an edit of the class's overhead
      would otherwise refuse every pod of the class: "Pod's Overhead doesn't match"),
      and with the default-scheduler placement a pod of a class ``admitted_by_plugin``
      names costs no mutation."""
    spec: dict[str, Any] = {"runtimeClasses": entries}
    if label_nodes:
        spec["labelNodes"] = True
    if admission_plugin:
        spec["runtimeClassAdmissionPlugin"] = True
    return spec
