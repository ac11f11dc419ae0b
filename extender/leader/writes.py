"""A key's turn at writing: damping, the actor's pace, the send, and what the answer means.

``Turn.write(plan)`` is how a reconcile writes (``extender.leader.workqueue`` gives it
one per turn). ``plan`` reads the current state and returns the ``Write`` to make or
``Unchanged``; the turn:

- asks ``Damping`` first: a write that would make its object say again what the key's
  last success made it say, within ``retry_max`` of that success, means someone undid
  it (a GitOps tool reverting a caBundle, a controller fighting over a label). It waits
  (``Retry("damped")``) as one more step of the key's streak, so a fight slows to one
  write per ``retry_max`` instead of a hot loop; a write of something new goes out at
  once;
- waits for the actor's ``Pace`` (``extender.leader.limits``: its token bucket under
  the API client's 429 pause), taken only when there is something to send, and asks
  ``plan`` again after a wait (the world may have moved meanwhile);
- sends, and sorts the answer: 2xx ``Done``, 404 ``Unchanged("deleted")``, else
  ``Failed``; after a refusal it asks ``plan`` once more (the object changed
  meanwhile, a uid guard refusing a recreated pod, is no failure).

It counts nothing and schedules nothing: the queue owns the attempts and the backoff.
Pure: no I/O but the ``send`` the reconcile gives.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from extender.leader.backoff import retry_delay
from extender.leader.limits import Pace
from extender.leader.results import Done, Failed, Result, Retry, Unchanged, Write

__all__ = ["Damping", "Turn"]


@dataclass(frozen=True)
class _Success:
    done_at: float
    # The success's place in its streak: 1, or more when it came after failures or
    # continued a streak of undone successes.
    streak: int
    content: Hashable


class Damping:
    """Each key's last success for ``retry_max`` seconds, and the streaks of undone
    ones (see the module doc)."""

    def __init__(self, *, initial: float, maximum: float, clock: Callable[[], float]) -> None:
        self._initial = initial
        self._maximum = maximum
        self._clock = clock
        # The last successes, oldest first; and, per key whose success was undone, the
        # streak its next success continues.
        self._recent: OrderedDict[Hashable, _Success] = OrderedDict()
        self._continued: dict[Hashable, int] = {}

    def delay(self, key: Hashable, content: Hashable) -> float:
        """The wait before a write of ``content``: 0 for a key at rest or a write of
        something new; else the streak's next backoff."""
        recent = self._recent.pop(key, None)
        if recent is None or recent.content != content:
            return 0.0
        if self._clock() - recent.done_at >= self._maximum:
            return 0.0
        self._continued[key] = recent.streak
        return retry_delay(recent.streak, initial=self._initial, maximum=self._maximum)

    def succeeded(self, key: Hashable, content: Hashable, failures: int) -> None:
        """A write of ``content`` succeeded after ``failures`` failures in a row;
        successes older than ``retry_max`` are forgotten."""
        now = self._clock()
        streak = self._continued.pop(key, 0) + failures + 1
        self._recent[key] = _Success(now, streak, content)
        self._recent.move_to_end(key)
        while self._recent:
            oldest, success = next(iter(self._recent.items()))
            if now - success.done_at < self._maximum:
                break
            del self._recent[oldest]

    def forget(self, key: Hashable) -> None:
        self._recent.pop(key, None)
        self._continued.pop(key, None)

    def clear(self) -> None:
        self._recent.clear()
        self._continued.clear()


class Turn:
    """A key's turn with the queue: what a reconcile writes through."""

    def __init__(self, key: Hashable, pace: Pace, damping: Damping) -> None:
        self._key = key
        self._pace = pace
        self._damping = damping

    async def write(self, plan: Callable[[], Write | Unchanged | Retry]) -> Result:
        """Make the write ``plan`` asks for now, and say how it ended (module doc); a
        plan with nothing to write now says so (``Unchanged``, or ``Retry`` later)."""
        wanted = plan()
        if not isinstance(wanted, Write):
            return wanted
        delay = self._damping.delay(self._key, wanted.content)
        if delay > 0:
            return Retry("damped", after=delay)
        if await self._pace.wait():
            wanted = plan()  # the wait may have been long
            if not isinstance(wanted, Write):
                return wanted
        sent = await wanted.send()
        if 200 <= sent.status < 300:
            return Done(wanted, sent)
        if sent.status == 404:
            return Unchanged("deleted", sent)
        failed = Failed(wanted, sent)
        if failed.refused:
            # Refused because the object changed meanwhile (a uid guard answering 422
            # rather than 409 counts here too): nothing is wrong.
            again = plan()
            if isinstance(again, Unchanged):
                return Unchanged(again.reason, sent)
        return failed
