"""What the webhook certificates should be: a pure function of what they are and the clock.

The keeper (``extender.certificates.keeper``) is level-triggered: at the start of each
leader term, on every change of the Secret or of a webhook configuration, and at each
periodic check, it reads what the Secret and both caBundles hold *now* and asks
``plan`` what they should hold. Nothing here does I/O or keeps state between calls, so
a replica that takes the lead over, or one that restarts half-way through a rotation,
reaches the same answer as the one before it.

The Secret holds the CA (``ca.crt``/``ca.key``), the previous CA while it still
overlaps (``ca-previous.crt``) and the serving pair (``tls.crt``/``tls.key``).

The order of a CA rotation, one step per call (the keeper re-reads and plans again
after every write), so that at no moment a replica serves a certificate that a caBundle
does not trust:

1. the CA is due: a new CA is written, the old one moves to ``ca-previous.crt``, and
   the serving pair stays (issued by the old CA, which the bundles trust);
2. the bundles get both CAs (old and new);
3. once every bundle trusts the new CA, the serving pair is reissued by it;
4. once the old CA has expired, it leaves the Secret and the bundles.

The serving certificate is reissued, apart from step 3, when it is missing or
unreadable, names other DNS names than the Service's, or is within
``leaf_renew_before`` of its end. Kubernetes' API server verifies the webhook's
certificate against the caBundle for the name ``<service>.<namespace>.svc``, from
the SANs alone (staging/src/k8s.io/apiserver/pkg/util/webhook/client.go builds the
name; Go's crypto/x509 has ignored the Common Name since Go 1.15).

A new CA that does not come from a rotation (the Secret deleted, which has a new one
issued, or a CA and pair put into it by hand) gets the same care, in two halves:

- a replica switches to the Secret's pair only once the caBundle of every webhook holds
  a CA that signed it (``trust``, judged against the CAs the bundles actually hold:
  after a recreation the old CA lives only there); until then it serves the pair it had;
- a CA leaves the bundles only once no replica serves a leaf it signed: ``served``, the
  CAs of the bundles that signed a leaf some replica serves (the keeper asks every
  endpoint of the Service), keeps them next to what the Secret says to trust; when it
  is not known (None: an endpoint did not answer) no CA leaves them at all.

So after a recreation the bundles hold the old CA and the new one, every replica
switches to the new leaf, and only then does the old CA go.

A Secret this keeper cannot use (not labelled as its own, or a CA it cannot sign with)
is never overwritten: ``problem`` says why; deleting the Secret has a new one issued.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

# Gatekeeper's and cert-manager's habits: a long-lived CA, a one-year serving
# certificate renewed three months ahead; the CA a year ahead, so the old and the new
# CA overlap in the bundles for a year.
CA_VALIDITY = timedelta(days=3650)
CA_RENEW_BEFORE = timedelta(days=365)
LEAF_VALIDITY = timedelta(days=365)
LEAF_RENEW_BEFORE = timedelta(days=90)


@dataclass(frozen=True)
class Cert:
    """What the plan needs of one certificate (``extender.certificates.authority`` reads it)."""

    fingerprint: str  # SHA-256 of the DER, hex
    not_before: datetime
    not_after: datetime
    dns_names: frozenset[str] = frozenset()
    pem: str = ""

    def valid_at(self, now: datetime) -> bool:
        return self.not_before <= now < self.not_after


@dataclass(frozen=True)
class Absent:
    """No Secret: the leader creates it (and recreates it when it is deleted)."""


@dataclass(frozen=True)
class Unusable:
    """A Secret the keeper must not touch: not its own (``foreign``), or its CA unusable."""

    reason: str
    foreign: bool = False


@dataclass(frozen=True)
class Material:
    """A Secret of this keeper whose CA can sign."""

    ca: Cert
    previous_ca: Cert | None = None
    # None: missing, unreadable, or its key does not match it.
    leaf: Cert | None = None
    # The fingerprint of the CA (current or previous) that signed the leaf; None if neither.
    leaf_issuer: str | None = None
    resource_version: str = ""


SecretState = Absent | Unusable | Material


@dataclass(frozen=True)
class Bundle:
    """One webhook configuration as the keeper read it: its webhooks that call the
    extender's Service, each with the fingerprints of the CAs in its caBundle, and
    those CAs themselves (what a CA kept in the bundles is written back from)."""

    present: bool
    webhooks: Mapping[str, frozenset[str]] = field(default_factory=dict)
    cas: Mapping[str, Cert] = field(default_factory=dict)


@dataclass(frozen=True)
class Policy:
    dns_names: frozenset[str]
    ca_validity: timedelta = CA_VALIDITY
    ca_renew_before: timedelta = CA_RENEW_BEFORE
    leaf_validity: timedelta = LEAF_VALIDITY
    leaf_renew_before: timedelta = LEAF_RENEW_BEFORE


@dataclass(frozen=True)
class BundleChange:
    """Set the caBundle of these webhooks of one configuration to exactly these CAs."""

    configuration: str
    webhooks: tuple[str, ...]
    cas: tuple[Cert, ...]


@dataclass(frozen=True)
class Plan:
    write: Literal["none", "create", "update"] = "none"
    new_ca: bool = False
    new_leaf: bool = False
    # What ca-previous.crt holds after the write: as it is, nothing, or the current CA.
    previous_ca: Literal["keep", "drop", "current"] = "keep"
    bundles: tuple[BundleChange, ...] = ()
    # Fingerprints of the CAs the bundles keep beyond what the Secret says to trust:
    # some replica serves a leaf they signed, or that is not known.
    retained: tuple[str, ...] = ()
    problem: str = ""
    reasons: tuple[str, ...] = ()

    @property
    def idle(self) -> bool:
        return self.write == "none" and not self.bundles


def service_dns_names(service: str, namespace: str) -> frozenset[str]:
    """The names a Service is dialled by: ``<svc>``, ``<svc>.<ns>``, ``<svc>.<ns>.svc``
    (the API server uses the last one)."""
    return frozenset({service, f"{service}.{namespace}", f"{service}.{namespace}.svc"})


def trusted_cas(secret: Material, now: datetime) -> tuple[Cert, ...]:
    """What every caBundle should hold: the CA, and the previous one until it expires."""
    cas = [secret.ca]
    previous = secret.previous_ca
    if previous is not None and previous.not_after > now and previous.fingerprint != secret.ca.fingerprint:
        cas.append(previous)
    return tuple(cas)


def _leaf_problem(secret: Material, now: datetime, policy: Policy) -> tuple[str, bool]:
    """Why the serving certificate needs reissuing ("" if it does not), and whether it
    is unusable as it is (then it is reissued at once, whatever the bundles hold)."""
    leaf = secret.leaf
    if leaf is None:
        return "the serving certificate is missing or does not match its key", True
    if secret.leaf_issuer is None:
        return "the serving certificate was not issued by the Secret's CA", True
    if not leaf.valid_at(now):
        return "the serving certificate is not valid now", True
    if now >= leaf.not_after - policy.leaf_renew_before:
        return "the serving certificate is due for renewal", False
    if leaf.dns_names != policy.dns_names:
        return "the serving certificate names other DNS names than the Service's", False
    if secret.leaf_issuer != secret.ca.fingerprint:
        return "the serving certificate was issued by the previous CA", False
    return "", False


def _bundles_trust(bundles: Mapping[str, Bundle], fingerprint: str) -> bool:
    return all(
        fingerprint in cas
        for bundle in bundles.values()
        if bundle.present
        for cas in bundle.webhooks.values()
    )


def bundle_cas(bundles: Mapping[str, Bundle]) -> dict[str, Cert]:
    """Every CA the caBundles hold, by fingerprint."""
    return {fp: ca for bundle in bundles.values() if bundle.present for fp, ca in bundle.cas.items()}


def removal_candidates(secret: SecretState, bundles: Mapping[str, Bundle], now: datetime) -> frozenset[str]:
    """The CAs the bundles hold that the Secret does not say to trust: those that leave
    them once no replica serves a leaf they signed. Only these make ``served`` matter,
    so the keeper asks the replicas what they serve only when there are some."""
    if not isinstance(secret, Material):
        return frozenset()
    wanted = {ca.fingerprint for ca in trusted_cas(secret, now)}
    held = {
        fp for bundle in bundles.values() if bundle.present for cas in bundle.webhooks.values() for fp in cas
    }
    return frozenset(held - wanted)


def plan(
    secret: SecretState,
    bundles: Mapping[str, Bundle],
    now: datetime,
    policy: Policy,
    *,
    served: frozenset[str] | None,
) -> Plan:
    """What to write next: the Secret first (then the keeper plans again), else the
    caBundles that differ from the CAs the Secret says to trust, plus those ``served``
    keeps (the CAs of the bundles that signed a leaf some replica serves; None when
    that is not known, and then every CA they hold stays). See the module doc."""
    if isinstance(secret, Absent):
        return Plan(write="create", new_ca=True, new_leaf=True, previous_ca="drop", reasons=("no Secret",))
    if isinstance(secret, Unusable):
        return Plan(problem=secret.reason)
    reasons: list[str] = []
    new_ca = now >= secret.ca.not_after - policy.ca_renew_before
    previous: Literal["keep", "drop", "current"] = "keep"
    if new_ca:
        reasons.append("the CA is due for renewal" if secret.ca.not_after > now else "the CA has expired")
        previous = "current" if secret.ca.not_after > now else "drop"
    elif secret.previous_ca is not None and secret.previous_ca.not_after <= now:
        reasons.append("the previous CA has expired")
        previous = "drop"
    leaf_problem, unusable = _leaf_problem(secret, now, policy)
    new_leaf = False
    if leaf_problem:
        # A usable certificate is reissued only by a CA every bundle already trusts: by
        # the same CA, or (step 3) by the new one once the bundles hold it.
        same_issuer = secret.leaf_issuer == secret.ca.fingerprint
        new_leaf = unusable or (
            not new_ca and (same_issuer or _bundles_trust(bundles, secret.ca.fingerprint))
        )
        if new_leaf:
            reasons.append(leaf_problem)
    if new_ca or new_leaf or previous != "keep":
        return Plan(
            write="update", new_ca=new_ca, new_leaf=new_leaf, previous_ca=previous, reasons=tuple(reasons)
        )
    candidates = removal_candidates(secret, bundles, now)
    kept = candidates if served is None else candidates & served
    changes = _bundle_changes(bundles, trusted_cas(secret, now), kept)
    return Plan(
        bundles=changes,
        retained=tuple(sorted(kept)),
        reasons=tuple(f"{c.configuration}: caBundle of {', '.join(c.webhooks)}" for c in changes),
    )


def _bundle_changes(
    bundles: Mapping[str, Bundle], wanted: tuple[Cert, ...], kept: frozenset[str]
) -> tuple[BundleChange, ...]:
    """Each webhook's caBundle should hold ``wanted``, and of ``kept`` what it holds
    already (a CA is never added to a bundle for being kept, only not taken out)."""
    known = bundle_cas(bundles)
    wanted_fps = frozenset(ca.fingerprint for ca in wanted)
    changes = []
    for name, bundle in sorted(bundles.items()):
        if not bundle.present:
            continue
        targets: dict[tuple[str, ...], list[str]] = {}
        for hook, have in sorted(bundle.webhooks.items()):
            keep = tuple(sorted(have & kept))
            if not set(keep) <= known.keys():
                continue  # a CA it cannot write back: leave that bundle as it is
            if have != wanted_fps | set(keep):
                targets.setdefault(keep, []).append(hook)
        for keep, hooks in sorted(targets.items()):
            changes.append(BundleChange(name, tuple(hooks), (*wanted, *(known[fp] for fp in keep))))
    return tuple(changes)


@dataclass(frozen=True)
class Trust:
    trusted: bool
    reason: str


def trust(
    served: Cert | None, signers: frozenset[str], bundles: Mapping[str, Bundle], now: datetime
) -> Trust:
    """Whether the API server trusts ``served``: valid now, and the caBundle of every
    webhook of every configuration holding a CA, valid now, that signed it.

    ``signers`` are the fingerprints of the bundles' CAs that signed ``served``
    (``authority.signers``: a signature check, not a name match). The API server
    verifies the webhook's certificate against exactly that caBundle, for
    ``<service>.<namespace>.svc`` (staging/src/k8s.io/apiserver/pkg/util/webhook/client.go).
    """
    if served is None:
        return Trust(False, "no certificate is being served")
    if not served.valid_at(now):
        return Trust(False, "the served certificate is not valid now")
    if not bundles:
        return Trust(False, "no webhook configuration was read yet")
    cas = bundle_cas(bundles)
    valid = frozenset(fp for fp in signers if fp in cas and cas[fp].valid_at(now))
    for name, bundle in sorted(bundles.items()):
        if not bundle.present:
            return Trust(False, f"{name} not found")
        if not bundle.webhooks:
            return Trust(False, f"{name} has no webhook calling the extender's Service")
        for hook, held in sorted(bundle.webhooks.items()):
            if held & valid:
                continue
            if held & signers:
                return Trust(
                    False,
                    f"{name}: the CA of the served certificate in the caBundle of {hook} is not valid now",
                )
            return Trust(
                False, f"{name}: the caBundle of {hook} does not hold the CA of the served certificate"
            )
    return Trust(True, "trusted by " + ", ".join(sorted(bundles)))
