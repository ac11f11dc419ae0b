"""Reflector options for tests against the test API server: short timeouts and backoff.

Production backoff starts near a second and timeouts are minutes; a test that waits on
a re-list or a reconnect should wait milliseconds. Each test keeps its own page size
and watch timeouts (they are what it exercises) and passes them as overrides.
"""

from __future__ import annotations

from typing import Any

from extender.kube.reflector import ReflectorOptions

_FAST: dict[str, Any] = {
    "request_timeout": 2.0,
    "backoff_initial": 0.02,
    "backoff_max": 0.2,
    "backoff_jitter": 0.5,
}


def fast_reflector(**overrides: Any) -> ReflectorOptions:
    """ReflectorOptions with test-speed timeouts and backoff, plus ``overrides``."""
    return ReflectorOptions(**{**_FAST, **overrides})
