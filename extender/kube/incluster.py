"""Facts about the pod this process runs in, as Kubernetes gives them to it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def own_namespace(environ: Mapping[str, str] | None = None, sa_file: str = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The pod's namespace: ``POD_NAMESPACE``, else the service account's, else ``default``."""
    environ = os.environ if environ is None else environ
    if environ.get("POD_NAMESPACE"):
        return environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = Path(sa_file).read_text(encoding="utf-8").strip()
        if text:
            return text
    return "default"
