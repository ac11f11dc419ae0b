"""The caBundles as the keeper reads them: from a webhook configuration to a ``Bundle``.

The keeper's informers follow the Secret and each webhook configuration by name and
keep each as its raw JSON (``extender.kube.watched``): the keeper reads only what it needs of them.
``bundle_of`` reads one configuration: the webhooks that call the extender's Service
and the CAs in each one's caBundle (what ``plan`` decides from, and what ``trust``
judges a pair against). ``InformerBundles`` is every configuration as this replica's
informers show it, read again only when one of them changed: every replica asks for
it at each change, each ``/readyz`` and each scrape, the leader at each pass.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from extender.certificates.authority import CertificateError, read_bundle
from extender.certificates.options import CertificateOptions
from extender.certificates.plan import Bundle, Cert
from extender.kube.informer import Informer
from extender.kube.watched import Watched


def version_of(obj: Mapping[str, Any] | None) -> str | None:
    """The resourceVersion of an object as read (None: there is none)."""
    if obj is None:
        return None
    metadata = obj.get("metadata")
    return str(metadata.get("resourceVersion") or "") if isinstance(metadata, dict) else ""


def bundle_of(configuration: Mapping[str, Any] | None, *, service: str, namespace: str) -> Bundle:
    """The caBundles of ``configuration``'s webhooks that call ``namespace/service``."""
    if configuration is None:
        return Bundle(present=False)
    hooks: dict[str, frozenset[str]] = {}
    cas: dict[str, Cert] = {}
    for webhook in configuration.get("webhooks") or ():
        if not isinstance(webhook, dict) or not isinstance(webhook.get("name"), str):
            continue
        client = webhook.get("clientConfig") or {}
        reference = client.get("service") or {}
        if reference.get("name") != service or reference.get("namespace") != namespace:
            continue
        try:
            pem = base64.b64decode(str(client.get("caBundle") or ""), validate=True)
            held = {c.fingerprint: c for c in read_bundle(pem)}
        except (binascii.Error, ValueError, CertificateError):
            held = {}  # unreadable: trusts nothing, and gets rewritten
        hooks[webhook["name"]] = frozenset(held)
        cas.update(held)
    return Bundle(present=True, webhooks=hooks, cas=cas)


class InformerBundles:
    """The configurations as ``informers`` (by label) last saw them, read into
    ``Bundle``s; {} until every one has listed."""

    def __init__(self, options: CertificateOptions, informers: Mapping[str, Informer[Watched]]) -> None:
        self._options = options
        self._informers = informers
        self._memo: tuple[tuple[str | None, ...], dict[str, Bundle]] | None = None

    def seen(self) -> dict[str, Watched | None]:
        """Each configuration as its informer holds it (None: there is none)."""
        return {
            label: self._informers[label].store.get(name) for label, _, name in self._options.configurations
        }

    def __call__(self) -> dict[str, Bundle]:
        if not all(informer.synced for informer in self._informers.values()):
            return {}
        seen = self.seen()
        versions = tuple(w.resource_version if w else None for w in seen.values())
        if self._memo is None or self._memo[0] != versions:
            options = self._options
            bundles = {
                label: bundle_of(w.obj if w else None, service=options.service, namespace=options.namespace)
                for label, w in seen.items()
            }
            self._memo = (versions, bundles)
        return self._memo[1]
