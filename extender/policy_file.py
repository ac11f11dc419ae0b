"""Loading the policy: the YAML file (or the bundled default) plus plugin predicates."""

from __future__ import annotations

from importlib import metadata, resources
from pathlib import Path

from extender.documents import DocumentError, load_document, read_failure
from policies.registry import ENTRY_POINT_GROUP, Policy, PolicyError, PredicateFactory, build_policy


def plugin_factories() -> dict[str, PredicateFactory]:
    """Predicate factories that installed packages register under the entry-point group."""
    factories: dict[str, PredicateFactory] = {}
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            factories[entry_point.name] = entry_point.load()
        except Exception as exc:  # a broken plugin must say which one it is
            raise PolicyError(f"predicate plugin {entry_point.name} ({entry_point.value}): {exc}") from None
    return factories


def default_policy_text() -> str:
    return resources.files("policies").joinpath("default-policy.yaml").read_text(encoding="utf-8")


def load_policy(path: str | Path | None = None) -> Policy:
    """The policy from ``path``, or the bundled default. Raises PolicyError."""
    if path is None:
        text, source = default_policy_text(), "default policy"
    else:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"{source}: {read_failure(exc)}") from None
    try:
        document = load_document(text)
    except DocumentError as exc:
        raise PolicyError(f"{source}: {exc}") from None
    return build_policy(document, extra_factories=plugin_factories(), source=source)
