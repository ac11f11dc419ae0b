"""The chart's values: values.yaml documents every key and values.schema.json knows
exactly those; the schema refuses wrong types, unknown keys (at the top and in every
section) and the combinations no shipped setup has, saying where; each setup's values
file lints clean; the mode decides requeueing unless it is set; the release namespace
must be one of the install's own; NOTES.txt tells the operator what to check next, in
the release namespace.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, NAMESPACE, SERVER_1_36, differences, refusal, run_helm, template
from tests.support.manifests import render

VALUES = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
# The two modes (docs/install.md#which-mode-do-i-install); the default-scheduler mode
# (deploy/overlays/default-scheduler) is the chart's default.
DEFAULT_SCHEDULER = {"mode": "default-scheduler"}
PREDICATE = {"mode": "predicate"}
SCHEMA = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
# Maps whose keys are the user's (Kubernetes quantities, labels), not the chart's.
FREE_MAPS = {"scheduler.resources", "extender.resources", "monitoring.labels", "certManager.issuerRef"}
SECTIONS = sorted(name for name, value in VALUES.items() if isinstance(value, dict))


def _paths(values: dict[str, Any], prefix: str = "") -> set[str]:
    found = set()
    for name, value in values.items():
        path = f"{prefix}{name}"
        found.add(path)
        if isinstance(value, dict) and path not in FREE_MAPS:
            found |= _paths(value, f"{path}.")
    return found


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    found = set()
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        found.add(path)
        if "$ref" in sub:
            sub = SCHEMA["definitions"][sub["$ref"].rsplit("/", 1)[1]]
        if path not in FREE_MAPS:
            found |= _schema_paths(sub, f"{path}.")
    return found


def test_the_schema_knows_exactly_the_keys_of_values_yaml() -> None:
    assert _schema_paths(SCHEMA) - {"global"} == _paths(VALUES)
    assert set(SCHEMA["required"]) == set(VALUES)


def test_every_key_of_values_yaml_has_its_comment() -> None:
    """Line by line: each key has a comment right above it, but for the Kubernetes
    structure inside a container's resources."""
    undocumented = []
    lines = (CHART / "values.yaml").read_text(encoding="utf-8").splitlines()
    inside: int | None = None  # the indentation of a resources: block being skipped
    for index, line in enumerate(lines):
        match = re.match(r"( *)([A-Za-z][\w-]*):", line)
        if match is None:
            continue
        indent = len(match.group(1))
        if inside is not None and indent > inside:
            continue
        inside = indent if match.group(2) == "resources" else None
        if not lines[index - 1].lstrip().startswith("#"):
            undocumented.append(line)
    assert undocumented == []


REFUSED = [
    ({"foo": "1"}, "- at '': additional properties 'foo' not allowed"),
    ({"mode": "predicate-mode"}, "- at '/mode': value must be one of 'default-scheduler', 'predicate'"),
    # The names of before 0.2 are gone (docs/upgrading.md says what each became).
    ({"mode": "alongside-admission"}, "- at '/mode': value must be one of 'default-scheduler', 'predicate'"),
    ({"labelNodes.placement": "default-scheduler"}, "- at '/labelNodes': additional properties 'placement'"),
    ({"replicas": "two"}, "- at '/replicas': got string, want integer"),
    ({"replicas": "0"}, "- at '/replicas': minimum: got 0, want 1"),
    (
        {"podAdmission.mode": "sometimes"},
        "- at '/podAdmission/mode': value must be one of 'auto', 'policy', 'webhook', 'both', 'none'",
    ),
    (
        {"requeuePendingPods.enabled": "sometimes"},
        "- at '/requeuePendingPods/enabled': got string, want null or boolean",
    ),
    ({"extender.image.pullPolicy": "Sometimes"}, "- at '/extender/image/pullPolicy': value must be one of"),
    ({"tls.secretName": "Bad_Name"}, "- at '/tls/secretName': 'Bad_Name' does not match pattern"),
    (
        {"certManager.issuerRef.kind": "ClusterIssuer"},
        "- at '/certManager/issuerRef': properties 'name' required",
    ),
    ({"monitoring.labels.release": "1"}, "- at '/monitoring/labels/release': got number, want string"),
    ({"tls": "null"}, "- at '': missing property 'tls'"),
    (
        {"imagePullSecrets[0].nam": "regcred"},
        "- at '/imagePullSecrets/0': additional properties 'nam' not allowed",
    ),
    ({"imagePullSecrets": "regcred"}, "- at '/imagePullSecrets': got string, want array"),
    (
        {"labelNodes.startupTaint": "Bad Key!"},
        "- at '/labelNodes/startupTaint': 'Bad Key!' does not match pattern",
    ),
    ({"labelNodes.startupTaintGrace": "-1"}, "- at '/labelNodes/startupTaintGrace': minimum: got -1, want 0"),
]

# Combinations no overlay ships (templates/_validate.tpl): each refused saying what it
# means and what to set, every broken rule in one message.
NOT_TOGETHER = [
    (
        {**PREDICATE, "labelNodes.enabled": "true", "podAdmission.mode": "none"},
        "- the node labels (labelNodes, or mode=default-scheduler) need pod admission (podAdmission.mode auto, "
        "policy, webhook or both, not none)",
    ),
    # An autoscaled cluster in predicate mode: its autoscaler cannot see the classes'
    # rules, and pods of a class would pend for good (docs/autoscaling.md).
    (
        {**PREDICATE, "nodeAutoscaling.enabled": "true"},
        "- nodeAutoscaling.enabled=true in predicate mode needs labelNodes.enabled=true: cluster-autoscaler and "
        "Karpenter never call the extender (kubernetes/autoscaler#506)",
    ),
    (
        {**PREDICATE, "tls.enabled": "true", "labelNodes.enabled": "true"},
        "- tls.enabled=true and labelNodes.enabled=true: no shipped scheduler configuration has both",
    ),
    (
        {**PREDICATE, "leaderElection.enabled": "false", "certManager.enabled": "true"},
        "- leaderElection.enabled=false leaves no replica to act, and these need one: podAdmission.mode=auto "
        "(the pod admission table; webhook or none keep none), requeueing (predicate mode requeues unless "
        "requeuePendingPods.enabled=false)",
    ),
    (
        {
            **PREDICATE,
            "leaderElection.enabled": "false",
            "requeuePendingPods.enabled": "false",
            "podAdmission.mode": "none",
        },
        "these need one: certManager.enabled=false (the leader renews the self-managed webhook certificates)",
    ),
    (
        {
            **PREDICATE,
            "leaderElection.enabled": "false",
            "certManager.enabled": "true",
            "requeuePendingPods.enabled": "false",
            "podAdmission.mode": "webhook",
            "auditRunningPods.enabled": "true",
        },
        "these need one: auditRunningPods.enabled=true",
    ),
    # The default-scheduler mode: the node labels place the pods, and only the pod
    # admission policies give them their requirement; no kube-scheduler runs, for tls to
    # talk to or requeueing to nudge pods for.
    (
        {"labelNodes.enabled": "false"},
        "- mode=default-scheduler places the pods by the node labels the extender keeps: labelNodes.enabled=false",
    ),
    *(
        (
            {**DEFAULT_SCHEDULER, "podAdmission.mode": mode},
            f"- mode=default-scheduler needs pod admission by the policies (podAdmission.mode auto or policy, "
            f"not {mode})",
        )
        for mode in ("webhook", "both", "none")
    ),
    (
        {**DEFAULT_SCHEDULER, "tls.enabled": "true"},
        "- mode=default-scheduler runs no kube-scheduler: tls.enabled=true",
    ),
    (
        {**DEFAULT_SCHEDULER, "requeuePendingPods.enabled": "true"},
        "- mode=default-scheduler has no requeueing",
    ),
]


@pytest.mark.parametrize(
    ("values", "message"), REFUSED, ids=lambda v: json.dumps(v) if isinstance(v, dict) else ""
)
def test_the_schema_refuses_with_a_message_saying_where(values: dict[str, str], message: str) -> None:
    error = refusal(values)
    assert "values don't meet the specifications of the schema" in error
    assert message in error, error


@pytest.mark.parametrize(
    ("values", "message"), NOT_TOGETHER, ids=lambda v: json.dumps(v) if isinstance(v, dict) else ""
)
def test_values_that_do_not_go_together_are_refused_saying_why(values: dict[str, str], message: str) -> None:
    error = refusal(values, api_versions=SERVER_1_36)
    assert "these values do not go together (docs/install.md#install-with-helm):" in error, error
    assert message in error, error


def test_every_combination_refused_is_listed_at_once() -> None:
    """Three broken rules, three lines: no fix-one-run-again."""
    error = refusal(
        {"tls.enabled": "true", "labelNodes.enabled": "false", "requeuePendingPods.enabled": "true"}
    )
    lines = [line for line in error.splitlines() if line.startswith("- ")]
    assert len(lines) == 3, error


@pytest.mark.parametrize("section", SECTIONS)
def test_every_section_refuses_an_unknown_key(section: str) -> None:
    assert f"- at '/{section}': additional properties 'bogus' not allowed" in refusal(
        {f"{section}.bogus": "1"}
    )


@pytest.mark.parametrize("values", sorted(p.name for p in (CHART / "ci").glob("*-values.yaml")))
def test_each_setups_values_lint_clean(values: str) -> None:
    result = run_helm(
        "lint", "--strict", str(CHART), "--namespace", NAMESPACE, "-f", str(CHART / "ci" / values)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    assert not re.search(r"\[(WARNING|ERROR)\]", result.stdout), result.stdout


# --- what the values decide ------------------------------------------------------------


def _requeueing(values: dict[str, str]) -> bool:
    docs = template(values)
    flag = "--requeue-pending-pods" in _extender_args(docs)
    objects = {d["kind"] for d in docs if d["metadata"]["name"] == "runtimeclass-extender-requeue"}
    assert objects == (
        {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
        if flag
        else set()
    )
    return flag


def test_requeueing_follows_the_mode_unless_it_is_set() -> None:
    assert _requeueing(PREDICATE)
    assert not _requeueing({**PREDICATE, "requeuePendingPods.enabled": "false"})
    assert _requeueing({**PREDICATE, "requeuePendingPods.enabled": "null"})
    assert _requeueing({**PREDICATE, "labelNodes.enabled": "true"})


def test_the_default_scheduler_mode_does_not_requeue() -> None:
    """overlays/default-scheduler has no requeueing (no pod waits for runtimeclass-scheduler):
    null leaves it off, as false does."""
    assert not _requeueing({})
    assert not _requeueing({**DEFAULT_SCHEDULER, "requeuePendingPods.enabled": "false"})


def test_the_node_labels_follow_the_mode_unless_set() -> None:
    """On in the default-scheduler mode, which places the pods by them; off in predicate
    mode unless labelNodes.enabled=true."""

    def labels(values: dict[str, str]) -> bool:
        return "--label-nodes" in _extender_args(template(values))

    assert labels({}) and labels({**DEFAULT_SCHEDULER, "labelNodes.enabled": "true"})
    assert not labels(PREDICATE) and not labels({**PREDICATE, "labelNodes.enabled": "false"})
    assert labels({**PREDICATE, "labelNodes.enabled": "true"})


def test_image_pull_secrets_reach_the_pod() -> None:
    """A private registry's credentials, for the extender's image and kube-scheduler's:
    the pod's spec.imagePullSecrets, and nothing else changes."""
    values = {**PREDICATE, "imagePullSecrets[0].name": "regcred", "imagePullSecrets[1].name": "mirror"}
    prefix = "('Deployment', 'runtimeclass-extender', 'runtimeclass-scheduler').spec.template.spec"
    # (differences names the second rendering "the overlay")
    assert differences(template(values), template(PREDICATE)) == [
        f"{prefix}.imagePullSecrets: only in the chart"
    ]
    (deployment,) = [d for d in template(values) if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [
        {"name": "regcred"},
        {"name": "mirror"},
    ]
    (plain,) = [d for d in template({}) if d["kind"] == "Deployment"]
    assert "imagePullSecrets" not in plain["spec"]["template"]["spec"]


DEFAULT_SCHEDULER_NEEDS_POLICIES = "mode=default-scheduler needs the pod admission policies, and podAdmission.mode auto chose the pod webhook"


def test_the_default_scheduler_mode_fails_where_auto_would_choose_the_webhook() -> None:
    """What the schema cannot see: auto on an API server without MutatingAdmissionPolicy
    (helm template without --api-versions is one, a 1.35 cluster another) would choose
    the pod webhook, which has no default-scheduler mode; the render fails, saying what
    to do. With the policies named, or on a 1.36 server, it renders them."""
    error = refusal({}, api_versions=())
    assert DEFAULT_SCHEDULER_NEEDS_POLICIES in error, error
    assert "--api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" in error
    assert "podAdmission.mode=policy" in error
    assert "before 1.36, install predicate mode: --set mode=predicate" in error
    for docs in (
        template(DEFAULT_SCHEDULER, api_versions=SERVER_1_36),
        template({**DEFAULT_SCHEDULER, "podAdmission.mode": "policy"}, api_versions=()),
    ):
        kinds = {d["kind"] for d in docs}
        assert "MutatingAdmissionPolicy" in kinds and "MutatingWebhookConfiguration" not in kinds
        assert "--placement=default-scheduler" in _extender_args(docs)


def test_predicate_mode_without_requeueing_leaves_out_the_component_and_nothing_else() -> None:
    chart, overlay = (
        template({**PREDICATE, "requeuePendingPods.enabled": "false"}),
        render("overlays/predicate-mode"),
    )
    found = differences(chart, overlay)
    assert found[:4] == [
        f"('{kind}', None, 'runtimeclass-extender-requeue'): only in the overlay"
        for kind in (
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        )
    ]
    assert len(found) == 5 and ".containers[0].args: chart" in found[4]
    assert _extender_args(chart) == [a for a in _extender_args(overlay) if not a.startswith("--requeue-")]


def _extender_args(docs: tuple[dict[str, Any], ...]) -> list[str]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (extender,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"]
    return list(extender["args"])


@pytest.mark.parametrize("namespace", ["default", "kube-system"])
def test_the_chart_never_claims_a_namespace_of_the_cluster(namespace: str) -> None:
    """namespace.create would label it for the pod webhook to skip, and make it the
    release's; there the namespace must be left alone."""
    assert "install into a namespace of its own" in refusal({}, namespace=namespace, api_versions=SERVER_1_36)
    docs = template({"namespace.create": "false"}, namespace=namespace)
    assert not [d for d in docs if d["kind"] == "Namespace"]
    assert {d["metadata"].get("namespace") for d in docs if "namespace" in d["metadata"]} == {namespace}


# --- NOTES.txt ----------------------------------------------------------------------------


def _notes(values: dict[str, str], namespace: str = "other") -> str:
    """NOTES.txt as ``helm install`` prints it (a client-side dry run: no cluster), with
    the pod admission policies unless ``values`` say otherwise (helm install has no
    --api-versions, and a dry run without a cluster serves no MutatingAdmissionPolicy)."""
    values = {"podAdmission.mode": "policy", **values}
    args = ["install", "runtimeclass-extender", str(CHART), "--namespace", namespace, "--dry-run=client"]
    args += [flag for k, v in values.items() for flag in ("--set", f"{k}={v}")]
    result = run_helm(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("\nNOTES:\n", 1)[1]


def _commands(notes: str) -> list[str]:
    return [line.strip() for line in notes.splitlines() if line.strip().startswith(("kubectl", "curl"))]


def test_notes_say_what_to_check_next_in_the_release_namespace() -> None:
    notes = _notes(PREDICATE)
    commands = _commands(notes)
    for needed in (
        "kubectl -n other rollout status deployment/runtimeclass-scheduler",
        "curl -s http://127.0.0.1:8081/readyz",
        "kubectl -n other get leases",
        "kubectl -n other get secret runtimeclass-extender-webhook-certificate",
        "kubectl get validatingwebhookconfiguration runtimeclass-extender \\",
        "kubectl get events --field-selector reason=FailedScheduling",
    ):
        assert needed in commands, needed
    namespaced = [c for c in commands if c.startswith("kubectl") and " -n " in c]
    assert namespaced and all(" -n other " in c for c in namespaced)
    assert "one release per cluster" in notes
    # Predicate mode, where the API server's RuntimeClass admission plugin runs: what
    # kube-scheduler's messages then say, and how to have them name the class.
    assert "--disable-admission-plugins=RuntimeClass" in notes


def test_notes_warn_of_an_image_no_registry_serves() -> None:
    """The chart's default repository, runtimeclass-extender, is Docker Hub's
    library/runtimeclass-extender, which does not exist: the pods would never start."""
    assert "WARNING: the extender image runtimeclass-extender:" in _notes({})
    assert "--set extender.image.repository=REGISTRY/runtimeclass-extender" in _notes({})
    for repository in ("ghcr.io/example/runtimeclass-extender", "example/runtimeclass-extender"):
        assert "WARNING" not in _notes({"extender.image.repository": repository}), repository


def test_notes_follow_the_parts() -> None:
    notes = _notes(
        {**PREDICATE, "tls.enabled": "true", "certManager.enabled": "true", "namespace.create": "false"}
    )
    commands = _commands(notes)
    assert "kubectl -n other get secret runtimeclass-extender-tls" in commands
    assert "kubectl -n other get certificate runtimeclass-extender-webhook" in commands
    assert "kubectl -n other get secret runtimeclass-extender-webhook-certificate" not in commands
    assert "kubectl label namespace other runtimeclass-extender.dev/webhook=ignore" in commands
    # The default-scheduler mode's guard selects its param by the namespace's label.
    placed = _commands(_notes({"namespace.create": "false"}))
    assert (
        "kubectl label namespace other runtimeclass-extender.dev/webhook=ignore "
        "runtimeclass-extender.dev/placement=default-scheduler" in placed
    )
    large = _commands(_notes({**PREDICATE, "labelNodes.enabled": "true", "monitoring.enabled": "true"}))
    assert "kubectl get events --field-selector reason=RuntimeClassFitsNoNode" in large
    assert "kubectl get events --field-selector reason=RuntimeClassNodesUnavailable" in large
    assert "kubectl -n other get podmonitor,prometheusrule runtimeclass-extender" in large
    webhook = _notes({**PREDICATE, "podAdmission.mode": "webhook"})
    assert (
        "kubectl get validatingwebhookconfiguration,mutatingwebhookconfiguration runtimeclass-extender \\"
        in (_commands(webhook))
    )


def test_notes_say_how_to_check_that_the_pod_admission_policies_run() -> None:
    """A served policy is not a running one (a 1.36 server with the feature gate off):
    where the chart installs the policies, the notes give the check that proves them;
    with the webhook alone they do not."""
    policy = _notes({**PREDICATE, "podAdmission.mode": "policy"})
    assert "runtimeclass-extender check-pod-admission --namespace default" in policy
    assert "Parts: the RuntimeClass webhook, the pod admission policies," in policy
    webhook = _notes({**PREDICATE, "podAdmission.mode": "webhook"})
    assert "check-pod-admission" not in webhook
    assert "Parts: the RuntimeClass webhook, the pod webhook," in webhook
    assert "kubectl get podadmissiontable runtimeclass-extender -o yaml" in policy
    large = _notes({**PREDICATE, "podAdmission.mode": "policy", "labelNodes.enabled": "true"})
    assert "Parts: the RuntimeClass webhook, the pod admission policies," in large
    assert "pod webhook" not in large.split("Parts:", 1)[1].split(";", 1)[0]


def test_notes_in_the_default_scheduler_mode_check_what_it_runs() -> None:
    """No kube-scheduler runs: the rollout of the extender alone, its one Lease, the table
    and a dry-run pod of each class that keeps its schedulerName, the default scheduler's
    events and the extender's; nothing of runtimeclass-scheduler's."""
    notes = _notes({"podAdmission.mode": "policy"})
    commands = _commands(notes)
    for needed in (
        "kubectl -n other rollout status deployment/runtimeclass-scheduler",
        "kubectl get podadmissiontable runtimeclass-extender -o yaml",
        "kubectl get events --field-selector reason=RuntimeClassFitsNoNode",
    ):
        assert needed in commands, needed
    flat = notes.replace("\n   ", " ")
    assert "no kube-scheduler container runs in this mode" in flat
    assert "every pod 1/1 ready" in notes and "2/2" not in notes
    assert "runtimeclass-extender check-pod-admission --namespace default" in notes
    assert "keeps schedulerName default-scheduler" in flat
    assert "runtimeclass-extender-pod-admission-required" in notes
    assert (
        "Parts: the RuntimeClass webhook, the pod admission policies, node labels, the mode's guard," in notes
    )
    # Nothing of the second scheduler: its Lease, its events, its image, predicate mode's
    # API server flag (the RuntimeClass admission plugin may stay on).
    assert "kube-scheduler's" not in notes and "from runtimeclass-scheduler" not in notes
    assert "kube-scheduler v1" not in notes and "--disable-admission-plugins" not in notes
    large = _notes({**PREDICATE, "labelNodes.enabled": "true"})
    assert "2/2 ready" in large and "1/1" not in large


def test_the_startup_taint_values_set_the_flag_and_the_node_policy_alike() -> None:
    """EKS managed node groups refuse taints under kubernetes.io/ (docs/autoscaling.md):
    a key of one's own goes to --startup-taint and to the node policy's startupTaint
    variable, which allows removing exactly that key. The defaults add no flag."""

    def rendered(values: dict[str, str]) -> tuple[list[str], str]:
        docs = template({**PREDICATE, "labelNodes.enabled": "true", **values})
        policy = next(
            d
            for d in docs
            if d["kind"] == "ValidatingAdmissionPolicy"
            and d["metadata"]["name"] == "runtimeclass-extender-node-labels"
        )
        variable = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "startupTaint")
        return [a for a in _extender_args(docs) if a.startswith("--startup-taint")], variable

    assert rendered({}) == ([], "'startup-taint.cluster-autoscaler.kubernetes.io/runtimeclass-labels'")
    own = {"labelNodes.startupTaint": "example.com/runtimeclass-labels", "labelNodes.startupTaintGrace": "90"}
    assert rendered(own) == (
        ["--startup-taint=example.com/runtimeclass-labels", "--startup-taint-grace=90"],
        "'example.com/runtimeclass-labels'",
    )
