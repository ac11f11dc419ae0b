"""Each key's failures in a row and its backoff: client-go's item rate limiter.

client-go's ``ItemExponentialFailureRateLimiter``: ``when(key)`` counts one more
failure of the key (``NumRequeues``) and says how long it waits, ``initial`` doubling
up to ``maximum``, never sooner than the server's ``Retry-After``; ``forget(key)``
starts it over. The queue (``extender.leader.workqueue``) calls it for every failed
end of a reconcile, so no reconcile escapes the count. It also remembers whether a
key's failing streak was said to the actor, so that it is said once. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["KeyBackoff", "retry_delay"]

K = TypeVar("K", bound=Hashable)


def retry_delay(attempt: int, *, initial: float, maximum: float, retry_after: float | None = None) -> float:
    """Seconds before attempt ``attempt + 1`` (attempt counts from 1): ``initial``
    doubling up to ``maximum``, and never sooner than the server's ``Retry-After``
    (itself capped at ``maximum``)."""
    delay = min(initial * (2.0 ** max(0, attempt - 1)), maximum)
    if retry_after is not None:
        delay = max(delay, min(retry_after, maximum))
    return delay


@dataclass
class _Streak:
    failures: int = 0
    said: bool = False


class KeyBackoff(Generic[K]):
    """The failures in a row of each key (see the module doc)."""

    def __init__(self, *, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self._streaks: dict[K, _Streak] = {}

    def when(self, key: K, retry_after: float | None = None) -> float:
        """One more failure of ``key``: how long it waits before its next attempt."""
        streak = self._streaks.setdefault(key, _Streak())
        streak.failures += 1
        return self.delay(streak.failures, retry_after)

    def delay(self, failures: int, retry_after: float | None = None) -> float:
        return retry_delay(failures, initial=self.initial, maximum=self.maximum, retry_after=retry_after)

    def failures(self, key: K) -> int:
        """client-go's NumRequeues."""
        streak = self._streaks.get(key)
        return streak.failures if streak is not None else 0

    def say(self, key: K) -> bool:
        """True the first time it is asked during the key's streak (the streak is said once)."""
        streak = self._streaks.setdefault(key, _Streak())
        said, streak.said = streak.said, True
        return not said

    def forget(self, key: K) -> int:
        """Start the key's count over; returns the failures it had."""
        streak = self._streaks.pop(key, None)
        return streak.failures if streak is not None else 0

    def clear(self) -> None:
        self._streaks.clear()
