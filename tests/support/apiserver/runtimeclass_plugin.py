"""kube-apiserver's RuntimeClass admission plugin, for the test API server (``runtimeclass_plugin=True``).

As plugin/pkg/admission/runtimeclass/admission.go does it on a pod CREATE (the plugin
handles nothing else), first in the mutating chain and first of the validating one
(the order of ``AllOrderedPlugins`` in pkg/kubeapiserver/options/plugins.go):

- ``prepareObjects``: a pod naming a class that does not exist is refused, 403,
  ``pod rejected: RuntimeClass "<name>" not found``; a pod naming none is left alone;
- ``Admit`` (``setOverhead``, ``setScheduling``): the class's ``overhead.podFixed``
  where the pod has none, a pod whose overhead differs refused; the class's
  ``scheduling.nodeSelector`` merged into the pod's (a conflicting value refused:
  ``conflict: runtimeClass.scheduling.nodeSelector[K] = V; pod.spec.nodeSelector[K] =
  V2``), its tolerations merged with the pod's by ``MergeTolerations``
  (pkg/util/tolerations/tolerations.go: both lists in order, less each one another
  covers, ``isSuperset``);
- ``Validate`` (``validateOverhead``): after every mutation, the pod's overhead must be
  the class's, or none where the class has none.

Written apart from the extender's own model of it (extender/admission/runtimeclass_plugin.py),
so that tests of the extender against this server can tell the two apart; tests/real/
runs the same pods through kube-apiserver 1.36.2 with the plugin on.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from policies.quantity import QuantityError, parse_quantity

JsonObj = dict[str, Any]
NOT_FOUND = 'pod rejected: RuntimeClass "{name}" not found'
OVERHEAD_DIFFERS = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
OVERHEAD_WITHOUT_CLASS = "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"


def admit(pod: JsonObj, runtime_class: Mapping[str, Any] | None) -> tuple[JsonObj | None, str]:
    """The pod after the plugin's mutating half, or (None, why it refuses it);
    ``runtime_class`` is the stored class the pod names (None: it names none, or one
    that does not exist, which ``not_found`` tells apart)."""
    if runtime_class is None:
        return pod, ""
    result = copy.deepcopy(pod)
    spec = result.setdefault("spec", {})
    overhead = runtime_class.get("overhead")
    if overhead is not None:
        fixed = overhead.get("podFixed") or {}
        if spec.get("overhead") is not None and not _same_resources(spec["overhead"], fixed):
            return None, OVERHEAD_DIFFERS
        if fixed:
            spec["overhead"] = copy.deepcopy(fixed)
    scheduling = runtime_class.get("scheduling")
    if scheduling is None:
        return result, ""
    selector = spec.get("nodeSelector")
    for key, value in (scheduling.get("nodeSelector") or {}).items():
        if selector is not None and key in selector and selector[key] != value:
            return None, (
                f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                f"pod.spec.nodeSelector[{key}] = {selector[key]}"
            )
    if scheduling.get("nodeSelector"):
        spec["nodeSelector"] = {**(selector or {}), **scheduling["nodeSelector"]}
    merged = _merge(spec.get("tolerations") or [], scheduling.get("tolerations") or [])
    if merged:
        spec["tolerations"] = merged
    else:
        spec.pop("tolerations", None)
    return result, ""


def validate(pod: JsonObj, runtime_class: Mapping[str, Any] | None) -> str:
    """Why the plugin's validating half refuses the pod ("": it does not)."""
    if runtime_class is None:
        return ""
    overhead = runtime_class.get("overhead")
    own = (pod.get("spec") or {}).get("overhead")
    if overhead is not None:
        return "" if _same_resources(own or {}, overhead.get("podFixed") or {}) else OVERHEAD_DIFFERS
    return OVERHEAD_WITHOUT_CLASS if own is not None else ""


def _same_resources(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Semantic.DeepEqual of two ResourceLists: the same names, equal quantities by value."""
    if set(one) != set(other):
        return False
    try:
        return all(parse_quantity(str(one[k])) == parse_quantity(str(other[k])) for k in one)
    except QuantityError:
        return False


def _merge(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]) -> list[JsonObj]:
    every = [dict(t) for t in (*first, *second)]
    merged: list[JsonObj] = []
    for i, toleration in enumerate(every):
        if any(_superset(kept, toleration) for kept in merged):
            continue
        if any(not _equal(other, toleration) and _superset(other, toleration) for other in every[i + 1 :]):
            continue
        merged.append(toleration)
    return merged


def _field(toleration: Mapping[str, Any], name: str) -> Any:
    value = toleration.get(name)
    return value if name == "tolerationSeconds" else (value or "")


def _equal(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    names = ("key", "operator", "value", "effect", "tolerationSeconds")
    return all(_field(one, n) == _field(other, n) for n in names)


def _superset(ss: Mapping[str, Any], t: Mapping[str, Any]) -> bool:
    """``isSuperset(ss, t)``."""
    if _equal(ss, t):
        return True
    if _field(t, "key") != _field(ss, "key") and (_field(ss, "key") != "" or _field(ss, "operator") != "Exists"):
        return False
    if _field(t, "effect") != _field(ss, "effect") and _field(ss, "effect") != "":
        return False
    if _field(ss, "effect") == "NoExecute" and _field(ss, "tolerationSeconds") is not None:
        seconds = _field(t, "tolerationSeconds")
        if seconds is None or seconds > _field(ss, "tolerationSeconds"):
            return False
    operator = _field(ss, "operator")
    if operator in ("Equal", ""):
        return bool(_field(t, "operator") == "Equal" and _field(t, "value") == _field(ss, "value"))
    return bool(operator == "Exists")
