"""Turning one filter request into one filter answer.

The rules are kube-scheduler's (pkg/scheduler/extender.go, ``Filter``): answer in the
form asked (names for names, node objects for node objects), always send the passing
list even when empty, put every rejected node in exactly one failure map, and never
name a node that was not asked about. Duplicated names are answered once.

Which node fails and why is the policy's business (``policies``); this module only
looks nodes up and sorts verdicts into the two maps. In names mode the verdicts come
from ``extender.decision_cache`` when the policy allows it (that is what keeps a
15,000-node call cheap); ``decide`` without a cache is the same answer by plain evaluation.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from extender.cluster.objects import nodes_from_api
from extender.cluster.state import ClusterState
from extender.decision_cache import DecisionCache, Entry
from extender.protocol import ExtenderArgs, ExtenderFilterResult
from policies.objects import NodeView, PodView, RuntimeClassView
from policies.registry import Policy
from policies.verdict import REASON_NODE_UNKNOWN, RUNTIME_REASON_LABELS, Verdict, reason_label

ERROR_NOT_SYNCED = "cluster state not synced"

# pkg/scheduler/schedule_one.go, minFeasibleNodesToFind: kube-scheduler stops its
# in-tree filters early only after this many feasible nodes (numFeasibleNodesToFind is
# max(100, percentage of the cluster)). A call offering fewer nodes was not cut short.
MIN_FEASIBLE_NODES_TO_FIND: Final = 100


@dataclass(frozen=True, slots=True)
class HiddenNodes:
    """A call where kube-scheduler's node sampling hid every node that fits the pod.

    Every offered node failed for a RuntimeClass reason, while the cache holds
    ``fitting`` nodes that would pass (class rules and taints, with the pod's and the
    class's tolerations) and were not offered.
    """

    offered: int
    cluster: int
    fitting: int


@dataclass
class Decision:
    """A filter answer plus what the logs and explain want to know about it."""

    result: ExtenderFilterResult
    pod: PodView
    runtime_class: RuntimeClassView | None = None
    # Per rejected node: the predicate's detail (which label, which taint). May be
    # computed lazily on first read (the fast path's answers).
    details: Mapping[str, str] = field(default_factory=dict)
    # Rejected nodes per reason, when the decision knew them without counting (the
    # fast path); None means: count the failure maps.
    reason_counts: Mapping[str, int] | None = None
    # Set when the sampling hid the nodes that fit (see ``hidden_nodes``).
    hidden: HiddenNodes | None = None
    # The answer's bytes, when they came prebuilt (a request naming the whole cluster:
    # extender.decision_cache); ``result`` holds the same values.
    prebuilt_json: bytes | None = None
    # Names-mode names that neither the state nor ``extra_nodes`` held, each once, in
    # request order: what a direct lookup could still find (the filter handler's).
    missing: Sequence[str] = ()

    def to_json(self) -> bytes:
        """The answer's JSON, as sent to kube-scheduler."""
        return self.result.to_json() if self.prebuilt_json is None else self.prebuilt_json


class _Sorter:
    """Collects verdicts into the two failure maps."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}
        self.unresolvable: dict[str, str] = {}
        self.details: dict[str, str] = {}

    def reject(self, name: str, verdict: Verdict) -> None:
        (self.unresolvable if verdict.unresolvable else self.failed)[name] = verdict.reason
        self.details[name] = verdict.detail

    def reasons(self) -> set[str]:
        return {*self.failed.values(), *self.unresolvable.values()}


def not_synced_result() -> ExtenderFilterResult:
    return ExtenderFilterResult(
        Nodes=None, NodeNames=None, FailedNodes={}, FailedAndUnresolvableNodes={}, Error=ERROR_NOT_SYNCED
    )


def decide(
    args: ExtenderArgs,
    state: ClusterState,
    policy: Policy,
    *,
    cache: DecisionCache | None = None,
    extra_nodes: Mapping[str, NodeView] | None = None,
    unknown_reason: Mapping[str, str] | None = None,
) -> Decision:
    """Answer one filter request from ``state``.

    ``extra_nodes`` are nodes fetched directly because the state had not seen them
    yet; ``unknown_reason`` can override the reason (and detail) for names that could
    not be found at all. Raises ``ObjectError`` for malformed node objects in a
    full-nodes request.

    Names mode answers from ``cache`` (``extender.decision_cache``, built over this
    same ``state``) when one is given and the policy allows it. Without it every node
    is judged by ``Policy.evaluate``: the plain rule the fast path is tested against
    (tests/test_decision_cache.py). The answer is the same either way.
    """
    pod = args.Pod.view()
    if not state.runtime_classes.synced or (args.names_mode and not state.nodes.synced):
        return Decision(not_synced_result(), pod)
    runtime_class = state.runtime_classes.get(pod.runtime_class_name) if pod.runtime_class_name else None
    if args.NodeNames is None:
        return _decide_full_nodes(args, pod, runtime_class, policy, state, cache)

    assert cache is None or cache.state is state, "a decision cache answers for its own state only"
    entry = cache.entry(policy, pod, runtime_class) if cache is not None else None
    if entry is None:
        return _decide_names(args.NodeNames, pod, runtime_class, state, policy, extra_nodes, unknown_reason)
    known = state.nodes.live_dict()
    names = args.NodeNames
    whole = entry.whole_cluster(names, _whole_answer_json)
    if whole is not None:
        result = _names_answer(whole.passing, {}, whole.failures)
        details = _LazyDetails(whole.failures, pod, runtime_class, known, policy)
        return Decision(result, pod, runtime_class, details, whole.counts, prebuilt_json=whole.answer_json)
    fast = entry.partition(names)
    if fast is None or (fast.unknown and extra_nodes and not fast.unknown.isdisjoint(extra_nodes)):
        # Resolvable failures, or nodes found by a direct lookup: per name, still from
        # cached verdicts.
        return _decide_names(
            names, pod, runtime_class, state, policy, extra_nodes, unknown_reason, cached=entry
        )
    counts = fast.counts
    unknown: dict[str, str] = {}
    missing: list[str] = []
    if fast.unknown:
        # Not in the state: failed as unknown (resolvable: the node may yet appear), and
        # named to the caller in request order, which may look them up and ask again.
        missing = list(dict.fromkeys(filter(fast.unknown.__contains__, names)))
        unknown = dict.fromkeys(missing, REASON_NODE_UNKNOWN)  # in request order too
        counts = {**counts, REASON_NODE_UNKNOWN: len(unknown)}
    result = _names_answer(fast.passing, unknown, fast.failures)
    details = _LazyDetails(
        fast.failures, pod, runtime_class, known, policy, unknown=_unknown_details(unknown, unknown_reason)
    )
    # With no node passing, every distinct offered name is in a failure map.
    hidden = None if fast.passing else hidden_nodes(entry, fast.failures, counts, len(known))
    return Decision(result, pod, runtime_class, details, counts, hidden, missing=missing)


def _names_answer(
    passing: list[str], failed: dict[str, str], unresolvable: dict[str, str]
) -> ExtenderFilterResult:
    """A names-mode answer from the decision cache (only unknown names are resolvable)."""
    return ExtenderFilterResult(
        Nodes=None, NodeNames=passing, FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable, Error=""
    )


def _whole_answer_json(passing: list[str], failures: dict[str, str]) -> bytes:
    return _names_answer(passing, {}, failures).to_json()


def _unknown_detail(name: str, unknown_reason: Mapping[str, str] | None) -> str:
    """The detail of a name the state does not hold: the lookup's word, else the plain fact."""
    return (unknown_reason or {}).get(name, f"node {name!r} is not in the extender's cache")


def _unknown_details(unknown: Iterable[str], unknown_reason: Mapping[str, str] | None) -> dict[str, str]:
    return {name: _unknown_detail(name, unknown_reason) for name in unknown}


def hidden_nodes(
    entry: Entry, offered: Collection[str], reasons: Iterable[str], cluster: int
) -> HiddenNodes | None:
    """What the sampling hid from a call that let no offered node pass, or None.

    kube-scheduler's in-tree filters stop after numFeasibleNodesToFind nodes pass them
    (pkg/scheduler/schedule_one.go, findNodesThatPassFilters), and only those reach the
    extender. Where the extender alone knows a rule (predicate mode, the selector
    annotation, the handler check) and the class's nodes are a small share of the
    cluster, the sample can hold none of them. That is the case here when at least
    that minimum was offered, every offered node failed for a RuntimeClass reason
    (not taints, not unknown names), and ``entry`` (which judged every cached node)
    knows fitting nodes outside the offer. ``offered`` holds each offered name once. No
    scan of the cluster: the entry holds the fitting set, and one C-level pass over the
    offer counts the fitting nodes in it.
    """
    if len(offered) < MIN_FEASIBLE_NODES_TO_FIND or len(offered) >= cluster:
        return None
    if not all(reason_label(reason) in RUNTIME_REASON_LABELS for reason in reasons):
        return None
    fitting = entry.fitting
    not_offered = len(fitting) - sum(map(fitting.__contains__, offered))
    return HiddenNodes(len(offered), cluster, not_offered) if not_offered else None


def _decide_names(
    names: list[str],
    pod: PodView,
    runtime_class: RuntimeClassView | None,
    state: ClusterState,
    policy: Policy,
    extra_nodes: Mapping[str, NodeView] | None,
    unknown_reason: Mapping[str, str] | None,
    *,
    cached: Entry | None = None,
) -> Decision:
    """Names mode, one name at a time (verdicts from ``cached`` where it has them)."""
    sorter = _Sorter()
    passing: list[str] = []
    missing: list[str] = []
    seen: set[str] = set()
    known = state.nodes.live_dict()
    extra = extra_nodes or {}
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        node = known.get(name) or extra.get(name)
        if node is None:
            detail = _unknown_detail(name, unknown_reason)
            sorter.reject(name, Verdict(False, REASON_NODE_UNKNOWN, unresolvable=False, detail=detail))
            missing.append(name)
            continue
        verdict = cached.verdict(name) if cached is not None and name in known else None
        if verdict is None or not verdict.fits:
            # Uncached, or failing: the plain evaluation also gives the detail.
            verdict = policy.evaluate(pod, runtime_class, node)
        if verdict.fits:
            passing.append(name)
        else:
            sorter.reject(name, verdict)
    result = ExtenderFilterResult(
        Nodes=None,
        NodeNames=passing,
        FailedNodes=sorter.failed,
        FailedAndUnresolvableNodes=sorter.unresolvable,
        Error="",
    )
    hidden = None
    if cached is not None and not passing:
        hidden = hidden_nodes(cached, seen, sorter.reasons(), len(known))
    return Decision(result, pod, runtime_class, sorter.details, hidden=hidden, missing=missing)


def _decide_full_nodes(
    args: ExtenderArgs,
    pod: PodView,
    runtime_class: RuntimeClassView | None,
    policy: Policy,
    state: ClusterState,
    cache: DecisionCache | None,
) -> Decision:
    """Full-nodes mode: the nodes come with the request, so no cached verdict applies
    to them; the cache only says, when none passes, what the sampling hid."""
    assert args.Nodes is not None
    sorter = _Sorter()
    items = args.Nodes.items or []
    views = nodes_from_api(items, own=False)  # used for this answer only
    kept: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw, node in zip(items, views, strict=True):
        if node.name in seen:
            continue
        seen.add(node.name)
        verdict = policy.evaluate(pod, runtime_class, node)
        if verdict.fits:
            kept.append(raw)
        else:
            sorter.reject(node.name, verdict)
    result = ExtenderFilterResult(
        Nodes={"metadata": {}, "items": kept},
        NodeNames=None,
        FailedNodes=sorter.failed,
        FailedAndUnresolvableNodes=sorter.unresolvable,
        Error="",
    )
    hidden = None
    if not kept and len(seen) >= MIN_FEASIBLE_NODES_TO_FIND and cache is not None and state.nodes.synced:
        entry = cache.entry(policy, pod, runtime_class)
        if entry is not None:
            hidden = hidden_nodes(entry, seen, sorter.reasons(), len(state.nodes))
    return Decision(result, pod, runtime_class, sorter.details, hidden=hidden)


class _LazyDetails(Mapping[str, str]):
    """Per rejected node, the predicate's detail, computed on first access.

    The fast path keeps only reasons; details (which label, which taint) are wanted by
    debug logging alone, so they are worked out from the same pure policy only when
    read. Read them before the state changes (the handler does, synchronously).
    """

    def __init__(
        self,
        rejected: Mapping[str, str],
        pod: PodView,
        runtime_class: RuntimeClassView | None,
        nodes: Mapping[str, NodeView],
        policy: Policy,
        *,
        unknown: Mapping[str, str] | None = None,
    ) -> None:
        """``rejected``: the cached nodes rejected, by name; ``unknown``: the details of
        the names not in ``nodes``, already known."""
        self._rejected = rejected
        self._args = (pod, runtime_class, nodes, policy)
        self._unknown = unknown or {}
        self._details: dict[str, str] | None = None

    def _load(self) -> dict[str, str]:
        if self._details is None:
            pod, runtime_class, nodes, policy = self._args
            self._details = dict(self._unknown)
            for name in self._rejected:
                node = nodes.get(name)
                if node is not None:
                    self._details[name] = policy.evaluate(pod, runtime_class, node).detail
        return self._details

    def __getitem__(self, name: str) -> str:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())
