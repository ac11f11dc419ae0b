"""The derived node labels (extender/cluster/class_labels.py): names, which classes get
one, and the patch that brings a node in line, touching nothing outside the prefix."""

from __future__ import annotations

import re
from types import MappingProxyType

import pytest

from extender.cluster.class_labels import LABEL_VALUE, ClassLabels, label_key, label_name, node_rules
from extender.policy_file import load_policy
from policies.objects import NodeView, RuntimeClassView, RuntimeHandler, SelectorRequirement
from policies.registry import build_policy

PREFIX = "runtimeclass.node-restriction.kubernetes.io"
# apimachinery/pkg/util/validation/validation.go: qualifiedNameFmt, qualifiedNameMaxLength.
LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
# RuntimeClass names are DNS subdomains (apimachinery IsDNS1123Subdomain).
LONG = "a" * 40 + "." + "b" * 40 + ".sandbox-runtime.example.com"

POLICY = load_policy()
WITH_HANDLERS = build_policy(
    {
        "apiVersion": "runtimeclass-extender.dev/v1alpha1",
        "kind": "Policy",
        "predicates": [
            {"name": "RuntimeClassExists"},
            {"name": "RuntimeClassNodeSelector"},
            {"name": "RuntimeHandler", "options": {"nodesWithoutReport": "fail"}},
            {"name": "TaintToleration"},
        ],
    }
)


def rc(name: str = "gvisor", *, selector: dict[str, str] | None = None, **kwargs: object) -> RuntimeClassView:
    return RuntimeClassView(
        name=name,
        handler=str(kwargs.pop("handler", "runsc")),
        node_selector=MappingProxyType(selector or {}),
        **kwargs,  # type: ignore[arg-type]
    )


def node(name: str = "n1", handlers: tuple[str, ...] | None = None, **labels: str) -> NodeView:
    return NodeView(
        name=name,
        labels=MappingProxyType({k.replace("__", "/").replace("_", "."): v for k, v in labels.items()}),
        runtime_handlers=None if handlers is None else tuple(RuntimeHandler(h) for h in handlers),
    )


@pytest.mark.parametrize(
    ("class_name", "expected"),
    [
        ("gvisor", "gvisor"),
        ("kata.containers-2", "kata.containers-2"),
        ("x" * 63, "x" * 63),
    ],
)
def test_a_name_that_fits_is_the_label_name(class_name: str, expected: str) -> None:
    assert label_name(class_name) == expected


def test_a_long_name_gets_a_hashed_form_that_is_a_valid_label_name_and_cannot_be_a_class_name() -> None:
    hashed = label_name(LONG)
    assert len(hashed) == 63 and LABEL_NAME.fullmatch(hashed)
    assert "_" in hashed  # never in a RuntimeClass name, so never equal to one
    assert hashed.startswith(LONG[:46])
    assert label_name(LONG) == hashed  # stable
    # Two long names that share their first 46 characters still get two labels.
    assert label_name(LONG + "x") != hashed
    assert label_name("x" * 64) != label_name("x" * 63)
    assert label_key(PREFIX, "gvisor") == f"{PREFIX}/gvisor"


def test_node_rules_are_the_predicates_that_read_only_the_class() -> None:
    assert [p.name for p in node_rules(POLICY)] == ["RuntimeClassExists", "RuntimeClassNodeSelector"]
    assert "RuntimeHandler" in [p.name for p in node_rules(WITH_HANDLERS)]
    assert "TaintToleration" not in [p.name for p in node_rules(WITH_HANDLERS)]


@pytest.mark.parametrize(
    ("runtime_class", "policy", "labelled"),
    [
        (rc(selector={"sandbox": "gvisor"}), POLICY, True),
        (rc(match_expressions=(SelectorRequirement("zone", "In", ("a",)),)), POLICY, True),
        (rc(selector_error="bad annotation"), POLICY, True),  # fails closed: labelled on no node
        (rc(), POLICY, False),  # selects every node: a label would narrow nothing
        (rc(), WITH_HANDLERS, True),  # the handler check is a node rule of every class
    ],
    ids=["selector", "annotation", "malformed-annotation", "no-rules", "handler-check"],
)
def test_which_classes_get_a_label(runtime_class: RuntimeClassView, policy: object, labelled: bool) -> None:
    labels = ClassLabels(PREFIX, policy)  # type: ignore[arg-type]
    assert labels.has_node_rules(runtime_class) is labelled
    assert (f"{PREFIX}/gvisor" in labels.labelled([runtime_class])) is labelled


GVISOR = rc(selector={"sandbox": "gvisor"})
KATA = rc("kata", selector={"sandbox": "kata"}, handler="kata")
KEY_G, KEY_K = f"{PREFIX}/gvisor", f"{PREFIX}/kata"


@pytest.mark.parametrize(
    ("labels", "patch"),
    [
        ({"sandbox": "gvisor"}, {KEY_G: LABEL_VALUE}),
        ({"sandbox": "gvisor", KEY_G: "true"}, {}),
        ({"sandbox": "runc", KEY_G: "true"}, {KEY_G: None}),
        ({"sandbox": "gvisor", KEY_G: "false"}, {KEY_G: LABEL_VALUE}),  # a value edited by hand
        ({"sandbox": "kata", KEY_G: "true"}, {KEY_G: None, KEY_K: LABEL_VALUE}),
        ({f"{PREFIX}/deleted-class": "true"}, {f"{PREFIX}/deleted-class": None}),
        # Outside the prefix nothing is ever touched, not even a look-alike.
        ({"other.example.com/gvisor": "true", f"x{PREFIX}/gvisor": "true"}, {}),
    ],
    ids=["add", "in-sync", "remove", "correct-value", "move", "unexplained", "not-ours"],
)
def test_the_patch_brings_the_prefix_in_line_and_nothing_else(
    labels: dict[str, str], patch: dict[str, str | None]
) -> None:
    plan = ClassLabels(PREFIX, POLICY)
    view = NodeView(name="n1", labels=MappingProxyType(labels))
    assert plan.patch(view, plan.labelled([GVISOR, KATA])) == patch


def test_taints_stay_the_extenders_business() -> None:
    from policies.objects import Taint

    plan = ClassLabels(PREFIX, POLICY)
    tainted = NodeView(
        name="n1",
        labels=MappingProxyType({"sandbox": "gvisor"}),
        taints=(Taint("sandbox", "NoSchedule", "gvisor"),),
    )
    assert plan.patch(tainted, plan.labelled([GVISOR])) == {KEY_G: LABEL_VALUE}


def test_the_handler_check_labels_only_nodes_that_report_the_handler() -> None:
    plan = ClassLabels(PREFIX, WITH_HANDLERS)
    labelled = plan.labelled([rc()])
    assert plan.patch(node("a", ("runsc", "runc")), labelled) == {KEY_G: LABEL_VALUE}
    assert plan.patch(node("b", ("runc",)), labelled) == {}
    assert plan.patch(node("c"), labelled) == {}  # reports none; the policy says fail
