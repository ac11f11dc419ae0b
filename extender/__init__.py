"""A RuntimeClass-aware kube-scheduler extender."""

from __future__ import annotations

import functools

DISTRIBUTION = "runtimeclass-extender"

# Every metric this project exports starts with this.
METRIC_PREFIX = "runtimeclass_extender_"


@functools.cache
def version() -> str:
    """The version pyproject.toml declares, as the installed package metadata records it,
    so ``--version``, ``/readyz`` and capture files never disagree with the package.

    Read on first use, not at import: importlib.metadata takes tens of milliseconds to
    import, which ``--help`` should not pay.
    """
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        # A source tree on sys.path that was never installed (pip install -e . records it).
        return "0+unknown"


def __getattr__(name: str) -> str:
    # ``extender.__version__``, computed when first asked for (PEP 562).
    if name == "__version__":
        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
