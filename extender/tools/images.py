"""Container images of an install that no registry serves.

An image reference without a ``/`` names Docker Hub's ``library/`` namespace, which
holds Docker's official images only (the reference grammar: github.com/distribution/
reference, normalize.go, ``ParseNormalizedNamed``). The extender's image as the
manifests and the chart name it, ``runtimeclass-extender:<version>``, is one: an install
that keeps it gives pods that never start (``ErrImagePull``). ``check`` says so of a
rendered install before it is applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

# The repository the manifests name until an overlay (kustomize ``images:``) or the
# chart's extender.image.repository names the operator's registry.
UNSERVED_REPOSITORY: Final = "runtimeclass-extender"
GET_THE_IMAGE: Final = "docs/install.md#get-the-image"


def _pod_spec(obj: dict[str, Any]) -> Any:
    """The pod spec of a Pod, a workload's template or a CronJob's job template."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    if obj.get("kind") == "Pod":
        return spec
    if isinstance(job := spec.get("jobTemplate"), dict):
        spec = job.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    return template.get("spec") if isinstance(template, dict) else None


def _containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = _pod_spec(obj)
    if not isinstance(spec, dict):
        return
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        if isinstance(containers, list):
            yield from (c for c in containers if isinstance(c, dict))


def _repository(image: str) -> str:
    """The reference without its digest and tag (a ``:`` after the last ``/`` is a tag's)."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def unserved_images(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(container name, image) of each container of ``obj`` whose image is the
    extender's without a registry."""
    found = []
    for container in _containers(obj):
        image = container.get("image")
        if isinstance(image, str) and _repository(image) == UNSERVED_REPOSITORY:
            found.append((str(container.get("name", "")), image))
    return found
