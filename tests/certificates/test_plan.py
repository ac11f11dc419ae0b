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
    removal_candidates,
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


KNOWN = {"ca": CA, "old-ca": OLD_CA}


def ca_cert(fingerprint: str) -> Cert:
    return KNOWN.get(fingerprint) or cert(fingerprint, T0 - 100 * DAY, 3650)


def bundles(*fingerprints: str, present: bool = True) -> dict[str, Bundle]:
    hooks = {"runtimeclasses.runtimeclass-extender.dev": frozenset(fingerprints)}
    pods = {"pods.runtimeclass-extender.dev": frozenset(fingerprints)}
    cas = {fp: ca_cert(fp) for fp in fingerprints}
    return {
        VALIDATING: Bundle(present, hooks if present else {}, cas if present else {}),
        MUTATING: Bundle(present, pods if present else {}, cas if present else {}),
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
    # Observed: no replica serves a leaf of a CA the Secret does not name.
    result = plan(secret, bundle_state, now, POLICY, served=frozenset())
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
    result = plan(secret, state, T0, POLICY, served=frozenset())
    assert result.bundles == (BundleChange(MUTATING, ("pods.runtimeclass-extender.dev",), (CA, OLD_CA)),)


@pytest.mark.parametrize("foreign", [True, False])
def test_an_unusable_secret_is_a_problem_and_nothing_is_written(foreign: bool) -> None:
    result = plan(Unusable("not ours", foreign=foreign), bundles(), T0, POLICY, served=None)
    assert result == Plan(problem="not ours")
    assert result.idle


def _settle(secret: Material, state: dict[str, Bundle], now: datetime) -> tuple[Material, dict[str, Bundle]]:
    """Carry plans out until idle, as the keeper does (the Secret first, then the
    bundles), checking after every step that the served leaf's CA is in every bundle."""
    for _ in range(8):
        step = plan(secret, state, now, POLICY, served=frozenset())
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
            cas = {c.fingerprint: c for c in change.cas}
            state = {**state, change.configuration: Bundle(True, hooks, cas)}
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
    ("trusted", LEAF, {"ca"}, TRUSTING, T0, True, "trusted by"),
    ("nothing served", None, set(), TRUSTING, T0, False, "no certificate"),
    ("expired leaf", LEAF, {"ca"}, TRUSTING, T0 + 400 * DAY, False, "not valid now"),
    # After the Secret was recreated: the leaf's CA is in the bundles only.
    (
        "signed by a CA the Secret no longer names",
        LEAF,
        {"old-ca"},
        bundles("old-ca", "ca"),
        T0,
        True,
        "trusted",
    ),
    ("signed by no CA of the bundles", LEAF, set(), TRUSTING, T0, False, "does not hold the CA"),
    ("its CA expired", LEAF, {"old-ca"}, bundles("old-ca"), OLD_CA.not_after, False, "CA of the served"),
    ("configurations unread", LEAF, {"ca"}, {}, T0, False, "no webhook configuration was read"),
    (
        "a configuration missing",
        LEAF,
        {"ca"},
        {VALIDATING: TRUSTING[VALIDATING], MUTATING: Bundle(False)},
        T0,
        False,
        "not found",
    ),
    (
        "no webhook of ours",
        LEAF,
        {"ca"},
        {VALIDATING: Bundle(True, {}), MUTATING: TRUSTING[MUTATING]},
        T0,
        False,
        "no webhook",
    ),
    (
        "one bundle lacks the CA",
        LEAF,
        {"ca"},
        {**TRUSTING, MUTATING: bundles("x")[MUTATING]},
        T0,
        False,
        "does not hold",
    ),
]


@pytest.mark.parametrize(
    ("served", "signed_by", "state", "now", "trusted", "reason"),
    [row[1:] for row in TRUST_ROWS],
    ids=[row[0] for row in TRUST_ROWS],
)
def test_trust(
    served: Cert | None,
    signed_by: set[str],
    state: Mapping[str, Bundle],
    now: datetime,
    trusted: bool,
    reason: str,
) -> None:
    verdict = trust(served, frozenset(signed_by), state, now)
    assert verdict.trusted is trusted
    assert reason in verdict.reason


# After the Secret was recreated (a new CA "ca", the bundles still on "old-ca") or a
# CA and pair put into it by hand: which CAs the bundles keep, by what the replicas serve.
RECREATED = GOOD
RETENTION_ROWS = [
    # (id, bundles' CAs, served, each bundle's CAs after the plan or None, retained)
    ("first the new CA joins the old one", ("old-ca",), frozenset({"old-ca"}), ("ca", "old-ca"), ("old-ca",)),
    ("unknown: the new CA joins, the old stays", ("old-ca",), None, ("ca", "old-ca"), ("old-ca",)),
    ("a replica still serves the old leaf", ("ca", "old-ca"), frozenset({"old-ca"}), None, ("old-ca",)),
    ("not known what replicas serve", ("ca", "old-ca"), None, None, ("old-ca",)),
    ("every replica serves the new leaf", ("ca", "old-ca"), frozenset(), ("ca",), ()),
    ("served leaves signed by the new CA only", ("ca", "old-ca"), frozenset({"ca"}), ("ca",), ()),
    (
        "a foreign CA nobody serves by goes",
        ("ca", "old-ca", "x"),
        frozenset({"old-ca"}),
        ("ca", "old-ca"),
        ("old-ca",),
    ),
]


@pytest.mark.parametrize(
    ("held", "served", "after", "retained"),
    [row[1:] for row in RETENTION_ROWS],
    ids=[row[0] for row in RETENTION_ROWS],
)
def test_a_ca_leaves_the_bundles_only_once_no_replica_serves_a_leaf_it_signed(
    held: tuple[str, ...],
    served: frozenset[str] | None,
    after: tuple[str, ...] | None,
    retained: tuple[str, ...],
) -> None:
    result = plan(RECREATED, bundles(*held), T0, POLICY, served=served)
    assert result.write == "none" and not result.problem
    assert result.retained == retained
    if after is None:
        assert result.bundles == ()
    else:
        assert {c.configuration for c in result.bundles} == {VALIDATING, MUTATING}
        for change in result.bundles:
            assert tuple(ca.fingerprint for ca in change.cas) == after
            assert change.cas[0] == CA  # what the Secret says to trust first


def test_a_kept_ca_is_never_added_to_a_bundle_that_lacks_it() -> None:
    state = {VALIDATING: bundles("old-ca")[VALIDATING], MUTATING: bundles("x")[MUTATING]}
    result = plan(GOOD, state, T0, POLICY, served=None)
    assert result.retained == ("old-ca", "x")
    assert {c.configuration: tuple(ca.fingerprint for ca in c.cas) for c in result.bundles} == {
        VALIDATING: ("ca", "old-ca"),
        MUTATING: ("ca", "x"),
    }


def test_removal_candidates_are_what_the_secret_does_not_name() -> None:
    rotating = Material(ca=CA, previous_ca=OLD_CA, leaf=LEAF, leaf_issuer="old-ca")
    assert removal_candidates(rotating, bundles("ca", "old-ca"), T0) == frozenset()
    assert removal_candidates(GOOD, bundles("ca", "old-ca", "x"), T0) == {"old-ca", "x"}
    # Once the previous CA has expired it is a candidate too.
    assert removal_candidates(rotating, bundles("ca", "old-ca"), OLD_CA.not_after) == {"old-ca"}
    assert removal_candidates(Absent(), bundles("old-ca"), T0) == frozenset()
    assert removal_candidates(Unusable("x"), bundles("old-ca"), T0) == frozenset()


def test_a_whole_recreation_settles_without_an_untrusted_moment() -> None:
    """The Secret recreated: the replicas serve the old leaf until both bundles hold the
    new CA, then switch; the old CA goes once none serves the old leaf."""
    state = bundles("old-ca")
    serving = {"old-ca"}  # the CA of the leaf each replica serves
    for _ in range(4):
        step = plan(GOOD, state, T0, POLICY, served=frozenset(serving))
        for change in step.bundles:
            hooks = dict.fromkeys(
                state[change.configuration].webhooks, frozenset(c.fingerprint for c in change.cas)
            )
            state = {
                **state,
                change.configuration: Bundle(True, hooks, {c.fingerprint: c for c in change.cas}),
            }
        assert all(serving <= held for b in state.values() for held in b.webhooks.values())
        if trust(LEAF, frozenset({"ca"}), state, T0).trusted:
            serving = {"ca"}  # every replica switches
    assert serving == {"ca"}
    assert _fingerprints(state) == {"ca"}


def test_service_dns_names() -> None:
    assert service_dns_names("svc", "ns") == {"svc", "svc.ns", "svc.ns.svc"}
