"""The filter's fast path (extender.decision_cache) against the plain evaluation.

``decide`` answers names-mode requests from cached per-node outcomes;
``decide`` without a cache runs ``Policy.evaluate`` on every node. On random clusters,
random requests and random sequences of store mutations (upsert, delete, replace of
nodes and RuntimeClasses) both must give the same answer, field for field, and the
same per-node details. The passing names may come in any order (docs/reference.md,
``POST /filter``): they are compared sorted, so a name listed twice still differs. The cache lives across the mutations (it
listens to the state's stores), so this checks invalidation rather than assuming it.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cluster.state import ClusterState
from extender.decision_cache import DecisionCache, policy_is_cacheable
from extender.filtering import Decision, decide
from extender.policy_file import load_policy
from extender.protocol import ExtenderArgs
from policies.objects import (
    NodeView,
    PodView,
    RuntimeClassView,
    RuntimeHandler,
    SelectorRequirement,
    Taint,
    Toleration,
)
from policies.predicates import RuntimeClassExists, RuntimeClassNodeSelector, TaintToleration
from policies.registry import Policy
from policies.runtime_handler import RuntimeHandler as RuntimeHandlerPredicate
from policies.verdict import FITS, REASON_NODE_UNKNOWN, Verdict
from tests.support.reference_model import normalise

LABEL_KEYS = ("zone", "pool", "sandbox", "arch", "gpu")
LABEL_VALUES = ("a", "b", "true", "1", "")
TAINT_KEYS = ("sandbox", "gpu", "dedicated", "spot", "node.kubernetes.io/unreachable")
TAINT_VALUES = ("", "true", "gvisor", "3", "10", "x")
EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
TOLERATION_EFFECTS = ("", *EFFECTS)
OPERATORS = ("", "Equal", "Exists", "Lt", "Gt", "Bogus")
HANDLERS = ("runc", "runsc", "kata")
CLASS_NAMES = ("runc", "gvisor", "kata", "gpu", "ghost")


# --------------------------------------------------------------------------- policies


@dataclass(frozen=True)
class PodLabelPredicate:
    """A third-party predicate that reads pod labels and declares nothing: the cache
    must not be used for a policy containing it."""

    name: str = "PodLabel"

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        wanted = pod.labels.get("zone")
        if wanted is not None and node.labels.get("zone") != wanted:
            return Verdict(False, "node(s) not in the pod's zone", unresolvable=False, detail="zone")
        return FITS


@dataclass(frozen=True)
class ResolvableGpu:
    """Declares its pod inputs and fails some nodes *resolvably* (FailedNodes)."""

    name: str = "ResolvableGpu"
    pod_inputs: ClassVar[frozenset[str]] = frozenset({"runtime_class_name"})

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        if runtime_class is not None and runtime_class.name == "gpu" and node.labels.get("gpu") != "true":
            return Verdict(False, "node(s) had no free GPU", unresolvable=False, detail="no gpu")
        return FITS


DEFAULT = load_policy()
POLICIES: dict[str, Policy] = {
    "default": DEFAULT,
    "handlers-fail": Policy(
        (
            RuntimeClassExists(),
            RuntimeClassNodeSelector(),
            RuntimeHandlerPredicate(fail_without_report=True, required_features=("userNamespaces",)),
            TaintToleration(),
        )
    ),
    "handlers-pass": Policy((RuntimeClassExists(), RuntimeHandlerPredicate(), TaintToleration())),
    "third-party": Policy((RuntimeClassExists(), PodLabelPredicate(), TaintToleration())),
    "resolvable": Policy((RuntimeClassExists(), ResolvableGpu(), TaintToleration())),
    "empty": Policy(()),
}


def test_cacheable_policies_are_recognised() -> None:
    assert policy_is_cacheable(POLICIES["default"])
    assert policy_is_cacheable(POLICIES["handlers-fail"])
    assert policy_is_cacheable(POLICIES["resolvable"])
    assert policy_is_cacheable(POLICIES["empty"])
    assert not policy_is_cacheable(POLICIES["third-party"])


# --------------------------------------------------------------------------- random objects


def random_node(rng: random.Random, name: str) -> NodeView:
    labels = {
        key: rng.choice(LABEL_VALUES) for key in rng.sample(LABEL_KEYS, rng.randrange(len(LABEL_KEYS) + 1))
    }
    taints = tuple(
        Taint(rng.choice(TAINT_KEYS), rng.choice(EFFECTS), rng.choice(TAINT_VALUES))
        for _ in range(rng.randrange(3))
    )
    handlers: tuple[RuntimeHandler, ...] | None = None
    if rng.random() < 0.6:
        handlers = tuple(
            RuntimeHandler(
                h, frozenset(rng.sample(("userNamespaces", "recursiveReadOnlyMounts"), rng.randrange(3)))
            )
            for h in rng.sample(HANDLERS, rng.randrange(len(HANDLERS) + 1))
        )
    return NodeView(
        name=name,
        labels=MappingProxyType(labels),
        taints=taints,
        runtime_handlers=handlers,
        resource_version=str(rng.randrange(10**6)),
    )


def random_toleration(rng: random.Random) -> Toleration:
    operator = rng.choice(OPERATORS)
    key = "" if operator == "Exists" and rng.random() < 0.2 else rng.choice(TAINT_KEYS)
    return Toleration(key, operator, rng.choice(TAINT_VALUES), rng.choice(TOLERATION_EFFECTS))


def random_class(rng: random.Random, name: str) -> RuntimeClassView:
    selector = {key: rng.choice(LABEL_VALUES) for key in rng.sample(LABEL_KEYS, rng.randrange(3))}
    expressions: tuple[SelectorRequirement, ...] | None = None
    if rng.random() < 0.3:
        expressions = (
            SelectorRequirement(
                rng.choice(LABEL_KEYS),
                rng.choice(("In", "NotIn", "Exists", "DoesNotExist")),
                tuple(rng.sample(LABEL_VALUES, 2)),
            ),
        )
    return RuntimeClassView(
        name=name,
        handler=rng.choice(HANDLERS),
        node_selector=MappingProxyType(selector),
        tolerations=tuple(random_toleration(rng) for _ in range(rng.randrange(3))),
        match_expressions=expressions,
        selector_error="bad annotation" if rng.random() < 0.05 else None,
        resource_version=str(rng.randrange(10**6)),
    )


def pod_json(rng: random.Random, toleration_sets: list[tuple[Toleration, ...]]) -> dict[str, Any]:
    """A Pod as kube-scheduler sends it; toleration sets repeat, as they do for replicas."""
    spec: dict[str, Any] = {}
    choice = rng.random()
    if choice < 0.75:
        spec["runtimeClassName"] = rng.choice(CLASS_NAMES)
    elif choice < 0.85:
        spec["runtimeClassName"] = ""
    tolerations = rng.choice(toleration_sets)
    spec["tolerations"] = [
        {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect} for t in tolerations
    ]
    labels = {"zone": rng.choice(("a", "b"))} if rng.random() < 0.5 else {}
    return {"metadata": {"name": "p", "namespace": "default", "labels": labels}, "spec": spec}


def names_request(rng: random.Random, state: ClusterState, pod: dict[str, Any]) -> ExtenderArgs:
    known = list(state.nodes)
    if rng.random() < 0.4:
        # Every cached node, as kube-scheduler sends with percentageOfNodesToScore: 100
        # (the prebuilt whole-cluster answer), sometimes less one node.
        names = known[:]
        if names and rng.random() < 0.2:
            names.remove(rng.choice(names))
    else:
        names = rng.sample(known, rng.randrange(len(known) + 1)) if known else []
    if rng.random() < 0.2:
        names.append(f"unknown-{rng.randrange(3)}")
    if names and rng.random() < 0.15:
        names.append(rng.choice(names))  # listed twice
    rng.shuffle(names)
    return ExtenderArgs.model_validate({"Pod": pod, "Nodes": None, "NodeNames": names})


def mutate(rng: random.Random, state: ClusterState, next_id: list[int]) -> None:
    """One random change through the stores' public API (as the watch makes them)."""
    roll = rng.random()
    nodes = list(state.nodes)
    if roll < 0.35 and nodes:
        name = rng.choice(nodes)
        state.nodes.upsert(random_node(rng, name))
    elif roll < 0.45:
        next_id[0] += 1
        state.nodes.upsert(random_node(rng, f"node-{next_id[0]}"))
    elif roll < 0.55 and nodes:
        state.nodes.delete(rng.choice(nodes))
    elif roll < 0.62:
        kept = rng.sample(nodes, len(nodes) // 2)
        fresh = [random_node(rng, name) if rng.random() < 0.3 else state.nodes.get(name) for name in kept]
        next_id[0] += 1
        state.nodes.replace([n for n in fresh if n is not None] + [random_node(rng, f"node-{next_id[0]}")])
    elif roll < 0.82:
        state.runtime_classes.upsert(random_class(rng, rng.choice(CLASS_NAMES)))
    elif roll < 0.92:
        state.runtime_classes.delete(rng.choice(CLASS_NAMES))
    else:
        state.runtime_classes.replace(
            random_class(rng, name) for name in rng.sample(CLASS_NAMES, rng.randrange(len(CLASS_NAMES)))
        )


def random_state(rng: random.Random, node_count: int) -> ClusterState:
    state = ClusterState()
    state.nodes.replace(random_node(rng, f"node-{i}") for i in range(node_count))
    state.runtime_classes.replace(random_class(rng, name) for name in CLASS_NAMES[:-1] if rng.random() < 0.8)
    return state


# --------------------------------------------------------------------------- comparison


def assert_same(fast: Decision, reference: Decision) -> None:
    got, want = fast.result, reference.result
    # Names mode: each passing name once, in any order (kube-scheduler maps them back by
    # name: pkg/scheduler/extender.go). Sorted, not a set: a name listed twice differs.
    assert (got.NodeNames is None) == (want.NodeNames is None)
    assert sorted(got.NodeNames or ()) == sorted(want.NodeNames or ())
    assert got.Nodes == want.Nodes  # full-nodes mode: the request's order
    assert got.FailedNodes == want.FailedNodes
    assert got.FailedAndUnresolvableNodes == want.FailedAndUnresolvableNodes
    if fast.prebuilt_json is None:
        # The failure maps in the request's order, as the plain evaluation lists them
        # (docs/reference.md): the same call, the same answer, whatever the process's
        # string hashes. A whole-cluster call's is prebuilt, in the cache's order.
        assert list(got.FailedNodes.items()) == list(want.FailedNodes.items())
        assert list(got.FailedAndUnresolvableNodes.items()) == list(want.FailedAndUnresolvableNodes.items())
    assert got.Error == want.Error
    # Same JSON, and the bytes sent (prebuilt for a whole-cluster call) are the result's.
    assert normalise(orjson.loads(got.to_json())) == normalise(orjson.loads(want.to_json()))
    assert orjson.loads(fast.to_json()) == orjson.loads(got.to_json())
    assert dict(fast.details) == dict(reference.details)
    assert fast.runtime_class == reference.runtime_class
    # The names for a direct lookup: each unknown name once, in request order (the
    # lookup's budget takes the first ones).
    assert list(fast.missing) == list(reference.missing)
    if fast.reason_counts is not None:
        # The metrics trust these counts instead of counting the failure maps.
        rejected = Counter(got.FailedNodes.values()) + Counter(got.FailedAndUnresolvableNodes.values())
        assert dict(fast.reason_counts) == dict(rejected)


def run_scenario(rng: random.Random, *, policy: Policy, node_count: int, steps: int) -> None:
    state = random_state(rng, node_count)
    cache = DecisionCache(state)
    toleration_sets = [tuple(random_toleration(rng) for _ in range(rng.randrange(4))) for _ in range(3)]
    next_id = [node_count]
    for _ in range(steps):
        for _ in range(rng.randrange(1, 4)):
            pod = pod_json(rng, toleration_sets)
            args = names_request(rng, state, pod)
            # Reference first: the fast path must not depend on having run before it.
            reference = decide(args, state, policy)
            assert_same(decide(args, state, policy, cache=cache), reference)
            # The same pod offered only nodes that pass (what kube-scheduler's own
            # filters leave of a class's pool), or a sample of them, maybe one twice.
            pool = list(reference.result.NodeNames or ())
            pool = rng.sample(pool, rng.randrange(len(pool) + 1)) if rng.random() < 0.5 else pool
            if pool and rng.random() < 0.15:
                pool.append(rng.choice(pool))
            rng.shuffle(pool)
            args = ExtenderArgs.model_validate({"Pod": pod, "Nodes": None, "NodeNames": pool})
            assert_same(decide(args, state, policy, cache=cache), decide(args, state, policy))
        for _ in range(rng.randrange(4)):
            mutate(rng, state, next_id)


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@pytest.mark.parametrize("seed", range(12))
def test_fast_path_agrees_with_reference_on_random_seeds(seed: int, policy_name: str) -> None:
    rng = random.Random(f"fast-path:{seed}:{policy_name}")
    run_scenario(rng, policy=POLICIES[policy_name], node_count=rng.randrange(1, 60), steps=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    policy_name=st.sampled_from(sorted(POLICIES)),
    node_count=st.integers(min_value=0, max_value=40),
    steps=st.integers(min_value=1, max_value=20),
)
def test_fast_path_agrees_with_reference_hypothesis(
    seed: int, policy_name: str, node_count: int, steps: int
) -> None:
    run_scenario(random.Random(seed), policy=POLICIES[policy_name], node_count=node_count, steps=steps)


def _args(
    names: list[str], runtime_class: str | None = None, tolerations: list[dict[str, str]] | None = None
) -> ExtenderArgs:
    spec: dict[str, Any] = {"tolerations": tolerations or []}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    return ExtenderArgs.model_validate({"Pod": {"spec": spec}, "Nodes": None, "NodeNames": names})


def _sandbox_state() -> ClusterState:
    state = ClusterState()
    state.nodes.replace(
        [
            NodeView("plain-1"),
            NodeView(
                "sandbox-1",
                labels=MappingProxyType({"sandbox": "true"}),
                taints=(Taint("sandbox", "NoSchedule", "true"),),
            ),
        ]
    )
    state.runtime_classes.replace(
        [
            RuntimeClassView(
                "gvisor",
                "runsc",
                node_selector=MappingProxyType({"sandbox": "true"}),
                tolerations=(Toleration("sandbox", "Exists", "", "NoSchedule"),),
            )
        ]
    )
    return state


def test_cached_entries_are_used_and_follow_node_and_class_changes() -> None:
    state = _sandbox_state()
    cache = DecisionCache(state)
    args = _args(["plain-1", "sandbox-1"], "gvisor")
    assert decide(args, state, DEFAULT, cache=cache).result.NodeNames == ["sandbox-1"]
    assert len(cache) == 1  # the answer came from the cache

    # The node loses its label: only that node is re-evaluated, and the answer follows.
    state.nodes.upsert(NodeView("sandbox-1", taints=(Taint("sandbox", "NoSchedule", "true"),)))
    assert decide(args, state, DEFAULT, cache=cache).result.NodeNames == []
    # A new node the class fits.
    state.nodes.upsert(NodeView("sandbox-2", labels=MappingProxyType({"sandbox": "true"})))
    assert decide(
        _args(["sandbox-2", "plain-1"], "gvisor"), state, DEFAULT, cache=cache
    ).result.NodeNames == ["sandbox-2"]
    # The class goes away, then comes back without a selector.
    state.runtime_classes.delete("gvisor")
    answer = decide(args, state, DEFAULT, cache=cache).result
    assert answer.NodeNames == []
    assert set(answer.FailedAndUnresolvableNodes.values()) == {'RuntimeClass "gvisor" not found'}
    state.runtime_classes.upsert(RuntimeClassView("gvisor", "runsc"))
    assert decide(args, state, DEFAULT, cache=cache).result.NodeNames == ["plain-1"]
    # A re-LIST that drops a node.
    state.nodes.replace([NodeView("plain-1")])
    answer = decide(args, state, DEFAULT, cache=cache).result
    assert answer.NodeNames == ["plain-1"]
    assert list(answer.FailedNodes) == ["sandbox-1"]  # unknown now: FailedNodes, with a reason


@pytest.mark.parametrize(
    ("names", "whole"),
    [
        (["plain-1", "sandbox-1"], True),
        (["sandbox-1", "plain-1"], True),  # in any order
        (["plain-1"], False),  # one node not named
        (["plain-1", "plain-1"], False),  # as many names as nodes, one listed twice
        (["plain-1", "ghost-1"], False),  # as many names as nodes, one unknown
        (["plain-1", "sandbox-1", "ghost-1"], False),
        (["plain-1", "sandbox-1", "plain-1"], False),
    ],
)
def test_whole_cluster_answer_only_for_exactly_the_cached_nodes(names: list[str], whole: bool) -> None:
    state = _sandbox_state()
    args = _args(names, "gvisor")
    fast = decide(args, state, DEFAULT, cache=DecisionCache(state))
    assert (fast.prebuilt_json is not None) == whole
    assert_same(fast, decide(args, state, DEFAULT))


def test_whole_cluster_answer_is_the_same_bytes_for_any_order_of_the_names() -> None:
    """kube-scheduler's order of feasible nodes varies from call to call (its filters run
    in parallel: pkg/scheduler/schedule_one.go, findNodesThatPassFilters) and it maps the
    answer's names back by name (pkg/scheduler/extender.go): every order of the whole
    cluster gets one answer, its passing names in the cache's order."""
    state = _sandbox_state()
    state.nodes.upsert(NodeView("sandbox-2", labels=MappingProxyType({"sandbox": "true"})))
    state.nodes.upsert(NodeView("sandbox-3", labels=MappingProxyType({"sandbox": "true"})))
    cache = DecisionCache(state)
    names = sorted(state.nodes)
    answers = set()
    for order in (names, names[::-1], names[1:] + names[:1]):
        decision = decide(_args(order, "gvisor"), state, DEFAULT, cache=cache)
        assert decision.prebuilt_json is not None
        assert_same(decision, decide(_args(order, "gvisor"), state, DEFAULT))
        answers.add(decision.to_json())
    assert len(answers) == 1
    assert orjson.loads(answers.pop())["NodeNames"] == [n for n in state.nodes if n.startswith("sandbox")]
    # A call naming part of the cluster: its passing names, each once, in any order.
    part = ["sandbox-3", "plain-1", "sandbox-1", "sandbox-3"]
    assert sorted(decide(_args(part, "gvisor"), state, DEFAULT, cache=cache).result.NodeNames or ()) == [
        "sandbox-1",
        "sandbox-3",
    ]


def test_whole_cluster_answer_is_rebuilt_after_every_change() -> None:
    """The prebuilt bytes never outlive the entry they came from: a label, a taint, a
    new node, a deleted node and a class edit each change the next whole answer."""
    state = _sandbox_state()
    cache = DecisionCache(state)

    def whole(runtime_class: str = "gvisor") -> Decision:
        args = _args(sorted(state.nodes), runtime_class)
        decision = decide(args, state, DEFAULT, cache=cache)
        reference = decide(args, state, DEFAULT)
        assert decision.prebuilt_json is not None
        assert_same(decision, reference)
        return decision

    first = whole()
    assert first.result.NodeNames == ["sandbox-1"]
    assert whole().prebuilt_json is first.prebuilt_json  # unchanged entry: the same bytes
    state.nodes.upsert(NodeView("plain-1", labels=MappingProxyType({"sandbox": "true"})))
    assert sorted(whole().result.NodeNames or ()) == ["plain-1", "sandbox-1"]
    state.nodes.upsert(NodeView("plain-1", taints=(Taint("x", "NoSchedule", "y"),)))
    assert whole().result.NodeNames == ["sandbox-1"]
    state.nodes.upsert(NodeView("sandbox-2", labels=MappingProxyType({"sandbox": "true"})))
    assert sorted(whole().result.NodeNames or ()) == ["sandbox-1", "sandbox-2"]
    state.nodes.delete("sandbox-1")
    assert whole().result.NodeNames == ["sandbox-2"]
    state.runtime_classes.upsert(
        RuntimeClassView("gvisor", "runsc", node_selector=MappingProxyType({"x": "y"}))
    )
    assert whole().result.NodeNames == []
    assert whole("").result.NodeNames == ["sandbox-2"]  # no class: the untainted node


def test_uncacheable_policy_is_evaluated_per_pod() -> None:
    state = _sandbox_state()
    policy = POLICIES["third-party"]
    cache = DecisionCache(state)
    assert cache.entry(policy, PodView(), None) is None
    for zone in ("a", "b"):
        pod = {"metadata": {"labels": {"zone": zone}}, "spec": {}}
        args = ExtenderArgs.model_validate({"Pod": pod, "Nodes": None, "NodeNames": ["plain-1"]})
        assert_same(decide(args, state, policy, cache=cache), decide(args, state, policy))


def test_extra_nodes_and_unknown_reasons_match_reference() -> None:
    state = _sandbox_state()
    extra: Mapping[str, NodeView] = {
        "fresh-1": NodeView("fresh-1", labels=MappingProxyType({"sandbox": "true"}))
    }
    args = _args(["fresh-1", "gone-1", "sandbox-1", "plain-1"], "gvisor")
    unknown = {"gone-1": "lookup failed: 404"}
    fast = decide(args, state, DEFAULT, cache=DecisionCache(state), extra_nodes=extra, unknown_reason=unknown)
    reference = decide(args, state, DEFAULT, extra_nodes=extra, unknown_reason=unknown)
    assert_same(fast, reference)
    assert sorted(fast.result.NodeNames or ()) == ["fresh-1", "sandbox-1"]
    assert fast.details["gone-1"] == "lookup failed: 404"


def test_unknown_names_are_rejected_and_named_for_a_lookup_in_request_order() -> None:
    """Names the state does not hold fail as unknown (FailedNodes: preemption cannot
    help, but the node may yet appear) and come back in ``missing``, each once, in
    request order: the filter handler looks them up directly and decides again."""
    state = _sandbox_state()
    cache = DecisionCache(state)
    args = _args(["ghost-2", "sandbox-1", "ghost-1", "plain-1", "ghost-2"], "gvisor")
    fast = decide(args, state, DEFAULT, cache=cache)
    assert_same(fast, decide(args, state, DEFAULT))
    assert fast.missing == ["ghost-2", "ghost-1"]
    assert fast.result.FailedNodes == {"ghost-2": REASON_NODE_UNKNOWN, "ghost-1": REASON_NODE_UNKNOWN}
    assert fast.details["ghost-1"] == "node 'ghost-1' is not in the extender's cache"
    # Known names only (part of the cluster, and all of it): nothing to look up.
    for known in (["sandbox-1"], ["plain-1", "sandbox-1"]):
        assert list(decide(_args(known, "gvisor"), state, DEFAULT, cache=cache).missing) == []


def test_unknown_names_the_lookup_did_not_find_keep_its_reasons() -> None:
    """After a lookup that found none of the unknown names, the fast path answers them
    with the lookup's details, as the per-name path does."""
    state = _sandbox_state()
    args = _args(["gone-1", "sandbox-1", "gone-2", "plain-1"], "gvisor")
    extra: Mapping[str, NodeView] = {"elsewhere-1": NodeView("elsewhere-1")}
    unknown = {"gone-1": "lookup failed: 404", "gone-2": "lookup timed out"}
    fast = decide(args, state, DEFAULT, cache=DecisionCache(state), extra_nodes=extra, unknown_reason=unknown)
    assert_same(fast, decide(args, state, DEFAULT, extra_nodes=extra, unknown_reason=unknown))
    assert {name: fast.details[name] for name in unknown} == unknown
    assert sorted(fast.details) == ["gone-1", "gone-2", "plain-1"]
    assert fast.missing == ["gone-1", "gone-2"]


def test_many_toleration_sets_are_bounded() -> None:
    state = _sandbox_state()
    cache = DecisionCache(state)
    for i in range(100):
        tolerations = [{"key": f"k{i}", "operator": "Exists"}]
        decide(_args(["plain-1"], "gvisor", tolerations), state, DEFAULT, cache=cache)
    assert len(cache) <= 16
