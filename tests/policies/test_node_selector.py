"""RuntimeClass ``scheduling.nodeSelector`` matching (``policies.node_selector``).

A RuntimeClass node selector is a map; Kubernetes turns it into a selector with
``labels.SelectorFromSet`` (k8s.io/apimachinery/pkg/labels/selector.go): one ``=``
requirement per key, all ANDed. A ``=`` requirement needs the key present
(``Requirement.Matches``: "if !ls.Has(r.key) return false") with exactly that value; an
empty set selects everything; labels the selector does not mention are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from policies.node_selector import selector_mismatches

SFS = "k8s.io/apimachinery/pkg/labels SelectorFromSet"

CASES = [
    pytest.param({}, {}, [], id="empty-selector-no-labels"),
    pytest.param({}, {"a": "1", "kubernetes.io/os": "linux"}, [], id="empty-selector-any-labels"),
    pytest.param({"runtime/gvisor": "true"}, {"runtime/gvisor": "true"}, [], id="exact"),
    pytest.param(
        {"runtime/gvisor": "true"},
        {"runtime/gvisor": "true", "kubernetes.io/os": "linux", "e2e/bad": "true"},
        [],
        id="extra-node-labels-fine",
    ),
    pytest.param(
        {"a": "1", "b": "2"},
        {"b": "2", "a": "1", "c": "3"},
        [],
        id="all-keys-any-order",
    ),
    pytest.param(
        {"runtime/gvisor": "true"},
        {"kubernetes.io/os": "linux"},
        ["missing label runtime/gvisor=true"],
        id="key-missing",
    ),
    pytest.param(
        {"runtime/gvisor": "true"},
        {"runtime/gvisor": "false"},
        ["label runtime/gvisor is 'false', not 'true'"],
        id="value-differs",
    ),
    pytest.param(
        {"runtime/gvisor": "true"},
        {"runtime/gvisor": "True"},
        ["label runtime/gvisor is 'True', not 'true'"],
        id="value-case-sensitive",
    ),
    pytest.param(
        {"Runtime/gvisor": "true"},
        {"runtime/gvisor": "true"},
        ["missing label Runtime/gvisor=true"],
        id="key-case-sensitive",
    ),
    # An empty value still needs the key: "k=" does not select nodes without "k".
    pytest.param({"k": ""}, {"k": ""}, [], id="empty-value-present"),
    pytest.param({"k": ""}, {}, ["missing label k="], id="empty-value-key-absent"),
    pytest.param({"k": ""}, {"k": "x"}, ["label k is 'x', not ''"], id="empty-value-vs-value"),
    pytest.param(
        {"a": "1", "b": "2", "c": "3"},
        {"a": "1", "b": "9"},
        ["label b is '9', not '2'", "missing label c=3"],
        id="every-failing-key-reported",
    ),
]


@pytest.mark.parametrize(("selector", "labels", "problems"), CASES)
def test_selector_mismatches(
    selector: Mapping[str, str], labels: Mapping[str, str], problems: list[str]
) -> None:
    assert selector_mismatches(selector, labels) == problems, SFS
