"""Configurations that start, but can only answer one way: warnings for the operator.

An empty cluster file and a policy without predicates are valid (a test setup may want
either), so they do not stop ``serve``; but in production each means every filter call
gets the same answer whatever the pod, which an operator should hear about at start
(a WARNING log line) and whenever readiness is checked (``/readyz`` lists them).

Pure: the loaded state, the policy and the settings that matter in, sentences out.
"""

from __future__ import annotations

from extender.cluster.state import ClusterState
from policies.registry import Policy


def empty_cluster_file(cluster_file: str, state: ClusterState) -> str | None:
    """``cluster file PATH holds 0 nodes and 0 RuntimeClasses`` (or 0 of one of them), or
    None when it holds both: what ``serve`` warns of, and ``explain`` says with an
    unknown class."""
    nodes, classes = len(state.nodes), len(state.runtime_classes)
    if nodes and classes:
        return None
    if not nodes and not classes:
        return f"cluster file {cluster_file} holds 0 nodes and 0 RuntimeClasses"
    return f"cluster file {cluster_file} holds 0 {'nodes' if not nodes else 'RuntimeClasses'}"


def configuration_warnings(
    *,
    cluster_file: str | None,
    state: ClusterState,
    policy: Policy,
    label_nodes: bool = False,
    admission_port: int | None = None,
) -> list[str]:
    """What the configuration means that was likely not intended, one sentence each."""
    warnings: list[str] = []
    if cluster_file is not None and (holds := empty_cluster_file(cluster_file, state)) is not None:
        rejects_names = (
            "every node a filter request names (nodeCacheCapable: true) is unknown to the extender "
            "and rejected"
        )
        fits_no_class = "every pod that names a RuntimeClass fits no node"
        if not state.nodes and not state.runtime_classes:
            warnings.append(f"{holds}: {rejects_names}, and {fits_no_class}")
        elif not state.nodes:
            warnings.append(f"{holds}: {rejects_names}")
        else:
            warnings.append(f"{holds}: {fits_no_class}")
    if not policy.predicates:
        warnings.append(
            "the policy enables no predicates: every node passes every filter call, whatever the "
            "pod's RuntimeClass (nothing is enforced)"
        )
    if label_nodes and admission_port is None:
        warnings.append(
            "label-nodes is on but admission-port is not: the pod webhook cannot require the class labels "
            "of pods; unless the API server's admission policies do (components/pod-admission-policy/"
            "label-nodes), kube-scheduler does not narrow to a class's nodes (the labels are kept, and the "
            "extender still judges every pod)"
        )
    return warnings
