"""Admission of writes: how fast an actor writes, and the pause the API server asks for.

Shaped after client-go's rest client, whose ``flowcontrol`` limiter (QPS/Burst) every
request waits on and whose answer to a 429 honours ``Retry-After``:

- ``WriteLimiter``, **one per API client**, shared by every leader actor that writes
  over it (``serve`` builds one, ``extender.http.wiring``). It holds the **429 pause**:
  a 429 is the API server's answer to the client's identity (API Priority and Fairness
  queues by user), not to one actor, so its ``Retry-After`` pauses every actor's
  writes. And it hands each actor a ``Pace``.
- ``Pace``, **one per actor**: its own token bucket (``WriteOptions.rate`` and
  ``burst``), as kube-controller-manager gives each controller a client of its own
  with its own QPS. Each rate is a promise about one kind of object's watchers (a node
  update wakes every watcher of all Nodes, an event fills etcd), and one actor's burst
  (a relabel of 7,500 nodes) never holds back another's writes (a certificate renewal,
  a requeue nudge). So the writes over one client are at most the sum of the rates,
  and all of them stop while the server asks.

Pure: no I/O; the clock and the sleep are passed in (tests substitute both).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["Pace", "Sleep", "TokenBucket", "WriteLimiter"]

Sleep = Callable[[float], Awaitable[None]]


class TokenBucket:
    """A rate limit of ``rate`` per second with bursts of up to ``burst``, as client-go's
    rest clients apply QPS/Burst (flowcontrol.NewTokenBucketRateLimiter over
    golang.org/x/time/rate): each caller *reserves* the next token and waits until its
    time, so callers waiting together are spaced at the rate rather than all woken at
    once to race for one token (a herd that would also batch their work into one turn
    of the event loop).

    ``now`` is any monotonic clock in seconds, passed in by the caller.
    """

    def __init__(self, rate: float, burst: int, *, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._stamp = now

    def take(self, now: float) -> float:
        """Reserve a token: 0.0 when one is there, else the seconds until the reserved one
        is (the caller then waits that long, and has it)."""
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0.0 else -self._tokens / self.rate


class WriteLimiter:
    """The writes over one API client: the 429 pause they share, and each actor's pace."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.clock = clock
        self.sleep = sleep
        self._not_before = 0.0  # clock time before which no write goes out (429)

    def pace(self, rate: float, burst: int) -> Pace:
        """An actor's own rate limit, under this client's pause."""
        return Pace(self, TokenBucket(rate, burst, now=self.clock()))

    def pause(self, retry_after: float, *, cap: float) -> None:
        """The API server answered 429 with ``Retry-After``: no write over this client
        for that long (at most ``cap`` seconds: a server asking for an hour is not
        taken at its word)."""
        self._not_before = max(self._not_before, self.clock() + min(retry_after, cap))

    @property
    def paused_for(self) -> float:
        """Seconds the pause still lasts (0.0: none)."""
        return max(0.0, self._not_before - self.clock())

    async def unpaused(self) -> bool:
        """Until the pause is over; True if there was one (the world may have moved)."""
        waited = False
        while (now := self.clock()) < self._not_before:
            await self.sleep(self._not_before - now)
            waited = True
        return waited


class Pace:
    """One actor's token bucket, taken after the client's pause."""

    def __init__(self, limiter: WriteLimiter, bucket: TokenBucket) -> None:
        self.limiter = limiter
        self.bucket = bucket

    async def wait(self) -> bool:
        """Until a write may go out; True if it had to wait (the world may have moved)."""
        waited = await self.limiter.unpaused()
        delay = self.bucket.take(self.limiter.clock())
        if delay > 0:
            await self.limiter.sleep(delay)  # the token reserved is this write's when it wakes
            waited = True
        return waited
