"""Which predicates run, in which order, with which options.

A policy document (the parsed policy file) names predicates; names resolve to
factories ``factory(options) -> Predicate``. Built-in factories are listed here;
third parties add theirs through the ``runtimeclass_extender.predicates`` entry-point
group without touching this package. Finding entry points reads installed package
metadata, so the caller passes them in: this module stays free of I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.objects import NodeView, PodView, RuntimeClassView
from policies.predicates import runtime_class_exists, runtime_class_node_selector, taint_toleration
from policies.runtime_handler import runtime_handler
from policies.verdict import FITS, Predicate, Verdict

ENTRY_POINT_GROUP = "runtimeclass_extender.predicates"
POLICY_API_VERSION = "runtimeclass-extender.dev/v1alpha1"
POLICY_KIND = "Policy"

PredicateFactory = Callable[[Mapping[str, Any]], Predicate]

BUILTIN_FACTORIES: Mapping[str, PredicateFactory] = {
    "RuntimeClassExists": runtime_class_exists,
    "RuntimeClassNodeSelector": runtime_class_node_selector,
    "TaintToleration": taint_toleration,
    "RuntimeHandler": runtime_handler,
}


class PolicyError(ValueError):
    """The policy document is invalid; the message names the offending entry."""


@dataclass(frozen=True)
class Policy:
    """An ordered set of predicates."""

    predicates: tuple[Predicate, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.predicates)

    def evaluate(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        """The first failing predicate's verdict, or FITS (the filter's answer)."""
        for predicate in self.predicates:
            verdict = predicate.check(pod, runtime_class, node)
            if not verdict.fits:
                return verdict
        return FITS

    def explain(
        self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView
    ) -> list[tuple[str, Verdict]]:
        """Every predicate's verdict, failing or not, in policy order."""
        return [(p.name, p.check(pod, runtime_class, node)) for p in self.predicates]


def build_policy(
    document: Any, *, extra_factories: Mapping[str, PredicateFactory] | None = None, source: str = "policy"
) -> Policy:
    """Validate a parsed policy document and instantiate its predicates."""
    factories = dict(BUILTIN_FACTORIES)
    for name, factory in (extra_factories or {}).items():
        if name in BUILTIN_FACTORIES:
            raise PolicyError(f"{source}: plugin predicate {name!r} clashes with a built-in predicate")
        factories[name] = factory

    if not isinstance(document, Mapping):
        raise PolicyError(f"{source}: expected a mapping with apiVersion, kind and predicates")
    unknown = set(document) - {"apiVersion", "kind", "predicates"}
    if unknown:
        raise PolicyError(f"{source}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    if document.get("apiVersion") != POLICY_API_VERSION or document.get("kind") != POLICY_KIND:
        raise PolicyError(f"{source}: expected apiVersion {POLICY_API_VERSION} and kind {POLICY_KIND}")
    entries = document.get("predicates")
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        raise PolicyError(f"{source}: predicates must be a list")

    predicates: list[Predicate] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"{source}: predicates[{index}]"
        if not isinstance(entry, Mapping):
            raise PolicyError(f"{where}: expected a mapping with name, enabled, options")
        extra = set(entry) - {"name", "enabled", "options"}
        if extra:
            raise PolicyError(f"{where}: unknown field(s) {', '.join(sorted(map(str, extra)))}")
        entry_name = entry.get("name")
        if not isinstance(entry_name, str) or entry_name not in factories:
            known = ", ".join(sorted(factories))
            raise PolicyError(f"{where}: unknown predicate {entry_name!r}; known: {known}")
        name = entry_name
        if name in seen:
            raise PolicyError(f"{where}: predicate {name} is listed twice")
        seen.add(name)
        enabled = entry.get("enabled", True)
        if not isinstance(enabled, bool):
            raise PolicyError(f"{where}: enabled must be true or false")
        options = entry.get("options") or {}
        if not isinstance(options, Mapping):
            raise PolicyError(f"{where}: options must be a mapping")
        if not enabled:
            continue
        try:
            predicate = factories[name](options)
        except ValueError as exc:
            raise PolicyError(f"{where}: {exc}") from None
        if predicate.name != name:
            raise PolicyError(f"{where}: factory for {name} built a predicate named {predicate.name!r}")
        predicates.append(predicate)
    return Policy(tuple(predicates))
