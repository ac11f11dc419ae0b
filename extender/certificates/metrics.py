"""The webhook certificates' gauges, read at scrape time.

On every replica: when the certificate the admission listener serves expires, and
whether every caBundle trusts it (what ``/readyz`` on the admission and probe ports
waits for; the alerts ``RuntimeClassExtenderWebhookCertificateExpiring`` and
``...Untrusted`` watch them). On the leader: how many CAs it keeps in the caBundles
only because a replica serves, or may serve, a certificate they signed (0 elsewhere).
The collector asks the keeper's parts through the callables it is given, so a scrape
reads the state of that moment and nothing is kept up to date in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from extender.certificates.secret import Served

EXPIRY_METRIC = "runtimeclass_extender_webhook_certificate_expiry_timestamp_seconds"
TRUSTED_METRIC = "runtimeclass_extender_webhook_certificate_trusted"
RETAINED_METRIC = "runtimeclass_extender_webhook_certificate_retained_cas"


class CertificateMetrics(Collector):
    """The served certificate's end (only while one is served), whether the caBundles
    trust it, and the CAs the leader keeps in them for a replica's sake."""

    def __init__(
        self,
        *,
        served: Callable[[], Served | None],
        trusted: Callable[[], bool],
        retained: Callable[[], int],
    ) -> None:
        self._served = served
        self._trusted = trusted
        self._retained = retained

    def collect(self) -> Iterator[Any]:
        served = self._served()
        if served is not None:
            expiry = GaugeMetricFamily(
                EXPIRY_METRIC,
                "When the certificate the admission listener serves expires (Unix seconds); "
                "self-managed webhook certificates only.",
            )
            expiry.add_metric([], served.leaf.not_after.timestamp())
            yield expiry
        trusted = GaugeMetricFamily(
            TRUSTED_METRIC,
            "1 while the webhook configurations' caBundles trust the certificate the admission "
            "listener serves, else 0; self-managed webhook certificates only.",
        )
        trusted.add_metric([], 1.0 if self._trusted() else 0.0)
        yield trusted
        retained = GaugeMetricFamily(
            RETAINED_METRIC,
            "On the leader: CAs kept in the caBundles although the Secret no longer names them, "
            "because a replica serves, or may serve, a certificate they signed (0 elsewhere); "
            "self-managed webhook certificates only.",
        )
        retained.add_metric([], float(self._retained()))
        yield retained
