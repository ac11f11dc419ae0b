"""The keeper's decisions, as a table: what the Secret and the caBundles hold, the
clock, and what ``plan`` says they should hold next (no certificates are minted here:
the plan sees only fingerprints and dates)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from extender.certificates.plan import (
    Absent,
    Bundle,
    BundleChange,
    Cert,
    Material,
    Plan,
    Policy,
    Unusable,
    plan,
    service_dns_names,
    trust,
    trusted_cas,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
NAMES = service_dns_names("runtimeclass-extender-webhook", "runtimeclass-extender")
POLICY = Policy(dns_names=NAMES)
VALIDATING = "ValidatingWebhookConfiguration/runtimeclass-extender"
MUTATING = "MutatingWebhookConfiguration/runtimeclass-extender"


def cert(fingerprint: str, start: datetime, days: float, names: frozenset[str] = frozenset()) -> Cert:
    return Cert(fingerprint, start - timedelta(hours=1), start + days * DAY, names, pem=f"<{fingerprint}>")


CA = cert("ca", T0, 3650)
OLD_CA = cert("old-ca", T0 - 3300 * DAY, 3650)  # expires T0 + 350 days
LEAF = cert("leaf", T0, 365, NAMES)
GOOD = Material(ca=CA, leaf=LEAF, leaf_issuer="ca", resource_version="7")


def bundles(*fingerprints: str, present: bool = True) -> dict[str, Bundle]:
    hooks = {"runtimeclasses.runtimeclass-extender.dev": frozenset(fingerprints)}
    pods = {"pods.runtimeclass-extender.dev": frozenset(fingerprints)}
    return {
        VALIDATING: Bundle(present, hooks if present else {}),
        MUTATING: Bundle(present, pods if present else {}),
    }


TRUSTING = bundles("ca")

# (id, secret, bundles, now, expected: write, new_ca, new_leaf, previous_ca, bundle fingerprints or None)
Row = tuple[str, object, Mapping[str, Bundle], datetime, str, bool, bool, str, tuple[str, ...] | None]
ROWS: list[Row] = [
    ("no Secret: create CA and leaf", Absent(), {}, T0, "create", True, True, "drop", None),
    ("all in order", GOOD, TRUSTING, T0, "none", False, False, "keep", None),
    ("empty bundles get the CA", GOOD, bundles(), T0, "none", False, False, "keep", ("ca",)),
    (
        "a foreign CA in the bundles is replaced",
        GOOD,
        bundles("ca", "x"),
        T0,
        "none",
        False,
        False,
        "keep",
        ("ca",),
    ),
    (
        "configurations absent: nothing to patch",
        GOOD,
        bundles(present=False),
        T0,
        "none",
        False,
        False,
        "keep",
        None,
    ),
    ("leaf due 90 days ahead", GOOD, TRUSTING, T0 + 276 * DAY, "update", False, True, "keep", None),
    ("leaf not yet due", GOOD, TRUSTING, T0 + 270 * DAY, "none", False, False, "keep", None),
    ("leaf expired", GOOD, TRUSTING, T0 + 400 * DAY, "update", False, True, "keep", None),
    (
        "leaf unreadable",
        replace(GOOD, leaf=None, leaf_issuer=None),
        TRUSTING,
        T0,
        "update",
        False,
        True,
        "keep",
        None,
    ),
    (
        "leaf from another CA",
        replace(GOOD, leaf_issuer=None),
        TRUSTING,
        T0,
        "update",
        False,
        True,
        "keep",
        None,
    ),
    (
        "leaf for another Service",
        replace(GOOD, leaf=cert("leaf", T0, 365, frozenset({"other.svc"}))),
        TRUSTING,
        T0,
        "update",
        False,
        True,
        "keep",
        None,
    ),
    (
        "CA due a year ahead: new CA, old one kept, the leaf stays",
        replace(GOOD, leaf=cert("leaf", T0 + 3280 * DAY, 365, NAMES)),
        TRUSTING,
        T0 + 3286 * DAY,
        "update",
        True,
        False,
        "current",
        None,
    ),
    (
        "CA expired: new CA and leaf, old one dropped",
        GOOD,
        TRUSTING,
        T0 + 3651 * DAY,
        "update",
        True,
        True,
        "drop",
        None,
    ),
    # Step 2 of a rotation: the bundles get both CAs; the leaf (by the old CA) waits.
    (
        "after a CA rotation the bundles get both",
        Material(ca=CA, previous_ca=OLD_CA, leaf=LEAF, leaf_issuer="old-ca"),
        bundles("old-ca"),
        T0,
        "none",
        False,
        False,
        "keep",
        ("ca", "old-ca"),
    ),
    # Step 3: both bundles trust the new CA: the leaf is reissued by it.
    (
        "bundles trust the new CA: reissue the leaf",
        Material(ca=CA, previous_ca=OLD_CA, leaf=LEAF, leaf_issuer="old-ca"),
        bundles("ca", "old-ca"),
        T0,
        "update",
        False,
        True,
        "keep",
        None,
    ),
    # Only one bundle has the new CA yet: the leaf waits, the other bundle is patched.
    (
        "one bundle behind: the leaf waits",
        Material(ca=CA, previous_ca=OLD_CA, leaf=LEAF, leaf_issuer="old-ca"),
        {VALIDATING: bundles("ca", "old-ca")[VALIDATING], MUTATING: bundles("old-ca")[MUTATING]},
        T0,
        "none",
        False,
        False,
        "keep",
        ("ca", "old-ca"),
    ),
    # Step 4: the old CA expired: it leaves the Secret (and then the bundles).
    (
        "old CA expired: dropped",
        Material(ca=CA, previous_ca=OLD_CA, leaf=cert("leaf", T0 + 300 * DAY, 365, NAMES), leaf_issuer="ca"),
        bundles("ca", "old-ca"),
        T0 + 351 * DAY,
        "update",
        False,
        False,
        "drop",
        None,
    ),
    (
        "old CA expired, already gone from the Secret: bundles lose it",
        Material(ca=CA, leaf=LEAF, leaf_issuer="ca"),
        bundles("ca", "old-ca"),
        T0 + 100 * DAY,
        "none",
        False,
        False,
        "keep",
        ("ca",),
    ),
    # A due leaf signed by the old CA, bundles not trusting the new one: wait for them.
    (
        "due leaf by the old CA waits for the bundles",
        Material(
            ca=CA, previous_ca=OLD_CA, leaf=cert("leaf", T0 - 300 * DAY, 365, NAMES), leaf_issuer="old-ca"
        ),
        bundles("old-ca"),
        T0,
        "none",
        False,
        False,
        "keep",
        ("ca", "old-ca"),
    ),
]


@pytest.mark.parametrize(
    ("secret", "bundle_state", "now", "write", "new_ca", "new_leaf", "previous", "bundle"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_plan(
    secret: Absent | Material,
    bundle_state: Mapping[str, Bundle],
    now: datetime,
    write: str,
    new_ca: bool,
    new_leaf: bool,
    previous: str,
    bundle: tuple[str, ...] | None,
) -> None:
    result = plan(secret, bundle_state, now, POLICY)
    assert not result.problem
    assert (result.write, result.new_ca, result.new_leaf, result.previous_ca) == (
        write,
        new_ca,
        new_leaf,
        previous,
    )
    if write != "none":
        # The Secret first: the bundles are planned again from what it holds afterwards.
        assert result.bundles == ()
        assert result.reasons
    if bundle is None:
        assert result.bundles == () or write != "none"
        if write == "none":
            assert result.idle
    else:
        assert result.bundles
        for change in result.bundles:
            assert tuple(ca.fingerprint for ca in change.cas) == bundle
            assert change.webhooks  # only the webhooks whose bundle differs


def test_only_the_stale_configuration_is_patched() -> None:
    secret = Material(ca=CA, previous_ca=OLD_CA, leaf=LEAF, leaf_issuer="old-ca")
    state = {VALIDATING: bundles("ca", "old-ca")[VALIDATING], MUTATING: bundles("old-ca")[MUTATING]}
    result = plan(secret, state, T0, POLICY)
    assert result.bundles == (BundleChange(MUTATING, ("pods.runtimeclass-extender.dev",), (CA, OLD_CA)),)


@pytest.mark.parametrize("foreign", [True, False])
def test_an_unusable_secret_is_a_problem_and_nothing_is_written(foreign: bool) -> None:
    result = plan(Unusable("not ours", foreign=foreign), bundles(), T0, POLICY)
    assert result == Plan(problem="not ours")
    assert result.idle


def _settle(secret: Material, state: dict[str, Bundle], now: datetime) -> tuple[Material, dict[str, Bundle]]:
    """Carry plans out until idle, as the keeper does (the Secret first, then the
    bundles), checking after every step that the served leaf's CA is in every bundle."""
    for _ in range(8):
        step = plan(secret, state, now, POLICY)
        if step.idle:
            return secret, state
        if step.write == "update":
            ca = cert(f"ca@{now.date()}", now, 3650) if step.new_ca else secret.ca
            previous = {"keep": secret.previous_ca, "drop": None, "current": secret.ca}[step.previous_ca]
            leaf, issuer = secret.leaf, secret.leaf_issuer
            if step.new_leaf:
                leaf, issuer = cert(f"leaf@{now.date()}", now, 365, NAMES), ca.fingerprint
            secret = Material(ca=ca, previous_ca=previous, leaf=leaf, leaf_issuer=issuer)
        for change in step.bundles:
            fingerprints = frozenset(c.fingerprint for c in change.cas)
            hooks = dict.fromkeys(state[change.configuration].webhooks, fingerprints)
            state = {**state, change.configuration: Bundle(True, hooks)}
        assert secret.leaf_issuer is not None
        assert all(secret.leaf_issuer in cas for b in state.values() for cas in b.webhooks.values())
    raise AssertionError("the plans did not settle")


def _fingerprints(state: dict[str, Bundle]) -> set[str]:
    return {fp for b in state.values() for cas in b.webhooks.values() for fp in cas}


def test_a_whole_rotation_settles_without_an_untrusted_moment() -> None:
    now = T0 + 3290 * DAY  # the CA is due; the leaf is not
    secret, state = _settle(replace(GOOD, leaf=cert("leaf", now - 30 * DAY, 365, NAMES)), bundles("ca"), now)
    new = f"ca@{now.date()}"
    assert secret.ca.fingerprint == new and secret.leaf_issuer == new
    assert secret.previous_ca == CA
    assert _fingerprints(state) == {new, "ca"}
    # Once the old CA has expired it leaves the Secret, then the bundles.
    later = CA.not_after + DAY
    secret, state = _settle(secret, state, later)
    assert secret.previous_ca is None
    assert _fingerprints(state) == {new}


def test_trusted_cas_skip_an_expired_previous() -> None:
    secret = Material(ca=CA, previous_ca=OLD_CA)
    assert trusted_cas(secret, T0) == (CA, OLD_CA)
    assert trusted_cas(secret, OLD_CA.not_after) == (CA,)


TRUST_ROWS = [
    ("trusted", LEAF, CA, TRUSTING, T0, True, "trusted by"),
    ("nothing served", None, None, TRUSTING, T0, False, "no certificate"),
    ("expired leaf", LEAF, CA, TRUSTING, T0 + 400 * DAY, False, "not valid now"),
    ("unknown issuer", LEAF, None, TRUSTING, T0, False, "not issued by a CA of the Secret"),
    ("configurations unread", LEAF, CA, {}, T0, False, "no webhook configuration was read"),
    (
        "a configuration missing",
        LEAF,
        CA,
        {VALIDATING: TRUSTING[VALIDATING], MUTATING: Bundle(False)},
        T0,
        False,
        "not found",
    ),
    (
        "no webhook of ours",
        LEAF,
        CA,
        {VALIDATING: Bundle(True, {}), MUTATING: TRUSTING[MUTATING]},
        T0,
        False,
        "no webhook",
    ),
    (
        "one bundle lacks the CA",
        LEAF,
        CA,
        {**TRUSTING, MUTATING: bundles("x")[MUTATING]},
        T0,
        False,
        "does not hold",
    ),
]


@pytest.mark.parametrize(
    ("served", "issuer", "state", "now", "trusted", "reason"),
    [row[1:] for row in TRUST_ROWS],
    ids=[row[0] for row in TRUST_ROWS],
)
def test_trust(
    served: Cert | None,
    issuer: Cert | None,
    state: Mapping[str, Bundle],
    now: datetime,
    trusted: bool,
    reason: str,
) -> None:
    verdict = trust(served, issuer, state, now)
    assert verdict.trusted is trusted
    assert reason in verdict.reason


def test_service_dns_names() -> None:
    assert service_dns_names("svc", "ns") == {"svc", "svc.ns", "svc.ns.svc"}
