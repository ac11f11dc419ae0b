"""Capped exponential backoff with jitter, as client-go's reflector waits between failures."""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """Capped exponential backoff with jitter, reset after a quiet period.

    Delay n is ``min(initial * 2**n, max)`` stretched by up to ``jitter`` times itself
    (wait.Jitter), so a fleet of extenders does not retry in lockstep.
    """

    def __init__(
        self,
        *,
        initial: float,
        maximum: float,
        reset_after: float,
        jitter: float,
        rng: random.Random,
        clock: Callable[[], float],
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.reset_after = reset_after
        self.jitter = jitter
        self._rng = rng
        self._clock = clock
        self._step = 0
        self._last: float | None = None

    def reset(self) -> None:
        self._step = 0

    def next(self) -> float:
        now = self._clock()
        if self._last is not None and now - self._last > self.reset_after:
            self._step = 0
        self._last = now
        base = min(self.initial * (2.0**self._step), self.maximum)
        self._step = min(self._step + 1, 32)
        return base * (1.0 + self._rng.random() * self.jitter)
