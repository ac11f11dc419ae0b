"""The policy file: validation (``build_policy``), loading (``load_policy``) and plugins.

A policy document names predicates in order; each entry has ``name``, optional
``enabled`` (bool, default true) and optional ``options`` (a mapping the predicate
validates). Every error is a PolicyError whose message names the source and the entry.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.policy_file import load_policy
from policies.objects import NodeView, PodView, RuntimeClassView, Taint
from policies.registry import POLICY_API_VERSION, POLICY_KIND, PolicyError, build_policy
from policies.verdict import FITS, Verdict
from tests.support.docs import fenced_blocks, page, section
from tests.support.paths import REPO

DEFAULT_ORDER = ("RuntimeClassExists", "RuntimeClassNodeSelector", "TaintToleration")
HEAD = {"apiVersion": POLICY_API_VERSION, "kind": POLICY_KIND}


def doc(*entries: Any, **top: Any) -> dict[str, Any]:
    return {**HEAD, "predicates": list(entries), **top}


INVALID_DOCUMENTS = [
    pytest.param(None, "expected a mapping", id="empty-document"),
    pytest.param(["RuntimeClassExists"], "expected a mapping", id="document-is-a-list"),
    pytest.param(doc(extra=1), "unknown field(s) extra", id="unknown-top-level-field"),
    pytest.param(
        {**doc(), "apiVersion": "v1"}, f"expected apiVersion {POLICY_API_VERSION}", id="wrong-apiVersion"
    ),
    pytest.param({**doc(), "kind": "Config"}, f"kind {POLICY_KIND}", id="wrong-kind"),
    pytest.param({**HEAD}, "predicates must be a list", id="predicates-missing"),
    pytest.param(
        {**HEAD, "predicates": "TaintToleration"}, "predicates must be a list", id="predicates-string"
    ),
    pytest.param(
        {**HEAD, "predicates": {"name": "TaintToleration"}}, "predicates must be a list", id="predicates-map"
    ),
    pytest.param(doc("TaintToleration"), "predicates[0]: expected a mapping", id="entry-not-mapping"),
    pytest.param(
        doc({"name": "TaintToleration", "weight": 2}),
        "predicates[0]: unknown field(s) weight",
        id="entry-unknown-field",
    ),
    pytest.param(
        doc({"name": "RuntimeClassExists"}, {"name": "NodeAffinity"}),
        "predicates[1]: unknown predicate 'NodeAffinity'; known: ",
        id="unknown-predicate",
    ),
    pytest.param(doc({"enabled": True}), "predicates[0]: unknown predicate None", id="name-missing"),
    pytest.param(
        doc({"name": "taintToleration"}),
        "predicates[0]: unknown predicate 'taintToleration'",
        id="name-case-sensitive",
    ),
    pytest.param(
        doc({"name": "TaintToleration"}, {"name": "RuntimeClassExists"}, {"name": "TaintToleration"}),
        "predicates[2]: predicate TaintToleration is listed twice",
        id="duplicate",
    ),
    pytest.param(
        doc({"name": "TaintToleration", "enabled": False}, {"name": "TaintToleration"}),
        "predicates[1]: predicate TaintToleration is listed twice",
        id="duplicate-of-disabled",
    ),
    pytest.param(
        doc({"name": "TaintToleration", "enabled": "yes"}),
        "predicates[0]: enabled must be true or false",
        id="enabled-string",
    ),
    pytest.param(
        doc({"name": "TaintToleration", "enabled": 1}),
        "predicates[0]: enabled must be true or false",
        id="enabled-int",
    ),
    pytest.param(
        doc({"name": "TaintToleration", "options": ["x"]}),
        "predicates[0]: options must be a mapping",
        id="options-not-mapping",
    ),
    pytest.param(
        doc({"name": "RuntimeClassExists"}, {"name": "TaintToleration", "options": {"strict": True}}),
        "predicates[1]: predicate TaintToleration takes no options, got: strict",
        id="options-on-predicate-without-options",
    ),
]


@pytest.mark.parametrize(("document", "message"), INVALID_DOCUMENTS)
def test_invalid_documents(document: Any, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        build_policy(document, source="my-policy.yaml")
    assert str(caught.value).startswith("my-policy.yaml: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("entries", "names"),
    [
        pytest.param([{"name": n} for n in DEFAULT_ORDER], DEFAULT_ORDER, id="all"),
        pytest.param(
            [{"name": "TaintToleration"}, {"name": "RuntimeClassExists"}],
            ("TaintToleration", "RuntimeClassExists"),
            id="order-kept",
        ),
        pytest.param(
            [
                {"name": "RuntimeClassExists"},
                {"name": "RuntimeClassNodeSelector", "enabled": True},
                {"name": "TaintToleration", "enabled": False},
            ],
            ("RuntimeClassExists", "RuntimeClassNodeSelector"),
            id="one-disabled",
        ),
        pytest.param(
            [{"name": "TaintToleration", "enabled": False, "options": {"ignored": "while disabled"}}],
            (),
            id="disabled-options-not-built",
        ),
        pytest.param([{"name": "TaintToleration", "options": None}], ("TaintToleration",), id="null-options"),
        pytest.param([{"name": "TaintToleration", "options": {}}], ("TaintToleration",), id="empty-options"),
        pytest.param([], (), id="no-predicates"),
    ],
)
def test_valid_documents(entries: list[dict[str, Any]], names: tuple[str, ...]) -> None:
    assert build_policy(doc(*entries)).names == names


def test_disabled_predicate_does_not_judge() -> None:
    tainted = NodeView("n", {}, (Taint("sandbox", "NoSchedule", "true"),))
    pod = PodView(name="p")
    enabled = build_policy(doc({"name": "TaintToleration"}))
    disabled = build_policy(doc({"name": "TaintToleration", "enabled": False}))
    assert enabled.evaluate(pod, None, tainted).reason == "node(s) had untolerated taint(s)"
    assert disabled.evaluate(pod, None, tainted) == FITS


def test_unknown_predicate_lists_the_known_ones() -> None:
    with pytest.raises(PolicyError) as caught:
        build_policy(doc({"name": "NodeAffinity"}), extra_factories={"NeedsLabel": needs_label})
    known = str(caught.value).split("; known: ")[1].split(", ")
    assert set(DEFAULT_ORDER) | {"NeedsLabel"} <= set(known)
    assert known == sorted(known)


def test_bundled_default_policy() -> None:
    policy = load_policy()
    assert policy.names == DEFAULT_ORDER
    # The bundled file is the one docs/reference.md shows and ships in the package.
    assert load_policy(REPO / "policies" / "default-policy.yaml").names == DEFAULT_ORDER


def test_load_policy_from_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            apiVersion: {POLICY_API_VERSION}
            kind: {POLICY_KIND}
            predicates:
            - name: TaintToleration
            - name: RuntimeClassNodeSelector
              enabled: false
            - name: RuntimeClassExists
            """
        )
    )
    assert load_policy(path).names == ("TaintToleration", "RuntimeClassExists")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("predicates: [", "not valid YAML", id="bad-yaml"),
        pytest.param("", "expected a mapping", id="empty-file"),
        pytest.param(
            f"apiVersion: {POLICY_API_VERSION}\nkind: {POLICY_KIND}\npredicates:\n- name: Nope\n",
            "predicates[0]: unknown predicate 'Nope'",
            id="bad-entry",
        ),
    ],
)
def test_load_policy_errors_name_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(content)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_load_policy_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(tmp_path / "absent.yaml")
    assert str(caught.value) == f"{tmp_path / 'absent.yaml'}: no such file or directory"


# --- third-party predicates ----------------------------------------------------------


@dataclass(frozen=True)
class NeedsLabel:
    """A third-party predicate: the node must carry a configured label."""

    label: str
    name: str = "NeedsLabel"

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        if self.label in node.labels:
            return FITS
        return Verdict(False, "node(s) lack the required label", unresolvable=True, detail=self.label)


def needs_label(options: Mapping[str, Any]) -> NeedsLabel:
    unknown = set(options) - {"label"}
    if unknown or not isinstance(options.get("label"), str):
        raise ValueError("NeedsLabel takes one option, label (a string)")
    return NeedsLabel(options["label"])


def test_third_party_predicate_via_extra_factories() -> None:
    policy = build_policy(
        doc({"name": "RuntimeClassExists"}, {"name": "NeedsLabel", "options": {"label": "gpu"}}),
        extra_factories={"NeedsLabel": needs_label},
    )
    assert policy.names == ("RuntimeClassExists", "NeedsLabel")
    pod = PodView(name="p")
    assert policy.evaluate(pod, None, NodeView("a", {"gpu": "yes"})) == FITS
    assert policy.evaluate(pod, None, NodeView("b", {})) == Verdict(
        False, "node(s) lack the required label", unresolvable=True, detail="gpu"
    )


def test_third_party_options_error_names_entry() -> None:
    with pytest.raises(PolicyError, match=r"^policy: predicates\[0\]: NeedsLabel takes one option"):
        build_policy(
            doc({"name": "NeedsLabel", "options": {"label": 3}}), extra_factories={"NeedsLabel": needs_label}
        )


def test_third_party_unknown_without_its_factory() -> None:
    with pytest.raises(PolicyError, match="unknown predicate 'NeedsLabel'"):
        build_policy(doc({"name": "NeedsLabel", "options": {"label": "gpu"}}))


def test_third_party_cannot_replace_builtin() -> None:
    with pytest.raises(PolicyError, match="'TaintToleration' clashes with a built-in predicate"):
        build_policy(doc(), extra_factories={"TaintToleration": needs_label})


def test_third_party_factory_must_build_predicate_of_its_name() -> None:
    with pytest.raises(PolicyError, match=r"factory for Other built a predicate named 'NeedsLabel'"):
        build_policy(
            doc({"name": "Other", "options": {"label": "x"}}), extra_factories={"Other": needs_label}
        )


def _install_distribution(root: Path, module: str, source: str, entry_points: str) -> None:
    """A minimal installed distribution (dist-info + module) under ``root``."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    dist_info = root / f"{module}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def test_entry_point_plugin_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_distribution(
        tmp_path,
        "rcx_test_plugin",
        """\
        from dataclasses import dataclass
        from policies.verdict import FITS, Verdict

        @dataclass(frozen=True)
        class Windows:
            name: str = "WindowsOnly"

            def check(self, pod, runtime_class, node):
                if node.labels.get("kubernetes.io/os") == "windows":
                    return FITS
                return Verdict(False, "node(s) are not Windows", unresolvable=True)

        def factory(options):
            return Windows()
        """,
        """\
        [runtimeclass_extender.predicates]
        WindowsOnly = rcx_test_plugin:factory
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(
        f"apiVersion: {POLICY_API_VERSION}\nkind: {POLICY_KIND}\npredicates:\n- name: WindowsOnly\n"
    )
    policy = load_policy(policy_path)
    assert policy.names == ("WindowsOnly",)
    pod = PodView(name="p")
    assert policy.evaluate(pod, None, NodeView("w", {"kubernetes.io/os": "windows"})) == FITS
    assert (
        policy.evaluate(pod, None, NodeView("l", {"kubernetes.io/os": "linux"})).reason
        == "node(s) are not Windows"
    )


def test_broken_entry_point_plugin_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_distribution(
        tmp_path,
        "rcx_broken_plugin",
        "raise ImportError('missing dependency')\n",
        """\
        [runtimeclass_extender.predicates]
        Broken = rcx_broken_plugin:factory
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        PolicyError, match=r"predicate plugin Broken \(rcx_broken_plugin:factory\): missing dependency"
    ):
        load_policy()


def test_docs_show_the_bundled_policy_and_a_loadable_handler_policy(tmp_path: Path) -> None:
    """docs/reference.md shows the bundled default; docs/predicates.md's policy enabling
    the runtime-handler check loads as it says."""
    (shown,) = fenced_blocks(section(page("reference.md"), "### Policy file"), "yaml")[:1]
    bundled = REPO / "policies" / "default-policy.yaml"
    assert yaml.safe_load(shown) == yaml.safe_load(bundled.read_text())
    handler_policies = [
        block
        for block in fenced_blocks(page("predicates.md"), "yaml")
        if block.startswith(f"apiVersion: {POLICY_API_VERSION}\nkind: {POLICY_KIND}\n")
    ]
    assert len(handler_policies) == 1
    path = tmp_path / "policy.yaml"
    path.write_text(handler_policies[0])
    assert load_policy(path).names == (*DEFAULT_ORDER[:2], "RuntimeHandler", DEFAULT_ORDER[2])
