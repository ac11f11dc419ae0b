"""The built-in predicates (``policies.predicates``) and ``Policy.evaluate``/``explain``.

Sources each case mirrors:
- EXISTS: a pod naming a RuntimeClass that does not exist cannot run anywhere
  (plugin/pkg/admission/runtimeclass rejects it; the kubelet cannot resolve the handler).
- SEL: ``labels.SelectorFromSet`` (k8s.io/apimachinery/pkg/labels), which the RuntimeClass
  admission plugin effectively applies by merging ``scheduling.nodeSelector`` into the pod.
- TT: pkg/scheduler/framework/plugins/tainttoleration (the filter judges NoSchedule and
  NoExecute taints only; PreferNoSchedule is for scoring) with ``ToleratesTaint``.
- NOEXEC: pkg/controller/tainteviction and the kubelet evict on NoExecute reading only
  the pod's own tolerations, so a RuntimeClass toleration cannot admit a pod there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from policies.objects import NodeView, PodView, RuntimeClassView, Taint, Toleration
from policies.predicates import RuntimeClassExists, RuntimeClassNodeSelector, TaintToleration
from policies.registry import POLICY_API_VERSION, POLICY_KIND, Policy, build_policy
from policies.verdict import FITS, Predicate, Verdict

EXISTS = "plugin/pkg/admission/runtimeclass: a missing RuntimeClass is an error"
SEL = "k8s.io/apimachinery/pkg/labels SelectorFromSet"
TT = "pkg/scheduler/framework/plugins/tainttoleration Filter + ToleratesTaint"
NOEXEC = "pkg/controller/tainteviction: NoExecute judged on the pod's own tolerations"

MISMATCH = "node(s) didn't match RuntimeClass"
UNTOLERATED = "node(s) had untolerated taint(s)"

SANDBOX_NOSCHEDULE = Taint("sandbox", "NoSchedule", "true")
SANDBOX_NOEXECUTE = Taint("sandbox", "NoExecute", "true")
TOLERATE_SANDBOX = Toleration("sandbox", "Equal", "true", "NoSchedule")
TOLERATE_SANDBOX_ANY_EFFECT = Toleration("sandbox", "Equal", "true", "")
# What the API server's DefaultTolerationSeconds admission adds to every pod.
DEFAULT_TOLERATIONS = (
    Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    Toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
)

GVISOR = RuntimeClassView(
    name="gvisor",
    handler="runsc",
    node_selector={"runtime/gvisor": "true"},
    tolerations=(TOLERATE_SANDBOX,),
)
GVISOR_ANY_EFFECT = RuntimeClassView(
    name="gvisor",
    handler="runsc",
    node_selector={"runtime/gvisor": "true"},
    tolerations=(TOLERATE_SANDBOX_ANY_EFFECT,),
)
RUNC = RuntimeClassView(name="runc", handler="runc")  # no scheduling at all

PLAIN = NodeView("plain-1", {"kubernetes.io/os": "linux"})
GVISOR_NODE = NodeView("gvisor-1", {"runtime/gvisor": "true"}, (SANDBOX_NOSCHEDULE,))
GVISOR_NOEXECUTE_NODE = NodeView("gvisor-x", {"runtime/gvisor": "true"}, (SANDBOX_NOEXECUTE,))


def pod(runtime_class: str | None = None, *tolerations: Toleration) -> PodView:
    return PodView(name="p", namespace="default", runtime_class_name=runtime_class, tolerations=tolerations)


def node(*taints: Taint, labels: Mapping[str, str] | None = None) -> NodeView:
    return NodeView("n", labels or {}, taints)


# --- RuntimeClassExists ------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_pod", "runtime_class", "expected"),
    [
        pytest.param(pod(None), None, FITS, id="no-runtimeclass"),
        pytest.param(pod(""), None, FITS, id="empty-runtimeclass-name"),
        pytest.param(pod("gvisor"), GVISOR, FITS, id="class-exists"),
        pytest.param(
            pod("gvisor"),
            None,
            Verdict(False, 'RuntimeClass "gvisor" not found', unresolvable=True),
            id="class-missing",
        ),
        pytest.param(
            pod("kata-containers"),
            None,
            Verdict(False, 'RuntimeClass "kata-containers" not found', unresolvable=True),
            id="class-missing-name-in-reason",
        ),
    ],
)
def test_runtime_class_exists(
    the_pod: PodView, runtime_class: RuntimeClassView | None, expected: Verdict
) -> None:
    verdict = RuntimeClassExists().check(the_pod, runtime_class, PLAIN)
    assert verdict._replace(detail="") == expected, EXISTS
    if not verdict.fits:
        assert str(the_pod.runtime_class_name) in verdict.detail


# --- RuntimeClassNodeSelector ------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime_class", "the_node", "fits", "detail"),
    [
        pytest.param(None, PLAIN, True, "", id="no-runtimeclass-passes-everywhere"),
        pytest.param(RUNC, PLAIN, True, "", id="class-without-scheduling-passes"),
        pytest.param(RUNC, GVISOR_NODE, True, "", id="class-without-scheduling-passes-tainted"),
        pytest.param(GVISOR, GVISOR_NODE, True, "", id="selector-matches"),
        pytest.param(
            GVISOR,
            NodeView("g", {"runtime/gvisor": "true", "e2e/bad": "true", "kubernetes.io/os": "linux"}),
            True,
            "",
            id="extra-labels-fine",
        ),
        pytest.param(GVISOR, PLAIN, False, "missing label runtime/gvisor=true", id="label-missing"),
        pytest.param(
            GVISOR,
            NodeView("g", {"runtime/gvisor": "false"}),
            False,
            "label runtime/gvisor is 'false', not 'true'",
            id="label-other-value",
        ),
    ],
)
def test_runtime_class_node_selector(
    runtime_class: RuntimeClassView | None, the_node: NodeView, fits: bool, detail: str
) -> None:
    the_pod = pod(runtime_class.name if runtime_class else None)
    verdict = RuntimeClassNodeSelector().check(the_pod, runtime_class, the_node)
    if fits:
        assert verdict == FITS, SEL
    else:
        # The reason is the same for every node (kube-scheduler counts identical
        # strings); which label was wrong goes to the detail.
        assert verdict == Verdict(False, MISMATCH, unresolvable=True, detail=detail), SEL


def test_node_selector_fails_closed_on_unreadable_class() -> None:
    broken = RuntimeClassView(
        name="broken", handler="runsc", selector_error="matchExpressions[0]: bad operator"
    )
    verdict = RuntimeClassNodeSelector().check(pod("broken"), broken, GVISOR_NODE)
    assert verdict == Verdict(
        False,
        'RuntimeClass "broken" has an invalid node selector annotation',
        unresolvable=True,
        detail="matchExpressions[0]: bad operator",
    )


# --- TaintToleration ---------------------------------------------------------------


@dataclass(frozen=True)
class TaintCase:
    id: str
    pod: PodView
    runtime_class: RuntimeClassView | None
    node: NodeView
    fits: bool
    rule: str
    # Substrings the detail must name when the node fails (the taint, and why).
    detail_mentions: tuple[str, ...] = field(default=())


TAINT_CASES = [
    TaintCase("untainted-node", pod(), None, node(), True, TT),
    TaintCase("prefer-noschedule-ignored", pod(), None, node(Taint("k", "PreferNoSchedule", "v")), True, TT),
    TaintCase(
        "prefer-noschedule-ignored-with-class",
        pod("gvisor"),
        GVISOR,
        node(Taint("x", "PreferNoSchedule")),
        True,
        TT,
    ),
    TaintCase("unknown-effect-ignored", pod(), None, node(Taint("k", "SomeFutureEffect", "v")), True, TT),
    TaintCase(
        "noschedule-untolerated",
        pod(),
        None,
        node(SANDBOX_NOSCHEDULE),
        False,
        TT,
        ("sandbox=true:NoSchedule",),
    ),
    TaintCase(
        "noschedule-tolerated-by-pod", pod(None, TOLERATE_SANDBOX), None, node(SANDBOX_NOSCHEDULE), True, TT
    ),
    TaintCase("noschedule-tolerated-by-class", pod("gvisor"), GVISOR, node(SANDBOX_NOSCHEDULE), True, TT),
    TaintCase(
        "noschedule-class-tolerates-other-value",
        pod("gvisor"),
        GVISOR,
        node(Taint("sandbox", "NoSchedule", "false")),
        False,
        TT,
        ("sandbox=false:NoSchedule",),
    ),
    TaintCase(
        "noexecute-class-toleration-alone-not-enough",
        pod("gvisor"),
        GVISOR_ANY_EFFECT,
        node(SANDBOX_NOEXECUTE),
        False,
        NOEXEC,
        ("sandbox=true:NoExecute", "NoExecute needs the pod's own toleration"),
    ),
    TaintCase(
        "noexecute-class-noschedule-toleration-does-not-apply",
        pod("gvisor"),
        GVISOR,
        node(SANDBOX_NOEXECUTE),
        False,
        TT,
        ("sandbox=true:NoExecute",),
    ),
    TaintCase(
        "noexecute-tolerated-by-pod",
        pod("gvisor", Toleration("sandbox", "Exists", "", "NoExecute")),
        GVISOR,
        node(SANDBOX_NOEXECUTE),
        True,
        NOEXEC,
    ),
    TaintCase(
        "noexecute-pod-and-class",
        pod("gvisor", TOLERATE_SANDBOX_ANY_EFFECT),
        GVISOR_ANY_EFFECT,
        node(SANDBOX_NOEXECUTE),
        True,
        NOEXEC,
    ),
    TaintCase(
        "noexecute-untolerated-no-class",
        pod(),
        None,
        node(SANDBOX_NOEXECUTE),
        False,
        TT,
        ("sandbox=true:NoExecute",),
    ),
    TaintCase(
        "default-tolerations-cover-not-ready",
        pod(None, *DEFAULT_TOLERATIONS),
        None,
        node(Taint("node.kubernetes.io/not-ready", "NoExecute")),
        True,
        TT,
    ),
    # A pod without runtimeClassName is still judged on taints, with its own tolerations.
    TaintCase(
        "no-runtimeclass-tainted-untolerated",
        pod(None, *DEFAULT_TOLERATIONS),
        None,
        GVISOR_NODE,
        False,
        TT,
        ("sandbox=true:NoSchedule",),
    ),
    TaintCase("no-runtimeclass-own-toleration", pod(None, TOLERATE_SANDBOX), None, GVISOR_NODE, True, TT),
    # A class without scheduling adds no tolerations.
    TaintCase(
        "class-without-scheduling-tainted",
        pod("runc"),
        RUNC,
        GVISOR_NODE,
        False,
        TT,
        ("sandbox=true:NoSchedule",),
    ),
    TaintCase(
        "class-without-scheduling-own-toleration", pod("runc", TOLERATE_SANDBOX), RUNC, GVISOR_NODE, True, TT
    ),
    # Every filtered taint must be tolerated, by whichever source may tolerate it.
    TaintCase(
        "two-taints-one-untolerated",
        pod("gvisor"),
        GVISOR,
        node(SANDBOX_NOSCHEDULE, Taint("gpu", "NoSchedule", "true")),
        False,
        TT,
        ("gpu=true:NoSchedule",),
    ),
    TaintCase(
        "two-taints-pod-and-class",
        pod("gvisor", Toleration("gpu", "Exists", "", "NoSchedule")),
        GVISOR,
        node(SANDBOX_NOSCHEDULE, Taint("gpu", "NoSchedule", "true")),
        True,
        TT,
    ),
    TaintCase(
        "noschedule-and-noexecute-class-only",
        pod("gvisor"),
        GVISOR_ANY_EFFECT,
        node(SANDBOX_NOSCHEDULE, SANDBOX_NOEXECUTE),
        False,
        NOEXEC,
        ("sandbox=true:NoExecute",),
    ),
    TaintCase(
        "wildcard-pod-toleration",
        pod(None, Toleration("", "Exists")),
        None,
        node(SANDBOX_NOSCHEDULE, SANDBOX_NOEXECUTE, Taint("x", "NoSchedule")),
        True,
        TT,
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in TAINT_CASES])
def test_taint_toleration(case: TaintCase) -> None:
    verdict = TaintToleration().check(case.pod, case.runtime_class, case.node)
    if case.fits:
        assert verdict == FITS, case.rule
        return
    assert (verdict.fits, verdict.reason, verdict.unresolvable) == (False, UNTOLERATED, True), case.rule
    for text in case.detail_mentions:
        assert text in verdict.detail, (case.rule, verdict.detail)


def test_untolerated_detail_names_only_the_untolerated_taint() -> None:
    verdict = TaintToleration().check(
        pod("gvisor"), GVISOR, node(SANDBOX_NOSCHEDULE, Taint("gpu", "NoSchedule", "true"))
    )
    assert "gpu=true:NoSchedule" in verdict.detail
    assert "sandbox" not in verdict.detail


# --- Policy.evaluate and Policy.explain --------------------------------------------


def policy(*names: str) -> Policy:
    return build_policy(
        {"apiVersion": POLICY_API_VERSION, "kind": POLICY_KIND, "predicates": [{"name": n} for n in names]}
    )


DEFAULT_ORDER = ("RuntimeClassExists", "RuntimeClassNodeSelector", "TaintToleration")
# Fails the selector (no runtime/gvisor label) and the taint (gpu, untolerated).
BAD_NODE = NodeView("bad", {"kubernetes.io/os": "linux"}, (Taint("gpu", "NoSchedule", "true"),))


@pytest.mark.parametrize(
    ("order", "the_pod", "runtime_class", "expected_reason"),
    [
        pytest.param(DEFAULT_ORDER, pod("gvisor"), GVISOR, MISMATCH, id="selector-first"),
        pytest.param(
            ("TaintToleration", "RuntimeClassNodeSelector", "RuntimeClassExists"),
            pod("gvisor"),
            GVISOR,
            UNTOLERATED,
            id="taint-first",
        ),
        pytest.param(
            DEFAULT_ORDER, pod("gone"), None, 'RuntimeClass "gone" not found', id="missing-class-first"
        ),
        pytest.param(
            ("TaintToleration", "RuntimeClassExists"),
            pod("gone"),
            None,
            UNTOLERATED,
            id="missing-class-after-taint",
        ),
        pytest.param(("RuntimeClassNodeSelector",), pod("gone"), None, None, id="missing-class-unchecked"),
    ],
)
def test_evaluate_reports_first_failure_in_policy_order(
    order: tuple[str, ...],
    the_pod: PodView,
    runtime_class: RuntimeClassView | None,
    expected_reason: str | None,
) -> None:
    verdict = policy(*order).evaluate(the_pod, runtime_class, BAD_NODE)
    if expected_reason is None:
        assert verdict == FITS
    else:
        assert (verdict.fits, verdict.reason) == (False, expected_reason)


def test_evaluate_fits_when_every_predicate_fits() -> None:
    assert policy(*DEFAULT_ORDER).evaluate(pod("gvisor"), GVISOR, GVISOR_NODE) == FITS


def test_empty_policy_fits_everything() -> None:
    assert policy().evaluate(pod("gone"), None, BAD_NODE) == FITS


@dataclass(frozen=True)
class Recording:
    """A plugin-style predicate that remembers it was asked."""

    name: str
    fits: bool
    calls: list[str] = field(default_factory=list)

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        self.calls.append(node.name)
        return FITS if self.fits else Verdict(False, f"{self.name} says no", detail=node.name)


def test_evaluate_stops_at_first_failure() -> None:
    first, second, third = Recording("A", True), Recording("B", False), Recording("C", False)
    predicates: tuple[Predicate, ...] = (first, second, third)
    verdict = Policy(predicates).evaluate(pod(), None, PLAIN)
    assert verdict == Verdict(False, "B says no", detail="plain-1")
    assert (first.calls, second.calls, third.calls) == (["plain-1"], ["plain-1"], [])


def test_explain_reports_every_predicate_in_order() -> None:
    explained = policy(*DEFAULT_ORDER).explain(pod("gvisor"), GVISOR, BAD_NODE)
    assert [name for name, _ in explained] == list(DEFAULT_ORDER)
    summary: list[tuple[str, Any]] = [(name, (v.fits, v.reason)) for name, v in explained]
    assert summary == [
        ("RuntimeClassExists", (True, "")),
        ("RuntimeClassNodeSelector", (False, MISMATCH)),
        ("TaintToleration", (False, UNTOLERATED)),
    ]
    assert "runtime/gvisor" in explained[1][1].detail
    assert "gpu=true:NoSchedule" in explained[2][1].detail


def test_explain_runs_all_predicates_even_after_a_failure() -> None:
    first, second = Recording("A", False), Recording("B", True)
    explained = Policy((first, second)).explain(pod(), None, PLAIN)
    assert [(name, v.fits) for name, v in explained] == [("A", False), ("B", True)]
    assert second.calls == ["plain-1"]
