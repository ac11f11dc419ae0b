"""The pure requeue planner: who gets nudged, and never twice for one class revision.

Level-triggered: a pending pod is due a nudge exactly when its class is now at another
revision than the one it was last tried against (extender/requeue/planner.py)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from extender.cluster.class_revisions import ABSENT, revision_digest, scheduling_revision
from extender.cluster.pending_pods import PendingPod
from extender.requeue.planner import RequeuePlanner
from policies.objects import RuntimeClassView, SelectorRequirement, Toleration

SCHED = "runtimeclass-scheduler"


def pod(
    name: str, rc: str = "gvisor", *, scheduler: str = SCHED, uid: str | None = None, requeued_for: str = ""
) -> PendingPod:
    return PendingPod("default", name, uid or f"uid-{name}", rc, scheduler, requeued_for=requeued_for)


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


def started(*pods: PendingPod, classes: dict[str, object] | None = None) -> RequeuePlanner:
    """A planner after the first LISTs: ``classes`` (name -> revision) and ``pods``."""
    planner = RequeuePlanner([SCHED])
    for name, revision in (classes or {}).items():
        planner.observe_class(name, revision, initial=True)
    planner.baseline_listed()
    for one in pods:
        planner.first_seen(one, initial=True)
    return planner


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
    planner = RequeuePlanner([SCHED])
    if old is not None:
        planner.observe_class("gvisor", scheduling_revision(old), initial=True)
    assert planner.observe_class("gvisor", scheduling_revision(new)) is matters


def test_only_our_schedulable_pods_with_a_class_are_nudged() -> None:
    pods = [
        pod("a"),
        pod("other-scheduler", scheduler="default-scheduler"),
        PendingPod("default", "terminating", "u1", "gvisor", SCHED, schedulable=False),
    ]
    planner = started(*pods)
    planner.observe_class("gvisor", scheduling_revision(gvisor()))
    assert [n.pod.pod_name for n in planner.plan(pods).nudges] == ["a"]


def test_initial_list_is_a_baseline_not_a_change() -> None:
    pods = [pod("a")]
    planner = started(*pods, classes={"gvisor": scheduling_revision(gvisor())})
    plan = planner.plan(pods)
    assert plan.changes == [] and plan.nudges == []


def test_pods_listed_before_the_classes_are_judged_against_the_classes_first_list() -> None:
    """The first LIST of pods may come in before the first of RuntimeClasses: those pods
    were pending since before start, tried against the classes as first listed."""
    pods = [pod("a")]
    planner = RequeuePlanner([SCHED])
    planner.first_seen(pods[0], initial=True)
    planner.observe_class("gvisor", scheduling_revision(gvisor()), initial=True)
    planner.baseline_listed()
    assert planner.plan(pods).nudges == []
    planner.observe_class("gvisor", scheduling_revision(gvisor(handler="debug")))
    assert [n.pod.pod_name for n in planner.plan(pods).nudges] == ["a"]


def test_a_pod_created_after_a_change_is_not_nudged_for_it() -> None:
    old = [pod("old")]
    planner = started(*old, classes={"gvisor": scheduling_revision(gvisor())})
    planner.observe_class("gvisor", scheduling_revision(gvisor(handler="debug")))
    new = pod("new")
    planner.first_seen(new, initial=False)  # arrived by the watch, after the edit
    assert [n.pod.pod_name for n in planner.plan([*old, new]).nudges] == ["old"]


def test_burst_of_edits_coalesces_into_one_nudge_per_pod() -> None:
    pods = [pod("a"), pod("b"), pod("c", rc="kata")]
    planner = started(*pods)
    for handler in ("h1", "h2", "h3"):
        planner.observe_class("gvisor", scheduling_revision(gvisor(handler=handler)))
    nudges = planner.plan(pods).nudges
    assert sorted(n.pod.pod_name for n in nudges) == ["a", "b"]
    assert {n.revision for n in nudges} == {scheduling_revision(gvisor(handler="h3"))}
    for nudge in nudges:
        planner.done(nudge)
    assert planner.plan(pods).nudges == []  # nothing new since


def test_never_twice_for_the_same_revision_but_again_for_a_new_one() -> None:
    pods = [pod("a")]
    planner = started(*pods)
    first = scheduling_revision(gvisor())
    planner.observe_class("gvisor", first)
    (nudge,) = planner.plan(pods).nudges
    planner.done(nudge)
    # Deleted, then recreated identically: each is a change the pod was not tried against.
    planner.observe_class("gvisor", ABSENT)
    (deleted,) = planner.plan(pods).nudges
    assert deleted.revision == ABSENT
    planner.done(deleted)
    planner.observe_class("gvisor", first)
    (again,) = planner.plan(pods).nudges
    assert again.revision == first
    planner.done(again)
    # A no-op update (same revision) is not a change at all.
    assert planner.observe_class("gvisor", first) is False
    assert planner.plan(pods).nudges == []


def test_a_nudge_not_yet_done_is_still_due_at_every_pass() -> None:
    """Level-triggered: a nudge that failed, or was cut short with a term, is found again
    by the next pass (of this replica or the next leader), not lost with a queue."""
    pods = [pod("a")]
    planner = started(*pods)
    planner.observe_class("gvisor", scheduling_revision(gvisor()))
    assert [n.pod.pod_name for n in planner.plan(pods).nudges] == ["a"]
    assert [n.pod.pod_name for n in planner.plan(pods).nudges] == ["a"]


def test_a_new_leader_nudges_only_what_its_predecessor_had_not() -> None:
    """Another replica's nudges show on the pods (their annotation names the revision)."""
    revision = scheduling_revision(gvisor())
    done_by_other = pod("a", requeued_for=revision_digest(revision))
    owed = pod("b")
    planner = started(done_by_other, owed)
    planner.observe_class("gvisor", revision)
    plan = planner.plan([done_by_other, owed])
    assert [n.pod.pod_name for n in plan.nudges] == ["b"]
    assert [n.pod.pod_name for n in plan.already_nudged] == ["a"]


def test_the_own_record_lasts_until_the_pod_shows_the_nudge() -> None:
    pods = [pod("a")]
    planner = started(*pods)
    planner.observe_class("gvisor", scheduling_revision(gvisor()))
    (nudge,) = planner.plan(pods).nudges
    planner.done(nudge)
    shown = pod("a", requeued_for=nudge.digest)
    planner.seen_annotation(shown)
    assert planner.plan([shown]).nudges == []


def test_forgetting_a_pod_drops_its_history() -> None:
    pods = [pod("a")]
    planner = started(*pods)
    planner.observe_class("gvisor", scheduling_revision(gvisor()))
    (nudge,) = planner.plan(pods).nudges
    planner.done(nudge)
    planner.forget_pod("uid-a")
    # Seen again (a new pending pod of that uid after a re-list): tried against now.
    planner.first_seen(pods[0], initial=False)
    assert planner.plan(pods).nudges == []


def test_plan_reports_net_changes_and_pods_already_nudged() -> None:
    pods = [pod("a")]
    planner = started(*pods, classes={"kata": scheduling_revision(gvisor(name="kata"))})
    planner.observe_class("gvisor", scheduling_revision(gvisor()))
    planner.observe_class("kata", ABSENT)
    plan = planner.plan(pods)
    assert [(c.class_name, c.kind) for c in plan.changes] == [("gvisor", "added"), ("kata", "deleted")]
    (nudge,) = plan.nudges
    planner.done(nudge)
    # Edited (that nudge never completes, say it failed), then edited back: the pod was
    # already nudged for this revision.
    planner.observe_class("gvisor", scheduling_revision(gvisor(handler="other")))
    assert [n.pod.pod_name for n in planner.plan(pods).nudges] == ["a"]
    planner.observe_class("gvisor", scheduling_revision(gvisor()))
    again = planner.plan(pods)
    assert [c.kind for c in again.changes] == ["updated"]
    assert again.nudges == []
    assert [n.pod.pod_name for n in again.already_nudged] == ["a"]


def test_changed_back_within_one_window_is_no_change() -> None:
    pods = [pod("a")]
    rev = scheduling_revision(gvisor())
    planner = started(*pods, classes={"gvisor": rev})
    # Both edits are seen as changes; only their net effect is none.
    assert planner.observe_class("gvisor", scheduling_revision(gvisor(handler="debug"))) is True
    assert planner.observe_class("gvisor", rev) is True
    plan = planner.plan(pods)
    assert plan.changes == [] and plan.nudges == []
    # Added and deleted again before the window closed: nothing either.
    planner.observe_class("new", scheduling_revision(gvisor(name="new")))
    planner.observe_class("new", ABSENT)
    assert planner.plan(pods).changes == []
