"""The API defaults the fake API server applies, a sliver of kube-apiserver's.

A real server defaults every object it decodes from a request, before admission, and
again after each mutation a MutatingAdmissionPolicy or a mutating webhook makes
(admission/plugin/policy/mutating/dispatcher.go ``dispatchOne`` and
admission/plugin/webhook/mutating/dispatcher.go ``callAttrMutatingHook`` call the
scheme's defaulter on the patched object). The fake applies only:

- Pod ``spec.schedulerName``: ``default-scheduler`` when empty
  (pkg/apis/core/v1/defaults.go ``SetDefaults_PodSpec``; v1.DefaultSchedulerName),
  which decides which scheduler profile a pod goes to.

Every other default (restartPolicy, dnsPolicy, tolerations of the
DefaultTolerationSeconds plugin, ``status: {}``...) is absent from objects the fake
stores: compare against a real server's objects field by field, not whole.
"""

from __future__ import annotations

from typing import Any

DEFAULT_SCHEDULER_NAME = "default-scheduler"


def apply_defaults(kind: tuple[str, str, str], obj: dict[str, Any] | None) -> None:
    """Default ``obj``, of (group, version, kind) ``kind``, in place."""
    if obj is None or kind != ("", "v1", "Pod"):
        return
    spec = obj.get("spec")
    if isinstance(spec, dict) and not spec.get("schedulerName"):
        spec["schedulerName"] = DEFAULT_SCHEDULER_NAME
