"""Verdicts reused across filter calls: the filter's fast path.

kube-scheduler asks about thousands of nodes per pod, and most pods ask the same
question: "which nodes can run RuntimeClass X with tolerations T?". The answer per
node only changes when that node, or class X, changes. So, per
(policy, RuntimeClass name, pod tolerations) this module keeps every cached node's
outcome (``""`` when it fits, else the reason) and answers a names-mode request with a
few C-level passes over the names instead of running every predicate on every node.

When this is valid
    A predicate's verdict may depend on the pod only through the fields in
    ``CACHE_KEY_FIELDS``. Predicates say so with a ``pod_inputs`` attribute (see
    ``policies.verdict``); a policy with any predicate that does not declare it, or
    declares more (a third-party predicate reading pod labels, say), is not cached:
    ``decide`` then runs the plain per-node evaluation. Predicates are pure, so the
    node and the RuntimeClass are the only other inputs, and both are tracked.

Invalidation
    The cache listens to both stores. A node change (upsert, delete, or a difference
    found by ``replace``) marks that node dirty in every entry; the next lookup of an
    entry re-evaluates just its dirty nodes (an entry with too many dirty nodes is
    dropped and rebuilt instead). A RuntimeClass change drops the entries keyed by that
    class name, including entries built while the class did not exist. As a second
    guard, a lookup also checks that the entry was built with the very RuntimeClass
    object the store holds now.

The whole cluster, prebuilt
    With ``percentageOfNodesToScore: 100`` kube-scheduler names every feasible node in
    every call, so most calls name exactly the cached nodes. For those an entry keeps
    the whole answer ready (``WholeCluster``: the passing names, the failure map, the
    counts per reason and the answer's bytes), built on the first such call and
    dropped whenever the entry changes at all. Such a call then costs one hash and
    one probe per name (the cached names less the request's must be none), and its
    answer is sent as it was written.

    The passing names come in the cache's order, not the request's: kube-scheduler
    maps the returned names back to its own node objects through a map
    (pkg/scheduler/extender.go, ``HTTPExtender.Filter``), its own order of feasible
    nodes already varies from call to call (its filters run in parallel,
    pkg/scheduler/schedule_one.go ``findNodesThatPassFilters``), and it breaks ties
    between equal scores at random (``selectHost``). Building a set of the request and
    picking the passing names out of it in its order cost twice as much (BENCHMARKS.md,
    "The whole-cluster call").

Every other call
    The adaptive sample, a RuntimeClass's pool (what kube-scheduler's own filters leave
    once RuntimeClass admission has put the class's nodeSelector on the pod), a sample
    of that, names the cache does not hold: ``Entry.partition``. A call offering a
    large share of the passing nodes (a pool) builds a set of itself and walks the
    entry's set of passing nodes once, discarding each from it; a small one (a sample)
    probes its names into that set. When every name passes, the request is its own
    answer. Otherwise each failure group is intersected with what is left, and the
    passing names are the request's less those, in the request's order. Walking a
    cluster-sized set in table order, rather than probing it once per offered name, is
    what keeps a call naming thousands of nodes cheap: the probes miss the CPU caches,
    the walk does not (BENCHMARKS.md, "Every call shape").

Everything runs on the service's one event loop: listeners and lookups never
interleave, so an entry is never read half-updated.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import filterfalse
from typing import Final

from extender.cluster.state import NODES, ClusterState
from extender.kube.store import Named, Store
from policies.objects import NodeView, PodView, RuntimeClassView, Toleration
from policies.registry import Policy
from policies.verdict import POD_INPUTS_ATTR, Verdict

# The pod fields an entry is keyed by: predicates reading only these can be cached.
CACHE_KEY_FIELDS: Final = frozenset({"runtime_class_name", "tolerations"})

# Distinct (policy, class, tolerations) combinations kept. An entry is a dict and a few
# sets over all nodes, sharing the store's name strings (about 1.3 MB at 15,000
# nodes); real clusters have a handful of classes and toleration sets, so this bounds
# memory without evicting the hot ones.
MAX_ENTRIES: Final = 16

# An entry with more dirty nodes than this share of its nodes is rebuilt from scratch
# (a re-LIST changed most of the cluster): cheaper than patching node by node.
_REBUILD_SHARE: Final = 0.25

EntryKey = tuple[int, str | None, tuple[Toleration, ...]]


def policy_is_cacheable(policy: Policy) -> bool:
    """Every predicate declares that it reads the pod only through CACHE_KEY_FIELDS."""
    for predicate in policy.predicates:
        inputs = getattr(predicate, POD_INPUTS_ATTR, None)
        if not isinstance(inputs, frozenset) or not inputs <= CACHE_KEY_FIELDS:
            return False
    return True


@dataclass(frozen=True, slots=True)
class WholeCluster:
    """The answer to a request naming every cached node once (read only: shared by
    every such answer until the entry changes): the passing names (in the cache's
    order), the failure map, how many nodes failed with each reason, and the answer as
    sent, written once by the caller's serialiser."""

    passing: list[str]
    failures: dict[str, str]
    counts: dict[str, int]
    answer_json: bytes


# An empty set of names, shared (never written).
_NO_NAMES: Final[frozenset[str]] = frozenset()

# A call offering fewer names than the passing set holds, divided by this, probes its
# names into it rather than walking it (``Entry.partition``): CPython's own cut-over
# between the two (set_difference_update_internal in Objects/setobject.c).
_PROBE_SHARE: Final = 8


@dataclass(frozen=True, slots=True)
class Partition:
    """A names-mode request partitioned by an entry's outcomes: the passing names (each
    once, in the request's order), the failure map of the failing ones (every failure
    unresolvable), how many failed with each reason, and the distinct names the entry
    does not hold (not in either). Read only: ``passing`` may be the request's own list."""

    passing: list[str]
    failures: dict[str, str]
    counts: dict[str, int]
    unknown: AbstractSet[str]


# Writes a whole answer (passing names, failure map) in the wire format: the caller's,
# so that this module stays apart from the protocol.
Serialiser = Callable[[list[str], dict[str, str]], bytes]


class Entry:
    """The outcome of every cached node for one (policy, class, tolerations)."""

    __slots__ = (
        "dirty",
        "failing",
        "groups",
        "outcome",
        "pod",
        "policy",
        "resolvable",
        "runtime_class",
        "whole",
    )

    def __init__(self, policy: Policy, pod: PodView, runtime_class: RuntimeClassView | None) -> None:
        # The policy is held so that id(policy) in the key cannot be reused while the
        # entry lives; the pod is any pod with this key (its other fields are unread).
        self.policy = policy
        self.pod = pod
        self.runtime_class = runtime_class
        # node name -> "" when the node fits, else the failing verdict's reason.
        self.outcome: dict[str, str] = {}
        # The same, inverted: outcome -> names. Few groups, as a reason never varies
        # per node: a request is answered by one set intersection per group.
        self.groups: dict[str, set[str]] = {}
        # The failing part of ``outcome``: the failure map of a request naming every node.
        self.failing: dict[str, str] = {}
        # Names whose failure preemption might fix (FailedNodes); rare, built-ins have none.
        self.resolvable: set[str] = set()
        self.dirty: set[str] = set()
        # Built on first use; None again after any change to the outcomes.
        self.whole: WholeCluster | None = None

    def _judge(self, node: NodeView) -> tuple[str, bool]:
        """(reason or "" when the node fits, whether the failure is resolvable)."""
        verdict = self.policy.evaluate(self.pod, self.runtime_class, node)
        return ("", False) if verdict.fits else (verdict.reason, not verdict.unresolvable)

    def _record(self, name: str, reason: str, resolvable: bool) -> None:
        # The store's own name string: the cached views' strings are compact, interned
        # copies (extender/cluster/objects.py), so entries share them at no extra memory.
        self.whole = None
        self.outcome[name] = reason
        if reason:
            self.failing[name] = reason
        self.groups.setdefault(reason, set()).add(name)
        if resolvable:
            self.resolvable.add(name)

    def evaluate(self, node: NodeView) -> None:
        self.forget(node.name)
        self._record(node.name, *self._judge(node))

    def forget(self, name: str) -> None:
        self.whole = None
        reason = self.outcome.pop(name, None)
        self.failing.pop(name, None)
        if reason is not None:
            group = self.groups[reason]
            group.discard(name)
            if not group:
                del self.groups[reason]
            self.resolvable.discard(name)

    def build(self, nodes: Iterable[NodeView]) -> None:
        for node in nodes:
            self._record(node.name, *self._judge(node))

    def refresh(self, nodes: Store[NodeView]) -> None:
        """Re-evaluate the nodes that changed since the last lookup."""
        dirty, self.dirty = self.dirty, set()
        for name in dirty:
            node = nodes.get(name)
            if node is None:
                self.forget(name)
            else:
                self.evaluate(node)

    @property
    def fitting(self) -> AbstractSet[str]:
        """The cached nodes that pass (the entry's own set: read, never write)."""
        return self.groups.get("") or frozenset()

    def verdict(self, name: str) -> Verdict | None:
        """The cached verdict for a node (without detail), or None if not cached."""
        reason = self.outcome.get(name)
        if reason is None:
            return None
        if not reason:
            return Verdict(True)
        return Verdict(False, reason, unresolvable=name not in self.resolvable)

    def whole_cluster(self, names: list[str], serialise: Serialiser) -> WholeCluster | None:
        """The prebuilt answer when ``names`` are exactly the cached nodes, each named
        once; else None. ``serialise`` writes it, on the first such call."""
        # As many names as cached nodes, and no cached node left unnamed: then each is
        # named exactly once and nothing else is (pigeonhole). The difference copies the
        # cached names (their hashes are stored) and removes the request's from the copy:
        # one hash and probe per name, no set of the request built.
        if self.resolvable or len(names) != len(self.outcome) or self.outcome.keys() - names:
            return None
        if self.whole is None:
            passing = [name for name, reason in self.outcome.items() if not reason]
            failures, counts = self._all_failures()  # every cached node named
            self.whole = WholeCluster(passing, failures, counts, serialise(passing, failures))
        return self.whole

    def partition(self, names: list[str]) -> Partition | None:
        """``names`` partitioned by their cached outcomes (see ``Partition``), or None when a
        cached failure is resolvable (the per-name path knows what to say).

        C-level passes only, none of them per name in Python. What they cost is where
        they read memory: the request's strings were just written and are in the CPU
        caches, the entry's sets are not, and a probe into a set the size of a pool
        reads two places at random in it. So a call offering a large share of the
        passing set (a class's pool, every node) builds a set of itself and walks the
        passing set's table once, in order, discarding each of its names from that set
        (``set.difference_update``); a small call (a sample) probes its names into the
        passing set (``set.intersection``), fewer reads than a walk. Either way, when
        every name passes the request itself is the answer. Otherwise each failure
        group is intersected with what is left (CPython walks the smaller side), and the
        passing names are the request's less those, in its order. Measured in
        BENCHMARKS.md ("Every call shape"), per shape of call.
        """
        if self.resolvable:
            return None
        passed: set[str] | frozenset[str] = self.groups.get("") or _NO_NAMES
        if len(passed) > _PROBE_SHARE * len(names):
            passed = passed.intersection(names)  # a small call: probed
            if len(passed) == len(names):
                # Every name passes, each listed once: the request is its own answer.
                return Partition(names, {}, {}, _NO_NAMES)
        not_passing = set(names)
        distinct = len(not_passing)
        not_passing.difference_update(passed)  # a large call walks the passing set here
        if not not_passing:
            # Every name passes: the request itself is the answer (only read from here
            # on), in its own order, when no name is listed twice.
            passing = names if distinct == len(names) else list(dict.fromkeys(names))
            return Partition(passing, {}, {}, _NO_NAMES)
        failures, counts = self._failures_among(not_passing, names)
        unknown: AbstractSet[str] = _NO_NAMES
        if len(failures) != len(not_passing):
            unknown = not_passing.difference(failures)
        passing = list(filterfalse(not_passing.__contains__, names))
        if distinct != len(names):
            passing = list(dict.fromkeys(passing))
        return Partition(passing, failures, counts, unknown)

    def _failures_among(
        self, requested: AbstractSet[str], names: list[str]
    ) -> tuple[dict[str, str], dict[str, int]]:
        """The failure map of the failing names among ``requested`` (the request's names
        that do not pass), in the order of ``names``, and its counts per reason: one
        intersection per reason (each walks the smaller side).

        In request order, as the per-name path answers: the groups are sets, whose order
        follows the process's string hashes, so the same call got its failure map in
        another order after each restart. One more C-level pass over the names gives
        it, probing the request's own set where it can (its own strings: each hit an
        identity check)."""
        every = len(requested) == len(self.failing) and self.failing.keys() == requested
        if every:
            counts = {reason: len(group) for reason, group in self.groups.items() if reason}
            hits_by_reason: list[tuple[str, AbstractSet[str]]] = []
        else:
            counts = {}
            hits_by_reason = []
            for reason, group in self.groups.items():
                if reason:
                    hits = group.intersection(requested)
                    if hits:
                        counts[reason] = len(hits)
                        hits_by_reason.append((reason, hits))
            if not hits_by_reason:
                return {}, {}
        # Only failing names among the requested ones (no unknown name): probe those.
        all_fail = every or sum(counts.values()) == len(requested)
        if len(counts) == 1:
            (reason,) = counts
            member = requested.__contains__ if all_fail else hits_by_reason[0][1].__contains__
            return dict.fromkeys(filter(member, names), reason), counts
        reason_of: Mapping[str, str] = self.failing
        if not every:
            among: dict[str, str] = {}
            for reason, found in hits_by_reason:
                among.update(dict.fromkeys(found, reason))
            reason_of = among
        in_order = list(filter(requested.__contains__ if all_fail else reason_of.__contains__, names))
        return dict(zip(in_order, map(reason_of.__getitem__, in_order), strict=True)), counts

    def _all_failures(self) -> tuple[dict[str, str], dict[str, int]]:
        """The failure map of the whole cluster (a dict copy) and its counts per reason."""
        counts = {reason: len(group) for reason, group in self.groups.items() if reason}
        return self.failing.copy(), counts


class DecisionCache:
    """The entries for one ClusterState, kept exact by the stores' listeners."""

    def __init__(self, state: ClusterState, *, max_entries: int = MAX_ENTRIES) -> None:
        self._max_entries = max_entries
        self._entries: OrderedDict[EntryKey, Entry] = OrderedDict()
        self._cacheable: dict[int, tuple[Policy, bool]] = {}
        self.state = state
        self._nodes = state.nodes
        state.nodes.add_listener(self._changed)
        state.runtime_classes.add_listener(self._changed)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def _changed(self, kind: str, old: Named | None, new: Named | None) -> None:
        changed = new if new is not None else old
        if changed is None:
            return
        name = changed.name
        if kind == NODES:
            stale = []
            for key, entry in self._entries.items():
                entry.dirty.add(name)
                if len(entry.dirty) > max(64, _REBUILD_SHARE * len(entry.outcome)):
                    stale.append(key)
            for key in stale:
                del self._entries[key]
        else:
            for key in [key for key in self._entries if key[1] == name]:
                del self._entries[key]

    def is_cacheable(self, policy: Policy) -> bool:
        known = self._cacheable.get(id(policy))
        if known is None or known[0] is not policy:
            known = (policy, policy_is_cacheable(policy))
            self._cacheable[id(policy)] = known
        return known[1]

    def entry(self, policy: Policy, pod: PodView, runtime_class: RuntimeClassView | None) -> Entry | None:
        """The up-to-date entry for this pod's key (built on first use), or None when
        the policy cannot be cached."""
        if not self.is_cacheable(policy):
            return None
        key: EntryKey = (id(policy), pod.runtime_class_name, pod.tolerations)
        entry = self._entries.get(key)
        if entry is not None and (entry.policy is not policy or entry.runtime_class is not runtime_class):
            entry = None  # built for another policy object or an older class revision
        if entry is None:
            entry = Entry(policy, pod, runtime_class)
            entry.build(self._nodes.values())
            self._entries[key] = entry
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
            if entry.dirty:
                entry.refresh(self._nodes)
        return entry
