"""Label matching for RuntimeClass ``scheduling.nodeSelector``.

A RuntimeClass node selector is a plain map: it matches a node when every key is a
node label with exactly that value, like ``labels.SelectorFromSet`` in
k8s.io/apimachinery/pkg/labels (an empty map matches every node; extra node labels
are fine).
"""

from __future__ import annotations

from collections.abc import Mapping


def selector_mismatches(selector: Mapping[str, str], labels: Mapping[str, str]) -> list[str]:
    """Human-readable reasons why ``labels`` do not satisfy ``selector``; empty when they do."""
    problems: list[str] = []
    for key, wanted in selector.items():
        actual = labels.get(key)
        if actual is None:
            problems.append(f"missing label {key}={wanted}")
        elif actual != wanted:
            problems.append(f"label {key} is {actual!r}, not {wanted!r}")
    return problems
