"""Timestamps as the API writes them.

``metav1.MicroTime`` (a Lease's acquire and renew times) is RFC 3339 in UTC with
microseconds (RFC3339Micro in k8s.io/apimachinery/pkg/apis/meta/v1/micro_time.go); the
requeuer's annotation uses the same form, so two nudges never write the same value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

MICRO_TIME_FORMAT: Final = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_micro_time(moment: datetime | None = None) -> str:
    """``moment`` (default: now) as MicroTime text; a naive ``moment`` is local time."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime(MICRO_TIME_FORMAT)
