"""Small helpers the benchmark scripts share: this machine's CPU, a free loopback port."""

from __future__ import annotations

import socket
from pathlib import Path


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, or "" where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
