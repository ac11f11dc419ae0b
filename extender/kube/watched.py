"""One object followed by name, kept as its raw JSON.

Some actors follow a single object of their own (the webhook certificate's Secret and
the webhook configurations, the pod admission table's ConfigMap): an informer with a
``metadata.name`` field selector into a store of ``Watched``, which the actor reads as
it needs (no view type of its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.kube.store import Named, ObjectError


@dataclass(frozen=True)
class Watched:
    """One object followed by name: the raw JSON, for the actor's own reading."""

    name: str
    resource_version: str
    obj: Mapping[str, Any]


def watched(obj: Any) -> Named:
    """The informers' reading of an object: its name, its resourceVersion, itself."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(metadata, dict):
        raise ObjectError("an object without metadata")
    return Watched(str(metadata.get("name") or ""), str(metadata.get("resourceVersion") or ""), obj)
