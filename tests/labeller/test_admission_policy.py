"""The ValidatingAdmissionPolicy that keeps the extender's node writes to its label
prefix (deploy/components/label-nodes/admission-policy.yaml), evaluated offline.

The API server runs it for real (the denial it gave on kube-apiserver 1.36.2 is
tests/data/fixtures/kube-apiserver/node-patch-denied-by-admission-policy.json, whose
message the table below expects). Here its match condition and validations run on
``common-expression-language`` (cel-rust). That library does not parse CEL's optional
field syntax (``.?labels.orValue({})``), so the two label variables are given as what
they mean (a node's labels, or ``{}`` when it has none); the test first pins their
expressions, so a change there cannot pass unseen.
"""

from __future__ import annotations

import json
from typing import Any

import cel
import pytest
import yaml

from tests.support.paths import FIXTURES, REPO

POLICY_FILE = REPO / "deploy" / "components" / "label-nodes" / "admission-policy.yaml"
PREFIX = "runtimeclass.node-restriction.kubernetes.io/"
EXTENDER = "system:serviceaccount:runtimeclass-extender:runtimeclass-extender"
DENIED = json.loads((FIXTURES / "kube-apiserver" / "node-patch-denied-by-admission-policy.json").read_text())


def policy() -> dict[str, Any]:
    documents = [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]
    (found,) = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"]
    spec: dict[str, Any] = found["spec"]
    return spec


def test_the_variables_are_the_ones_this_test_stands_in_for() -> None:
    variables = {v["name"]: v["expression"] for v in policy()["variables"]}
    assert variables == {
        "prefix": f"'{PREFIX}'",
        "oldL": "request.operation == 'UPDATE' ? oldObject.metadata.?labels.orValue({}) : {}",
        "newL": "request.operation == 'UPDATE' ? object.metadata.?labels.orValue({}) : {}",
    }


def denials(
    old: dict[str, str] | None,
    new: dict[str, str] | None,
    *,
    operation: str = "UPDATE",
    sub_resource: str | None = None,
    spec_change: bool = False,
) -> list[str]:
    """The messages of the validations that fail (empty: allowed)."""
    request: dict[str, Any] = {"operation": operation, "userInfo": {"username": EXTENDER}}
    if sub_resource is not None:
        request["subResource"] = sub_resource
    old_node: dict[str, Any] = {"metadata": {} if old is None else {"labels": old}, "spec": {}}
    new_node: dict[str, Any] = {
        "metadata": {} if new is None else {"labels": new},
        "spec": {"unschedulable": True} if spec_change else {},
    }
    update = operation == "UPDATE"
    context = {
        "request": request,
        "object": new_node,
        "oldObject": old_node,
        "variables": {
            "prefix": PREFIX,
            "oldL": (old or {}) if update else {},
            "newL": (new or {}) if update else {},
        },
    }
    spec = policy()
    (condition,) = spec["matchConditions"]
    assert cel.evaluate(condition["expression"], context) is True
    return [v["message"] for v in spec["validations"] if cel.evaluate(v["expression"], context) is not True]


NOT_CHANGED = "labels outside the prefix may not change or be removed"
NOT_ADDED = "labels outside the prefix may not be added"


@pytest.mark.parametrize(
    ("old", "new", "kwargs", "expected"),
    [
        # What the labeller does: allowed.
        ({"zone": "a"}, {"zone": "a", PREFIX + "gvisor": "true"}, {}, []),
        ({"zone": "a", PREFIX + "gvisor": "true"}, {"zone": "a"}, {}, []),
        ({PREFIX + "gvisor": "false"}, {PREFIX + "gvisor": "true"}, {}, []),
        (None, {PREFIX + "gvisor": "true"}, {}, []),
        # Anything else: denied.
        ({"runtime/gvisor": "true"}, {}, {}, [DENIED["response"]["message"].rsplit(": ", 1)[1]]),
        ({"zone": "a"}, {"zone": "b"}, {}, [NOT_CHANGED]),
        ({}, {"zone": "a"}, {}, [NOT_ADDED]),
        ({"zone": "a"}, {"zone": "a"}, {"spec_change": True}, ["node spec may not change"]),
        (
            {"zone": "a"},
            {"zone": "a"},
            {"sub_resource": "status"},
            ["may only update the node object itself"],
        ),
        (None, None, {"operation": "DELETE"}, ["may only update the node object itself"]),
    ],
    ids=[
        "add-prefixed",
        "remove-prefixed",
        "correct-prefixed",
        "node-without-labels",
        "remove-other",
        "change-other",
        "add-other",
        "spec",
        "status",
        "delete",
    ],
)
def test_only_labels_under_the_prefix_may_change(
    old: dict[str, str] | None, new: dict[str, str] | None, kwargs: dict[str, Any], expected: list[str]
) -> None:
    assert denials(old, new, **kwargs) == expected


def test_the_real_denial_is_the_one_for_a_label_outside_the_prefix() -> None:
    assert DENIED["httpStatus"] == 422
    assert DENIED["response"]["message"].endswith(NOT_CHANGED)
