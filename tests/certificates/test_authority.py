"""The self-managed certificates as minted (extender.certificates.authority)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from extender.certificates.authority import new_ca, new_serving


@pytest.mark.parametrize("namespace", ["runtimeclass-extender", "platform-scheduling-sandboxed-runtimes"])
def test_a_serving_certificate_for_a_long_namespace_names_every_name_in_its_sans(namespace: str) -> None:
    """``<service>.<namespace>.svc`` is over 64 characters, the Common Name's limit, in a
    namespace of over 30: the certificate is made all the same (the first name that fits
    is its Common Name), and every name is a SAN, which is what the API server verifies."""
    service = "runtimeclass-extender-webhook"
    names = [service, f"{service}.{namespace}", f"{service}.{namespace}.svc"]
    now = datetime.now(UTC)
    ca = new_ca(now, timedelta(days=365), common_name="test")
    pair = new_serving(ca, names, now, timedelta(days=30))
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == set(names)
    (common,) = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert len(str(common.value)) <= 64 and common.value in names
