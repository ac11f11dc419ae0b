"""A RuntimeClass-aware kube-scheduler extender."""

from importlib import metadata

DISTRIBUTION = "runtimeclass-extender"


def _installed_version() -> str:
    """The version pyproject.toml declares, as the installed package metadata records it,
    so ``--version``, ``/readyz`` and capture files never disagree with the package."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        # A source tree on sys.path that was never installed (pip install -e . records it).
        return "0+unknown"


__version__ = _installed_version()
