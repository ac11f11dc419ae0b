"""The pod admission table: what admitting a pod of each RuntimeClass adds, in one object.

The admission policies of deploy/components/pod-admission-policy route pods that name a
RuntimeClass, give them their class's Pod Overhead and, in large-cluster mode, their
class's node-label requirement, inside kube-apiserver. What they read of each class is
this table, one ``PodAdmissionTable`` object (a cluster-scoped custom resource,
runtimeclass-extender.dev/v1alpha1) that the extender's leader keeps equal to the
RuntimeClasses (``extender.podtable``), and that the mutating policy takes as its one
param, by name (the guard, the validating policy, takes none: it reads what the
mutating policy wrote into the pod).

Why a table, and not the RuntimeClasses themselves: a policy whose param is "every
RuntimeClass" is invoked once per class for every pod, so it costs every pod of the
cluster more the more classes there are (staging/src/k8s.io/apiserver/pkg/admission/
plugin/policy/generic/policy_dispatcher.go: one invocation per binding and param); one
param by name is one invocation, whatever the number of classes, and a match condition
that is false for pods naming no class makes it none for them.

Why a custom resource, and not a ConfigMap: kube-apiserver 1.36 serves a built-in
paramKind from its shared informer factory and stops that informer for good once no
binding names the kind (kubernetes/kubernetes#130887): after an uninstall and a
reinstall every pod of a class would be admitted as if the table were missing until
the API server restarts, or against a table frozen at the old content. A custom
resource's param informer is its own, started again when a binding names it again
(checked on kube-apiserver 1.36.2: tests/real/).

One entry per class, under the class's name:

    spec:
      runtimeClasses:
        gvisor: {overhead: {cpu: 250m, memory: 64Mi}, nodeLabel: runtimeclass.node-restriction.kubernetes.io/gvisor}
        runc: {}

- ``overhead``: the class's ``overhead.podFixed``, absent when the class has no
  ``overhead`` and ``{}`` when it has one without podFixed (the in-tree plugin tells
  the two apart: a pod that brings an overhead is refused with a different message);
- ``nodeLabel``: the node label a pod of the class must require (``serve
  --label-nodes``, a class with node rules: ``ClassLabels``), hashed past 63 characters
  as the labeller names it (a policy cannot hash); absent otherwise.
- ``tolerations``: with label-nodes, the class's tolerations as the extender honours
  them (for NoSchedule taints: one without an effect becomes one for NoSchedule, and
  NoExecute and PreferNoSchedule ones are left out); each is added to a pod of the class
  that does not carry it (and is not opted out), as the in-tree RuntimeClass plugin
  merges them. cluster-autoscaler and Karpenter judge a node group's taints by a pod's
  own tolerations: without them a tainted group (a GKE Sandbox-style pool) is never
  picked for the class's pods. Absent when the class has none of these.
- ``podAnnotations``: without ``nodeLabel``, for a class with node rules,
  ``AUTOSCALER_ANNOTATIONS``: each is added to a pod of the class that does not set it
  (and is not opted out), so that cluster-autoscaler and Karpenter never remove the
  node it runs on. They decide where a pod could go by kube-scheduler's in-tree
  filters alone, never the extender (kubernetes/autoscaler#506), so a pod whose class's
  rules are not in its spec "can be moved" to any node with room, one that cannot run
  the class included; its node would be drained and removed, and the pod left pending.
- ``unlessNodeSelector``: the class's ``scheduling.nodeSelector`` when that is all of
  its node rules: a pod whose ``nodeSelector`` holds every entry (the in-tree
  RuntimeClass admission plugin merged it, as it does on every cluster that runs it;
  or its author wrote it) is held to the class's nodes by its own selector, which
  also shows the autoscalers where it can run: it gets no ``podAnnotations`` and no
  ``nodeLabel`` requirement. The derived label would add nothing for it (its merged
  selector pins the class's rules of its admission, as the label does), and a node
  group's template lacks that label where its nodes register through a kubelet (GKE,
  AKS): without it, an autoscaler scales such a group from zero for the pod.

A class that is not in the table (created while no replica ran) gets routing and
nothing else, as a class that does not exist (docs/pod-webhook.md, "The window").

Pure: views in, dicts out. The pod webhook decides the same from the same views
(``extender.admission.pod_review``); a test admits one table of pods both ways.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from extender.cluster.class_labels import ClassLabels
from policies.objects import RuntimeClassView

__all__ = [
    "ADMITTED_LABEL",
    "API_VERSION",
    "AUTOSCALER_ANNOTATIONS",
    "KIND",
    "MISSING_CRD_HINT",
    "PLURAL",
    "TABLES",
    "TABLE_PATH",
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
# A pod the autoscalers must not move: cluster-autoscaler never removes a node running a
# pod with the first (FAQ, "What types of pods can prevent CA from removing a node?"),
# Karpenter never disrupts one with the second (its disruption docs, "Pod-Level
# Controls").
AUTOSCALER_ANNOTATIONS: Final = (
    ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"),
    ("karpenter.sh/do-not-disrupt", "true"),
)


def entry(runtime_class: RuntimeClassView, labels: ClassLabels | None, rules: ClassLabels) -> dict[str, Any]:
    """The class's entry (see the module doc); ``labels`` is None without label-nodes;
    ``rules`` says which classes have node rules under the extender's policy."""
    found: dict[str, Any] = {}
    if runtime_class.overhead is not None:
        found["overhead"] = dict(runtime_class.overhead)
    visible = rules.visible_selector(runtime_class) if rules.has_node_rules(runtime_class) else None
    if labels is not None:
        if labels.has_node_rules(runtime_class):
            found["nodeLabel"] = labels.key(runtime_class.name)
        if tolerations := pod_tolerations(runtime_class):
            found["tolerations"] = tolerations
    elif rules.has_node_rules(runtime_class):
        found["podAnnotations"] = dict(AUTOSCALER_ANNOTATIONS)
    if visible is not None:
        found["unlessNodeSelector"] = dict(visible)
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


def table(
    classes: Iterable[RuntimeClassView], labels: ClassLabels | None, rules: ClassLabels
) -> dict[str, dict[str, Any]]:
    """Every class's entry, by class name: the object's ``spec.runtimeClasses``."""
    return {runtime_class.name: entry(runtime_class, labels, rules) for runtime_class in classes}


def entries_of(obj: Any) -> dict[str, dict[str, Any]] | None:
    """A table object's ``spec.runtimeClasses``, the entries that are objects (None:
    there is no object; ``{}``: an object without entries)."""
    if not isinstance(obj, dict):
        return None
    spec = obj.get("spec")
    found = spec.get("runtimeClasses") if isinstance(spec, dict) else None
    return {str(k): v for k, v in found.items() if isinstance(v, dict)} if isinstance(found, dict) else {}


def table_spec(
    entries: dict[str, dict[str, Any]], *, admission_plugin: bool = False, default_scheduler: bool = False
) -> dict[str, Any]:
    """The table object's ``spec``: the entries, and how the pods of a class are admitted
    and placed besides.

    - ``runtimeClassAdmissionPlugin``: the API server's RuntimeClass admission plugin
      runs first (alongside admission, a managed cluster) and sets and checks each pod's
      overhead from the live class, so the policy leaves the overhead alone: an entry
      behind an edit of the class's overhead would otherwise refuse every pod of the
      class ("Pod's Overhead doesn't match").
    - ``placement: DefaultScheduler`` (``serve --placement default-scheduler``): the
      cluster's default scheduler places the pods by what admission gives them, with no
      extender in its path. Pods are not routed; a pod of a class is marked admitted
      (the label ``ADMITTED_LABEL``) when its class is in the table, and the guard of
      components/default-scheduler-placement refuses every pod of a class that is not:
      nothing else would keep it off nodes that cannot run its class. Absent: pods are
      routed to the RuntimeClass scheduler, whose extender judges them."""
    spec: dict[str, Any] = {"runtimeClasses": entries}
    if admission_plugin:
        spec["runtimeClassAdmissionPlugin"] = True
    if default_scheduler:
        spec["placement"] = "DefaultScheduler"
    return spec
