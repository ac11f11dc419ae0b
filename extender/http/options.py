"""What each part of ``serve`` is given, from its ``ServeSettings``.

One function per component: the leader election's Lease (``leader_gate_for``), which
leader actors run and with what (``actor_options``, ``requeue_options``), the
self-managed webhook certificates (``webhook_certificate_options``), the capture writer
(``capture_writer``, which checks its directory now, so a path that cannot be used
stops the start), and the pod webhook's routing (``routing_config``). Nothing here
starts anything: ``extender.http.wiring`` builds the parts from these and attaches them
to the app.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from extender.admission import RoutingConfig
from extender.audit.auditor import AuditOptions
from extender.capture.writer import CaptureWriter
from extender.cluster.class_labels import ClassLabels
from extender.documents import write_failure
from extender.http.actors import ActorOptions
from extender.kube.incluster import own_namespace
from extender.labeller.events import EventOptions
from extender.labeller.labeller import LabelOptions
from extender.leader.gate import ElectionOptions, LeaderGate, identity
from extender.podtable.keeper import TableOptions
from extender.requeue.requeuer import RequeueOptions
from extender.settings import ServeSettings, SettingsError
from policies.registry import Policy

if TYPE_CHECKING:
    from extender.certificates.keeper import CertificateOptions


def leader_gate_for(settings: ServeSettings) -> LeaderGate:
    return LeaderGate(
        identity(),
        ElectionOptions(
            lease_name=settings.leader_elect_lease_name,
            namespace=settings.leader_elect_lease_namespace or own_namespace(),
            lease_duration=settings.leader_elect_lease_duration,
            renew_deadline=settings.leader_elect_renew_deadline,
            retry_period=settings.leader_elect_retry_period,
        ),
    )


def actor_options(settings: ServeSettings) -> ActorOptions:
    """Which leader actors the settings turn on (``extender.http.actors``)."""
    return ActorOptions(
        requeue=requeue_options(settings) if settings.requeue_pending_pods else None,
        audit=AuditOptions() if settings.audit_running_pods else None,
        label=(
            LabelOptions(
                prefix=settings.node_label_prefix,
                rate=settings.label_nodes_rate,
                startup_taint=settings.startup_taint,
                startup_taint_grace=settings.startup_taint_grace,
            )
            if settings.label_nodes
            else None
        ),
        # Pods the label rules out hear why from an event: FailedScheduling cannot say.
        events=EventOptions() if settings.label_nodes else None,
        table=(
            TableOptions(
                name=settings.pod_admission_table,
                namespace=settings.namespace or own_namespace(),
                label_nodes=settings.label_nodes,
            )
            if settings.pod_admission_table
            else None
        ),
    )


def requeue_options(settings: ServeSettings) -> RequeueOptions:
    rate = settings.requeue_rate
    return RequeueOptions(
        scheduler_names=settings.requeue_scheduler_names,
        window=settings.requeue_window,
        rate=rate,
        burst=max(1, min(5, int(rate))),
    )


def webhook_certificate_options(settings: ServeSettings) -> CertificateOptions:
    from extender.certificates.keeper import CertificateOptions

    assert settings.webhook_certificate_secret is not None
    return CertificateOptions(
        secret=settings.webhook_certificate_secret,
        # The pod webhook's namespace setting when given, else the pod's own.
        namespace=settings.namespace or own_namespace(),
        service=settings.webhook_service,
        validating_configuration=settings.webhook_validating_configuration,
        mutating_configuration=settings.webhook_mutating_configuration,
    )


def capture_writer(settings: ServeSettings) -> CaptureWriter:
    """The writer for the capture settings; the directory is created now, so a path that
    cannot be used stops the process at start instead of dropping captures."""
    assert settings.capture_dir is not None
    directory = Path(settings.capture_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as exc:
        raise SettingsError(f"capture-dir: {directory}: {write_failure(exc)}") from None
    return CaptureWriter(
        directory, max_files=settings.capture_max_files, max_bytes=settings.capture_max_bytes
    )


def routing_config(settings: ServeSettings, policy: Policy) -> RoutingConfig:
    """The pod webhook's routing: the scheduler it routes to, the extender's own
    namespace (never routed), and with label-nodes the labels it requires (the ones the
    labeller keeps), without it the classes whose pods get the autoscalers' annotations."""
    rules = ClassLabels(settings.node_label_prefix, policy)
    return RoutingConfig(
        settings.route_pods_to_scheduler,
        settings.namespace or "",
        class_labels=rules if settings.label_nodes else None,
        node_rules=rules,
    )
