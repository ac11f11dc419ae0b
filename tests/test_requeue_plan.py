"""The pure requeue planner: who gets nudged, and never twice for one class revision."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from extender.requeue_plan import ABSENT, PendingPod, PendingPods, RequeuePlanner, class_revision
from policies.objects import RuntimeClassView, SelectorRequirement, Toleration

SCHED = "runtimeclass-scheduler"


def pod(name: str, rc: str = "gvisor", *, scheduler: str = SCHED, uid: str | None = None) -> PendingPod:
    return PendingPod("default", name, uid or f"uid-{name}", rc, scheduler)


def gvisor(**changes: object) -> RuntimeClassView:
    fields: dict[str, object] = {
        "name": "gvisor",
        "handler": "runsc",
        "node_selector": MappingProxyType({"sandbox": "gvisor"}),
        "tolerations": (Toleration("sandbox", "Equal", "gvisor", "NoSchedule"),),
        "resource_version": "10",
    }
    fields.update(changes)
    return RuntimeClassView(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("old", "new", "matters"),
    [
        (None, gvisor(), True),  # created
        (gvisor(), None, True),  # deleted
        (gvisor(), gvisor(resource_version="11"), False),  # label/annotation edit elsewhere
        (gvisor(), gvisor(handler="runsc-debug"), True),
        (gvisor(), gvisor(node_selector=MappingProxyType({"sandbox": "other"})), True),
        (gvisor(), gvisor(tolerations=()), True),
        (gvisor(), gvisor(match_expressions=(SelectorRequirement("zone", "In", ("a",)),)), True),
        (gvisor(), gvisor(selector_error="bad annotation"), True),
    ],
)
def test_only_scheduling_relevant_changes_matter(
    old: RuntimeClassView | None, new: RuntimeClassView | None, matters: bool
) -> None:
    planner = RequeuePlanner()
    if old is not None:
        planner.observe("gvisor", class_revision(old), initial=True)
    assert planner.observe("gvisor", class_revision(new)) is matters


def test_pending_pods_keep_only_ours_with_a_class() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    pods.upsert(pod("other-scheduler", scheduler="default-scheduler"))
    pods.upsert(pod("no-class", rc=""))
    pods.upsert(pod("kata", rc="kata"))
    assert [p.pod_name for p in pods.naming("gvisor")] == ["a"]
    assert [p.pod_name for p in pods.naming("kata")] == ["kata"]
    # A pod switching class (recreated under the same name) moves index.
    pods.upsert(pod("a", rc="kata", uid="uid-a2"))
    assert pods.naming("gvisor") == []
    assert sorted(p.pod_name for p in pods.naming("kata")) == ["a", "kata"]
    pods.delete("default/a")
    pods.delete("default/never-there")
    assert [p.pod_name for p in pods.naming("kata")] == ["kata"]


def test_initial_list_is_a_baseline_not_a_change() -> None:
    planner = RequeuePlanner()
    assert planner.observe("gvisor", class_revision(gvisor()), initial=True) is False
    assert not planner.has_changes


def test_burst_of_edits_coalesces_into_one_nudge_per_pod() -> None:
    pods = PendingPods([SCHED])
    for name in ("a", "b"):
        pods.upsert(pod(name))
    pods.upsert(pod("c", rc="kata"))
    planner = RequeuePlanner()
    planner.observe("gvisor", ABSENT, initial=True)
    for handler in ("h1", "h2", "h3"):
        planner.observe("gvisor", class_revision(gvisor(handler=handler)))
    nudges = planner.flush(pods)
    assert sorted(n.pod.pod_name for n in nudges) == ["a", "b"]
    assert {n.revision for n in nudges} == {class_revision(gvisor(handler="h3"))}
    assert planner.flush(pods) == []  # nothing new since


def test_never_twice_for_the_same_revision_but_again_for_a_new_one() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    planner = RequeuePlanner()
    first = class_revision(gvisor())
    planner.observe("gvisor", first)
    (nudge,) = planner.flush(pods)
    planner.done(nudge)
    # Deleted and recreated identically: the pod was already nudged for this revision
    # ... unless something in between changed it: A -> absent -> A is a new change to A.
    planner.observe("gvisor", ABSENT)
    (deleted,) = planner.flush(pods)
    assert deleted.revision == ABSENT
    planner.done(deleted)
    planner.observe("gvisor", first)
    (again,) = planner.flush(pods)
    assert again.revision == first
    planner.done(again)
    # A no-op update (same revision) is not a change at all.
    assert planner.observe("gvisor", first) is False
    assert planner.flush(pods) == []


def test_undone_nudges_are_offered_again_after_the_next_change_only_if_still_due() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    planner = RequeuePlanner()
    rev = class_revision(gvisor())
    planner.observe("gvisor", rev)
    (nudge,) = planner.flush(pods)
    planner.done(nudge)
    # The same revision observed through a relist after a reconnect: no second patch.
    planner.observe("gvisor", ABSENT, initial=True)
    planner.observe("gvisor", rev)
    assert planner.flush(pods) == []


def test_forgetting_a_pod_drops_its_history() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    planner = RequeuePlanner()
    rev = class_revision(gvisor())
    planner.observe("gvisor", rev)
    (nudge,) = planner.flush(pods)
    planner.done(nudge)
    planner.forget_pod("uid-a")
    planner.observe("gvisor", ABSENT, initial=True)
    planner.observe("gvisor", rev)
    assert [n.pod.pod_name for n in planner.flush(pods)] == ["a"]
