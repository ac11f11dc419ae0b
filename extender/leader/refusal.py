"""A refusal is the actor's condition, not one key's: one probe, the other keys held.

A missing RBAC rule (403) or an admission policy that refuses the actor's writes (422)
refuses every key alike. Retried per key, 15,000 node keys would ask for hundreds of
writes a second for as long as it lasts, and say it in 15,000 warnings. So on the first
refusal the queue (``extender.leader.workqueue``) enters this condition:

- the actor hears of it **once** (``Report.failure``: ``forbidden``, ``rejected``), with
  the hint of what grants the right or which policy refused;
- **one key probes**: the refused key is reconciled again after the probe's wait (and
  never sooner than its own backoff, so an object refused alone backs off as it would); a
  probe refused again goes to the back of the line of held keys and the key held
  longest probes next, so a refusal of one object alone (a policy that refuses that
  node only) holds the others back for one probe's wait, not for ever;
- **every other key is held** when its turn comes: not reconciled, not written; a key
  added again while held stays held, once;
- the condition **ends** when any write of the actor is accepted (``Done``): the held
  keys are released, in the order they came, each with its own backoff if it has
  failed before, at the actor's pace;
- **a key refused while another key's write was accepted is refused alone**: the
  refusal was that object's, not the actor's (a node the label policy refuses, a
  startup taint the node policy does not know). From then on its refusals are its
  own failures, retried on its own backoff, and hold no other key: before, each of
  its retries started a new refusal of the actor with it as the probe, and every key
  arriving meanwhile waited out its backoff, again and again. It is no longer alone
  once a write of it is accepted, once it has nothing to write, or when the term ends.

The probe's wait grows with the refusal: a sixteenth of how long it has lasted, from
``retry_initial`` up to ``refusal_max`` (an exponential backoff of factor 1 + 1/16 once
past the first seconds). So a refusal's end is noticed within a sixteenth of its
length (a few seconds after a refusal of a minute, about four minutes after one of an
hour), and a refusal that lasts costs a number of writes that grows with the logarithm
of its length, whatever the number of keys. Pure: no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["PROBE_FRACTION", "Refusal"]

K = TypeVar("K", bound=Hashable)

# The probe waits this fraction of how long the refusal has lasted (within its bounds).
PROBE_FRACTION = 1.0 / 16.0


class Refusal(Generic[K]):
    """One actor's refusal condition (see the module doc); the queue drives it."""

    def __init__(self, *, initial: float, maximum: float, clock: Callable[[], float]) -> None:
        self._initial = initial
        self._maximum = max(initial, maximum)
        self._clock = clock
        self._since: float | None = None
        # The key whose turn is the probe's (None: the next key whose turn comes).
        self.probe: K | None = None
        self.held: OrderedDict[K, None] = OrderedDict()
        # The keys refused in this refusal, and those refused alone (see the module doc).
        self._refused: set[K] = set()
        self._alone: set[K] = set()

    @property
    def active(self) -> bool:
        return self._since is not None

    @property
    def lasted(self) -> float:
        """Seconds since the refusal began (0.0 when there is none)."""
        return 0.0 if self._since is None else self._clock() - self._since

    def wait(self) -> float:
        """The probe's wait now."""
        return min(max(self._initial, self.lasted * PROBE_FRACTION), self._maximum)

    def holds(self, key: K) -> bool:
        """``key``'s turn has come: True if it is held instead of reconciled."""
        if self._since is None or key == self.probe:
            return False
        if self.probe is None:
            self.probe = key
            return False
        self.held[key] = None
        return True

    def alone(self, key: K) -> bool:
        """``key``'s refusals are its own (see the module doc): a refusal of it is a
        failure of that key, backed off as any other, and begins no refusal."""
        return key in self._alone

    def refused(self, key: K) -> tuple[K, float] | None:
        """``key``'s write was refused: the probe to schedule and its wait, or None
        when ``key`` is held (it was under way when the refusal began)."""
        self._refused.add(key)
        if self._since is None:
            self._since = self._clock()
            self.probe = key
        elif key != self.probe and self.probe is not None:
            self.held[key] = None
            return None
        if self.held:
            # Rotate: the refused probe waits behind the held keys; the oldest probes.
            self.held[key] = None
            self.probe, _ = self.held.popitem(last=False)
        else:
            self.probe = key
        return self.probe, self.wait()

    def skipped(self, key: K) -> K | None:
        """``key`` ended with nothing to write: if it was the probe, the key to probe
        next, at once (no write was made), or None (the next key whose turn comes)."""
        self._alone.discard(key)
        if self._since is None or key != self.probe:
            return None
        self.probe = self.held.popitem(last=False)[0] if self.held else None
        return self.probe

    def accepted(self, key: K) -> tuple[list[K], float] | None:
        """``key``'s write was accepted: if refused until now, the keys released and
        how long the refusal lasted; the condition is over, and the keys it refused
        were refused alone unless ``key`` is one of them."""
        self._alone.discard(key)
        if self._since is None:
            return None
        released, lasted = list(self.held), self.lasted
        if key not in self._refused:
            self._alone |= self._refused
        self._end()
        return released, lasted

    def _end(self) -> None:
        self._since = None
        self.probe = None
        self.held.clear()
        self._refused.clear()

    def clear(self) -> None:
        self._end()
        self._alone.clear()
