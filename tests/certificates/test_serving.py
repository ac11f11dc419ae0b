"""The switching context: a fresh SSLContext per pair, chosen per handshake (with or
without SNI); a pair that does not load changes nothing. And what the authority mints."""

from __future__ import annotations

import asyncio
import ssl
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding

from extender.certificates.authority import Pair, issued_by, key_matches, new_ca, new_serving, read_ca
from extender.certificates.serving import PairError, SwitchingContext

NOW = datetime.now(UTC)
NAMES = ["svc", "svc.ns", "svc.ns.svc"]


async def _peer(port: int, server_name: str | None) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    # server_hostname "" sends no SNI at all.
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=server_name or ""
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return bytes(der)


def _der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)


async def test_switches_per_handshake_and_keeps_the_previous_pair_when_a_new_one_fails() -> None:
    switching = SwitchingContext()
    runner = web.AppRunner(web.Application(), handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=switching.front).start()
    port = int(runner.addresses[0][1])
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await _peer(port, "svc.ns.svc")  # nothing loaded: refused
        ca = new_ca(NOW, timedelta(days=10), common_name="test CA")
        first = new_serving(ca, NAMES, NOW, timedelta(days=5))
        switching.serve(first)
        for server_name in ("svc.ns.svc", None):
            assert await _peer(port, server_name) == _der(first.cert_pem)
        second = new_serving(ca, NAMES, NOW, timedelta(days=5))
        with pytest.raises(PairError):
            switching.serve(Pair(second.cert_pem, first.key_pem))  # a key of another certificate
        with pytest.raises(PairError):
            switching.serve(Pair(b"not a certificate", second.key_pem))
        assert switching.pair == first
        assert await _peer(port, "svc.ns.svc") == _der(first.cert_pem)
        switching.serve(second)
        for server_name in ("svc.ns.svc", None):
            assert await _peer(port, server_name) == _der(second.cert_pem)
    finally:
        await runner.cleanup()


def test_what_the_authority_mints() -> None:
    ca = new_ca(NOW, timedelta(days=3650), common_name="test CA")
    leaf = new_serving(ca, NAMES, NOW, timedelta(days=365))
    ca_cert, cert = x509.load_pem_x509_certificate(ca.cert_pem), x509.load_pem_x509_certificate(leaf.cert_pem)
    for c in (ca_cert, cert):
        assert isinstance(c.public_key(), ec.EllipticCurvePublicKey)
        assert c.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
        assert c.signature_hash_algorithm is not None and c.signature_hash_algorithm.name == "sha256"
        assert 0 < c.serial_number < 2**159
        assert c.not_valid_before_utc == NOW.replace(microsecond=0) - timedelta(hours=1)
    constraints = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == sorted(NAMES)
    assert issued_by(leaf.cert_pem, ca.cert_pem) and key_matches(leaf.cert_pem, leaf.key_pem)
    assert read_ca(ca.cert_pem, ca.key_pem).not_after == ca_cert.not_valid_after_utc
    # A serving certificate never outlives its CA.
    short = new_ca(NOW, timedelta(days=30), common_name="short")
    assert (
        x509.load_pem_x509_certificate(
            new_serving(short, NAMES, NOW, timedelta(days=365)).cert_pem
        ).not_valid_after_utc
        == x509.load_pem_x509_certificate(short.cert_pem).not_valid_after_utc
    )
    # Serials are random.
    assert (
        cert.serial_number
        != x509.load_pem_x509_certificate(
            new_serving(ca, NAMES, NOW, timedelta(days=1)).cert_pem
        ).serial_number
    )
