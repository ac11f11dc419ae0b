"""Minting and reading the webhook's certificates, on ``cryptography`` (PyCA's X.509).

ECDSA P-256 keys and SHA-256 signatures: cheap to make and to verify, and accepted by
every API server (Go's crypto/tls). Serial numbers are 159 random bits (RFC 5280
allows at most 20 octets, positive). NotBefore lies an hour back, so a client whose
clock runs a little behind still accepts a certificate minted a moment ago.

The CA is a self-signed root used for nothing but this webhook: the only client, the
API server, trusts exactly the caBundle the keeper writes, so no other party is asked
to trust it. It may sign end-entity certificates only (``pathLength`` 0).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from extender.certificates.plan import Cert

BACKDATE = timedelta(hours=1)
ORGANIZATION = "runtimeclass-extender"


class CertificateError(ValueError):
    """A PEM that is not what it should be; the message says what."""


@dataclass(frozen=True)
class Pair:
    """A certificate and its private key, PEM."""

    cert_pem: bytes
    key_pem: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _serial() -> int:
    # 159 bits keeps the DER integer positive within RFC 5280's 20 octets.
    return x509.random_serial_number() >> 1


def new_ca(now: datetime, validity: timedelta, *, common_name: str) -> Pair:
    """A self-signed CA certificate valid from an hour before ``now`` for ``validity``."""
    key = _new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(_serial())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


# RFC 5280 ub-common-name: the cryptography package refuses a longer one.
MAX_COMMON_NAME = 64


def new_serving(ca: Pair, dns_names: Iterable[str], now: datetime, validity: timedelta) -> Pair:
    """A serving certificate for ``dns_names`` (SANs; the first that fits is also the
    Common Name), signed by ``ca``, ending no later than the CA does.

    A Common Name is at most 64 characters (RFC 5280's ub-common-name), and
    ``<service>.<namespace>.svc`` is longer in a namespace of over 30 characters: the
    first name that fits is the Common Name then, or none. Clients verify the SANs
    alone (the API server requires them: util/webhook/client.go), so nothing depends
    on it."""
    names = sorted(dns_names, key=lambda n: (-n.count("."), n))
    if not names:
        raise CertificateError("a serving certificate needs at least one DNS name")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertificateError("the CA key is not an ECDSA key")
    key = _new_key()
    public = key.public_key()
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION)]
    common = next((name for name in names if len(name) <= MAX_COMMON_NAME), None)
    if common is not None:
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(public)
        .serial_number(_serial())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _load(pem: bytes | str, what: str) -> x509.Certificate:
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise CertificateError(f"{what}: not a PEM certificate ({exc})") from None


def facts(cert: x509.Certificate) -> Cert:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns_names = frozenset(san.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        dns_names = frozenset()
    return Cert(
        fingerprint=hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest(),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        dns_names=dns_names,
        pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
    )


def read_certificate(pem: bytes | str, what: str = "certificate") -> Cert:
    """The facts of the first certificate of ``pem``; raises CertificateError."""
    return facts(_load(pem, what))


def read_bundle(pem: bytes | str) -> tuple[Cert, ...]:
    """Every certificate of a caBundle (PEM blocks); raises CertificateError if one is bad."""
    data = pem.encode() if isinstance(pem, str) else pem
    if not data.strip():
        return ()
    try:
        return tuple(facts(c) for c in x509.load_pem_x509_certificates(data))
    except ValueError as exc:
        raise CertificateError(f"caBundle: not PEM certificates ({exc})") from None


def read_ca(cert_pem: bytes, key_pem: bytes) -> Cert:
    """The CA's facts, once it is known to be a CA whose key matches; CertificateError otherwise."""
    cert = _load(cert_pem, "ca.crt")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        raise CertificateError("ca.crt: not a CA certificate (no basicConstraints)") from None
    if not constraints.ca:
        raise CertificateError("ca.crt: not a CA certificate (basicConstraints CA:FALSE)")
    if not key_matches(cert, key_pem):
        raise CertificateError("ca.key: not the private key of ca.crt")
    return facts(cert)


def key_matches(cert: x509.Certificate | bytes, key_pem: bytes) -> bool:
    """Whether ``key_pem`` is a readable private key of ``cert``'s public key."""
    if isinstance(cert, bytes):
        try:
            cert = x509.load_pem_x509_certificate(cert)
        except ValueError:
            return False
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(
        key.public_key().public_bytes(serialization.Encoding.DER, public)
        == cert.public_key().public_bytes(serialization.Encoding.DER, public)
    )


def issued_by(cert_pem: bytes | str, ca_pem: bytes | str) -> bool:
    """Whether ``ca_pem``'s key signed ``cert_pem`` (and names it as the issuer)."""
    try:
        cert, ca = _load(cert_pem, "certificate"), _load(ca_pem, "CA")
        cert.verify_directly_issued_by(ca)
    except (CertificateError, ValueError, TypeError, InvalidSignature):
        return False
    return True


def signers(cert_pem: bytes | str, cas: Mapping[str, Cert]) -> frozenset[str]:
    """The fingerprints of those of ``cas`` whose key signed ``cert_pem``: what the
    plan's ``trust`` and ``served`` are given (a signature check, as the API server's
    chain verification makes it, not a comparison of names)."""
    return frozenset(fp for fp, ca in cas.items() if issued_by(cert_pem, ca.pem))
