"""Derived node labels (``serve --label-nodes``): which nodes carry each RuntimeClass's label.

Why: kube-scheduler counts its node sample only among nodes that pass every in-tree
filter, and extenders run after (``findNodesThatPassFilters``,
pkg/scheduler/schedule_one.go). A label that exactly the nodes fitting a class carry,
required by the class's pods (the pod webhook adds it to ``spec.nodeSelector``), makes
the in-tree NodeAffinity filter narrow the candidates first, so a scarce class reaches
the extender whole at the adaptive sampling percentage.

The label: ``<prefix>/<class>: "true"``. The default prefix lies under
``node-restriction.kubernetes.io/``, which kubelets cannot set or remove while the
NodeRestriction admission plugin is on (``getForbiddenLabels``,
plugin/pkg/admission/noderestriction/admission.go), so a node cannot claim a class.
A label name is at most 63 characters (``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``,
apimachinery/pkg/util/validation/validation.go ``IsQualifiedName``); a RuntimeClass name
is a DNS subdomain of up to 253, so a longer one gets a hashed form with a ``_``, which
no RuntimeClass name contains: it cannot collide with a real name.

Which nodes: those that pass the class's **node rules**, the policy's predicates that
read nothing of the pod but its class (``pod_inputs``, policies/verdict.py):
``scheduling.nodeSelector``, the node-selector-term annotation, the runtime-handler
check when the policy has it. Taints stay the extender's business (tolerations are
the pod's). A class whose rules select every node (no selector, no annotation, no
other node rule in the policy) gets no label: requiring it would narrow nothing. A
class whose annotation is malformed fails closed: its label is on no node.

**A requirement once given out stays satisfiable.** The pod webhook writes the label
into ``spec.nodeSelector``, which is immutable. If a class later loses its node rules,
the pods admitted before still require its label, and a kubelet re-admits its running
pods against their node selectors when it restarts; removing the label would leave
those pods pending (or rejected) for good, with nothing naming the class. So a class
without node rules whose label is still *in use* (some node carries it, or some
pending pod requires it) keeps being labelled, on every node (all pass its rules),
until the class is deleted (its pods then meet the RuntimeClass-not-found message).

Pure: views and a policy in, label keys and patches out. The leader writes them
(``extender.labeller``); the pod webhook requires them (``extender.admission``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping

from policies.objects import NodeView, PodView, RuntimeClassView
from policies.predicates import RuntimeClassExists, RuntimeClassNodeSelector
from policies.registry import Policy
from policies.verdict import POD_INPUTS_ATTR, Predicate

LABEL_VALUE = "true"
# IsQualifiedName's name part.
MAX_LABEL_NAME = 63
# Of a hashed name: the class name's first characters, "_", 16 hex digits of SHA-256.
_HASHED_HEAD = MAX_LABEL_NAME - 1 - 16

_CLASS_ONLY = frozenset({"runtime_class_name"})
# Predicates whose node rules come from the class itself (selector, annotation): a
# class without those passes them on every node.
_PER_CLASS_RULES = (RuntimeClassExists, RuntimeClassNodeSelector)


def _never(_key: str) -> bool:
    return False


def label_name(class_name: str) -> str:
    """The label's name part for a class: the class name, or a hashed form past 63."""
    if len(class_name) <= MAX_LABEL_NAME:
        return class_name
    digest = hashlib.sha256(class_name.encode()).hexdigest()[:16]
    return f"{class_name[:_HASHED_HEAD]}_{digest}"


def label_key(prefix: str, class_name: str) -> str:
    return f"{prefix}/{label_name(class_name)}"


def node_rules(policy: Policy) -> tuple[Predicate, ...]:
    """The policy's predicates that judge a node for a class alone (a predicate that
    does not declare what it reads of the pod is not one: it may read tolerations)."""
    return tuple(p for p in policy.predicates if _reads_only_the_class(p))


def _reads_only_the_class(predicate: Predicate) -> bool:
    inputs = getattr(predicate, POD_INPUTS_ATTR, None)
    return isinstance(inputs, frozenset) and inputs <= _CLASS_ONLY


class ClassLabels:
    """The label each class asks for, and the labels each node should carry."""

    def __init__(self, prefix: str, policy: Policy) -> None:
        self.prefix = prefix
        self._owned = prefix + "/"
        self._rules = node_rules(policy)
        # A rule beyond the class's own selector (the runtime-handler check, a plugin)
        # judges every class's nodes: then every class has node rules.
        self._policy_has_node_rules = any(not isinstance(p, _PER_CLASS_RULES) for p in self._rules)
        self._handler_rule = any(p.name == "RuntimeHandler" for p in self._rules)
        # The pod a class's node rules are judged with (they read nothing else of it).
        self._pods: dict[str, PodView] = {}

    def has_node_rules(self, runtime_class: RuntimeClassView) -> bool:
        return bool(
            self._policy_has_node_rules
            or runtime_class.node_selector
            or runtime_class.match_expressions is not None
            or runtime_class.match_fields
            or runtime_class.selector_error is not None
        )

    def visible_selector(self, runtime_class: RuntimeClassView) -> Mapping[str, str] | None:
        """The class's node rules as a pod's ``nodeSelector`` can carry them (what an
        autoscaler, which simulates the in-tree filters and never calls the extender,
        can see): its ``scheduling.nodeSelector`` when that is all of its node rules;
        None when some rule is beyond a selector (the annotation, a rule of the
        policy) or the class has none."""
        if self._policy_has_node_rules or not runtime_class.node_selector:
            return None
        if runtime_class.match_expressions is not None or runtime_class.match_fields:
            return None
        if runtime_class.selector_error is not None:
            return None
        return runtime_class.node_selector

    def key(self, class_name: str) -> str:
        return label_key(self.prefix, class_name)

    def describe(self, runtime_class: RuntimeClassView) -> str:
        return describe_rules(runtime_class, handler_rule=self._handler_rule)

    def fits_any(self, runtime_class: RuntimeClassView, nodes: Iterable[NodeView]) -> bool:
        """Some node passes the class's node rules (stops at the first)."""
        return any(self.passes(runtime_class, node) for node in nodes)

    def labelled(
        self, runtime_classes: Iterable[RuntimeClassView], in_use: Callable[[str], bool] = _never
    ) -> dict[str, RuntimeClassView]:
        """The classes that get a label, by label key: those with node rules, and those
        without whose label ``in_use`` says is still required (see the module doc)."""
        result = {}
        for rc in runtime_classes:
            key = self.key(rc.name)
            if self.has_node_rules(rc) or in_use(key):
                result[key] = rc
        return result

    def rules_key(self, runtime_class: RuntimeClassView | None) -> Hashable:
        """What of a class decides which nodes carry its label (an edit that leaves it
        as it was, of the class's labels or annotations say, moves no label)."""
        if runtime_class is None:
            return None
        return (
            tuple(sorted(runtime_class.node_selector.items())),
            runtime_class.match_expressions,
            runtime_class.match_fields,
            runtime_class.selector_error,
            runtime_class.handler if self._handler_rule else None,
        )

    def passes(self, runtime_class: RuntimeClassView, node: NodeView) -> bool:
        # A full compare runs this for every node and class (300,000 times at 15,000
        # nodes x 20 classes): the class's pod is made once, and the rules are looped
        # plainly (a generator for all() made it twice as slow).
        pod = self._pods.get(runtime_class.name)
        if pod is None:
            pod = self._pods[runtime_class.name] = PodView(runtime_class_name=runtime_class.name)
        for rule in self._rules:  # noqa: SIM110
            if not rule.check(pod, runtime_class, node).fits:
                return False
        return True

    def owned(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The node's labels under the prefix."""
        return {k: v for k, v in labels.items() if k.startswith(self._owned)}

    def desired(self, node: NodeView, labelled: Mapping[str, RuntimeClassView]) -> frozenset[str]:
        """The keys the node should carry."""
        return frozenset(key for key, rc in labelled.items() if self.passes(rc, node))

    def patch(
        self,
        node: NodeView,
        labelled: Mapping[str, RuntimeClassView],
        keys: Collection[str] | None = None,
    ) -> dict[str, str | None]:
        """The labels to set (``"true"``) and remove (``None``) under the prefix, as a
        JSON merge patch of ``metadata.labels`` takes them; empty when in sync. A label
        under the prefix that no class explains (a deleted or renamed class, a value
        edited by hand) is removed or corrected; nothing outside the prefix is touched.
        With ``keys``, only those label keys are compared (the classes that changed)."""
        if keys is None:
            want = self.desired(node, labelled)
            have = self.owned(node.labels)
        else:
            want = frozenset(k for k in keys if k in labelled and self.passes(labelled[k], node))
            have = {k: v for k in keys if (v := node.labels.get(k)) is not None}
        changes: dict[str, str | None] = {key: None for key in have if key not in want}
        changes.update({key: LABEL_VALUE for key in want if have.get(key) != LABEL_VALUE})
        return changes


def describe_rules(runtime_class: RuntimeClassView, *, handler_rule: bool) -> str:
    """The class's node rules in words, for an event's note ("scheduling.nodeSelector
    runtime/pool=b and runtime handler "runsc""): what an operator compares with the
    nodes' labels."""
    if runtime_class.selector_error is not None:
        return f"its node-selector-term annotation, which is invalid ({runtime_class.selector_error})"
    parts = []
    if runtime_class.node_selector:
        pairs = ",".join(f"{k}={v}" for k, v in sorted(runtime_class.node_selector.items()))
        parts.append(f"scheduling.nodeSelector {pairs}")
    if runtime_class.match_expressions is not None or runtime_class.match_fields:
        parts.append("the node-selector-term annotation")
    if handler_rule:
        parts.append(f'runtime handler "{runtime_class.handler}"')
    return " and ".join(parts) or "its node rules"
