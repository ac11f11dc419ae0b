"""The leader gate: who leads, as this replica sees it, and the gate leader work passes.

``extender.leader.election`` campaigns for the Lease and opens or closes the gate
(``set_leading``); the leader actors' ``lead`` runs through ``LeaderGate.while_leading``
(``extender.leader.runner``), cancelled and awaited when the term ends. The election
never opens the gate before it holds the Lease and always closes it, and waits for
every acting job to end, before anything else happens at the end of a term.

Kept apart from the election because the campaign needs kubernetes-asyncio's election,
which imports the whole generated API client (about 35 MB of resident memory): a
``serve`` without ``--leader-elect`` never loads it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any


def identity(environ: Mapping[str, str] | None = None, hostname: str | None = None) -> str:
    """``<pod name or hostname>_<uuid>``: unique per process (kube-scheduler's form)."""
    environ = os.environ if environ is None else environ
    base = environ.get("POD_NAME") or hostname or socket.gethostname()
    return f"{base}_{uuid.uuid4()}"


@dataclass(frozen=True)
class ElectionOptions:
    lease_name: str
    namespace: str
    lease_duration: float
    renew_deadline: float
    retry_period: float


class LeaderGate:
    """Who leads, as this replica sees it, and the gate the acting jobs pass through."""

    def __init__(self, identity: str, options: ElectionOptions) -> None:
        self.identity = identity
        self.options = options
        self.holder = ""  # the holder last observed ("" before the first read, or none)
        self._leading = False
        self._changed = asyncio.Condition()
        self._acting = 0
        # Before the campaign starts: what it waits for (caches not listed yet, each
        # with its last error). Empty once campaigning.
        self.waiting_for: list[str] = []
        self.campaigning = False

    @property
    def leading(self) -> bool:
        return self._leading

    def details(self) -> dict[str, Any]:
        """For /readyz."""
        return {
            "identity": self.identity,
            "leading": self._leading,
            "holder": self.holder,
            "lease": f"{self.options.namespace}/{self.options.lease_name}",
            "campaigning": self.campaigning,
            "waitingFor": list(self.waiting_for),
        }

    async def set_leading(self, leading: bool) -> None:
        async with self._changed:
            self._leading = leading
            self._changed.notify_all()

    async def _until(self, predicate: Callable[[], bool]) -> None:
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def quiet(self) -> None:
        """Until no job acts any more."""
        await self._until(lambda: self._acting == 0)

    async def while_leading(self, job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job`` during every term this replica leads; cancel and await it when
        the term ends. Never returns (cancel it)."""
        while True:
            await self._until(lambda: self._leading)
            async with self._changed:
                self._acting += 1
            try:
                await self._run_one_term(job)
            finally:
                async with self._changed:
                    self._acting -= 1
                    self._changed.notify_all()

    async def _run_one_term(self, job: Callable[[], Awaitable[None]]) -> None:
        task = asyncio.ensure_future(job())
        lost = asyncio.ensure_future(self._until(lambda: not self._leading))
        try:
            await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
            if task.done() and not lost.done():
                task.result()  # a job that failed fails its owner
                await lost  # a job that ended stays ended for this term
        finally:
            for pending in (task, lost):
                pending.cancel()
            await asyncio.gather(task, lost, return_exceptions=True)
