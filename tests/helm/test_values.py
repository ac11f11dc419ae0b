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
# The default-scheduler placement (deploy/overlays/default-scheduler) by its two values.
DEFAULT_SCHEDULER = {"labelNodes.enabled": "true", "labelNodes.placement": "default-scheduler"}
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
    ({"mode": "predicate-mode"}, "- at '/mode': value must be one of 'predicate', 'alongside-admission'"),
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
    (
        {"labelNodes.placement": "kube-scheduler"},
        "- at '/labelNodes/placement': value must be one of 'runtimeclass-scheduler', 'default-scheduler'",
    ),
    ({"tls": "null"}, "- at '': missing property 'tls'"),
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
        {"labelNodes.enabled": "true", "podAdmission.mode": "none"},
        "- labelNodes.enabled=true needs pod admission (podAdmission.mode auto, policy, webhook or both, not none)",
    ),
    (
        {"labelNodes.enabled": "true", "mode": "alongside-admission"},
        "- labelNodes.enabled=true is large-cluster mode, which is predicate mode (deploy/overlays/large-cluster): "
        "set mode=predicate, not alongside-admission",
    ),
    (
        {"tls.enabled": "true", "mode": "alongside-admission"},
        "- tls.enabled=true is deploy/overlays/tls, predicate mode",
    ),
    # An autoscaled cluster in predicate mode: its autoscaler cannot see the classes'
    # rules, and pods of a class would pend for good (docs/autoscaling.md).
    (
        {"nodeAutoscaling.enabled": "true"},
        "- nodeAutoscaling.enabled=true in predicate mode needs labelNodes.enabled=true: cluster-autoscaler and "
        "Karpenter never call the extender (kubernetes/autoscaler#506)",
    ),
    (
        {"tls.enabled": "true", "labelNodes.enabled": "true"},
        "- tls.enabled=true and labelNodes.enabled=true: no shipped scheduler configuration has both",
    ),
    (
        {"leaderElection.enabled": "false", "certManager.enabled": "true"},
        "- leaderElection.enabled=false leaves no replica to act, and these need one: podAdmission.mode=auto "
        "(the pod admission table; webhook or none keep none), requeueing (predicate mode requeues unless "
        "requeuePendingPods.enabled=false)",
    ),
    (
        {"leaderElection.enabled": "false", "mode": "alongside-admission", "podAdmission.mode": "none"},
        "these need one: certManager.enabled=false (the leader renews the self-managed webhook certificates)",
    ),
    (
        {
            "leaderElection.enabled": "false",
            "certManager.enabled": "true",
            "mode": "alongside-admission",
            "podAdmission.mode": "webhook",
            "auditRunningPods.enabled": "true",
        },
        "these need one: auditRunningPods.enabled=true",
    ),
    # The default-scheduler placement: the node labels place the pods, and only the pod
    # admission policies give them their requirement; no kube-scheduler runs, for tls to
    # talk to or requeueing to nudge pods for.
    (
        {"labelNodes.placement": "default-scheduler"},
        "- labelNodes.placement=default-scheduler needs labelNodes.enabled=true",
    ),
    *(
        (
            {**DEFAULT_SCHEDULER, "podAdmission.mode": mode},
            f"- labelNodes.placement=default-scheduler needs pod admission by the policies (podAdmission.mode auto "
            f"or policy, not {mode})",
        )
        for mode in ("webhook", "both", "none")
    ),
    (
        {**DEFAULT_SCHEDULER, "tls.enabled": "true"},
        "- labelNodes.placement=default-scheduler runs no kube-scheduler: tls.enabled=true",
    ),
    (
        {**DEFAULT_SCHEDULER, "requeuePendingPods.enabled": "true"},
        "- labelNodes.placement=default-scheduler has no requeueing",
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
    error = refusal({"tls.enabled": "true", "labelNodes.enabled": "true", "mode": "alongside-admission"})
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
    assert _requeueing({})
    assert not _requeueing({"mode": "alongside-admission"})
    assert not _requeueing({"requeuePendingPods.enabled": "false"})
    assert _requeueing({"mode": "alongside-admission", "requeuePendingPods.enabled": "true"})
    assert _requeueing({"requeuePendingPods.enabled": "null"})


def test_the_default_scheduler_placement_does_not_requeue() -> None:
    """overlays/default-scheduler has no requeueing (no pod waits for runtimeclass-scheduler):
    null leaves it off, as false does."""
    assert not _requeueing(DEFAULT_SCHEDULER)
    assert not _requeueing({**DEFAULT_SCHEDULER, "requeuePendingPods.enabled": "false"})
    assert _requeueing({"labelNodes.enabled": "true"})


DEFAULT_SCHEDULER_NEEDS_POLICIES = (
    "labelNodes.placement=default-scheduler needs the pod admission policies, and "
    "podAdmission.mode auto chose the pod webhook"
)


def test_the_default_scheduler_placement_fails_where_auto_would_choose_the_webhook() -> None:
    """What the schema cannot see: auto on an API server without MutatingAdmissionPolicy
    (helm template without --api-versions is one) would choose the pod webhook, which has
    no default-scheduler placement; the render fails, saying what to do. With the
    policies named, or on a 1.36 server, it renders them."""
    error = refusal(DEFAULT_SCHEDULER)
    assert DEFAULT_SCHEDULER_NEEDS_POLICIES in error, error
    assert "--api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" in error
    assert "podAdmission.mode=policy" in error
    assert "keep labelNodes.placement=runtimeclass-scheduler" in error
    for docs in (
        template(DEFAULT_SCHEDULER, api_versions=SERVER_1_36),
        template({**DEFAULT_SCHEDULER, "podAdmission.mode": "policy"}, api_versions=()),
    ):
        kinds = {d["kind"] for d in docs}
        assert "MutatingAdmissionPolicy" in kinds and "MutatingWebhookConfiguration" not in kinds
        assert "--placement=default-scheduler" in _extender_args(docs)


def test_predicate_mode_without_requeueing_leaves_out_the_component_and_nothing_else() -> None:
    chart, overlay = template({"requeuePendingPods.enabled": "false"}), render("overlays/predicate-mode")
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
    assert "install into a namespace of its own" in refusal({}, namespace=namespace)
    docs = template({"namespace.create": "false"}, namespace=namespace)
    assert not [d for d in docs if d["kind"] == "Namespace"]
    assert {d["metadata"].get("namespace") for d in docs if "namespace" in d["metadata"]} == {namespace}


# --- NOTES.txt ----------------------------------------------------------------------------


def _notes(values: dict[str, str], namespace: str = "other") -> str:
    """NOTES.txt as ``helm install`` prints it (a client-side dry run: no cluster)."""
    args = ["install", "runtimeclass-extender", str(CHART), "--namespace", namespace, "--dry-run=client"]
    args += [flag for k, v in values.items() for flag in ("--set", f"{k}={v}")]
    result = run_helm(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("\nNOTES:\n", 1)[1]


def _commands(notes: str) -> list[str]:
    return [line.strip() for line in notes.splitlines() if line.strip().startswith(("kubectl", "curl"))]


def test_notes_say_what_to_check_next_in_the_release_namespace() -> None:
    notes = _notes({})
    commands = _commands(notes)
    for needed in (
        "kubectl -n other rollout status deployment/runtimeclass-scheduler",
        "curl -s http://127.0.0.1:8081/readyz",
        "kubectl -n other get leases",
        "kubectl -n other get secret runtimeclass-extender-webhook-certificate",
        "kubectl get validatingwebhookconfiguration,mutatingwebhookconfiguration runtimeclass-extender \\",
        "kubectl get events --field-selector reason=FailedScheduling",
    ):
        assert needed in commands, needed
    namespaced = [c for c in commands if c.startswith("kubectl") and " -n " in c]
    assert namespaced and all(" -n other " in c for c in namespaced)
    assert "one release per cluster" in notes
    assert "--disable-admission-plugins=RuntimeClass" in notes


def test_notes_warn_of_an_image_no_registry_serves() -> None:
    """The chart's default repository, runtimeclass-extender, is Docker Hub's
    library/runtimeclass-extender, which does not exist: the pods would never start."""
    assert "WARNING: the extender image runtimeclass-extender:" in _notes({})
    assert "--set extender.image.repository=REGISTRY/runtimeclass-extender" in _notes({})
    for repository in ("ghcr.io/example/runtimeclass-extender", "example/runtimeclass-extender"):
        assert "WARNING" not in _notes({"extender.image.repository": repository}), repository


def test_notes_follow_the_parts() -> None:
    notes = _notes({"tls.enabled": "true", "certManager.enabled": "true", "namespace.create": "false"})
    commands = _commands(notes)
    assert "kubectl -n other get secret runtimeclass-extender-tls" in commands
    assert "kubectl -n other get certificate runtimeclass-extender-webhook" in commands
    assert "kubectl -n other get secret runtimeclass-extender-webhook-certificate" not in commands
    assert "kubectl label namespace other runtimeclass-extender.dev/webhook=ignore" in commands
    large = _commands(_notes({"labelNodes.enabled": "true", "monitoring.enabled": "true"}))
    assert "kubectl get events --field-selector reason=RuntimeClassFitsNoNode" in large
    assert "kubectl get events --field-selector reason=RuntimeClassNodesUnavailable" in large
    assert "kubectl -n other get podmonitor,prometheusrule runtimeclass-extender" in large
    alongside = _notes({"mode": "alongside-admission", "podAdmission.mode": "none"})
    assert "--disable-admission-plugins" not in alongside
    assert "kubectl get validatingwebhookconfiguration runtimeclass-extender \\" in _commands(alongside)


def test_notes_say_how_to_check_that_the_pod_admission_policies_run() -> None:
    """A served policy is not a running one (a 1.36 server with the feature gate off):
    where the chart installs the policies, the notes give the check that proves them;
    with the webhook alone they do not."""
    policy = _notes({"podAdmission.mode": "policy"})
    assert "runtimeclass-extender check-pod-admission --namespace default" in policy
    assert "Parts: the RuntimeClass webhook, the pod admission policies," in policy
    webhook = _notes({"podAdmission.mode": "webhook"})
    assert "check-pod-admission" not in webhook
    assert "Parts: the RuntimeClass webhook, the pod webhook," in webhook
    assert "kubectl get podadmissiontable runtimeclass-extender -o yaml" in policy
    large = _notes({"podAdmission.mode": "policy", "labelNodes.enabled": "true"})
    assert "Parts: the RuntimeClass webhook, the pod admission policies," in large
    assert "pod webhook" not in large.split("Parts:", 1)[1].split(";", 1)[0]
    assert "runtimeclass-extender check-pod-admission --namespace default --label-nodes" in large


def test_notes_in_the_default_scheduler_placement_check_what_it_runs() -> None:
    """No kube-scheduler runs: the rollout of the extender alone, its one Lease, the table
    and a dry-run pod of each class that gets its label requirement and keeps its
    schedulerName, the default scheduler's events; nothing of runtimeclass-scheduler's."""
    notes = _notes({**DEFAULT_SCHEDULER, "podAdmission.mode": "policy"})
    commands = _commands(notes)
    for needed in (
        "kubectl -n other rollout status deployment/runtimeclass-scheduler",
        "kubectl get podadmissiontable runtimeclass-extender -o yaml",
        "kubectl get events --field-selector reason=RuntimeClassFitsNoNode",
    ):
        assert needed in commands, needed
    assert "no kube-scheduler container runs in this placement" in notes.replace("\n   ", " ")
    assert "every pod 1/1 ready" in notes and "2/2" not in notes
    assert (
        "runtimeclass-extender check-pod-admission --namespace default --label-nodes "
        "--scheduler-name default-scheduler" in notes
    )
    assert "keep schedulerName default-scheduler" in notes.replace("\n   ", " ")
    assert "runtimeclass-extender-pod-admission-required" in notes
    assert (
        "Parts: the RuntimeClass webhook, the pod admission policies, node labels, the placement's guard,"
        in notes
    )
    # Nothing of the second scheduler: its Lease, its events, its image, predicate mode's
    # API server flag (the RuntimeClass admission plugin may stay on).
    assert "kube-scheduler's" not in notes and "from runtimeclass-scheduler" not in notes
    assert "kube-scheduler v1" not in notes and "--disable-admission-plugins" not in notes
    large = _notes({"labelNodes.enabled": "true"})
    assert "--scheduler-name" not in large and "2/2 ready" in large


def test_the_startup_taint_values_set_the_flag_and_the_node_policy_alike() -> None:
    """EKS managed node groups refuse taints under kubernetes.io/ (docs/autoscaling.md):
    a key of one's own goes to --startup-taint and to the node policy's startupTaint
    variable, which allows removing exactly that key. The defaults add no flag."""

    def rendered(values: dict[str, str]) -> tuple[list[str], str]:
        docs = template({"labelNodes.enabled": "true", **values})
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
