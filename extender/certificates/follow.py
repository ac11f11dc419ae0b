"""What every replica serves: the Secret's pair, once every caBundle trusts it.

Run on every replica, leader or not, from the keeper's informers' listeners
(``extender.certificates.keeper``). Once the Secret and the configurations are listed,
and on every change of any of them, ``Follower.follow`` decides what to serve: the
Secret's pair, once the caBundle of every webhook of those configurations that calls
the extender's Service, as this replica's informers show them, holds a CA that signed
it (``plan.trust``, judged on the CAs the bundles hold: after the Secret was recreated
the old CA lives only there); until then the pair it served before, or, with none yet,
nothing (the listener refuses handshakes). So a new CA, however it came (a rotation,
the Secret deleted, a hand edit), is served only once the API server can verify it.
A Secret not labelled as the extender's is never served.

Each pair is loaded into a fresh ``SSLContext`` (``extender.certificates.serving``);
one that does not load is logged and the previous one keeps serving.

``trust`` tells readiness (and the metrics) whether the pair served is trusted by
every caBundle; the signature checks behind it are redone only when the leaf or the
bundles' CAs change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from extender.certificates.authority import signers
from extender.certificates.bundles import InformerBundles
from extender.certificates.options import CertificateOptions, Clock
from extender.certificates.plan import Bundle, Cert, Trust, bundle_cas, trust
from extender.certificates.secret import Served, is_ours, served_of
from extender.certificates.serving import PairError, SwitchingContext
from extender.kube.store import Store
from extender.kube.watched import Watched

log = logging.getLogger("extender.certificates")


class Follower:
    """This replica's choice of pair (``served``), switched on ``serving``."""

    def __init__(
        self,
        options: CertificateOptions,
        serving: SwitchingContext,
        secret: Store[Watched],
        bundles: InformerBundles,
        *,
        clock: Clock,
    ) -> None:
        self.options = options
        self.serving = serving
        self.served: Served | None = None
        self._secret = secret
        self._bundles = bundles
        self._clock = clock
        self._logged: set[tuple[str, str]] = set()
        self._signers_memo: dict[tuple[str, frozenset[str]], frozenset[str]] = {}

    def follow(self) -> None:
        """Serve the Secret's pair once every caBundle trusts it (see the module doc)."""
        candidate = self._candidate()
        if candidate is None:
            return
        if self.served is not None and candidate.pair == self.served.pair:
            self.served = candidate  # the CAs around it may have changed
            return
        verdict = self.trust_of(candidate.leaf)
        if not verdict.trusted:
            self._once(
                candidate.leaf.fingerprint,
                "not serving the new webhook certificate yet: " + verdict.reason,
                level=logging.INFO,
            )
            return
        try:
            self.serving.serve(candidate.pair)
        except PairError as exc:
            log.error(
                "the webhook certificate does not load; keeping the one served before",
                extra={"secret": self.options.secret_name, "error": str(exc)},
            )
            return
        self.served = candidate
        log.info(
            "serving webhook certificate",
            extra={
                "secret": self.options.secret_name,
                "notAfter": candidate.leaf.not_after.isoformat(),
                "fingerprint": candidate.leaf.fingerprint[:16],
            },
        )

    def _candidate(self) -> Served | None:
        """The pair the Secret holds, if it is one this replica may serve."""
        watched = self._secret.get(self.options.secret)
        if watched is None:
            return None
        if not is_ours(watched.obj):
            # Someone else's Secret of that name: never served (nor written).
            self._once(
                watched.resource_version,
                "the webhook certificate Secret is not labelled as the extender's; not serving it",
            )
            return None
        candidate = served_of(watched.obj)
        if candidate is None:
            self._once(
                watched.resource_version,
                "the webhook certificate Secret has no usable serving certificate and key; "
                "keeping the one served before",
            )
        return candidate

    def _once(self, key: str, message: str, *, level: int = logging.ERROR) -> None:
        if (key, message) not in self._logged:
            self._logged.add((key, message))
            log.log(level, message, extra={"secret": self.options.secret_name})

    def trust(self) -> Trust:
        """Whether every caBundle trusts the pair this replica serves."""
        return self.trust_of(self.served.leaf if self.served else None)

    def trust_of(self, leaf: Cert | None) -> Trust:
        bundles = self._bundles()
        found = self._signers(leaf.pem, leaf.fingerprint, bundles) if leaf is not None else frozenset()
        return trust(leaf, found, bundles, self._clock())

    def _signers(self, leaf_pem: str, leaf_fingerprint: str, bundles: Mapping[str, Bundle]) -> frozenset[str]:
        """The bundles' CAs that signed the leaf (signature checks, kept while the
        leaf and the bundles' CAs stay the same)."""
        cas = bundle_cas(bundles)
        key = (leaf_fingerprint, frozenset(cas))
        if key not in self._signers_memo:
            if len(self._signers_memo) >= 8:
                self._signers_memo.clear()
            self._signers_memo[key] = signers(leaf_pem, cas)
        return self._signers_memo[key]
