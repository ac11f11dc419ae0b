"""Every setting of ``serve``, with one name across flag, environment and config file.

A setting named ``max-body-bytes`` is the flag ``--max-body-bytes``, the environment
variable ``RUNTIMECLASS_EXTENDER_MAX_BODY_BYTES`` and the key ``max-body-bytes`` in the
YAML file given by ``--config``. Precedence: flag, then environment, then config file,
then the default. Invalid values fail at start with a message naming the setting.

Each setting is declared once, as a field of the frozen, typed ``ServeSettings``: its
type and default, and in the field's metadata its parser, help text and metavar.
``SERVE_SETTINGS`` (the flags, in ``--help`` order, and what ``resolve`` reads) is made
from those fields; ``resolve_serve`` returns a ``ServeSettings``. Every default is
written once, here: the components that have the same knob (the capture writer, the
live cluster, the requeuer) take their defaults from these constants.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from extender.kube.defaults import DEFAULT_SCHEDULER, LEADER_JITTER_FACTOR

ENV_PREFIX = "RUNTIMECLASS_EXTENDER_"


class SettingsError(ValueError):
    """A setting has an invalid value; the message names the setting and its source."""


def _int(text: str, what: str) -> int:
    # int()'s own message ("invalid literal for int() with base 10") names Python, not
    # the setting's expectation.
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"must be {what}") from None


def _positive_int(text: str) -> int:
    value = _int(text, "a positive whole number")
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def _port(text: str) -> int:
    value = _int(text, "a port number between 0 and 65535")
    if not 0 <= value <= 65535:
        raise ValueError("must be between 0 and 65535")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("must be a positive number") from None
    if not value > 0:
        raise ValueError("must be a positive number")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("must be a number, 0 or more") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError("must be a number, 0 or more")
    return value


def label_prefix(text: str) -> str:
    """A label key prefix: a DNS subdomain (validation.IsQualifiedName's prefix part).
    Also the operator commands' ``--node-label-prefix`` (``extender.tools.arguments``)."""
    # Imported here: the parsers are built for every command, --help included.
    from policies.node_affinity import label_key_errors

    prefix = text.strip()
    if not prefix:
        errors = ["it is empty"]
    elif "/" in prefix:
        # The label key is PREFIX/CLASS: a "/" in the prefix would make an invalid key.
        errors = ["it holds a '/' (the label key is PREFIX/CLASS)"]
    else:
        errors = label_key_errors(prefix + "/x")
    if errors:
        raise ValueError(
            "must be a DNS subdomain such as runtimeclass.node-restriction.kubernetes.io: "
            + "; ".join(errors)
        )
    return prefix


def _taint_key(text: str) -> str:
    """A taint key (a label key: validation.IsQualifiedName), or empty (off)."""
    # Imported here: the parsers are built for every command, --help included.
    from policies.node_affinity import label_key_errors

    key = text.strip()
    if key and (errors := label_key_errors(key)):
        raise ValueError(
            "must be a taint key such as " + DEFAULT_STARTUP_TAINT + ", or empty: " + "; ".join(errors)
        )
    return key


def configmap_reference(text: str) -> str:
    """NAMESPACE/NAME of a ConfigMap, or empty (off). Also ``check``'s
    ``--cluster-autoscaler-status``."""
    reference = text.strip()
    if reference:
        namespace, _, name = reference.partition("/")
        if not namespace or not name or "/" in name or any(c.isspace() for c in reference):
            raise ValueError(
                "must be NAMESPACE/NAME, such as " + DEFAULT_CLUSTER_AUTOSCALER_STATUS + ", or empty"
            )
    return reference


def _choice(*choices: str) -> Callable[[str], str]:
    """One of ``choices`` (lower case), in any case: ``DEBUG`` is ``debug``."""

    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value

    return parse


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _path(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


def _name(text: str) -> str:
    """One name as Kubernetes writes them (a scheduler name, a namespace): no blanks."""
    name = text.strip()
    if not name or any(c.isspace() for c in name):
        raise ValueError("must be one name without blanks")
    return name


def _names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names (blanks around commas ignored), at least one."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise ValueError("must name at least one")
    return names


@dataclass(frozen=True)
class Setting:
    """One setting as flag, environment and config file see it: a row of ``SERVE_SETTINGS``,
    made from a field of ``ServeSettings``."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    metavar: str | None = None
    # A flag that names exactly one thing and could be mistaken for one that takes
    # several (as kubectl's -f does): given twice, an error instead of the last one winning.
    once: bool = False

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper().replace("-", "_")

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    @property
    def is_flag(self) -> bool:
        return self.parse is _bool


# A 5,000-node full-nodes request is tens of MB (real Nodes carry managedFields and up
# to 50 image entries each, easily 20-50 KB); 256 MiB leaves room for that and more.
DEFAULT_MAX_BODY_BYTES = 256 * 1024 * 1024
# Node names (or Node items) in one filter request. kube-scheduler sends at most every
# node of the cluster; 20,000 covers the largest supported clusters (5,000 nodes
# officially, 15,000 in our targets). Counted after parsing: len() of one list.
DEFAULT_MAX_NODES_PER_REQUEST = 20_000
# Seconds to receive a whole filter request body. kube-scheduler's httpTimeout (5 s by
# default) ends the call long before; this only frees connections that trickle.
DEFAULT_BODY_READ_TIMEOUT = 30.0
# /healthz turns 503 once a watch has failed for this long (a restart may help then).
DEFAULT_UNHEALTHY_AFTER = 180.0
DEFAULT_CAPTURE_MAX_FILES = 1000
DEFAULT_CAPTURE_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_SCHEDULER_NAMES = (DEFAULT_SCHEDULER,)
DEFAULT_REQUEUE_WINDOW = 1.0
DEFAULT_REQUEUE_RATE = 20.0
# Leader election of the acting parts: kube-scheduler's defaults (15 s / 10 s / 2 s;
# staging/src/k8s.io/component-base/config/v1alpha1/defaults.go).
DEFAULT_LEASE_NAME = "runtimeclass-extender"
# The names deploy/components/admission-webhook gives the webhook's Service and both
# webhook configurations (self-managed certificates name and patch them).
DEFAULT_WEBHOOK_SERVICE = "runtimeclass-extender-webhook"
DEFAULT_WEBHOOK_CONFIGURATION = "runtimeclass-extender"
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0

# label-nodes (extender.cluster.class_labels says why this prefix).
DEFAULT_NODE_LABEL_PREFIX = "runtimeclass.node-restriction.kubernetes.io"
DEFAULT_LABEL_NODES_RATE = 100.0
# Under the prefix cluster-autoscaler counts as "starting, not ready"
# (cluster-autoscaler/utils/taints/taints.go StartupTaintPrefix).
DEFAULT_STARTUP_TAINT = "startup-taint.cluster-autoscaler.kubernetes.io/runtimeclass-labels"
# Who places the pods of a RuntimeClass (the placement setting).
PLACEMENT_RUNTIMECLASS_SCHEDULER = "runtimeclass-scheduler"
PLACEMENT_DEFAULT_SCHEDULER = "default-scheduler"
# Labels a kubelet cannot add, change or remove while NodeRestriction is on
# (plugin/pkg/admission/noderestriction/admission.go, getForbiddenLabels): this domain and
# its subdomains.
KUBELET_UNWRITABLE_DOMAIN = "node-restriction.kubernetes.io"
# How long a new node may wait under it for a label its classes read (kata-deploy sets
# katacontainers.io/kata-runtime once its DaemonSet pod has run there: tens of seconds).
# Off by default: a node no pending pod's class fits would wait out the grace whenever a
# pod of a class pends, a pod that fits no node at all too.
DEFAULT_STARTUP_TAINT_GRACE = 0.0
# cluster-autoscaler's --namespace and --status-config-map-name defaults.
DEFAULT_CLUSTER_AUTOSCALER_STATUS = "kube-system/cluster-autoscaler-status"

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")

_T = TypeVar("_T")


def _setting(
    default: _T, parse: Callable[[str], _T], help: str, metavar: str | None = None, *, once: bool = False
) -> _T:
    """A field of ``ServeSettings``: its default, and in its metadata the rest of its
    ``Setting`` (the name is the field's, in kebab case). mypy checks that ``parse`` and
    ``default`` give the field's type."""
    return field(default=default, metadata={"parse": parse, "help": help, "metavar": metavar, "once": once})


class _LiveClusterOnly(NamedTuple):
    """A setting that works through the API server, which ``--cluster-file`` replaces."""

    setting: str  # as the message names it
    why: str  # the rest of the message: what it needs the API server for, and what to do
    unless: str | None = None  # a setting that, when given, means this one is not used


# Each refused with --cluster-file as "<setting> needs a live cluster: <why>".
_LIVE_CLUSTER_ONLY = (
    _LiveClusterOnly(
        "--leader-elect",
        "the replicas compete for a Lease on the API server, and --cluster-file has none. "
        "Drop one of the two.",
    ),
    _LiveClusterOnly(
        "--audit-running-pods",
        "it watches running pods through the API server, and --cluster-file has none to watch "
        "(for a file with pods, run runtimeclass-extender audit --cluster-file). Drop one of the two.",
    ),
    _LiveClusterOnly(
        "--label-nodes",
        "it writes labels on the nodes through the API server, and --cluster-file has none. "
        "Drop one of the two.",
    ),
    _LiveClusterOnly(
        "webhook-certificate-secret",
        "the certificates are kept in a Secret and the webhook configurations on the API server, "
        "and --cluster-file has none. Set admission-tls-cert-file and admission-tls-key-file instead.",
        # The files win over self-managed certificates (extender.http.tls).
        unless="admission-tls-cert-file",
    ),
    _LiveClusterOnly(
        "pod-admission-table",
        "the table is an object on the API server, which --cluster-file does not provide. "
        "Drop one of the two.",
    ),
    _LiveClusterOnly(
        "--requeue-pending-pods",
        "it watches unscheduled pods and patches them through the API server, which --cluster-file "
        "does not provide. Drop one of the two.",
    ),
)


@dataclass(frozen=True)
class ServeSettings:
    """The resolved settings of ``serve``: each field is one setting (``_setting``), in
    the order of ``--help``."""

    host: str = _setting("0.0.0.0", str, "address to listen on")
    port: int = _setting(8888, _port, "port to listen on (0 picks a free one)")
    probe_port: int | None = _setting(
        None,
        _port,
        "also serve /healthz, /readyz and /metrics (nothing else) over HTTP on this port, for the "
        "kubelet's probes and metric scrapes when host is loopback; off by default",
        "PORT",
    )
    probe_host: str | None = _setting(
        None, _path, "address of the probe-port listener; default: host", "HOST"
    )
    cluster_file: str | None = _setting(
        None,
        _path,
        "read Nodes and RuntimeClasses from this file (kubectl get nodes,runtimeclasses -o yaml) "
        "instead of watching an API server",
        "PATH",
        once=True,
    )
    policy_file: str | None = _setting(None, _path, "policy file (YAML); default: the bundled policy", "PATH")
    kubeconfig: str | None = _setting(
        None,
        _path,
        "kubeconfig file for reaching the API server (default: KUBECONFIG, the in-cluster service "
        "account, then ~/.kube/config); used when no cluster-file is given",
        "PATH",
    )
    context: str | None = _setting(
        None, _path, "kubeconfig context to use (default: its current-context)", "NAME"
    )
    unhealthy_after: float = _setting(
        DEFAULT_UNHEALTHY_AFTER,
        _positive_float,
        "/healthz turns 503 once a watch has failed to reach the API server for this many seconds",
        "SECONDS",
    )
    max_body_bytes: int = _setting(
        DEFAULT_MAX_BODY_BYTES, _positive_int, "largest accepted request body; larger ones get 413", "BYTES"
    )
    max_nodes_per_request: int = _setting(
        DEFAULT_MAX_NODES_PER_REQUEST,
        _positive_int,
        "most node names (or Node items) accepted in one filter request; more get 400",
        "N",
    )
    body_read_timeout: float = _setting(
        DEFAULT_BODY_READ_TIMEOUT,
        _positive_float,
        "seconds to receive a whole filter request body; slower ones get 408",
        "SECONDS",
    )
    log_level: str = _setting("info", _choice(*LOG_LEVELS), "log level", "{" + ",".join(LOG_LEVELS) + "}")
    log_format: str = _setting(
        "text", _choice(*LOG_FORMATS), "log line format", "{" + ",".join(LOG_FORMATS) + "}"
    )
    tls_cert_file: str | None = _setting(None, _path, "serve HTTPS with this certificate (PEM)", "PATH")
    tls_key_file: str | None = _setting(None, _path, "private key of tls-cert-file (PEM)", "PATH")
    client_ca_file: str | None = _setting(
        None,
        _path,
        "require client certificates signed by these CAs (PEM; kube-scheduler's tlsConfig certFile/keyFile)",
        "PATH",
    )
    admission_port: int | None = _setting(
        None,
        _port,
        "also serve the admission webhooks (POST /admission/runtimeclasses and /admission/pods, plus /healthz and /readyz) "
        "over HTTPS on this port, without client certificates; off by default",
        "PORT",
    )
    admission_host: str | None = _setting(
        None, _path, "address of the admission-port listener; default: host", "HOST"
    )
    admission_tls_cert_file: str | None = _setting(
        None, _path, "certificate (PEM) of the admission-port listener; default: tls-cert-file", "PATH"
    )
    admission_tls_key_file: str | None = _setting(
        None, _path, "private key (PEM) of admission-tls-cert-file; default: tls-key-file", "PATH"
    )
    webhook_certificate_secret: str | None = _setting(
        None,
        _name,
        "self-managed certificates for the admission-port listener, kept in this Secret of the "
        "extender's namespace: a CA and a serving certificate for webhook-service, created and renewed "
        "by the leader, whose CA goes into both webhook configurations' caBundle; used "
        "when admission-tls-cert-file is not set (live mode only; off by default)",
        "NAME",
    )
    webhook_service: str = _setting(
        DEFAULT_WEBHOOK_SERVICE,
        _name,
        "the Service the API server calls the webhooks through: the serving certificate names "
        "<service>, <service>.<namespace> and <service>.<namespace>.svc",
        "NAME",
    )
    webhook_validating_configuration: str = _setting(
        DEFAULT_WEBHOOK_CONFIGURATION,
        _name,
        "the ValidatingWebhookConfiguration (RuntimeClasses) whose caBundle webhook-certificate-secret keeps",
        "NAME",
    )
    webhook_mutating_configuration: str | None = _setting(
        None,
        _name,
        "the MutatingWebhookConfiguration (the pod webhook) whose caBundle webhook-certificate-secret "
        "keeps too; unset: none (pod admission is done by the API server's policies, or not at all)",
        "NAME",
    )
    route_pods_to_scheduler: str | None = _setting(
        None,
        _name,
        "the pod webhook (POST /admission/pods) sets spec.schedulerName to NAME on pods that name a "
        "RuntimeClass and name no scheduler (or default-scheduler); off by default (overhead only)",
        "NAME",
    )
    namespace: str | None = _setting(
        None,
        _name,
        "the namespace the extender runs in (the deployment sets it from the downward API): the pod "
        "webhook never routes pods of this namespace or kube-system",
        "NAME",
    )
    pod_admission_table: str | None = _setting(
        None,
        _name,
        "keep the pod admission table, the PodAdmissionTable object (runtimeclass-extender.dev/v1alpha1, "
        "cluster-scoped) of this name: what the API server's pod admission policies give the pods of each "
        "RuntimeClass (its overhead, and with label-nodes its node label), written by the Lease holder "
        "(live mode only; needs the CustomResourceDefinition and RBAC to get, watch, create and patch that "
        "object)",
        "NAME",
    )
    capture_dir: str | None = _setting(
        None,
        _path,
        "write each filter request, its answer and the state it was decided against to this directory "
        "(for replay); off by default",
        "DIR",
    )
    capture_max_files: int = _setting(
        DEFAULT_CAPTURE_MAX_FILES, _positive_int, "keep at most this many capture files", "N"
    )
    capture_max_bytes: int = _setting(
        DEFAULT_CAPTURE_MAX_BYTES,
        _positive_int,
        "keep capture files within this many bytes in total (oldest removed first)",
        "BYTES",
    )
    requeue_pending_pods: bool = _setting(
        False,
        _bool,
        "when a RuntimeClass is added, changed or deleted, patch an annotation onto the unscheduled "
        "pods naming it so kube-scheduler retries them at once (live mode only; needs RBAC to "
        "list/watch/patch pods)",
    )
    requeue_scheduler_names: tuple[str, ...] = _setting(
        DEFAULT_SCHEDULER_NAMES,
        _names,
        "comma-separated schedulerNames whose pending pods requeue-pending-pods nudges "
        "(the profiles that use this extender)",
        "NAMES",
    )
    requeue_window: float = _setting(
        DEFAULT_REQUEUE_WINDOW,
        _positive_float,
        "RuntimeClass changes within this many seconds are coalesced into one nudge per pod",
        "SECONDS",
    )
    requeue_rate: float = _setting(
        DEFAULT_REQUEUE_RATE, _positive_float, "at most this many pod patches per second", "PER_SECOND"
    )
    audit_running_pods: bool = _setting(
        False,
        _bool,
        "watch running pods and export runtimeclass_extender_misplaced_pods: pods on nodes that no "
        "longer fit their RuntimeClass, each logged when it becomes misplaced (live mode only; needs "
        "RBAC to list/watch pods)",
    )
    label_nodes: bool = _setting(
        False,
        _bool,
        "the derived node labels: keep the label <node-label-prefix>/<class>=true on exactly the nodes that "
        "pass each RuntimeClass's node rules (the Lease holder writes them), for pod admission to require of "
        "the class's pods: the default-scheduler mode places the pods by them, and in predicate mode "
        "kube-scheduler narrows to a class's nodes before it samples (live mode only; needs RBAC to patch "
        "nodes)",
    )
    placement: str = _setting(
        PLACEMENT_RUNTIMECLASS_SCHEDULER,
        _choice(PLACEMENT_RUNTIMECLASS_SCHEDULER, PLACEMENT_DEFAULT_SCHEDULER),
        "the mode, by who places the pods of a RuntimeClass: runtimeclass-scheduler, the second "
        "kube-scheduler with the extender in its path (predicate mode: pod admission routes the pods to "
        "it); or default-scheduler, with label-nodes and pod-admission-table: the cluster's own scheduler, "
        "by the node label requirement, tolerations and overhead pod admission gives each pod, with no "
        "extender call and no second scheduler (the default-scheduler mode; docs/install.md)",
        "PLACEMENT",
    )
    node_label_prefix: str = _setting(
        DEFAULT_NODE_LABEL_PREFIX,
        label_prefix,
        "prefix of the label-nodes labels; under node-restriction.kubernetes.io kubelets cannot set them",
        "PREFIX",
    )
    label_nodes_rate: float = _setting(
        DEFAULT_LABEL_NODES_RATE,
        _positive_float,
        "at most this many node label patches per second (label-nodes)",
        "PER_SECOND",
    )
    startup_taint: str = _setting(
        DEFAULT_STARTUP_TAINT,
        _taint_key,
        "with label-nodes: the taint key a node group's new nodes register with "
        "(docs/autoscaling.md); the Lease holder removes exactly this taint from a node once its "
        "RuntimeClass labels are right, so that cluster-autoscaler counts the node as starting "
        "meanwhile rather than adding another; empty: never removed",
        "KEY",
    )
    startup_taint_grace: float = _setting(
        DEFAULT_STARTUP_TAINT_GRACE,
        _non_negative_float,
        "with label-nodes: how long a new node keeps the startup taint while it fits no RuntimeClass "
        "that a pending pod waits for, though such a pod waits (a label its class reads may come "
        "after registration: kata-deploy's, node-feature-discovery's); counted from when the Lease "
        "holder first saw it; 0: the taint goes as soon as the node's labels are right "
        "(docs/autoscaling.md)",
        "SECONDS",
    )
    cluster_autoscaler_status: str = _setting(
        DEFAULT_CLUSTER_AUTOSCALER_STATUS,
        configmap_reference,
        "NAMESPACE/NAME of cluster-autoscaler's status ConfigMap: where it exists, cluster-autoscaler runs, "
        "and without label-nodes every replica warns about the RuntimeClasses whose node rules it cannot "
        "see (docs/autoscaling.md; needs get on that ConfigMap); empty: not looked for",
        "NAMESPACE/NAME",
    )
    leader_elect: bool = _setting(
        False,
        _bool,
        "run several replicas: only the holder of a coordination.k8s.io/v1 Lease patches pending pods "
        "(requeue-pending-pods) and speaks for the audit (audit-running-pods); every replica answers "
        "/filter (live mode only; needs RBAC to get/create/update its Lease)",
    )
    leader_elect_lease_name: str = _setting(
        DEFAULT_LEASE_NAME, _path, "name of the Lease the replicas compete for", "NAME"
    )
    leader_elect_lease_namespace: str | None = _setting(
        None,
        _path,
        "namespace of the Lease; default: POD_NAMESPACE, else the service account's namespace, else default",
        "NAMESPACE",
    )
    leader_elect_lease_duration: float = _setting(
        DEFAULT_LEASE_DURATION,
        _positive_float,
        "seconds a follower waits after the last renewal it saw before it takes the Lease over",
        "SECONDS",
    )
    leader_elect_renew_deadline: float = _setting(
        DEFAULT_RENEW_DEADLINE,
        _positive_float,
        "seconds the leader keeps trying to renew before it stops acting; less than the lease duration",
        "SECONDS",
    )
    leader_elect_retry_period: float = _setting(
        DEFAULT_RETRY_PERIOD,
        _positive_float,
        "seconds between attempts to acquire or renew the Lease",
        "SECONDS",
    )

    def _given(self, setting: str) -> bool:
        return bool(getattr(self, setting.removeprefix("--").replace("-", "_")))

    def __post_init__(self) -> None:
        # client-go's validation (tools/leaderelection/leaderelection.go NewLeaderElector).
        if self.leader_elect_lease_duration <= self.leader_elect_renew_deadline:
            raise SettingsError(
                "--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline "
                f"(got {self.leader_elect_lease_duration:g} and {self.leader_elect_renew_deadline:g})"
            )
        if self.leader_elect_renew_deadline <= LEADER_JITTER_FACTOR * self.leader_elect_retry_period:
            raise SettingsError(
                "--leader-elect-renew-deadline must be greater than "
                f"{LEADER_JITTER_FACTOR:g} x --leader-elect-retry-period "
                f"(got {self.leader_elect_renew_deadline:g} and {self.leader_elect_retry_period:g})"
            )
        # What this election needs beyond client-go's checks (extender.leader.election,
        # "Safety"): a leader that last renewed at t stops acting by t + retry + renew at
        # the latest, and a follower takes over no earlier than t + lease; only
        # retry + renew < lease keeps the two from acting at once.
        renew_and_retry = self.leader_elect_renew_deadline + self.leader_elect_retry_period
        if renew_and_retry >= self.leader_elect_lease_duration:
            raise SettingsError(
                "--leader-elect-renew-deadline plus --leader-elect-retry-period must be less than "
                "--leader-elect-lease-duration, or a leader cut off from the API server may still act "
                "when another takes over "
                f"(got {self.leader_elect_renew_deadline:g} + {self.leader_elect_retry_period:g} >= "
                f"{self.leader_elect_lease_duration:g})"
            )
        if self.probe_port is not None and self.probe_port != 0:
            if self.probe_port == self.port:
                raise SettingsError(
                    f"probe-port {self.probe_port} is also port: the probes need a port of their own"
                )
            if self.probe_port == self.admission_port:
                raise SettingsError(
                    f"probe-port {self.probe_port} is also admission-port: the probes need a port of their own"
                )
        if (
            self.webhook_certificate_secret
            and not self.admission_tls_cert_file
            and self.admission_port is None
        ):
            raise SettingsError(
                "webhook-certificate-secret is set but admission-port is not: set the port to serve the webhooks"
            )
        if self.placement == PLACEMENT_DEFAULT_SCHEDULER:
            self._check_default_scheduler_placement()
        if self.cluster_file:
            for rule in _LIVE_CLUSTER_ONLY:
                if self._given(rule.setting) and not (rule.unless and self._given(rule.unless)):
                    raise SettingsError(f"{rule.setting} needs a live cluster: {rule.why}")


    def _check_default_scheduler_placement(self) -> None:
        """With no extender in the scheduler's path, the pod's label requirement is all
        that keeps it off nodes that cannot run its class: the labels must be the
        labeller's alone, and pod admission must give every pod its requirement."""
        missing = [flag for flag, given in (("--label-nodes", self.label_nodes), ("--pod-admission-table", self.pod_admission_table)) if not given]
        if missing:
            raise SettingsError(
                f"placement default-scheduler needs {' and '.join(missing)}: the default scheduler places the pods "
                "of a RuntimeClass by the node label pod admission requires of them"
            )
        prefix = self.node_label_prefix
        if prefix != KUBELET_UNWRITABLE_DOMAIN and not prefix.endswith("." + KUBELET_UNWRITABLE_DOMAIN):
            raise SettingsError(
                f"placement default-scheduler needs a node-label-prefix that kubelets cannot write "
                f"({KUBELET_UNWRITABLE_DOMAIN} or a subdomain of it), got {prefix}: with no extender in the "
                "scheduler's path, a node that sets such a label itself (kubelet --node-labels) would take the "
                "pods of a class it cannot run (docs/large-clusters.md)"
            )


SERVE_SETTINGS: tuple[Setting, ...] = tuple(
    Setting(f.name.replace("_", "-"), default=f.default, **f.metadata) for f in fields(ServeSettings)
)


class GivenOnce(argparse.Action):
    """A flag that may be given once: a second one is a usage error naming the flag, not a
    silent override (``--cluster-file a.yaml --cluster-file b.yaml`` reads one file, and
    which one would be a surprise)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice: it takes one file (merge the files into one List)")
        setattr(namespace, self.dest, values)


def add_arguments(parser: argparse.ArgumentParser, settings: Sequence[Setting]) -> None:
    parser.add_argument(
        "--config", metavar="PATH", help=f"YAML file of settings by name (env {ENV_PREFIX}CONFIG)"
    )
    for setting in settings:
        help_text = f"{setting.help} (env {setting.env}{_default_text(setting.default)})"
        if setting.is_flag:
            parser.add_argument(
                f"--{setting.name}", dest=setting.attr, action="store_const", const="true", help=help_text
            )
        else:
            parser.add_argument(
                f"--{setting.name}",
                dest=setting.attr,
                metavar=setting.metavar,
                help=help_text,
                action=GivenOnce if setting.once else "store",
            )


def _default_text(default: Any) -> str:
    # A setting that is off (or taken from elsewhere) unless given says so in its help.
    if default is None:
        return ""
    shown = ",".join(default) if isinstance(default, tuple) else repr(default)
    return f"; default {shown}"


def _load_config_file(path: str) -> Mapping[str, Any]:
    # Imported here: the parsers are built from this module for every command, --help
    # included, and only a --config file needs a YAML reader.
    from extender.documents import DocumentError, load_document, read_failure

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"config file {path}: {read_failure(exc)}") from None
    try:
        document = load_document(text)
    except DocumentError as exc:
        raise SettingsError(f"config file {path}: {exc}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise SettingsError(f"config file {path}: expected a mapping of setting names to values")
    return document


def resolve_serve(namespace: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ServeSettings:
    """``serve``'s settings from its parsed flags, the environment and the config file."""
    return ServeSettings(**resolve(namespace, SERVE_SETTINGS, environ))


def default_serve_settings(**overrides: Any) -> ServeSettings:
    """Every default, with ``overrides`` by attribute name (tests and embedding)."""
    unknown = set(overrides) - {f.name for f in fields(ServeSettings)}
    if unknown:
        raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
    return ServeSettings(**overrides)


def _with_suggestion(key: str, known: set[str]) -> str:
    """``clusterFile (did you mean cluster-file?)``: the keys are the flags' names, and
    a camelCase or snake_case spelling (as in Kubernetes objects) is the usual slip."""
    kebab = re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", key).replace("_", "-").lower()
    close = [kebab] if kebab in known else difflib.get_close_matches(kebab, sorted(known), n=1)
    return f"{key} (did you mean {close[0]}?)" if close else key


def resolve(
    namespace: argparse.Namespace,
    settings: Sequence[Setting],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Final values by attribute name, or SettingsError naming the bad one."""
    environ = os.environ if environ is None else environ
    config_path = getattr(namespace, "config", None) or environ.get(ENV_PREFIX + "CONFIG")
    config = _load_config_file(config_path) if config_path else {}
    known = {s.name for s in settings}
    unknown = [str(key) for key in config if key not in known]
    if unknown:
        described = ", ".join(_with_suggestion(key, known) for key in sorted(unknown))
        raise SettingsError(f"config file {config_path}: unknown setting(s) {described}")

    values: dict[str, Any] = {}
    for setting in settings:
        raw: Any
        flag_value = getattr(namespace, setting.attr, None)
        if flag_value is not None:
            raw, source = flag_value, f"--{setting.name}"
        elif setting.env in environ:
            raw, source = environ[setting.env], setting.env
        elif setting.name in config:
            raw, source = config[setting.name], f"{setting.name} in {config_path}"
        else:
            values[setting.attr] = setting.default
            continue
        if raw is None:
            values[setting.attr] = setting.default
            continue
        try:
            text = str(raw).lower() if isinstance(raw, bool) else str(raw)
            values[setting.attr] = setting.parse(text)
        except ValueError as exc:
            raise SettingsError(f"{source}: invalid value {raw!r}: {exc}") from None
    return values
