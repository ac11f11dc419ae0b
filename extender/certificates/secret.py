"""The one Secret that holds the webhook's certificates: its layout, reading it, writing it.

Type ``kubernetes.io/tls`` (so ``tls.crt``/``tls.key`` are the serving pair, where
every tool looks for them), plus ``ca.crt``/``ca.key`` (the CA that signs) and, while
a rotated CA still overlaps, ``ca-previous.crt``. The label
``app.kubernetes.io/managed-by: runtimeclass-extender`` marks it as the keeper's own:
a Secret of that name without it is someone else's and is never written.

No I/O here (minting draws random numbers, nothing else).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from extender.certificates.authority import (
    CertificateError,
    Pair,
    issued_by,
    key_matches,
    new_ca,
    new_serving,
    read_ca,
    read_certificate,
)
from extender.certificates.plan import Absent, Cert, Material, Plan, Policy, SecretState, Unusable

SECRET_TYPE = "kubernetes.io/tls"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
PREVIOUS_CA_CERT = "ca-previous.crt"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "runtimeclass-extender"
CA_COMMON_NAME = "runtimeclass-extender webhook CA"


def secret_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """The Secret's ``data``, decoded (an undecodable value counts as absent)."""
    data = secret.get("data")
    decoded: dict[str, bytes] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str):
                try:
                    decoded[key] = base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    continue
    return decoded


def is_ours(secret: Mapping[str, Any]) -> bool:
    metadata = secret.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return isinstance(labels, dict) and labels.get(MANAGED_BY) == MANAGER


@dataclass(frozen=True)
class Served:
    """The pair a listener should serve, with what readiness needs to know of it."""

    pair: Pair
    leaf: Cert
    # The CA (current or previous) that signed it; None if neither did.
    issuer: Cert | None


def read_secret(secret: Mapping[str, Any] | None, *, name: str = "") -> SecretState:
    """What the plan needs to know of the Secret (None: it does not exist)."""
    if secret is None:
        return Absent()
    what = f"Secret {name}" if name else "the Secret"
    if not is_ours(secret):
        return Unusable(
            f"{what} exists but is not labelled {MANAGED_BY}={MANAGER}: it is not the extender's, "
            "so it is left alone (delete it, or choose another webhook-certificate-secret)",
            foreign=True,
        )
    data = secret_data(secret)
    missing = [key for key in (CA_CERT, CA_KEY) if key not in data]
    if missing:
        return Unusable(f"{what} lacks {' and '.join(missing)}; delete it to have a new CA issued")
    try:
        ca = read_ca(data[CA_CERT], data[CA_KEY])
    except CertificateError as exc:
        return Unusable(f"{what}: {exc}; delete it to have a new CA issued")
    previous: Cert | None = None
    if PREVIOUS_CA_CERT in data:
        try:
            previous = read_certificate(data[PREVIOUS_CA_CERT], PREVIOUS_CA_CERT)
        except CertificateError:
            previous = None  # an unreadable previous CA is only dropped
    served = read_served(data, ca=ca, previous=previous)
    metadata = secret.get("metadata") or {}
    return Material(
        ca=ca,
        previous_ca=previous,
        leaf=served.leaf if served else None,
        leaf_issuer=served.issuer.fingerprint if served and served.issuer else None,
        resource_version=str(metadata.get("resourceVersion") or ""),
    )


def read_served(data: Mapping[str, bytes], *, ca: Cert | None, previous: Cert | None) -> Served | None:
    """The serving pair of the Secret's data, or None if it is missing, unreadable or
    its key does not match."""
    cert_pem, key_pem = data.get(TLS_CERT), data.get(TLS_KEY)
    if not cert_pem or not key_pem:
        return None
    try:
        leaf = read_certificate(cert_pem, TLS_CERT)
    except CertificateError:
        return None
    if not key_matches(cert_pem, key_pem):
        return None
    issuer = next((c for c in (ca, previous) if c is not None and issued_by(cert_pem, c.pem)), None)
    return Served(Pair(cert_pem, key_pem), leaf, issuer)


def served_of(secret: Mapping[str, Any]) -> Served | None:
    """What a replica following the Secret should serve (any Secret: its CAs need not be
    usable for signing to tell which one issued the pair)."""
    data = secret_data(secret)
    cas: list[Cert | None] = []
    for key in (CA_CERT, PREVIOUS_CA_CERT):
        try:
            cas.append(read_certificate(data[key], key) if key in data else None)
        except CertificateError:
            cas.append(None)
    return read_served(data, ca=cas[0], previous=cas[1])


def next_data(plan: Plan, data: Mapping[str, bytes], now: datetime, policy: Policy) -> dict[str, bytes]:
    """The Secret's data after ``plan`` (a write): new CA and/or pair minted as it says."""
    if plan.new_ca:
        ca = new_ca(now, policy.ca_validity, common_name=CA_COMMON_NAME)
    else:
        ca = Pair(data[CA_CERT], data[CA_KEY])
    result = {CA_CERT: ca.cert_pem, CA_KEY: ca.key_pem}
    if plan.previous_ca == "keep" and PREVIOUS_CA_CERT in data:
        result[PREVIOUS_CA_CERT] = data[PREVIOUS_CA_CERT]
    elif plan.previous_ca == "current" and CA_CERT in data:
        result[PREVIOUS_CA_CERT] = data[CA_CERT]
    if plan.new_leaf:
        leaf = new_serving(ca, policy.dns_names, now, policy.leaf_validity)
        result[TLS_CERT], result[TLS_KEY] = leaf.cert_pem, leaf.key_pem
    else:
        result[TLS_CERT], result[TLS_KEY] = data.get(TLS_CERT, b""), data.get(TLS_KEY, b"")
    return result


def secret_body(
    name: str, namespace: str, data: Mapping[str, bytes], *, resource_version: str = ""
) -> dict[str, Any]:
    """The whole Secret to POST (no resourceVersion) or PUT (the one read: a precondition)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {MANAGED_BY: MANAGER, "app.kubernetes.io/part-of": MANAGER},
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": SECRET_TYPE,
        "data": {key: base64.b64encode(value).decode() for key, value in sorted(data.items())},
    }
