"""Loopback ports for the processes a test or a benchmark starts, and for the addresses
a test needs nothing to listen on.

A port found free by binding port 0 comes from the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default), the range every
outgoing connection on the machine takes its local port from. Between that check and
the child's own bind, any connection (the test's own clients, kube-apiserver's to etcd,
a Prometheus scrape) can be given the port, and the child fails with "Address already
in use" (seen in a full run: an extender of tests/monitoring/test_chart_setups.py). So
ports are handed out from below that range, where the kernel assigns none by itself:
each at most once per process, and only once a bind shows it free. Two processes
handing out ports at once (two test runs on one machine) start at different places
of the range.
"""

from __future__ import annotations

import functools
import itertools
import os
import socket
import threading
from pathlib import Path

__all__ = ["free_port", "unused_address"]

_LOWEST = 20_000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _below_ephemeral() -> range:
    try:
        low = int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768
    return range(_LOWEST, max(_LOWEST + 1_000, low))


class _Ports:
    """The ports this process has handed out (each once), in order around the range."""

    def __init__(self) -> None:
        ports = _below_ephemeral()
        start = (os.getpid() * 7_919) % len(ports)
        self._order = itertools.cycle([*ports[start:], *ports[:start]])
        self._span = len(ports)
        self._given: set[int] = set()
        self._lock = threading.Lock()

    def take(self, host: str) -> int:
        with self._lock:
            for _ in range(self._span):
                port = next(self._order)
                if port in self._given:
                    continue
                with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
                    try:
                        sock.bind((host, port))
                    except OSError:
                        continue
                self._given.add(port)
                return port
        raise RuntimeError(f"no free port left on {host} in {_below_ephemeral()}")


@functools.cache
def _ports() -> _Ports:
    return _Ports()


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on, never given out before by this
    process, and outside the kernel's ephemeral range (see the module doc)."""
    return _ports().take(host)


def unused_address() -> tuple[str, int]:
    """A loopback address where nothing listens, for a test of a refused connection."""
    return "127.0.0.1", free_port()
