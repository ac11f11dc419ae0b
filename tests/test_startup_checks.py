"""extender.startup_checks: configurations that start but can only answer one way."""

from __future__ import annotations

from extender.cluster.state import ClusterState
from extender.policy_file import load_policy
from extender.startup_checks import configuration_warnings
from policies.objects import NodeView, RuntimeClassView
from policies.registry import Policy


def _state(nodes: int, classes: int) -> ClusterState:
    state = ClusterState()
    state.nodes.replace(NodeView(f"n{i}") for i in range(nodes))
    state.runtime_classes.replace(RuntimeClassView(f"rc{i}", "runc") for i in range(classes))
    return state


def test_a_usable_configuration_has_no_warning() -> None:
    assert configuration_warnings(cluster_file="c.yaml", state=_state(2, 1), policy=load_policy()) == []


def test_an_empty_cluster_file_says_what_it_means() -> None:
    (warning,) = configuration_warnings(cluster_file="c.yaml", state=_state(0, 0), policy=load_policy())
    assert "c.yaml holds 0 nodes and 0 RuntimeClasses" in warning
    assert "rejected" in warning and "fits no node" in warning
    (warning,) = configuration_warnings(cluster_file="c.yaml", state=_state(0, 1), policy=load_policy())
    assert "0 nodes" in warning and "RuntimeClasses" not in warning
    (warning,) = configuration_warnings(cluster_file="c.yaml", state=_state(1, 0), policy=load_policy())
    assert "0 RuntimeClasses" in warning and "fits no node" in warning


def test_an_empty_live_cluster_is_no_warning() -> None:
    # A watch may well start on an empty cluster (and the state fills in later).
    assert configuration_warnings(cluster_file=None, state=_state(0, 0), policy=load_policy()) == []


def test_a_policy_without_predicates_passes_every_node() -> None:
    (warning,) = configuration_warnings(cluster_file=None, state=_state(1, 1), policy=Policy(()))
    assert "enables no predicates" in warning and "every node passes" in warning


def test_label_nodes_without_the_pod_webhook_is_a_warning() -> None:
    # The labels alone narrow nothing: pods must require them, which the webhook does.
    (warning,) = configuration_warnings(
        cluster_file=None, state=_state(1, 1), policy=load_policy(), label_nodes=True
    )
    assert warning.startswith("label-nodes is on but admission-port is not")
    assert (
        configuration_warnings(
            cluster_file=None, state=_state(1, 1), policy=load_policy(), label_nodes=True, admission_port=8443
        )
        == []
    )
