"""Pending pods as the informer keeps them (extender/cluster/pending_pods.py): alike pods
share their selector and required keys while they pend, and nothing of a pod is kept
once it is gone, however many distinct selectors come and go."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from extender.cluster.pending_pods import PendingPod, PendingPods, pending_pod_converter

PREFIX = "runtimeclass.node-restriction.kubernetes.io"
ROUND_KEY = "example.com/round"


def pod(name: str, *, runtime_class: str | None, selector: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "runtimeclass-scheduler",
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        "nodeSelector": selector,
    }
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": spec,
    }


def round_pods(round_: int, count: int) -> list[dict[str, Any]]:
    """``count`` pods, each with a selector of its own, every other one naming a class;
    the ones of a class require its derived label, and a key of their own under the
    prefix every third pod."""
    pods = []
    for i in range(count):
        selector = {ROUND_KEY: f"{round_}-{i}", f"{PREFIX}/gvisor": "true"}
        if i % 3 == 0:
            selector[f"{PREFIX}/own-{round_}-{i}"] = "true"
        pods.append(pod(f"p-{round_}-{i}", runtime_class="gvisor" if i % 2 else None, selector=selector))
    return pods


def selectors_alive() -> int:
    """The live sets holding a selector pair of these rounds' pods (whoever holds them)."""
    gc.collect()
    return sum(
        1
        for obj in gc.get_objects()
        if type(obj) is frozenset
        and any(isinstance(item, tuple) and item[:1] == (ROUND_KEY,) for item in obj)
    )


@pytest.mark.parametrize("how", ["watch events", "re-LISTs"])
def test_nothing_of_the_pods_is_kept_once_they_are_gone(how: str) -> None:
    convert = pending_pod_converter(PREFIX)
    store = PendingPods()
    before = selectors_alive()
    for round_ in range(5):
        objects = round_pods(round_, 200)
        if how == "watch events":
            for obj in objects:
                store.upsert(convert(obj))  # ADDED
        else:
            store.replace([convert(obj) for obj in objects])
        assert len(store) == 100  # the pods that name a class
        assert selectors_alive() == before + 100, f"round {round_}"  # those pods' selectors, no others
        assert len(convert.selectors) == 100
        # The class's label alone (shared by most), and with a key of the pod's own.
        assert len(convert.required) == 1 + sum(1 for i in range(200) if i % 6 == 3)
        if how == "watch events":
            for obj in objects:
                store.delete(f"default/{obj['metadata']['name']}")  # bound, or deleted
        else:
            store.replace([])
        del objects
        assert len(store) == 0
        assert selectors_alive() == before, f"round {round_}"
        assert (len(convert.selectors), len(convert.required)) == (0, 0), f"round {round_}"
        assert store.required_keys() == frozenset()


def test_alike_pods_share_one_selector_and_one_set_of_required_keys_while_one_pends() -> None:
    convert = pending_pod_converter(PREFIX)
    store = PendingPods()
    selector = {"pool": "sandbox", f"{PREFIX}/gvisor": "true"}
    for i in range(3):
        store.upsert(convert(pod(f"a{i}", runtime_class="gvisor", selector=dict(selector))))
    a0, a1, a2 = (store[f"default/a{i}"] for i in range(3))
    assert a0.node_selector is a1.node_selector is a2.node_selector
    assert a0.required is a1.required is a2.required == frozenset({f"{PREFIX}/gvisor"})
    # One pod left holds them; a pod decoded now gets the same sets.
    store.delete("default/a0")
    store.delete("default/a1")
    del a0, a1
    later = convert(pod("later", runtime_class="gvisor", selector=dict(selector)))
    assert later.node_selector is a2.node_selector and later.required is a2.required
    # A pod of no class is never kept: its selector is not shared, nor remembered.
    none = convert(pod("none", runtime_class=None, selector={"pool": "elsewhere"}))
    assert none.node_selector == frozenset({("pool", "elsewhere")})
    assert len(convert.selectors) == 1
    store.upsert(none)
    assert "default/none" not in store


def test_a_pod_decoded_keeps_what_it_reads_of_its_selector() -> None:
    view = pending_pod_converter(PREFIX)(
        pod("p", runtime_class="gvisor", selector={"pool": "a", f"{PREFIX}/gvisor": "true"})
    )
    assert isinstance(view, PendingPod)
    assert view.node_selector == frozenset({("pool", "a"), (f"{PREFIX}/gvisor", "true")})
    assert view.required == frozenset({f"{PREFIX}/gvisor"})
    assert (
        pending_pod_converter(None)(pod("q", runtime_class="gvisor", selector={})).node_selector
        == frozenset()
    )
