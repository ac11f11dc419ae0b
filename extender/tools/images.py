"""Container images of an install that no registry serves.

An image reference without a ``/`` names Docker Hub's ``library/`` namespace, which
holds Docker's official images only (the reference grammar: github.com/distribution/
reference, normalize.go, ``ParseNormalizedNamed``). The extender's image as the
manifests and the chart name it, ``runtimeclass-extender:<version>``, is one: an install
that keeps it gives pods that never start (``ErrImagePull``). ``check`` says so of a
rendered install before it is applied.

So does an image whose registry is a placeholder left as the docs write it,
``REGISTRY/runtimeclass-extender:0.1.0``: a reference's first component is a registry
host when it has a ``.`` or a ``:`` (a port) or is ``localhost``, else a Docker Hub
namespace, which is lower case (``[a-z0-9]`` with ``.``, ``_``, ``__`` or ``-`` between);
``REGISTRY`` is neither, and no runtime can pull the image (``invalid reference format``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
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


# A path component of a reference (distribution/reference regexp.go, pathComponent).
_PATH_COMPONENT: Final = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")


def placeholder_host(image: str) -> str | None:
    """The first component of ``image`` when it can be neither a registry host nor a
    Docker Hub namespace (``REGISTRY``, ``<registry>``): a placeholder never replaced."""
    first, slash, _ = image.partition("/")
    if not slash or "." in first or ":" in first or first == "localhost":
        return None
    return None if _PATH_COMPONENT.fullmatch(first) else first


@dataclass(frozen=True, slots=True)
class UnservedImage:
    """A container of an install whose image of the extender no registry serves:
    ``placeholder`` is the registry placeholder it names, None when it names no registry."""

    container: str
    image: str
    placeholder: str | None = None


def unserved_images(obj: dict[str, Any]) -> list[UnservedImage]:
    """Each container of ``obj`` whose image is the extender's without a registry, or
    under a placeholder registry."""
    found = []
    for container in _containers(obj):
        image = container.get("image")
        if not isinstance(image, str):
            continue
        repository = _repository(image)
        name = str(container.get("name", ""))
        if repository == UNSERVED_REPOSITORY:
            found.append(UnservedImage(name, image))
        elif repository.rpartition("/")[2] == UNSERVED_REPOSITORY and (host := placeholder_host(image)):
            found.append(UnservedImage(name, image, placeholder=host))
    return found
