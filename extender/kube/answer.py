"""The API server's answer to one write, as the leader's write queue sorts it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sent:
    """Status 0 when there was no answer (a connection error, a timeout)."""

    status: int
    message: str = ""
    retry_after: float | None = None
