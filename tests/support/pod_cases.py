"""One table of pods and RuntimeClasses, and what pod admission must make of each pod.

The same table is admitted by the pod admission policies and by the pod webhook, on the
test API server (tests/admission/test_pod_admission_both_ways.py) and on kube-apiserver
itself (tests/real/test_pod_admission.py): the pods that come out must be the same both
ways, and each as ``EXPECTED`` says. Three setups: predicate mode (routing and
overhead), predicate mode with the node labels with the bundled policy (and the label requirement), and
predicate mode with the node labels with a policy that enables the runtime-handler check, where every
class has node rules.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from extender.admission.pod_table import (
    ADMITTED_LABEL,
    API_VERSION,
    AUTOSCALER_ANNOTATIONS,
    KIND,
    PLURAL,
    table,
    table_spec,
)
from extender.cluster.class_labels import ClassLabels, label_key
from extender.cluster.objects import runtime_class_from_api
from extender.policy_file import load_policy
from extender.settings import DEFAULT_NODE_LABEL_PREFIX
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from policies.quantity import resource_lists_equal
from policies.registry import Policy
from tests.support.apiserver import FakeApiServer, ResourceType
from tests.support.manifests import PREDICATE_LABELS, one, render, render_webhook_way
from tests.support.paths import REPO

Manifest = dict[str, Any]
# The table's kind, as the test API server serves it (the CRD's, deploy/components/
# pod-admission-policy/crd.yaml).
TABLES = ResourceType("runtimeclass-extender.dev", "v1alpha1", PLURAL, KIND)

# The pod admission policies' name, and the table they read (the keeper's object).
POD_ADMISSION = "runtimeclass-extender-pod-admission"
# Refuses a pod the mutating policy marked to refuse (and no other pod: its binding
# selects the marked ones by label).
GUARD = POD_ADMISSION + "-guard"
# The default-scheduler placement's guard: refuses a pod of a class pod admission did
# not admit (components/default-scheduler-placement).
REQUIRED = POD_ADMISSION + "-required"
TABLE = "runtimeclass-extender"
POLICY_KINDS = (
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
SCHEDULER = "runtimeclass-scheduler"
OPT_OUT = {"runtimeclass-extender.dev/webhook": "ignore"}
LONG = "sandboxed-runtime-for-untrusted-workloads-with-a-rather-long-class-name"
RUNTIME_HANDLER_POLICY = """\
apiVersion: runtimeclass-extender.dev/v1alpha1
kind: Policy
predicates:
- name: RuntimeClassExists
- name: RuntimeClassNodeSelector
- name: RuntimeHandler
  options:
    nodesWithoutReport: fail
    requiredFeatures: [userNamespaces]
- name: TaintToleration
"""


def runtime_class(
    name: str,
    *,
    overhead: dict[str, str] | None = None,
    empty_overhead: bool = False,
    node_selector: dict[str, str] | None = None,
    term: str | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> Manifest:
    obj: Manifest = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": "runsc" if name != "kata" else "kata",
    }
    if term is not None:
        obj["metadata"]["annotations"] = {NODE_SELECTOR_TERM_ANNOTATION: term}
    if overhead is not None:
        obj["overhead"] = {"podFixed": overhead}
    elif empty_overhead:
        obj["overhead"] = {}
    if node_selector is not None:
        obj["scheduling"] = {"nodeSelector": node_selector}
    if tolerations is not None:
        obj.setdefault("scheduling", {})["tolerations"] = tolerations
    return obj


GVISOR_OVERHEAD = {"cpu": "250m", "memory": "64Mi"}
SANDBOX_TOLERATION = {
    "key": "sandbox.gke.io/runtime",
    "operator": "Equal",
    "value": "gvisor",
    "effect": "NoSchedule",
}
# SANDBOX_TOLERATION without its operator: the same toleration, for the in-tree merge.
NO_OPERATOR_TOLERATION = {k: v for k, v in SANDBOX_TOLERATION.items() if k != "operator"}
GVISOR_TOLERATIONS = [
    SANDBOX_TOLERATION,
    # No effect: the extender honours it for NoSchedule taints, and pods get it so.
    {"key": "maintenance", "operator": "Exists"},
    # NoExecute: the pod's own business (the extender never counts a class's).
    {"key": "evict-me", "operator": "Exists", "effect": "NoExecute"},
]
# What a pod of gvisor gets with the node labels (extender/admission/pod_table.py).
GVISOR_POD_TOLERATIONS = [
    SANDBOX_TOLERATION,
    {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"},
]
KATA_OVERHEAD = {"cpu": "250m", "memory": "160Mi"}
CLASSES = [
    # Node rules, an overhead, and tolerations (as GKE Sandbox taints its nodes).
    runtime_class(
        "gvisor",
        overhead=GVISOR_OVERHEAD,
        node_selector={"sandbox.gke.io/runtime": "gvisor"},
        tolerations=GVISOR_TOLERATIONS,
    ),
    # An overhead, no node rules.
    runtime_class("kata", overhead=KATA_OVERHEAD),
    # Only the node-selector-term annotation.
    runtime_class(
        "term-only",
        term='{"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["0"]}]}',
    ),
    # A malformed annotation: node rules (it fails closed), no overhead.
    runtime_class("bad-term", term="not: [a, term"),
    # Nothing at all; an empty scheduling.nodeSelector is no rule either.
    runtime_class("plain"),
    runtime_class("empty-selector", node_selector={}),
    # overhead: {} (no podFixed).
    runtime_class("empty-overhead", empty_overhead=True),
    # A name over 63 characters: a hashed label.
    runtime_class(LONG, overhead=GVISOR_OVERHEAD, node_selector={"sandbox.gke.io/runtime": "gvisor"}),
]
# Each with the label the API server gives every namespace (the namespace strategy's
# kubernetes.io/metadata.name, which the bindings' and the webhook's selectors read).
# The test API server serves Namespaces for the policies' namespaceSelector.
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace")
EXTENDER_NAMESPACE = "runtimeclass-extender"
NAMESPACE_OBJECTS = [
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}},
    }
    for name, labels in (
        ("apps", {}),
        ("opted-out", OPT_OUT),
        ("kube-system", {}),
        ("runtimeclass-extender", OPT_OUT),
    )
]


@dataclass(frozen=True)
class PodCase:
    id: str
    runtime_class: str | None
    namespace: str = "apps"
    scheduler: str | None = None
    overhead: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, str]] | None = None
    # In predicate mode with the node labels only (a label value that conflicts).
    large_only: bool = False

    def manifest(self) -> Manifest:
        spec: Manifest = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        if self.runtime_class is not None:
            spec["runtimeClassName"] = self.runtime_class
        if self.scheduler is not None:
            spec["schedulerName"] = self.scheduler
        if self.overhead is not None:
            spec["overhead"] = dict(self.overhead)
        if self.node_selector is not None:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations is not None:
            spec["tolerations"] = [dict(t) for t in self.tolerations]
        metadata: Manifest = {"name": self.id, "namespace": self.namespace}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


GVISOR_KEY = label_key(DEFAULT_NODE_LABEL_PREFIX, "gvisor")
GVISOR_SELECTOR = {"sandbox.gke.io/runtime": "gvisor"}
# A pod that says itself whether cluster-autoscaler may evict it: kept.
OWN_ANNOTATIONS = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true", "team": "a"}
PODS_TABLE = [
    PodCase("gvisor", "gvisor"),
    PodCase("gvisor-default-scheduler", "gvisor", scheduler="default-scheduler"),
    PodCase("gvisor-own-scheduler", "gvisor", scheduler="my-scheduler"),
    PodCase("gvisor-routed-already", "gvisor", scheduler=SCHEDULER),
    PodCase("gvisor-own-selector", "gvisor", node_selector={"topology.kubernetes.io/zone": "a"}),
    # The class's own selector in the pod (as the in-tree RuntimeClass plugin merges it,
    # alongside admission): the autoscalers can see where it may run.
    PodCase("gvisor-class-selector", "gvisor", node_selector=GVISOR_SELECTOR),
    PodCase("gvisor-own-annotations", "gvisor", annotations=OWN_ANNOTATIONS),
    PodCase("gvisor-own-toleration", "gvisor", tolerations=[SANDBOX_TOLERATION]),
    # Covered as the in-tree merge decides it (isSuperset): no operator is Equal's, and
    # an empty key with Exists tolerates every taint.
    PodCase("gvisor-toleration-without-operator", "gvisor", tolerations=[NO_OPERATOR_TOLERATION]),
    PodCase("gvisor-tolerates-every-taint", "gvisor", tolerations=[{"operator": "Exists"}]),
    PodCase("gvisor-label-given", "gvisor", node_selector={GVISOR_KEY: "true"}),
    PodCase("gvisor-label-conflict", "gvisor", node_selector={GVISOR_KEY: "false"}, large_only=True),
    PodCase("gvisor-overhead-equal", "gvisor", overhead={"cpu": "0.25", "memory": "67108864"}),
    PodCase("gvisor-overhead-differs", "gvisor", overhead={"cpu": "500m", "memory": "64Mi"}),
    PodCase("gvisor-overhead-fewer", "gvisor", overhead={"cpu": "250m"}),
    PodCase("gvisor-opt-out-label", "gvisor", labels=OPT_OUT),
    PodCase("gvisor-opted-out-namespace", "gvisor", namespace="opted-out"),
    PodCase("gvisor-kube-system", "gvisor", namespace="kube-system"),
    PodCase("gvisor-own-namespace", "gvisor", namespace="runtimeclass-extender"),
    PodCase("kata", "kata"),
    PodCase("kata-own-scheduler-and-overhead", "kata", scheduler="batch", overhead=KATA_OVERHEAD),
    PodCase("term-only", "term-only"),
    PodCase("bad-term", "bad-term"),
    PodCase("plain", "plain"),
    PodCase("plain-with-overhead", "plain", overhead={"cpu": "100m"}),
    PodCase("empty-selector", "empty-selector"),
    PodCase("empty-overhead-with-overhead", "empty-overhead", overhead={"cpu": "100m"}),
    PodCase("empty-overhead", "empty-overhead"),
    PodCase("long-class-name", LONG),
    PodCase("long-class-name-opt-out", LONG, labels=OPT_OUT),
    PodCase("missing-class", "does-not-exist"),
    PodCase("missing-class-with-overhead", "does-not-exist", overhead={"cpu": "100m"}),
    PodCase("no-class", None),
    PodCase("empty-class", ""),
]


@dataclass(frozen=True)
class Setup:
    id: str
    overlay: str
    label_nodes: bool = False
    policy_text: str | None = None
    # The default-scheduler placement: the table says so, and its guard is applied.
    default_scheduler: bool = False

    def policy(self) -> Policy:
        if self.policy_text is None:
            return load_policy()
        path = REPO / ".pytest-policy.yaml"
        path.write_text(self.policy_text, encoding="utf-8")
        try:
            return load_policy(path)
        finally:
            path.unlink()

    def rules(self) -> ClassLabels:
        """Which classes have node rules under the setup's policy."""
        return ClassLabels(DEFAULT_NODE_LABEL_PREFIX, self.policy())

    def labels(self) -> ClassLabels | None:
        return self.rules() if self.label_nodes else None

    def policies_way(self) -> list[Manifest]:
        """What the overlay applies for pod admission, as shipped, with the table as the
        extender's leader (with --label-nodes with the node labels) fills it."""
        docs = render(self.overlay)
        wanted = [
            copy.deepcopy(d)
            for d in docs
            if d["kind"] in POLICY_KINDS and d["metadata"]["name"] in (POD_ADMISSION, GUARD, REQUIRED)
        ]
        return [self.table(), *wanted]

    def table(self) -> Manifest:
        """The PodAdmissionTable as the extender's leader writes it for ``CLASSES``."""
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": TABLE},
            "spec": table_spec(
                table((runtime_class_from_api(rc) for rc in CLASSES), self.rules()),
                label_nodes=self.label_nodes,
            ),
        }

    def namespaces(self) -> list[Manifest]:
        """``NAMESPACE_OBJECTS``, the extender's own labelled as the overlay makes it (with
        the default-scheduler placement, its label saying so: the guard's param)."""
        found = copy.deepcopy(NAMESPACE_OBJECTS)
        rendered = one(render(self.overlay), "Namespace", EXTENDER_NAMESPACE)
        for namespace in found:
            if namespace["metadata"]["name"] == EXTENDER_NAMESPACE:
                namespace["metadata"]["labels"].update(rendered["metadata"].get("labels") or {})
        return found

    def webhook_way(self) -> list[Manifest]:
        return [copy.deepcopy(one(render_webhook_way(self.overlay), "MutatingWebhookConfiguration"))]


SETUPS = [
    Setup("predicate-mode", "overlays/predicate-mode"),
    Setup("predicate-mode + node labels", PREDICATE_LABELS, label_nodes=True),
    Setup("predicate-mode + node labels, runtime-handler policy", PREDICATE_LABELS, True, RUNTIME_HANDLER_POLICY),
]
# The policies alone (the pod webhook has no default-scheduler placement).
DEFAULT_SCHEDULER = Setup("default-scheduler", "overlays/default-scheduler", label_nodes=True, default_scheduler=True)


@dataclass(frozen=True)
class Admitted:
    status: int
    pod: Manifest | None
    message: str


TABLED = {rc["metadata"]["name"] for rc in CLASSES}
# The namespaces no pod admission binding selects: those labelled to opt out, and
# kube-system and the extender's own, which every binding leaves out by name.
OPTED_OUT = {"kube-system", "runtimeclass-extender"} | {
    namespace["metadata"]["name"]
    for namespace in NAMESPACE_OBJECTS
    if namespace["metadata"]["labels"].get("runtimeclass-extender.dev/webhook") == "ignore"
}


def marked_admitted(admitted: Admitted) -> Admitted:
    """``admitted`` as the policies give it: the webhook's pod, and on a pod of a class in
    the table that is not opted out (by its label or its namespace's) the admitted mark,
    which the mutating policy sets in every mode (the default-scheduler placement's
    guard reads it; in predicate mode it is there for a move between the modes) and the
    pod webhook, never in that placement, does not."""
    pod = admitted.pod
    if pod is None or pod["spec"].get("runtimeClassName") not in TABLED:
        return admitted
    labels = pod["metadata"].get("labels") or {}
    if labels.get("runtimeclass-extender.dev/webhook") == "ignore" or pod["metadata"]["namespace"] in OPTED_OUT:
        return admitted
    marked = copy.deepcopy(pod)
    marked["metadata"]["labels"] = {**labels, ADMITTED_LABEL: "true"}
    return Admitted(admitted.status, marked, admitted.message)


STAMPED = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
PREFIXES = (
    'admission webhook "pods.runtimeclass-extender.dev" denied the request: ',
    "with binding '",
)


async def create_pod(session: aiohttp.ClientSession, server: FakeApiServer, pod: Manifest) -> Admitted:
    """The pod created as an administrator would: what the server stored (without what
    it stamps on every object), or its refusal in the mechanism's own words."""
    namespace = pod["metadata"]["namespace"]
    async with session.post(
        f"{server.url}/api/v1/namespaces/{namespace}/pods",
        data=json.dumps(pod),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {server.token}"},
    ) as response:
        body = await response.json()
    if response.status != 201:
        return Admitted(response.status, None, refusal_message(body))
    stored = copy.deepcopy(body)
    for key in STAMPED:
        stored["metadata"].pop(key, None)
    return Admitted(201, stored, "")


def refusal_message(status: Manifest) -> str:
    """The refusal after the mechanism's own words (a webhook's, a policy's)."""
    message = str(status.get("message", ""))
    webhook = PREFIXES[0]
    if webhook in message:
        return message.split(webhook, 1)[1]
    if "ValidatingAdmissionPolicy '" in message:
        return message.split("' denied request: ", 1)[1]
    return message


def admitted_as_it_came(case: PodCase) -> bool:
    """Whether the case is a pod that pod admission would have changed or refused, and
    that the mutating policy, skipped, leaves as it came: a pod of a class in a bound
    namespace (``empty-class`` is refused by validation either way)."""
    return bool(case.runtime_class) and case.namespace == "apps"


# --- what each pod must be (the same both ways, so said once) ------------------------------


def spec_of(admitted: Admitted) -> Manifest:
    assert admitted.status == 201 and admitted.pod is not None, admitted
    spec: Manifest = admitted.pod["spec"]
    return spec


def _label(setup: Setup, class_name: str) -> dict[str, str]:
    return {label_key(DEFAULT_NODE_LABEL_PREFIX, class_name): "true"} if setup.label_nodes else {}


def _routed(scheduler: str = SCHEDULER) -> Callable[[Setup, Admitted], None]:
    def check(setup: Setup, admitted: Admitted) -> None:
        assert spec_of(admitted)["schedulerName"] == scheduler

    return check


def _pod(
    *,
    scheduler: str = SCHEDULER,
    overhead: dict[str, str] | None = None,
    selector: Callable[[Setup], dict[str, str]] = lambda setup: {},
    annotations: Callable[[Setup], dict[str, str]] = lambda setup: {},
    tolerations: Callable[[Setup], list[dict[str, str]]] = lambda setup: [],
) -> Callable[[Setup, Admitted], None]:
    def check(setup: Setup, admitted: Admitted) -> None:
        spec = spec_of(admitted)
        assert spec["schedulerName"] == scheduler
        # By value: kube-apiserver writes a quantity in its canonical form (0.25 as 250m).
        have = spec.get("overhead")
        assert (have is None) == (overhead is None), have
        assert have is None or overhead is None or resource_lists_equal(have, overhead), have
        assert spec.get("nodeSelector", {}) == selector(setup)
        assert admitted.pod is not None
        assert admitted.pod["metadata"].get("annotations", {}) == annotations(setup)
        # Less the ones the API server gives every pod (DefaultTolerationSeconds).
        own = [t for t in spec.get("tolerations", []) if t.get("key") not in DEFAULT_TOLERATIONS]
        assert own == tolerations(setup), own

    return check


# Added to every pod by kube-apiserver's DefaultTolerationSeconds admission plugin.
DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _tolerating(
    *own: dict[str, str], covering: Sequence[dict[str, str]] = ()
) -> Callable[[Setup], list[dict[str, str]]]:
    """A gvisor pod's tolerations: its ``own``, and with the node labels its class's it
    does not carry, nor has one ``covering`` (as the in-tree plugin merges them: the
    autoscalers read them)."""

    def tolerations(setup: Setup) -> list[dict[str, str]]:
        skipped = [*own, *covering]
        added = [t for t in GVISOR_POD_TOLERATIONS if t not in skipped] if setup.label_nodes else []
        return [*own, *added]

    return tolerations


def _marked(setup: Setup) -> dict[str, str]:
    """Without label-nodes, a pod of a class with node rules the autoscalers cannot see
    in it is marked not to be moved (docs/autoscaling.md)."""
    return {} if setup.label_nodes else dict(AUTOSCALER_ANNOTATIONS)


def _invalid(start: str) -> Callable[[Setup, Admitted], None]:
    def check(setup: Setup, admitted: Admitted) -> None:
        assert admitted.status == 422 and admitted.message.startswith(start), admitted

    return check


def _refused(message: str) -> Callable[[Setup, Admitted], None]:
    def check(setup: Setup, admitted: Admitted) -> None:
        assert (admitted.status, admitted.message) == (422, message), admitted

    return check


def agrees_with_the_labeller(setup: Setup, case: PodCase, admitted: Admitted) -> None:
    """A pod of an existing class, admitted, not opted out, whose class name fits a
    label, requires its class's label exactly when the labeller labels nodes for the
    class (``ClassLabels.has_node_rules`` under the setup's policy)."""
    if not setup.label_nodes or admitted.pod is None or case.labels or case.namespace != "apps":
        return
    source = next((rc for rc in CLASSES if rc["metadata"]["name"] == case.runtime_class), None)
    if source is None or case.node_selector:
        return
    labels = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, setup.policy())
    required = labels.key(source["metadata"]["name"]) in admitted.pod["spec"].get("nodeSelector", {})
    assert required == labels.has_node_rules(runtime_class_from_api(source)), case.id


MISMATCH = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
WITHOUT = "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"


def _rules_label(class_name: str) -> Callable[[Setup], dict[str, str]]:
    """The class's label where it has node rules only by the policy (RuntimeHandler)."""
    return lambda setup: _label(setup, class_name) if setup.policy_text else {}


def _gvisor(
    *,
    overhead: dict[str, str] = GVISOR_OVERHEAD,
    selector: Callable[[Setup], dict[str, str]] = lambda s: _label(s, "gvisor"),
    annotations: Callable[[Setup], dict[str, str]] = _marked,
    tolerations: Callable[[Setup], list[dict[str, str]]] | None = None,
    scheduler: str = SCHEDULER,
) -> Callable[[Setup, Admitted], None]:
    """A pod of gvisor as admitted: its overhead, its label (with the node labels) or the
    autoscalers' annotations (without), its class's tolerations (with the node labels)."""
    return _pod(
        scheduler=scheduler,
        overhead=overhead,
        selector=selector,
        annotations=annotations,
        tolerations=tolerations or _tolerating(),
    )


EXPECTED: dict[str, Callable[[Setup, Admitted], None]] = {
    "gvisor": _gvisor(),
    "gvisor-default-scheduler": _gvisor(),
    "gvisor-own-scheduler": _gvisor(scheduler="my-scheduler"),
    "gvisor-routed-already": _gvisor(),
    "gvisor-own-selector": _gvisor(
        selector=lambda s: {"topology.kubernetes.io/zone": "a", **_label(s, "gvisor")}
    ),
    # Its own selector holds the class's whole one (as the in-tree plugin merges it):
    # that holds it to the class's nodes, so it gets no derived label (nor annotations),
    # unless the policy adds rules of its own (RuntimeHandler).
    "gvisor-class-selector": _gvisor(
        selector=lambda s: {**GVISOR_SELECTOR, **_rules_label("gvisor")(s)}, annotations=lambda s: {}
    ),
    "gvisor-own-toleration": _gvisor(tolerations=_tolerating(SANDBOX_TOLERATION)),
    "gvisor-toleration-without-operator": _gvisor(
        tolerations=_tolerating(NO_OPERATOR_TOLERATION, covering=[SANDBOX_TOLERATION])
    ),
    "gvisor-tolerates-every-taint": _gvisor(
        tolerations=_tolerating({"operator": "Exists"}, covering=GVISOR_POD_TOLERATIONS)
    ),
    "gvisor-own-annotations": _gvisor(annotations=lambda s: {**_marked(s), **OWN_ANNOTATIONS}),
    "gvisor-label-given": _gvisor(selector=lambda s: {GVISOR_KEY: "true"}),
    "gvisor-label-conflict": _refused(
        f"conflict: RuntimeClass gvisor requires {GVISOR_KEY} = true; pod.spec.nodeSelector[{GVISOR_KEY}] = false"
    ),
    # Equal by value: kept as the pod wrote it.
    "gvisor-overhead-equal": _gvisor(overhead={"cpu": "0.25", "memory": "67108864"}),
    "gvisor-overhead-differs": _refused(MISMATCH),
    "gvisor-overhead-fewer": _refused(MISMATCH),
    # Not routed, no label; the overhead all the same.
    "gvisor-opt-out-label": _pod(scheduler="default-scheduler", overhead=GVISOR_OVERHEAD),
    # Left out entirely.
    "gvisor-opted-out-namespace": _pod(scheduler="default-scheduler"),
    "gvisor-kube-system": _pod(scheduler="default-scheduler"),
    "gvisor-own-namespace": _pod(scheduler="default-scheduler"),
    "kata": _pod(overhead=KATA_OVERHEAD, selector=_rules_label("kata")),
    "kata-own-scheduler-and-overhead": _pod(
        scheduler="batch", overhead=KATA_OVERHEAD, selector=_rules_label("kata")
    ),
    "term-only": _pod(selector=lambda s: _label(s, "term-only"), annotations=_marked),
    "bad-term": _pod(selector=lambda s: _label(s, "bad-term"), annotations=_marked),
    "plain": _pod(selector=_rules_label("plain")),
    "plain-with-overhead": _refused(WITHOUT),
    "empty-selector": _pod(selector=_rules_label("empty-selector")),
    "empty-overhead-with-overhead": _refused(MISMATCH),
    "empty-overhead": _pod(selector=_rules_label("empty-overhead")),
    # The hashed label: the webhook computes it, and the table names it for the policies.
    "long-class-name": _pod(
        overhead=GVISOR_OVERHEAD, selector=lambda s: _label(s, LONG), annotations=_marked
    ),
    "long-class-name-opt-out": _pod(scheduler="default-scheduler", overhead=GVISOR_OVERHEAD),
    # Routed, so that the extender keeps it pending until the class exists; nothing else.
    "missing-class": _pod(),
    "missing-class-with-overhead": _pod(overhead={"cpu": "100m"}),
    "no-class": _pod(scheduler="default-scheduler"),
    # Not a valid name: refused by the API server's validation, whatever admits pods.
    "empty-class": _invalid('Pod "empty-class" is invalid: spec.runtimeClassName: Invalid value: ""'),
}


def injector_patch(pod: Manifest) -> list[Manifest]:
    """What the injector of ``injector_configuration`` patches into ``pod``: as kata's,
    ``runtimeClassName`` (gvisor) on a pod labelled ``inject-runtimeclass`` that names no
    class; and, as docs/pod-webhook.md asks of such an injector, the ``schedulerName``
    its ``inject-scheduler`` label names."""
    labels = pod["metadata"].get("labels") or {}
    if not labels.get("inject-runtimeclass") or pod["spec"].get("runtimeClassName"):
        return []
    patch = [{"op": "add", "path": "/spec/runtimeClassName", "value": "gvisor"}]
    if "inject-scheduler" in labels:
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": labels["inject-scheduler"]})
    return patch


def injector_configuration(url: str, ca_pem: bytes) -> Manifest:
    """A webhook configuration, as kata's injector has, that sets ``runtimeClassName`` on
    pods labelled ``inject-runtimeclass``: named to be called after the extender's
    (configurations are called in name order), served at ``url`` with ``ca_pem``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "zz-runtimeclass-injector"},
        "webhooks": [
            {
                "name": "inject.runtimeclass.example",
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "reinvocationPolicy": "IfNeeded",
            }
        ],
    }
