"""``check-pod-admission`` against the test API server: policies that run, policies that do
not (an API server that serves the API with the feature gate off admits pods untouched),
the label requirement and the policy file, and the errors a user can fix."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from extender.admission.pod_table import (
    ADMITTED_BY_PLUGIN_ANNOTATION,
    ADMITTED_LABEL,
    admitted_by_plugin,
    table,
    table_spec,
)
from extender.admission.probe import Admission, apply_patch, differences
from extender.cli import main
from extender.cluster.class_labels import ClassLabels
from extender.cluster.objects import runtime_class_from_api
from extender.policy_file import load_policy
from tests.support.apiserver import PODS, RUNTIME_CLASSES, SECRETS, FakeApiServer
from tests.support.manifests import PREDICATE_LABELS, render
from tests.support.pod_cases import (
    CLASSES,
    DEFAULT_SCHEDULER,
    LONG,
    NAMESPACES,
    POD_ADMISSION,
    RUNTIME_HANDLER_POLICY,
    TABLE,
    TABLES,
)

SHORT = [rc for rc in CLASSES if rc["metadata"]["name"] != LONG]
PREFIX = "runtimeclass.node-restriction.kubernetes.io"


def _pod_policies(overlay: str, policy: Path | None = None) -> list[dict[str, Any]]:
    """The overlay's pod admission (the CRD, the policies and their bindings, copies:
    ``render`` caches what it renders) and the table as the extender's leader writes it
    for ``SHORT`` (with --label-nodes with the node labels, under ``policy``)."""
    docs = [
        copy.deepcopy(d)
        for d in render(overlay)
        if d["metadata"]["name"] in (POD_ADMISSION, "podadmissiontables.runtimeclass-extender.dev")
    ]
    rules = ClassLabels(PREFIX, load_policy(policy))
    entries = table((runtime_class_from_api(rc) for rc in SHORT), rules)
    return [
        *docs,
        {
            "apiVersion": TABLES.api_version,
            "kind": TABLES.kind,
            "metadata": {"name": TABLE},
            "spec": table_spec(entries, label_nodes=overlay.endswith("label-nodes")),
        },
    ]


async def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = await asyncio.to_thread(main, ["check-pod-admission", *argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def classes(fake_apiserver: FakeApiServer) -> FakeApiServer:
    for rc in SHORT:
        fake_apiserver.add(RUNTIME_CLASSES, rc)
    return fake_apiserver


async def test_policies_that_run_pass_and_store_nothing(
    classes: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    classes.apply(_pod_policies("overlays/predicate-mode"))
    status, out, err = await _run(capsys, "--kubeconfig", str(fake_kubeconfig))
    assert status == 0, out + err
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["RUNTIMECLASS", "SCHEDULER", "OVERHEAD", "NODE", "LABEL", "RESULT"]
    by_class = {row[0]: row for row in rows[1:]}
    assert set(by_class) == {rc["metadata"]["name"] for rc in SHORT}
    assert by_class["gvisor"][1:] == ["runtimeclass-scheduler", "cpu=250m,memory=64Mi", "(none)", "ok"]
    assert by_class["plain"][1:] == ["runtimeclass-scheduler", "(none)", "(none)", "ok"]
    assert "every probe pod admitted as it should be" in err
    assert "The API server does not run the RuntimeClass admission plugin." in err
    # Dry runs: every probe admitted, none stored.
    assert classes.objects(PODS) == []
    posts = [r for r in classes.requests if r.verb == "post"]
    assert posts and all(dict(r.query).get("dryRun") == "All" for r in posts)


async def test_policies_that_do_not_run_are_found_out(
    classes: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a 1.36 server with MutatingAdmissionPolicy=false does: it accepted the
    policies (and their table, current), and admits every pod untouched."""
    classes.register(TABLES)
    classes.add(TABLES, _pod_policies("overlays/predicate-mode")[-1])
    status, out, err = await _run(capsys, "--kubeconfig", str(fake_kubeconfig), "--runtimeclass", "gvisor")
    assert status == 1
    assert out.splitlines()[1].split(None, 4) == [
        "gvisor",
        "default-scheduler",
        "(none)",
        "(none)",
        "differs: schedulerName default-scheduler, want runtimeclass-scheduler; "
        "overhead (none), want cpu=250m,memory=64Mi; annotations (none), "
        "want cluster-autoscaler.kubernetes.io/safe-to-evict=false,karpenter.sh/do-not-disrupt=true; "
        "no pod admission of ours ran for this pod in namespace default: the API server does not run "
        "the MutatingAdmissionPolicy (its feature gate off), or no binding or webhook selects the namespace",
    ]
    assert "1 of 1 RuntimeClasses admitted otherwise than they should be" in err


async def test_the_label_requirement_follows_the_policy_file(
    classes: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The table the extender writes with the bundled policy (and label-nodes, which the
    table says: the check expects the label requirement from it) agrees with a check
    under that policy; a policy file that makes every class have node rules
    (RuntimeHandler) does not agree with it until the extender runs with the same file
    and writes the table again, and the check says for which classes."""
    classes.apply(_pod_policies(PREDICATE_LABELS))
    kubeconfig = ["--kubeconfig", str(fake_kubeconfig), "-o", "json"]
    status, out, _ = await _run(capsys, *kubeconfig)
    assert status == 0, out
    results = {r["runtimeClass"]: r for r in json.loads(out)["results"]}
    assert results["gvisor"]["got"]["nodeLabel"] == f"{PREFIX}/gvisor=true"
    assert results["kata"]["got"]["nodeLabel"] == "(none)"
    policy = tmp_path / "policy.yaml"
    policy.write_text(RUNTIME_HANDLER_POLICY, encoding="utf-8")
    status, out, _ = await _run(capsys, *kubeconfig, "--policy-file", str(policy))
    assert status == 1
    differing = {r["runtimeClass"] for r in json.loads(out)["results"] if r["differences"]}
    assert differing == {"kata", "plain", "empty-selector", "empty-overhead"}
    classes.apply(_pod_policies(PREDICATE_LABELS, policy))
    status, out, _ = await _run(capsys, *kubeconfig, "--policy-file", str(policy))
    assert status == 0, out


async def test_what_a_user_can_fix_is_one_line(
    classes: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = ["--kubeconfig", str(fake_kubeconfig)]
    status, _, err = await _run(capsys, *kubeconfig, "-n", "kube-system")
    assert status == 2 and "pod admission leaves that namespace out" in err and "Traceback" not in err
    status, _, err = await _run(capsys, *kubeconfig, "--runtimeclass", "nope")
    assert status == 2 and "no RuntimeClass named nope" in err
    # No right to create pods (not even a dry run): says what the check needs.
    classes.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "reader"},
                "rules": [{"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": ["list"]}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
                "subjects": [{"kind": "User", "name": "ann"}],
            },
        ]
    )
    reader = classes.write_kubeconfig(tmp_path / "reader", user_name="ann")
    status, _, err = await _run(capsys, "--kubeconfig", str(reader))
    assert status == 2 and "cannot create pods in namespace default (dry run)" in err
    await classes.stop()
    status, _, err = await _run(capsys, *kubeconfig)
    assert status == 2 and "cannot reach" in err and "Traceback" not in err


def test_the_expected_pod_is_the_webhooks_patch_applied() -> None:
    pod = {"spec": {"schedulerName": "default-scheduler", "nodeSelector": {"a/b": "c"}}}
    patched = apply_patch(
        pod,
        [
            {"op": "replace", "path": "/spec/schedulerName", "value": "s"},
            {"op": "add", "path": "/spec/nodeSelector/x~1y~0z", "value": "true"},
            {"op": "add", "path": "/spec/overhead", "value": {"cpu": "1"}},
        ],
    )
    assert patched["spec"] == {
        "schedulerName": "s",
        "nodeSelector": {"a/b": "c", "x/y~z": "true"},
        "overhead": {"cpu": "1"},
    }
    assert pod["spec"]["schedulerName"] == "default-scheduler"  # a copy
    for bad in ({"op": "remove", "path": "/spec"}, {"op": "replace", "path": "/spec/missing", "value": 1}):
        with pytest.raises(ValueError):
            apply_patch(pod, [bad])


def test_differences_compare_by_value_and_only_the_prefixs_labels() -> None:
    want = Admission({"spec": {"schedulerName": "s", "overhead": {"cpu": "250m"}, "nodeSelector": {}}})
    got = Admission(
        {"spec": {"schedulerName": "s", "overhead": {"cpu": "0.25"}, "nodeSelector": {"zone": "a"}}}
    )
    assert differences(want, got, label_prefix=PREFIX) == []
    labelled = Admission(
        {"spec": {"schedulerName": "s", "overhead": {"cpu": "250m"}, "nodeSelector": {f"{PREFIX}/x": "true"}}}
    )
    assert differences(want, labelled, label_prefix=PREFIX) == [f"node label {PREFIX}/x=true, want (none)"]
    assert differences(want, Admission(None, "denied: no"), label_prefix=PREFIX) == ["refused: denied: no"]
    assert differences(Admission(None, "conflict"), got, label_prefix=PREFIX) == [
        "admitted, but the pod webhook refuses it: conflict"
    ]


def test_differences_compare_the_admitted_mark_only_where_it_is_read() -> None:
    """The default-scheduler mode's guard reads the mark; in predicate mode the policies
    set it and the pod webhook does not, and nothing reads it."""
    want = Admission({"metadata": {}, "spec": {"schedulerName": "s"}})
    marked = Admission({"metadata": {"labels": {ADMITTED_LABEL: "true"}}, "spec": {"schedulerName": "s"}})
    assert differences(want, marked, label_prefix=PREFIX) == [f"pod labels {ADMITTED_LABEL}=true, want (none)"]
    assert differences(marked, want, label_prefix=PREFIX) == [f"pod labels (none), want {ADMITTED_LABEL}=true"]
    assert differences(want, marked, label_prefix=PREFIX, marks=False) == []
    assert differences(marked, want, label_prefix=PREFIX, marks=False) == []


def test_differences_compare_the_autoscalers_annotations_and_the_noschedule_tolerations() -> None:
    toleration = {"key": "sandbox.gke.io/runtime", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"}
    # DefaultTolerationSeconds (plugin/pkg/admission/defaulttolerationseconds) adds these.
    server_added = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ]
    want = Admission(
        apply_patch(
            {"metadata": {"annotations": {"team": "a"}}, "spec": {"schedulerName": "s"}},
            [
                {"op": "add", "path": "/spec/tolerations", "value": []},
                {"op": "add", "path": "/spec/tolerations/-", "value": toleration},
                {"op": "add", "path": "/metadata/annotations/karpenter.sh~1do-not-disrupt", "value": "true"},
            ],
        )
    )
    assert want.pod is not None and want.pod["spec"]["tolerations"] == [toleration]
    same = {
        "metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true", "other": "x"}},
        "spec": {"schedulerName": "s", "tolerations": [toleration, *server_added]},
    }
    assert differences(want, Admission(same), label_prefix=PREFIX) == []
    bare = {"metadata": {}, "spec": {"schedulerName": "s", "tolerations": server_added}}
    assert differences(want, Admission(bare), label_prefix=PREFIX) == [
        "annotations (none), want karpenter.sh/do-not-disrupt=true",
        "NoSchedule tolerations (none), want sandbox.gke.io/runtime=gvisor:NoSchedule",
    ]


async def test_a_stale_or_missing_table_is_named(
    classes: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where the policies admit a class otherwise than they should, the check says when
    the table's entry for it is the cause: stale, missing, or the whole table gone."""
    docs = _pod_policies("overlays/predicate-mode")
    table_object = docs[-1]
    table_object["spec"]["runtimeClasses"]["gvisor"] = {"overhead": {"cpu": "1"}}
    del table_object["spec"]["runtimeClasses"]["kata"]
    classes.apply(docs)
    kubeconfig = ["--kubeconfig", str(fake_kubeconfig), "-o", "json"]
    status, out, _ = await _run(capsys, *kubeconfig)
    assert status == 1
    results = {r["runtimeClass"]: r["differences"] for r in json.loads(out)["results"]}
    assert results["gvisor"][-1] == "its entry in the PodAdmissionTable runtimeclass-extender is stale (is an extender leader running?)"
    assert results["kata"][-1] == "its entry in the PodAdmissionTable runtimeclass-extender is missing (is an extender leader running?)"
    assert results["plain"] == []
    classes.delete(TABLES, TABLE)
    status, out, _ = await _run(capsys, *kubeconfig)
    assert status == 1
    unrouted = json.loads(out)["results"][0]["differences"]
    assert unrouted[0] == "schedulerName default-scheduler, want runtimeclass-scheduler"
    assert unrouted[-1] == "the PodAdmissionTable runtimeclass-extender is missing (is an extender leader running?)"


async def test_a_table_kind_the_api_server_does_not_serve_is_named_with_what_installs_it(
    classes: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The policies applied without their CustomResourceDefinition (an upgrade that
    skipped it): their param never exists, so every pod comes back unrouted; the check
    says which CRD is missing and how to install it."""
    classes.apply([d for d in _pod_policies("overlays/predicate-mode") if d["kind"] not in ("CustomResourceDefinition", TABLES.kind)])
    status, out, _ = await _run(capsys, "--kubeconfig", str(fake_kubeconfig), "-o", "json")
    assert status == 1
    unrouted = json.loads(out)["results"][0]["differences"]
    assert unrouted[-1].startswith(
        "the API server does not serve PodAdmissionTables: if the pod admission policies are installed, "
        "install the PodAdmissionTable CustomResourceDefinition podadmissiontables.runtimeclass-extender.dev"
    ), unrouted


def test_without_a_kubeconfig_the_hint_names_only_what_it_takes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It creates pods through the API server: no --cluster-file (which it does not take)
    in the hint, unlike the commands that can read a file."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    status = main(["check-pod-admission"])
    err = capsys.readouterr().err
    assert status == 2
    assert err == (
        "runtimeclass-extender: error: no Kubernetes API server configured: not running in a pod with a "
        "service account, no --kubeconfig given, KUBECONFIG is not set and ~/.kube/config does not exist. "
        "Pass --kubeconfig PATH (or set KUBECONFIG) and optionally --context NAME\n"
    )
    status = main(["classes"])
    assert status == 2
    assert capsys.readouterr().err.rstrip("\n").endswith(
        "or read the cluster from a file with --cluster-file PATH"
    )


def _default_scheduler_install(server: FakeApiServer) -> None:
    """The default-scheduler placement's pod admission (the policies, the guard, the
    CRD), its namespace labelled as the overlay labels it, and the table as the leader
    writes it for ``SHORT`` (with the plugin on where the server runs it)."""
    docs = [
        copy.deepcopy(d)
        for d in render("overlays/default-scheduler")
        if d["metadata"]["name"]
        in (POD_ADMISSION, POD_ADMISSION + "-required", "podadmissiontables.runtimeclass-extender.dev")
    ]
    rules = ClassLabels(PREFIX, load_policy())
    entries = table((runtime_class_from_api(rc) for rc in SHORT), rules)
    docs.append(
        {
            "apiVersion": TABLES.api_version,
            "kind": TABLES.kind,
            "metadata": {"name": TABLE},
            "spec": table_spec(entries, label_nodes=True, admission_plugin=server.runtimeclass_plugin),
        }
    )
    server.register(NAMESPACES)
    for namespace in DEFAULT_SCHEDULER.namespaces():
        server.add(NAMESPACES, namespace)
    if server.runtimeclass_plugin:
        # As the leader writes it: the classes the plugin constrains fully.
        server.modify(
            NAMESPACES,
            "runtimeclass-extender",
            {"metadata": {"annotations": {ADMITTED_BY_PLUGIN_ANNOTATION: ",".join(admitted_by_plugin(entries))}}},
        )
    server.apply(docs)


async def test_the_default_scheduler_placement_is_checked_as_the_install_says_it(
    classes: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The extender's namespace says the cluster's default scheduler places the pods:
    the check expects each probe pod unrouted, with its class's label requirement and
    marked admitted, and says which placement is in force."""
    _default_scheduler_install(classes)
    status, out, err = await _run(capsys, "--kubeconfig", str(fake_kubeconfig), "-o", "json")
    assert status == 0, out + err
    report = json.loads(out)
    assert report["placement"] == "default-scheduler"
    assert report["runtimeClassAdmissionPlugin"] is False
    by_class = {r["runtimeClass"]: r for r in report["results"]}
    assert by_class["gvisor"]["got"]["schedulerName"] == "default-scheduler"
    assert by_class["gvisor"]["got"]["nodeLabel"] == f"{PREFIX}/gvisor=true"
    assert all(r["differences"] == [] for r in report["results"]), report
    status, _, err = await _run(capsys, "--kubeconfig", str(fake_kubeconfig))
    assert status == 0 and "Placement: default-scheduler (namespace runtimeclass-extender says so)" in err


@pytest.fixture
async def plugin_on() -> Any:
    """An API server that runs the RuntimeClass admission plugin, as every managed one
    does, with the classes."""
    server = FakeApiServer(runtimeclass_plugin=True)
    for rc in SHORT:
        server.add(RUNTIME_CLASSES, rc)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_with_the_plugin_on_a_correct_install_is_ok_and_a_class_it_constrains_is_not_marked(
    plugin_on: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default-scheduler placement on an API server that runs the RuntimeClass
    admission plugin: every probe pod carries what the plugin merged (the class's
    overhead, selector and tolerations); a pod of a class whose rules are its selector
    is left as the plugin made it (no label requirement, no mark: the mutating policy is
    not invoked for it), one of a class with more rules gets its label and the mark.
    The check finds the plugin and expects all that: ok."""
    _default_scheduler_install(plugin_on)
    kubeconfig = plugin_on.write_kubeconfig(tmp_path / "kubeconfig")
    status, out, err = await _run(capsys, "--kubeconfig", str(kubeconfig), "-o", "json")
    assert status == 0, out + err
    report = json.loads(out)
    assert report["runtimeClassAdmissionPlugin"] is True
    by_class = {r["runtimeClass"]: r for r in report["results"]}
    assert by_class["gvisor"]["got"] == {
        "schedulerName": "default-scheduler",
        "overhead": "cpu=250m,memory=64Mi",
        "nodeLabel": "(none)",
        "refusal": "",
    }
    assert by_class["term-only"]["got"]["nodeLabel"] == f"{PREFIX}/term-only=true"
    assert all(r["differences"] == [] for r in report["results"]), report
    status, _, err = await _run(capsys, "--kubeconfig", str(kubeconfig))
    assert status == 0 and "The API server runs the RuntimeClass admission plugin." in err


async def test_a_guard_left_behind_by_a_move_is_named(
    classes: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Moved from the default-scheduler placement with kubectl apply (which deletes
    nothing): the guard stays, inert (no namespace carries the placement's label), and
    the check says to delete it."""
    _default_scheduler_install(classes)
    classes.modify(NAMESPACES, "runtimeclass-extender", {"metadata": {"labels": {"runtimeclass-extender.dev/placement": None}}})
    _, out, err = await _run(capsys, "--kubeconfig", str(fake_kubeconfig), "-o", "json")
    assert json.loads(out)["placement"] == "runtimeclass-scheduler"
    assert "warning: the default-scheduler placement's guard" in err and "kubectl delete" in err


async def test_the_second_schedulers_identity_left_behind_by_a_move_is_named(
    classes: FakeApiServer, fake_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Moved to the default-scheduler placement with kubectl apply: the second
    scheduler's token Secret stays (a credential nobody uses); the check names it."""
    _default_scheduler_install(classes)
    status, _, err = await _run(capsys, "--kubeconfig", str(fake_kubeconfig))
    assert status == 0 and "left behind" not in err
    classes.add(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "runtimeclass-extender-token", "namespace": "runtimeclass-extender"},
            "type": "kubernetes.io/service-account-token",
        },
    )
    status, _, err = await _run(capsys, "--kubeconfig", str(fake_kubeconfig))
    assert status == 0
    assert "the second scheduler's identity and rights are left behind" in err
    assert "secrets/runtimeclass-extender-token" in err
