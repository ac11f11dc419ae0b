"""The RuntimeHandler predicate (``policies.runtime_handler``): KEP-585 "Native RuntimeClass Reporting".

What a node reports follows Kubernetes and containerd:
- API: staging/src/k8s.io/api/core/v1/types.go NodeRuntimeHandler (name "" is the
  default handler) and NodeRuntimeHandlerFeatures (recursiveReadOnlyMounts,
  userNamespaces); ``runtimeHandlers`` is omitempty, so [] and absent are the same.
- containerd internal/cri/server/service.go introspectRuntimeHandler: each configured
  runtime by name, plus the default runtime again as ""; runtimes it cannot introspect
  (runsc, kata) report no features, which the kubelet sends as false.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from extender.cluster.file_source import load_cluster_file
from policies.objects import NodeView, PodView, RuntimeClassView, RuntimeHandler
from policies.predicates import OptionsError
from policies.registry import POLICY_API_VERSION, POLICY_KIND, PolicyError, build_policy
from policies.runtime_handler import RuntimeHandler as RuntimeHandlerPredicate
from policies.runtime_handler import runtime_handler
from policies.verdict import FITS, Verdict
from tests.support.paths import REPO

RRO = "recursiveReadOnlyMounts"
USERNS = "userNamespaces"
ALL = frozenset({RRO, USERNS})

GVISOR = RuntimeClassView(name="gvisor", handler="runsc")
RUNC = RuntimeClassView(name="runc", handler="runc")
GVISOR_POD = PodView(name="p", runtime_class_name="gvisor")
RUNC_POD = PodView(name="p", runtime_class_name="runc")

# As containerd with runc as default and gVisor configured reports them.
SANDBOX_HANDLERS = (RuntimeHandler("", ALL), RuntimeHandler("runc", ALL), RuntimeHandler("runsc"))
RUNC_HANDLERS = (RuntimeHandler("", ALL), RuntimeHandler("runc", ALL))

UNSUPPORTED = 'node(s) don\'t support runtime handler "runsc"'
UNSUPPORTED_FEATURES = 'node(s) don\'t support runtime handler "runsc" with the required features'


def node(handlers: tuple[RuntimeHandler, ...] | None) -> NodeView:
    return NodeView("node-1", runtime_handlers=handlers)


# (case, options, pod, class, node handlers, verdict)
CASES: list[tuple[str, dict[str, Any], PodView, RuntimeClassView | None, Any, Verdict]] = [
    ("no RuntimeClass: passes", {}, PodView(name="p"), None, RUNC_HANDLERS, FITS),
    ("class not found: RuntimeClassExists decides", {}, GVISOR_POD, None, RUNC_HANDLERS, FITS),
    ("handler reported", {}, GVISOR_POD, GVISOR, SANDBOX_HANDLERS, FITS),
    (
        "handler not reported",
        {},
        GVISOR_POD,
        GVISOR,
        RUNC_HANDLERS,
        Verdict(
            False, UNSUPPORTED, True, "runtime handler 'runsc' not in the node's runtimeHandlers ('', 'runc')"
        ),
    ),
    (
        "the default handler '' does not stand in for a named one",
        {},
        GVISOR_POD,
        GVISOR,
        (RuntimeHandler("", ALL),),
        Verdict(False, UNSUPPORTED, True, "runtime handler 'runsc' not in the node's runtimeHandlers ('')"),
    ),
    ("no report, default pass", {}, GVISOR_POD, GVISOR, None, FITS),
    ("empty report is no report", {}, GVISOR_POD, GVISOR, (), FITS),
    (
        "no report, nodesWithoutReport: fail",
        {"nodesWithoutReport": "fail"},
        GVISOR_POD,
        GVISOR,
        None,
        Verdict(
            False, UNSUPPORTED, True, "node reports no status.runtimeHandlers (nodesWithoutReport: fail)"
        ),
    ),
    (
        "empty report, nodesWithoutReport: fail",
        {"nodesWithoutReport": "fail"},
        GVISOR_POD,
        GVISOR,
        (),
        Verdict(
            False, UNSUPPORTED, True, "node reports no status.runtimeHandlers (nodesWithoutReport: fail)"
        ),
    ),
    (
        "reported, nodesWithoutReport: fail",
        {"nodesWithoutReport": "fail"},
        GVISOR_POD,
        GVISOR,
        SANDBOX_HANDLERS,
        FITS,
    ),
    ("required feature present", {"requiredFeatures": [USERNS]}, RUNC_POD, RUNC, RUNC_HANDLERS, FITS),
    (
        "all required features present",
        {"requiredFeatures": [RRO, USERNS]},
        RUNC_POD,
        RUNC,
        RUNC_HANDLERS,
        FITS,
    ),
    (
        "required feature reported false",
        {"requiredFeatures": [USERNS]},
        GVISOR_POD,
        GVISOR,
        SANDBOX_HANDLERS,
        Verdict(
            False,
            UNSUPPORTED_FEATURES,
            True,
            "runtime handler 'runsc' lacks required feature(s) userNamespaces",
        ),
    ),
    (
        "only the missing feature is named",
        {"requiredFeatures": [RRO, USERNS]},
        GVISOR_POD,
        GVISOR,
        (RuntimeHandler("runsc", frozenset({RRO})),),
        Verdict(
            False,
            UNSUPPORTED_FEATURES,
            True,
            "runtime handler 'runsc' lacks required feature(s) userNamespaces",
        ),
    ),
    (
        "features of another handler do not count",
        {"requiredFeatures": [USERNS]},
        GVISOR_POD,
        GVISOR,
        (RuntimeHandler("", ALL), RuntimeHandler("runsc")),
        Verdict(
            False,
            UNSUPPORTED_FEATURES,
            True,
            "runtime handler 'runsc' lacks required feature(s) userNamespaces",
        ),
    ),
    (
        "required features on a node without a report: nodesWithoutReport decides",
        {"requiredFeatures": [USERNS]},
        GVISOR_POD,
        GVISOR,
        None,
        FITS,
    ),
]


@pytest.mark.parametrize(
    ("case", "options", "pod", "runtime_class", "handlers", "verdict"), CASES, ids=[c[0] for c in CASES]
)
def test_runtime_handler(
    case: str,
    options: dict[str, Any],
    pod: PodView,
    runtime_class: RuntimeClassView | None,
    handlers: tuple[RuntimeHandler, ...] | None,
    verdict: Verdict,
) -> None:
    assert runtime_handler(options).check(pod, runtime_class, node(handlers)) == verdict


def test_reason_is_the_same_on_every_node() -> None:
    """kube-scheduler counts identical reasons; the node's own handler list is detail only."""
    predicate = runtime_handler({"nodesWithoutReport": "fail"})
    nodes = [node(RUNC_HANDLERS), node((RuntimeHandler("kata"),)), node(None)]
    reasons = {predicate.check(GVISOR_POD, GVISOR, n).reason for n in nodes}
    assert reasons == {UNSUPPORTED}


@pytest.mark.parametrize(
    ("options", "predicate"),
    [
        ({}, RuntimeHandlerPredicate(fail_without_report=False, required_features=())),
        ({"nodesWithoutReport": "pass"}, RuntimeHandlerPredicate(fail_without_report=False)),
        ({"nodesWithoutReport": "fail"}, RuntimeHandlerPredicate(fail_without_report=True)),
        ({"requiredFeatures": None}, RuntimeHandlerPredicate()),
        (
            {"requiredFeatures": [USERNS, RRO, USERNS]},
            RuntimeHandlerPredicate(required_features=(USERNS, RRO)),
        ),
    ],
)
def test_options(options: dict[str, Any], predicate: RuntimeHandlerPredicate) -> None:
    assert runtime_handler(options) == predicate


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nodesWithoutReport": "skip"}, "nodesWithoutReport must be pass or fail, got 'skip'"),
        ({"nodesWithoutReport": True}, "nodesWithoutReport must be pass or fail, got True"),
        ({"requiredFeatures": ["userNamespace"]}, "unknown feature(s) in requiredFeatures: 'userNamespace'"),
        ({"requiredFeatures": "userNamespaces"}, "requiredFeatures must be a list of feature names"),
        ({"requiredFeatures": {"userNamespaces": True}}, "requiredFeatures must be a list of feature names"),
        ({"requiredFeature": [USERNS]}, "unknown option(s) requiredFeature"),
    ],
)
def test_options_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(OptionsError) as caught:
        runtime_handler(options)
    assert message in str(caught.value)


def _policy(entry: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": POLICY_API_VERSION, "kind": POLICY_KIND, "predicates": [entry]}


def test_policy_file_names_the_entry_with_bad_options() -> None:
    with pytest.raises(PolicyError, match=r"predicates\[0\]: predicate RuntimeHandler: unknown feature"):
        build_policy(_policy({"name": "RuntimeHandler", "options": {"requiredFeatures": ["gpus"]}}))


def test_default_policy_lists_it_disabled() -> None:
    document = yaml.safe_load((REPO / "policies" / "default-policy.yaml").read_text())
    entry = next(e for e in document["predicates"] if e["name"] == "RuntimeHandler")
    assert entry["enabled"] is False
    assert "RuntimeHandler" not in build_policy(document).names
    # Its documented options are valid once enabled.
    enabled = build_policy({**document, "predicates": [{**entry, "enabled": True}]})
    assert enabled.predicates == (RuntimeHandlerPredicate(),)


def test_example_cluster_reports() -> None:
    """deploy/examples/cluster.yaml: what the predicate sees there, node by node."""
    state = load_cluster_file(REPO / "deploy" / "examples" / "cluster.yaml")
    policy = build_policy(
        _policy({"name": "RuntimeHandler", "options": {"nodesWithoutReport": "fail", "requiredFeatures": []}})
    )
    kata = state.runtime_classes.get("kata-containers")
    fits = {
        name: policy.evaluate(PodView(runtime_class_name="kata-containers"), kata, n).fits
        for name, n in state.nodes.items()
    }
    assert fits == {
        "runc-1": False,
        "runc-2": False,
        "gvisor-1": False,
        "gvisor-2": False,
        "kata-1": True,
        "win-1": False,  # reports no handlers; nodesWithoutReport: fail
        "gpu-1": False,
    }
    win = state.nodes.get("win-1")
    assert win is not None and win.runtime_handlers is None
    gvisor = state.runtime_classes.get("gvisor")
    userns = build_policy(_policy({"name": "RuntimeHandler", "options": {"requiredFeatures": [USERNS]}}))
    verdicts = {
        name: userns.evaluate(PodView(runtime_class_name="gvisor"), gvisor, n).reason
        for name, n in state.nodes.items()
    }
    # runsc reports no features: every sandbox node lacks userNamespaces for it.
    assert verdicts == {
        "runc-1": UNSUPPORTED,
        "runc-2": UNSUPPORTED,
        "gvisor-1": UNSUPPORTED_FEATURES,
        "gvisor-2": UNSUPPORTED_FEATURES,
        "kata-1": UNSUPPORTED,
        "win-1": "",
        "gpu-1": UNSUPPORTED_FEATURES,
    }
