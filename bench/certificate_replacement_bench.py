"""Self-managed webhook certificates: how soon a deleted Secret is replaced, and whether
any webhook call meets an untrusted certificate meanwhile.

    .venv/bin/python bench/certificate_replacement_bench.py              # 3 rounds, a minute apart
    .venv/bin/python bench/certificate_replacement_bench.py --rounds 5 --pause 0

Deleting the Secret is the documented way to force a new CA and certificate. Runs in
this process, on 127.0.0.1 only: the test API server (tests/support/apiserver) with
both webhook configurations as deploy/ ships them, and two replicas of the
certificate keeper at the production settings (serve's defaults), each with its own
API connection, informers and TLS listener, and an EndpointSlice of the webhook
Service naming it; replica "a" leads. Meanwhile a client plays the API server's side
of webhook calls without pause: a new TLS connection to each replica in turn, verified
against the caBundle of a webhook as stored at that moment (the pod webhook is
``failurePolicy: Fail``, so a failed handshake is a pod that could not be created),
and every listener checks, at the moment it picks a certificate, that both stored
caBundles trust it.

Each deletion comes ``--pause`` seconds after the keepers settled (by default just
over the keeper's ``retry_max`` of 60 s, as on an install at rest: the same write made
again within that time, a Secret deleted again, say, is damped as a fight would be).
Printed per round, in ms from the deletion: the new CA in both caBundles, both
replicas serving the new certificate, the old CA gone from both caBundles; and over
all rounds the handshakes made, the failed ones and the certificates picked while a
caBundle did not trust them. Exits 1 on any failure or untrusted pick.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from extender.certificates.authority import read_bundle
from extender.certificates.keeper import CertificateOptions
from extender.certificates.secret import CA_CERT, TLS_CERT
from extender.leader.gate import ElectionOptions, LeaderGate
from tests.support.apiserver import SECRETS, FakeApiServer
from tests.support.webhook_certificates import (
    CONFIGURATION,
    NAMESPACE,
    SECRET,
    SERVICE,
    Dialler,
    Keeper,
    add_webhook_configurations,
    bundle_cas,
    ca_bundles,
    der_of,
    secret_data,
    settled,
    start_keeper,
)

# serve's defaults: only the names are given (extender/http/options.py).
OPTIONS = CertificateOptions(
    secret=SECRET,
    namespace=NAMESPACE,
    service=SERVICE,
    validating_configuration=CONFIGURATION,
    mutating_configuration=CONFIGURATION,
)
# kube-scheduler's durations; the leader is chosen by the bench, not by a campaign.
ELECTION = ElectionOptions("runtimeclass-extender", NAMESPACE, 15.0, 10.0, 2.0)
POLL = 0.002
LIMIT = 60.0


def _new_ca(server: FakeApiServer, old: bytes) -> str | None:
    if server.get(SECRETS, SECRET, namespace=NAMESPACE) is None:
        return None
    data = secret_data(server)
    return None if data[CA_CERT] == old else read_bundle(data[CA_CERT])[0].fingerprint


async def _until(condition: Callable[[], Awaitable[bool]], started: float, what: str) -> float:
    while not await condition():
        if time.monotonic() - started > LIMIT:
            raise RuntimeError(f"not within {LIMIT:.0f} s: {what}")
        await asyncio.sleep(POLL)
    return (time.monotonic() - started) * 1e3


async def one_round(server: FakeApiServer, replicas: list[Keeper]) -> dict[str, float]:
    old = secret_data(server)[CA_CERT]
    started = time.monotonic()
    server.delete(SECRETS, SECRET, namespace=NAMESPACE)

    async def trusted() -> bool:
        new = _new_ca(server, old)
        return new is not None and all(
            new in {ca.fingerprint for ca in read_bundle(pem)} for pem in ca_bundles(server).values()
        )

    async def served() -> bool:
        if _new_ca(server, old) is None:
            return False
        leaf = der_of(secret_data(server)[TLS_CERT])
        return all([await replica.peer_certificate() == leaf for replica in replicas])

    async def old_gone() -> bool:
        new = _new_ca(server, old)
        return new is not None and bundle_cas(server) == {new}

    return {
        "trusted_ms": await _until(trusted, started, "the new CA in both caBundles"),
        "served_ms": await _until(served, started, "both replicas serving the new certificate"),
        "old_gone_ms": await _until(old_gone, started, "the old CA gone from the caBundles"),
    }


async def run(rounds: int, pause: float) -> int:
    server = FakeApiServer()
    await server.start()
    add_webhook_configurations(server)
    replicas: list[Keeper] = []
    violations: list[str] = []
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name in ("a", "b"):
                replicas.append(
                    await start_keeper(
                        server, Path(tmp), name, clock=lambda: datetime.now(UTC), options=OPTIONS
                    )
                )
            gates = [LeaderGate(replica.name, ELECTION) for replica in replicas]
            for replica, gate in zip(replicas, gates, strict=True):
                replica.observe()
                replica.lead(gate)
            await gates[0].set_leading(True)
            for replica in replicas:
                await settled(replica, server)
                replica.check_every_choice(violations)
            dialler = Dialler(server, replicas)
            dialler.start()
            try:
                for number in range(1, rounds + 1):
                    await asyncio.sleep(pause)
                    result = await one_round(server, replicas)
                    results.append(result)
                    print(
                        f"round {number}: new CA in both caBundles {result['trusted_ms']:.0f} ms, "
                        f"both replicas serving its certificate {result['served_ms']:.0f} ms, "
                        f"old CA gone {result['old_gone_ms']:.0f} ms",
                        flush=True,
                    )
                    for replica in replicas:
                        await settled(replica, server)
            finally:
                await dialler.stop()
        finally:
            for replica in replicas:
                await replica.stop()
            await server.stop()
    for key, label in (
        ("trusted_ms", "new CA in both caBundles"),
        ("served_ms", "both replicas serving"),
        ("old_gone_ms", "old CA gone"),
    ):
        values = [r[key] for r in results]
        print(
            f"{label}: min {min(values):.0f} ms, median {statistics.median(values):.0f} ms, max {max(values):.0f} ms"
        )
    print(
        f"handshakes {dialler.handshakes}, failed {len(dialler.failures)}, "
        f"certificates picked while a caBundle did not trust them {len(violations)}"
    )
    for problem in [*dialler.failures, *violations][:10]:
        print(f"  {problem}")
    return 1 if dialler.failures or violations else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause", type=float, default=61.0, help="seconds at rest before each deletion")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.rounds, args.pause))


if __name__ == "__main__":
    sys.exit(main())
