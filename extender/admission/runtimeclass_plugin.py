"""kube-apiserver's RuntimeClass admission plugin: whether it runs, and what it does to a pod.

Every kube-apiserver runs it unless its flags turn it off (``RuntimeClass`` is not in
``DefaultOffAdmissionPlugins``, pkg/kubeapiserver/options/plugins.go), and no managed
cluster turns it off. It runs before any admission policy or webhook (the order of
``AllOrderedPlugins`` there), and what it does decides what pod admission must add:
where it runs, every pod of a class already carries the class's overhead,
``scheduling.nodeSelector`` and tolerations, from the live class, when a policy sees it.

**Finding out** (``probe_pod``, ``plugin_runs``), with no flag to get wrong: a pod that
names a RuntimeClass that does not exist, created as a dry run (``dryRun=All``: the
whole admission chain, nothing stored). The plugin refuses it in its mutating half with
its own words, ``pod rejected: RuntimeClass "<name>" not found`` (``prepareObjects`` in
plugin/pkg/admission/runtimeclass/admission.go); without the plugin nothing in
Kubernetes looks the class up before a kubelet does, and the dry run is admitted. Any
other answer (another plugin or webhook refusing the pod first, a timeout) says
nothing either way. The pod is one the Pod Security Standards' ``restricted`` profile
admits, with no token mounted and tiny requests and limits, so that a namespace's
policies and quotas refuse it for no reason of theirs.

**What it does to a pod** (``admit``), as ``Admit`` there does it: ``setOverhead`` (the
class's ``overhead.podFixed`` where the pod has none; a pod whose overhead differs is
refused) and ``setScheduling`` (the class's ``scheduling.nodeSelector`` merged into the
pod's, a conflicting value refused; its tolerations merged with the pod's by
``MergeTolerations``, pkg/util/tolerations/tolerations.go, which keeps one of any two
where one covers the other). ``check-pod-admission`` starts from it what a probe pod
should look like on a cluster that runs the plugin.

Pure: dicts in, dicts and verdicts out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from extender.admission import probe
from extender.admission.pod_review import covers
from policies.objects import RuntimeClassView, Toleration
from policies.quantity import QuantityError, resource_lists_equal

__all__ = ["PROBE_LABEL", "admit", "merge_tolerations", "not_found_message", "plugin_runs", "probe_pod"]

# The probe pod's label, so that anything that sees it (an audit log, another webhook)
# can tell what it is.
PROBE_LABEL: Final = {"app.kubernetes.io/name": "runtimeclass-extender-plugin-probe"}
OVERHEAD_MISMATCH: Final = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"


def not_found_message(class_name: str) -> str:
    """The plugin's words for a pod whose class does not exist (``prepareObjects``)."""
    return f'pod rejected: RuntimeClass "{class_name}" not found'


def probe_pod(namespace: str, class_name: str) -> dict[str, Any]:
    """A pod of ``class_name`` (which must not exist) in ``namespace``, to create as a dry
    run: ``check-pod-admission``'s probe pod (``extender.admission.probe``), named by the
    API server (``generateName``, so no pod of that name is in the way), labelled as this
    probe, with no token mounted and tiny requests and limits."""
    pod = probe.probe_pod("", namespace, class_name)
    metadata = pod["metadata"]
    del metadata["name"]
    metadata["generateName"] = "runtimeclass-extender-plugin-probe-"
    metadata["labels"] = dict(PROBE_LABEL)
    pod["spec"]["automountServiceAccountToken"] = False
    tiny = {"cpu": "1m", "memory": "1Mi"}
    for container in pod["spec"]["containers"]:
        container["resources"] = {"requests": dict(tiny), "limits": dict(tiny)}
    return pod


def plugin_runs(status: int, message: str, class_name: str) -> bool | None:
    """What the API server's answer to the dry run of ``probe_pod(..., class_name)`` says:
    True, the plugin refused it; False, the pod was admitted; None, neither (refused by
    something else first, or no answer)."""
    if 200 <= status < 300:
        return False
    if status == 403 and not_found_message(class_name) in message:
        return True
    return None


def admit(pod: Mapping[str, Any], runtime_class: RuntimeClassView) -> tuple[dict[str, Any] | None, str]:
    """``pod`` as the plugin's mutating half leaves it, or (None, its refusal)."""
    result = copy.deepcopy(dict(pod))
    spec = result.setdefault("spec", {})
    if runtime_class.overhead is not None:
        own = spec.get("overhead")
        if own is not None:
            try:
                same = resource_lists_equal(own, runtime_class.overhead)
            except QuantityError:
                same = False
            if not same:
                return None, OVERHEAD_MISMATCH
        spec["overhead"] = dict(runtime_class.overhead)
    selector = dict(spec.get("nodeSelector") or {})
    for key, value in runtime_class.node_selector.items():
        if key in selector and selector[key] != value:
            return None, (
                f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                f"pod.spec.nodeSelector[{key}] = {selector[key]}"
            )
        selector[key] = value
    if selector:
        spec["nodeSelector"] = selector
    # The class's tolerations merged in; the view does not keep a class's empty
    # ``scheduling`` apart from none, which matters only to a pod whose own tolerations
    # cover one another (MergeTolerations would drop one): not a probe pod.
    if runtime_class.tolerations:
        own = spec.get("tolerations") or []
        spec["tolerations"] = merge_tolerations(own, [_as_api(t) for t in runtime_class.tolerations])
    return result, ""


def merge_tolerations(
    first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``MergeTolerations``: both lists in order, less each toleration another one covers
    (of two equal ones, the first is kept)."""
    every = [dict(t) for t in (*first, *second)]
    merged: list[dict[str, Any]] = []
    for i, toleration in enumerate(every):
        if any(covers(kept, toleration) for kept in merged):
            continue
        if any(not _same(other, toleration) and covers(other, toleration) for other in every[i + 1 :]):
            continue
        merged.append(toleration)
    return merged


def _same(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Equal as Go's Semantic.DeepEqual compares two tolerations: an absent field is
    the empty one."""
    names = ("key", "operator", "value", "effect")
    return all((one.get(n) or "") == (other.get(n) or "") for n in names) and one.get(
        "tolerationSeconds"
    ) == other.get("tolerationSeconds")


def _as_api(toleration: Toleration) -> dict[str, str]:
    fields = {"key": toleration.key, "operator": toleration.operator, "value": toleration.value}
    return {name: value for name, value in {**fields, "effect": toleration.effect}.items() if value}
