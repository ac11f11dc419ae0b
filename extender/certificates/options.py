"""What the webhook certificate keeper is told, and the names of what it keeps.

``CertificateOptions`` (the Secret, the Service, the webhook configurations; the
periodic checks and the replica probe; and how its writes are paced, the leader
queue's ``WriteOptions`` with the keeper's defaults), the API paths of the Secret and
the configurations, and the wall clock every part of the keeper reads. Shared by the
parts of the keeper (``extender.certificates.keeper`` says which does what), so that
none of them imports another for a name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime

from extender.certificates.plan import Policy, service_dns_names
from extender.kube.reflector import ReflectorOptions
from extender.leader.workqueue import WriteOptions

SECRETS = "/api/v1/namespaces/{namespace}/secrets"
SECRET = SECRETS + "/{name}"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
VALIDATING = "validatingwebhookconfigurations"
MUTATING = "mutatingwebhookconfigurations"
# How often the leader checks, even when nothing changed (renewals are months ahead).
DEFAULT_CHECK_INTERVAL = 3600.0

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class CertificateOptions(WriteOptions):
    """The names, then (keywords only) everything with a default. The leader's writes
    go through its ``WorkQueue`` with these ``WriteOptions``: ``rate`` and ``burst``
    (a first start or a rotation is three writes), and the backoff per object after a
    failure, ``retry_initial`` doubling to ``retry_max``, which is also how long a
    success is remembered: a write undone within ``retry_max`` is damped."""

    secret: str
    namespace: str
    service: str
    validating_configuration: str
    # None: no pod webhook (the API server's admission policies do its job).
    mutating_configuration: str | None
    _: KW_ONLY
    check_interval: float = DEFAULT_CHECK_INTERVAL
    # Whole-request timeout of one read or write.
    request_timeout: float = 10.0
    rate: float = 1.0
    burst: int = 4
    retry_initial: float = 1.0
    retry_max: float = 60.0
    # A refused write's probe waits at most a minute: a caBundle the pod webhook
    # (failurePolicy Fail) needs is written within a minute of the RBAC's fix.
    refusal_max: float = 60.0
    # While CAs are kept only because a replica may still serve a leaf they signed:
    # how soon the leader asks the replicas again (doubling up to recheck_max).
    recheck_initial: float = 2.0
    recheck_max: float = 60.0
    # One TLS handshake to a replica, connection included.
    probe_timeout: float = 3.0
    reflector: ReflectorOptions = field(default_factory=ReflectorOptions)
    policy: Policy | None = None

    @property
    def dns_names(self) -> frozenset[str]:
        return service_dns_names(self.service, self.namespace)

    @property
    def server_name(self) -> str:
        """The name the API server dials and verifies: ``<svc>.<ns>.svc``
        (staging/src/k8s.io/apiserver/pkg/util/webhook/client.go)."""
        return f"{self.service}.{self.namespace}.svc"

    @property
    def secret_name(self) -> str:
        """``namespace/name`` of the Secret, for log lines and ``/readyz``."""
        return f"{self.namespace}/{self.secret}"

    @property
    def configurations(self) -> tuple[tuple[str, str, str], ...]:
        """(label, collection, name) of the webhook configurations whose caBundles it keeps."""
        validating = (
            f"ValidatingWebhookConfiguration/{self.validating_configuration}",
            VALIDATING,
            self.validating_configuration,
        )
        if self.mutating_configuration is None:
            return (validating,)
        mutating = (
            f"MutatingWebhookConfiguration/{self.mutating_configuration}",
            MUTATING,
            self.mutating_configuration,
        )
        return (validating, mutating)
