"""The ``node-template`` command against the RuntimeClasses of deploy/examples: which classes a
node group's nodes run, what its template must carry for the autoscalers, and the snippets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from extender.cli import main
from extender.tools.commands import kubectl_main
from tests.support.paths import EXAMPLES

CLASSES = str(EXAMPLES / "runtimeclasses.yaml")
PREFIX = "runtimeclass.node-restriction.kubernetes.io"
GVISOR = f"{PREFIX}/gvisor"
KATA = f"{PREFIX}/kata-containers"
STARTUP = "startup-taint.cluster-autoscaler.kubernetes.io/runtimeclass-labels"
# A GKE Sandbox-style node pool: the gvisor class's selector, its taint, Linux.
SANDBOX = ("--label", "sandbox.gke.io/runtime=gvisor", "--label", "kubernetes.io/os=linux")
# An API server without the RuntimeClass admission plugin: every class with node rules
# needs its derived label in the template (the cases below that say so).
PLUGIN_OFF = "--runtimeclass-admission-plugin=off"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["node-template", "--cluster-file", CLASSES, *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_sandbox_group_runs_gvisor_and_runc_and_needs_their_labels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(
        capsys, PLUGIN_OFF, *SANDBOX, "--taint", "sandbox.gke.io/runtime=gvisor:NoSchedule"
    )
    assert status == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:5]}
    assert rows["gvisor"] == ["yes", f"{GVISOR}=true"]
    assert rows["runc"] == ["yes", f"{PREFIX}/runc=true"]
    assert rows["kata-containers"][:2] == ["no", "(needs"]
    assert rows["windows-hyperv"][0] == "no"
    assert "Its nodes run 2 of 4 RuntimeClasses." in err
    assert f"The template must carry, and does not yet: {GVISOR}=true, {PREFIX}/runc=true" in out
    # The autoscaler reads a pod's own tolerations: gvisor's pods get their class's
    # toleration at admission, runc's have none.
    assert "Pods of gvisor must tolerate" not in out
    assert (
        "Pods of runc must tolerate in their own spec" in out
        and "sandbox.gke.io/runtime=gvisor:NoSchedule" in out
    )
    # Each provider's way.
    assert f"k8s.io/cluster-autoscaler/node-template/label/{GVISOR}: true" in out
    assert f"capacity.cluster-autoscaler.kubernetes.io/labels: {GVISOR}=true,{PREFIX}/runc=true" in out
    assert f"--register-with-taints={STARTUP}=:NoSchedule" in out
    karpenter = out.split("# Karpenter NodePool\n")[1].split("\n\n")[0]
    assert yaml.safe_load(karpenter) == {
        "spec": {
            "template": {
                "metadata": {"labels": {GVISOR: "true", f"{PREFIX}/runc": "true"}},
                "spec": {"startupTaints": [{"key": STARTUP, "effect": "NoSchedule"}]},
            }
        }
    }
    assert "the kubelet refuses it" in out


def test_a_node_manifest_that_claims_a_class_it_cannot_run_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    node = tmp_path / "template.yaml"
    node.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": "t",
                    "labels": {"sandbox.gke.io/runtime": "gvisor", GVISOR: "true", KATA: "true"},
                },
            }
        )
    )
    status, out, _ = run(capsys, PLUGIN_OFF, "--node", str(node), "--provider", "karpenter")
    assert status == 1
    assert f"The template must not carry {KATA}: its nodes cannot run that class" in out
    assert "every label its nodes need" in out  # gvisor's is there; runc's needs kubernetes.io/os
    assert "# AWS" not in out and "# Karpenter NodePool" in out


def test_json_is_one_document_and_the_plugin_has_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    status = kubectl_main(
        ["node-template", "--cluster-file", CLASSES, PLUGIN_OFF, *SANDBOX, "-o", "json", "--provider", "aws"]
    )
    document = json.loads(capsys.readouterr().out)
    assert status == 0
    assert document["labels"] == {GVISOR: "true", f"{PREFIX}/runc": "true"}
    assert document["missing"] == document["labels"] and document["stray"] == []
    assert [c["name"] for c in document["runtimeClasses"] if c["runs"]] == ["gvisor", "runc"]
    assert set(document["snippets"]) == {"aws"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "give the template: --node FILE, or its labels with --label KEY=VALUE"),
        (("--node", "-", "--label", "a=b"), "give either --node or --label/--taint, not both"),
        (("--label", "a"), "--label a: expected KEY=VALUE"),
        (
            ("--label", "a=b", "--taint", "k=v:Sometimes"),
            "--taint k=v:Sometimes: expected KEY[=VALUE]:EFFECT",
        ),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    status, _, err = run(capsys, *argv)
    assert status == 2
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("prefix", "reason"),
    [
        (
            "Bad Prefix!",
            "must be a DNS subdomain such as runtimeclass.node-restriction.kubernetes.io: prefix part a "
            "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character",
        ),
        (
            "example.com/rc",
            "must be a DNS subdomain such as runtimeclass.node-restriction.kubernetes.io: it holds a '/' "
            "(the label key is PREFIX/CLASS)",
        ),
    ],
)
@pytest.mark.parametrize("command", ["node-template", "check", "check-pod-admission", "serve"])
def test_the_label_prefix_is_refused_as_serve_refuses_it(
    capsys: pytest.CaptureFixture[str], prefix: str, reason: str, command: str
) -> None:
    """Every command taking --node-label-prefix reads it with serve's own parser: the same
    reason, exit status 2, before anything is read."""
    argv = {
        "node-template": ["node-template", "--cluster-file", CLASSES, *SANDBOX],
        "check": ["check", CLASSES],
        "check-pod-admission": ["check-pod-admission"],
        # With a flag refused after the settings are read: a prefix let through fails, never serves.
        "serve": ["serve", "--cluster-file", CLASSES, "--leader-elect"],
    }[command]
    if command == "serve":
        status = main([*argv, "--node-label-prefix", prefix])
    else:
        with pytest.raises(SystemExit) as exited:
            main([*argv, "--node-label-prefix", prefix])
        status = int(str(exited.value.code))
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    expected = f"--node-label-prefix: invalid value {prefix!r}: {reason}"
    if command == "serve":
        assert err == f"runtimeclass-extender: error: {expected}\n"
    else:
        assert err.splitlines()[-1] == f"runtimeclass-extender {command}: error: argument {expected}"


def test_the_gke_aks_snippet_honours_the_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, PLUGIN_OFF, *SANDBOX, "--provider", "gke-aks", "--node-label-prefix", "example.com"
    )
    assert status == 0
    snippet = out.split("# GKE and AKS node pools\n")[1].splitlines()
    assert snippet == [
        "# GKE (POOL, CLUSTER: yours)",
        "gcloud container node-pools create POOL --cluster=CLUSTER "
        f"--node-labels=example.com/gvisor=true,example.com/runc=true --node-taints={STARTUP}=true:NoSchedule",
        "# AKS (GROUP, CLUSTER, POOL: yours)",
        "az aks nodepool add --resource-group GROUP --cluster-name CLUSTER --name POOL "
        f"--labels example.com/gvisor=true example.com/runc=true --node-taints {STARTUP}=true:NoSchedule",
    ]


def test_where_the_plugin_runs_a_class_of_a_selector_alone_needs_no_label(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """By default (a cluster file: the plugin as kube-apiserver ships it, on), a class
    whose rules are its scheduling.nodeSelector alone gets no label requirement (pod
    admission leaves its pods to the plugin's selector), so a GKE Sandbox pool needs
    nothing of ours: gvisor and runc show their selectors, no label is missing, and the
    class's tolerations (merged by the plugin, all of them) need none of the pods' own."""
    status, out, err = run(capsys, *SANDBOX, "--taint", "sandbox.gke.io/runtime=gvisor:NoSchedule")
    assert status == 0
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines()[1:5]}
    assert (
        rows["gvisor"] == "yes (none: its pods carry scheduling.nodeSelector sandbox.gke.io/runtime=gvisor)"
    )
    assert rows["runc"] == "yes (none: its pods carry scheduling.nodeSelector kubernetes.io/os=linux)"
    assert "must carry" not in out and "# AWS" not in out
    assert "The template needs no derived label" in out
    assert (
        "The API server runs the RuntimeClass admission plugin (as kube-apiserver ships it; "
        "--runtimeclass-admission-plugin=off if yours does not)." in out
    )
    assert "Pods of gvisor must tolerate" not in out and "Pods of runc must tolerate" in out
    assert "Its nodes run 2 of 4 RuntimeClasses." in err
    # The flag alone says on; -o json says which was taken.
    status = main(
        [
            "node-template",
            "--cluster-file",
            CLASSES,
            *SANDBOX,
            "--runtimeclass-admission-plugin",
            "-o",
            "json",
        ]
    )
    document = json.loads(capsys.readouterr().out)
    assert status == 0 and document["runtimeClassAdmissionPlugin"] is True and document["labels"] == {}
    assert {c["name"]: c["selector"] for c in document["runtimeClasses"] if c["runs"]} == {
        "gvisor": {"sandbox.gke.io/runtime": "gvisor"},
        "runc": {"kubernetes.io/os": "linux"},
    }


def test_a_class_with_rules_the_plugin_cannot_merge_needs_its_label_either_way(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A class selected by the node-selector-term annotation (which the plugin never
    reads) needs its derived label in the template whether the plugin runs or not."""
    classes = tmp_path / "classes.yaml"
    classes.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {
                    "name": "kata",
                    "annotations": {
                        "runtimeclass-extender.dev/node-selector-term": (
                            '{"matchExpressions": [{"key": "katacontainers.io/kata-runtime", '
                            '"operator": "In", "values": ["true"]}]}'
                        )
                    },
                },
                "handler": "kata",
            }
        )
    )
    for plugin in ("on", "off"):
        status = main(
            [
                "node-template",
                "--cluster-file",
                str(classes),
                "--label",
                "katacontainers.io/kata-runtime=true",
                f"--runtimeclass-admission-plugin={plugin}",
                "--provider",
                "karpenter",
            ]
        )
        out = capsys.readouterr().out
        assert status == 0
        assert f"The template must carry, and does not yet: {PREFIX}/kata=true" in out, plugin
