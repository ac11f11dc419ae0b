"""The pure requeue planner: who gets nudged, and never twice for one class revision."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from extender.requeue.planner import (
    ABSENT,
    PendingPod,
    PendingPods,
    RequeuePlanner,
    class_revision,
)
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
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    plan = planner.plan(pods)
    assert plan.changes == [] and plan.nudges == []


def test_burst_of_edits_coalesces_into_one_nudge_per_pod() -> None:
    pods = PendingPods([SCHED])
    for name in ("a", "b"):
        pods.upsert(pod(name))
    pods.upsert(pod("c", rc="kata"))
    planner = RequeuePlanner()
    planner.observe("gvisor", ABSENT, initial=True)
    for handler in ("h1", "h2", "h3"):
        planner.observe("gvisor", class_revision(gvisor(handler=handler)))
    nudges = planner.plan(pods).nudges
    assert sorted(n.pod.pod_name for n in nudges) == ["a", "b"]
    assert {n.revision for n in nudges} == {class_revision(gvisor(handler="h3"))}
    assert planner.plan(pods).nudges == []  # nothing new since


def test_never_twice_for_the_same_revision_but_again_for_a_new_one() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    planner = RequeuePlanner()
    first = class_revision(gvisor())
    planner.observe("gvisor", first)
    (nudge,) = planner.plan(pods).nudges
    planner.done(nudge)
    # Deleted and recreated identically: the pod was already nudged for this revision
    # ... unless something in between changed it: A -> absent -> A is a new change to A.
    planner.observe("gvisor", ABSENT)
    (deleted,) = planner.plan(pods).nudges
    assert deleted.revision == ABSENT
    planner.done(deleted)
    planner.observe("gvisor", first)
    (again,) = planner.plan(pods).nudges
    assert again.revision == first
    planner.done(again)
    # A no-op update (same revision) is not a change at all.
    assert planner.observe("gvisor", first) is False
    assert planner.plan(pods).nudges == []


def test_undone_nudges_are_offered_again_after_the_next_change_only_if_still_due() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    planner = RequeuePlanner()
    rev = class_revision(gvisor())
    planner.observe("gvisor", rev)
    (nudge,) = planner.plan(pods).nudges
    planner.done(nudge)
    # The same revision observed through a relist after a reconnect: no second patch.
    planner.observe("gvisor", ABSENT, initial=True)
    planner.observe("gvisor", rev)
    assert planner.plan(pods).nudges == []


def test_forgetting_a_pod_drops_its_history() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    planner = RequeuePlanner()
    rev = class_revision(gvisor())
    planner.observe("gvisor", rev)
    (nudge,) = planner.plan(pods).nudges
    planner.done(nudge)
    planner.forget_pod("uid-a")
    planner.observe("gvisor", ABSENT, initial=True)
    planner.observe("gvisor", rev)
    assert [n.pod.pod_name for n in planner.plan(pods).nudges] == ["a"]


def test_pods_kube_scheduler_skips_are_not_indexed() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(PendingPod("default", "terminating", "u1", "gvisor", SCHED, schedulable=False))
    assert pods.naming("gvisor") == [] and len(pods) == 0


def test_plan_reports_net_changes_and_pods_already_nudged() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    planner = RequeuePlanner()
    planner.observe("kata", class_revision(gvisor(name="kata")), initial=True)
    planner.observe("gvisor", class_revision(gvisor()))
    planner.observe("kata", ABSENT)
    plan = planner.plan(pods)
    assert {(c.class_name, c.kind) for c in plan.changes} == {("gvisor", "added"), ("kata", "deleted")}
    (nudge,) = plan.nudges
    planner.done(nudge)
    # Edited (that nudge never completes, say it failed), then edited back: the pod was
    # already nudged for this revision.
    planner.observe("gvisor", class_revision(gvisor(handler="other")))
    assert [n.pod.pod_name for n in planner.plan(pods).nudges] == ["a"]
    planner.observe("gvisor", class_revision(gvisor()))
    again = planner.plan(pods)
    assert [c.kind for c in again.changes] == ["updated"]
    assert again.nudges == []
    assert [n.pod.pod_name for n in again.already_nudged] == ["a"]


def test_changed_back_within_one_window_is_no_change() -> None:
    pods = PendingPods([SCHED])
    pods.upsert(pod("a"))
    planner = RequeuePlanner()
    rev = class_revision(gvisor())
    planner.observe("gvisor", rev, initial=True)
    # Both edits are seen as changes; only their net effect is none.
    assert planner.observe("gvisor", class_revision(gvisor(handler="debug"))) is True
    assert planner.observe("gvisor", rev) is True
    plan = planner.plan(pods)
    assert plan.changes == [] and plan.nudges == []
    # Added and deleted again before the window closed: nothing either.
    planner.observe("new", class_revision(gvisor(name="new")))
    planner.observe("new", ABSENT)
    assert planner.plan(pods).changes == []
