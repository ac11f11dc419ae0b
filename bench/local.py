"""Small helpers the benchmark scripts share: this machine's CPU, a free loopback port,
how to start the extender, a process's CPU time, a steady pace, and the floor of any
admission policy."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

# The one home of the ports tests and benchmarks hand out (tests/support/ports.py).
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.ports import free_port as free_port


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, or "" where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def serve_command() -> list[str]:
    """How to run ``runtimeclass-extender`` from this environment."""
    script = Path(sys.executable).parent / "runtimeclass-extender"
    return [str(script)] if script.exists() else [sys.executable, "-m", "extender"]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/<pid>/stat fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main_thread_cpu_seconds(pid: int) -> float:
    """Time on CPU of a process's main thread (/proc/<pid>/schedstat, nanoseconds): exact,
    where /proc/<pid>/stat counts clock ticks, for timing one short step of an event loop."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def rss_mb(pid: int) -> dict[str, float]:
    """A process's resident memory now (VmRSS) and at its peak (VmHWM), in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


async def serve_api_server(server: Any, kubeconfig: str) -> None:
    """In an API-server process of a benchmark: start the test API server (filled by the
    caller), write its kubeconfig, print its URL (the parent waits for that line), and
    serve until killed."""
    await server.start()
    server.write_kubeconfig(kubeconfig)
    print(server.url, flush=True)
    await asyncio.Event().wait()


class Pacer:
    """Awaited before each step (a pod, a call): starts steps ``interval`` seconds apart
    (at once when 0), counting those that could not start on time because the one
    before took longer."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last = 0.0
        self.late = 0

    async def __call__(self) -> None:
        if self.interval:
            wait = self.last + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            elif self.last:
                self.late += 1
        self.last = time.monotonic()


def do_nothing_policy(name: str = "bench-do-nothing") -> list[dict[str, Any]]:
    """One ValidatingAdmissionPolicy bound to every pod CREATE whose match condition is
    false for all: what any admission policy costs a pod on kube-apiserver 1.36 (the pod
    converted for its match conditions: staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/filter.go,
    ForInput). Its binding selects every namespace; narrow its ``matchResources`` to bind
    it to fewer."""
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
                    ]
                },
                "matchConditions": [{"name": "never", "expression": "has(object.spec.runtimeClassName) && false"}],
                "validations": [{"expression": "true"}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]
