"""Noticing kube-scheduler's node sampling: ``Decision.hidden`` (extender.filtering).

kube-scheduler's ``findNodesThatPassFilters`` (pkg/scheduler/schedule_one.go) stops its
in-tree filters once ``numFeasibleNodesToFind`` nodes passed them, ``max(100, adaptive
%)``, the adaptive default ``50 - nodes/125`` % (at least 5 %): 680 of 2,000 nodes. Only
those reach the extender. When the extender alone knows the class's rule, a sample can
hold none of the class's few nodes. These cases replay that: a 2,000-node cluster whose
gVisor pool (3 nodes) stands at the end of the node list, offered the first 680 nodes.

The answer itself never changes (the reference evaluation, without the cache, gives the
same result); only ``hidden`` says what the sampling hid.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pytest

from extender.cluster.state import ClusterState
from extender.decision_cache import DecisionCache
from extender.filtering import MIN_FEASIBLE_NODES_TO_FIND, HiddenNodes, decide
from extender.policy_file import load_policy
from extender.protocol import ExtenderArgs
from policies.objects import NodeView
from tests.support.sampling import (
    CLUSTER,
    GVISOR,
    GVISOR_DEDICATED,
    KATA,
    RUNC,
    SAMPLE,
    TAINTED,
    sampled_cluster,
)


@pytest.fixture(scope="module")
def state() -> ClusterState:
    return sampled_cluster()


def _pod(runtime_class: str | None, tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtimeClassName": runtime_class}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec}


def _names_args(pod: dict[str, Any], names: list[str]) -> ExtenderArgs:
    return ExtenderArgs.model_validate({"Pod": pod, "Nodes": None, "NodeNames": names})


def _nodes_args(pod: dict[str, Any], names: list[str], state: ClusterState) -> ExtenderArgs:
    items = []
    for name in names:
        node = state.nodes[name]
        items.append(
            {
                "metadata": {"name": name, "labels": dict(node.labels)},
                "spec": {
                    "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints]
                },
            }
        )
    return ExtenderArgs.model_validate({"Pod": pod, "Nodes": {"items": items}, "NodeNames": None})


KATA_TOLERATION = [{"key": "kata", "operator": "Exists", "effect": "NoSchedule"}]


@dataclass(frozen=True)
class Case:
    id: str
    runtime_class: str | None
    offered: list[str]
    hidden: HiddenNodes | None
    tolerations: list[dict[str, str]] | None = None


CASES = [
    Case(
        "sample of runc nodes hides the gvisor pool", "gvisor", RUNC[:SAMPLE], HiddenNodes(SAMPLE, CLUSTER, 3)
    ),
    Case(
        "the sample holds one gvisor node: it passes, nothing hidden",
        "gvisor",
        [*RUNC[: SAMPLE - 1], "gvisor-2"],
        None,
    ),
    Case(
        "every node offered: nothing hidden",
        "gvisor",
        [*RUNC, *GVISOR, *KATA, *TAINTED, GVISOR_DEDICATED],
        None,
    ),
    Case(
        "fewer offered than the scheduler's minimum: no early stop happened",
        "gvisor",
        RUNC[: MIN_FEASIBLE_NODES_TO_FIND - 1],
        None,
    ),
    Case(
        "exactly the minimum offered counts",
        "gvisor",
        RUNC[:MIN_FEASIBLE_NODES_TO_FIND],
        HiddenNodes(100, CLUSTER, 3),
    ),
    Case("a class no node fits anywhere does not count", "ghost", RUNC[:SAMPLE], None),
    Case(
        "the class's nodes are rejected for taints only: not fitting, not hidden",
        "kata",
        RUNC[:SAMPLE],
        None,
    ),
    Case(
        "the same class for a pod tolerating the taint: hidden",
        "kata",
        RUNC[:SAMPLE],
        HiddenNodes(SAMPLE, CLUSTER, 2),
        KATA_TOLERATION,
    ),
    Case(
        "some offered nodes fail for taints, not the class: not counted",
        "gvisor",
        [*RUNC[: SAMPLE - 1], GVISOR_DEDICATED],
        None,
    ),
    Case("a pod without a class fails only for taints: never counted", None, TAINTED, None),
    Case(
        "a name listed twice is one offered node",
        "gvisor",
        [*RUNC[:SAMPLE], RUNC[0]],
        HiddenNodes(SAMPLE, CLUSTER, 3),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_names_mode(state: ClusterState, case: Case) -> None:
    args = _names_args(_pod(case.runtime_class, case.tolerations), case.offered)
    decision = decide(args, state, load_policy(), cache=DecisionCache(state))
    assert decision.hidden == case.hidden
    # The answer is the reference answer: the detection changes nothing in it.
    reference = decide(args, state, load_policy())
    assert asdict(decision.result) == asdict(reference.result)
    assert reference.hidden is None  # no cache, no claim


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_full_nodes_mode(state: ClusterState, case: Case) -> None:
    offered = list(dict.fromkeys(case.offered))  # full-nodes requests come without duplicates
    args = _nodes_args(_pod(case.runtime_class, case.tolerations), offered, state)
    decision = decide(args, state, load_policy(), cache=DecisionCache(state))
    expected = case.hidden
    assert decision.hidden == expected
    reference = decide(args, state, load_policy())
    assert asdict(decision.result) == asdict(reference.result)


def test_reasons_stay_the_constant_strings(state: ClusterState) -> None:
    args = _names_args(_pod("gvisor"), RUNC[:SAMPLE])
    decision = decide(args, state, load_policy(), cache=DecisionCache(state))
    assert decision.hidden is not None
    assert set(decision.result.FailedAndUnresolvableNodes.values()) == {"node(s) didn't match RuntimeClass"}
    assert decision.result.NodeNames == []


def test_a_node_fetched_directly_is_judged_with_the_rest() -> None:
    """The per-name path (a name the watch had not delivered, fetched directly) notices
    the same: the fetched node fails for the class like the sampled ones."""
    state = sampled_cluster()
    late = NodeView("runc-late")
    args = _names_args(_pod("gvisor"), [*RUNC[: SAMPLE - 1], "runc-late"])
    decision = decide(args, state, load_policy(), cache=DecisionCache(state), extra_nodes={"runc-late": late})
    assert decision.hidden == HiddenNodes(SAMPLE, CLUSTER, 3)


def test_an_unknown_name_is_not_a_class_rejection() -> None:
    state = sampled_cluster()
    args = _names_args(_pod("gvisor"), [*RUNC[: SAMPLE - 1], "no-such-node"])
    decision = decide(args, state, load_policy(), cache=DecisionCache(state))
    assert decision.hidden is None


def test_follows_the_cache_when_the_pool_changes() -> None:
    """A gVisor node relabelled away, then one added back: the count follows the watch."""
    state = sampled_cluster()
    cache = DecisionCache(state)
    args = _names_args(_pod("gvisor"), RUNC[:SAMPLE])
    assert decide(args, state, load_policy(), cache=cache).hidden == HiddenNodes(SAMPLE, CLUSTER, 3)
    state.nodes.upsert(NodeView("gvisor-1"))  # no longer labelled: not fitting (and a runc node now)
    assert decide(args, state, load_policy(), cache=cache).hidden == HiddenNodes(SAMPLE, CLUSTER, 2)
    for name in GVISOR:
        state.nodes.delete(name)
    assert decide(args, state, load_policy(), cache=cache).hidden is None
