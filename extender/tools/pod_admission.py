"""The ``check-pod-admission`` command: does the cluster admit pods of each RuntimeClass as it should?

``runtimeclass-extender check-pod-admission`` (and ``kubectl runtimeclass
check-pod-admission``) lists the live cluster's RuntimeClasses, creates one probe pod of
each in ``--namespace`` with ``dryRun=All`` (admitted by the whole admission chain,
stored nowhere), and compares each answer with what the pod webhook's own review makes
of the same pod (``extender.admission.probe``): routed to ``--scheduler-name``, the
class's Pod Overhead, and with ``--label-nodes`` the class's node-label requirement
(as the policy file decides which classes have node rules). So it checks the admission
policies of components/pod-admission-policy (served is not running: an API server
with the MutatingAdmissionPolicy feature gate off accepts them and runs none), the pod
webhook, and that a policy file changed since still agrees with the label policy.

It needs what ``kubectl create --dry-run=server`` needs: ``create`` on pods in the
namespace (a dry run is authorized as the write itself), and ``list`` on RuntimeClasses.

Exit status: 0 every class admitted as it should be, 1 some not (or refused), 2 bad
input or no cluster (one line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from dataclasses import dataclass, replace
from typing import Any, Final

from extender.admission.pod_review import NEVER_ROUTED_NAMESPACES, RoutingConfig
from extender.admission.pod_table import (
    ADMITTED_LABEL,
    MISSING_CRD_HINT,
    NAMESPACE_PATH,
    PLACEMENT_LABEL,
    PLURAL,
    TABLE_PATH,
    admitted_by_plugin,
    entries_of,
    table,
)
from extender.admission.probe import Admission, differences, expected_admission, probe_pod, summary
from extender.admission.runtimeclass_plugin import admit as plugin_admit
from extender.admission.runtimeclass_plugin import plugin_runs
from extender.admission.runtimeclass_plugin import probe_pod as plugin_probe_pod
from extender.cluster.class_labels import ClassLabels
from extender.cluster.objects import ObjectError, runtime_class_from_api
from extender.cluster.snapshot import ClusterUnavailable, client_timeout, connect_for_tool, describe_failure
from extender.cluster.state import ClusterState
from extender.kube.api import ApiError, ListOptions, list_pages, request_json
from extender.policy_file import load_policy
from extender.settings import PLACEMENT_DEFAULT_SCHEDULER, PLACEMENT_RUNTIMECLASS_SCHEDULER
from extender.tools.output import UsageError, guarded, print_structured, print_table

EXIT_AS_EXPECTED: Final = 0
EXIT_DIFFERENT: Final = 1
HEADER: Final = ("RUNTIMECLASS", "SCHEDULER", "OVERHEAD", "NODE LABEL", "RESULT")
RUNTIME_CLASSES: Final = "/apis/node.k8s.io/v1/runtimeclasses"
# The entries of a table its kind serves but that is not there, and of a kind not served.
MISSING: Final = "\0missing"
NOT_SERVED: Final = "\0not served"
PODS: Final = "/api/v1/namespaces/{namespace}/pods"
# The default-scheduler placement's guard (components/default-scheduler-placement).
GUARD_PATH: Final = (
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/runtimeclass-extender-pod-admission-required"
)
# The second scheduler's identity and rights, which the default-scheduler placement has
# not (deploy/base; components/default-scheduler-placement deletes them).
SECOND_SCHEDULER: Final = (
    "/api/v1/namespaces/{namespace}/serviceaccounts/runtimeclass-scheduler",
    "/api/v1/namespaces/{namespace}/secrets/runtimeclass-extender-token",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/runtimeclass-scheduler-as-kube-scheduler",
)


@dataclass(frozen=True)
class Checked:
    runtime_class: str
    expected: Admission
    got: Admission
    differences: list[str]
    # Who places the pods, as the install's manifests say it on the extender's
    # Namespace (runtimeclass-scheduler where they say nothing).
    placement: str = PLACEMENT_RUNTIMECLASS_SCHEDULER


@dataclass(frozen=True)
class Report:
    checked: list[Checked]
    placement: str
    # Whether the API server runs the RuntimeClass admission plugin (None: could not tell).
    plugin: bool | None
    # Objects of another placement left behind by a move (``kubectl apply`` deletes
    # nothing): harmless, but to delete (docs/upgrading.md, "Moving between placements").
    left_behind: tuple[str, ...] = ()


async def _check(args: argparse.Namespace, routing: RoutingConfig, label_prefix: str) -> Report:
    # No --cluster-file here: the check creates pods through the API server.
    connection = await connect_for_tool(args.kubeconfig, args.context, cluster_file_help=False)
    timeout = client_timeout(args.request_timeout)
    try:
        async with connection.api as api:
            items: list[dict[str, Any]] = []
            async for page in list_pages(api, RUNTIME_CLASSES, ListOptions(timeout=timeout)):
                items = [] if page.restarted else items
                items.extend(page.items)
            state = ClusterState()
            # The review reads the pod's class alone: the nodes are not listed.
            state.nodes.replace([])
            state.runtime_classes.replace(runtime_class_from_api(item) for item in items)
            names = args.runtimeclass or sorted(state.runtime_classes.keys())
            missing = [name for name in names if name not in state.runtime_classes]
            if missing:
                raise UsageError(f"no RuntimeClass named {', '.join(missing)}")
            stored = await _table(api, args.pod_admission_table, timeout)
            placement = await _placement(api, args.extender_namespace, timeout)
            plugin = await _plugin(api, args.namespace, state, timeout)
            rules = routing.node_rules
            assert rules is not None  # _routing sets it
            label_nodes = isinstance(stored, dict) and bool(stored.get("labelNodes"))
            if placement == PLACEMENT_DEFAULT_SCHEDULER:
                # The cluster's default scheduler places the pods: none routed, the
                # label required, each admitted one marked (the placement's policies).
                routing = replace(routing, scheduler_name=None, class_labels=rules)
            elif label_nodes:
                routing = replace(routing, class_labels=rules)
            wanted = table(state.runtime_classes.values(), rules)
            constrained = set(admitted_by_plugin(wanted)) if plugin else set()
            checked = []
            for name in names:
                pod = probe_pod(f"runtimeclass-extender-check-{secrets.token_hex(4)}", args.namespace, name)
                got = await _dry_run(api, pod, args.namespace, timeout)
                expected = _expected(
                    pod, state, routing, plugin=plugin, placement=placement, constrained=constrained
                )
                found = differences(
                    expected, got, label_prefix=label_prefix, marks=placement == PLACEMENT_DEFAULT_SCHEDULER
                )
                checked.append(Checked(name, expected, got, found, placement))
            entries = _entries(stored)
            for item in checked:
                if item.differences:
                    notes = table_notes(entries, wanted, item.runtime_class, args.pod_admission_table)
                    item.differences.extend(notes or unrouted_notes(item, args.namespace))
            left = await _left_behind(api, placement, args.extender_namespace, timeout)
            return Report(checked, placement, plugin, left_behind=left)
    except (ClusterUnavailable, UsageError):
        raise
    except ApiError as exc:
        raise ClusterUnavailable(f"{connection.host}: {exc}") from None
    except ObjectError as exc:
        raise ClusterUnavailable(f"unexpected object from {connection.host}: {exc}") from None
    except Exception as exc:  # connection refused, TLS, DNS, timeouts: say where, and why
        raise ClusterUnavailable(
            f"cannot reach {connection.host}: {describe_failure(exc, args.request_timeout)}"
        ) from None


def _expected(
    pod: dict[str, Any],
    state: ClusterState,
    routing: RoutingConfig,
    *,
    plugin: bool | None,
    placement: str,
    constrained: set[str],
) -> Admission:
    """What the probe pod should come out as: the API server's RuntimeClass admission
    plugin first where it runs (``extender.admission.runtimeclass_plugin``), then the
    pod webhook's review (which adds nothing the plugin put in), and with the
    default-scheduler placement the admitted mark, but on a pod of a class the plugin
    constrains fully, which the policies leave as the plugin made it."""
    name = pod["spec"]["runtimeClassName"]
    runtime_class = state.runtime_classes.get(name)
    if plugin and runtime_class is not None:
        admitted, refusal = plugin_admit(pod, runtime_class)
        if admitted is None:
            return Admission(None, refusal)
        pod = admitted
    expected = expected_admission(pod, state, routing)
    if placement == PLACEMENT_DEFAULT_SCHEDULER and expected.pod is not None and name not in constrained:
        expected.pod["metadata"].setdefault("labels", {})[ADMITTED_LABEL] = "true"
    return expected


async def _dry_run(api: Any, pod: dict[str, Any], namespace: str, timeout: Any) -> Admission:
    """The pod as the API server would store it, or why it refuses it. A refusal by RBAC
    (403 on the dry run itself) is the caller's problem, not the check's answer."""
    try:
        answer = await request_json(
            api,
            "POST",
            PODS,
            path_params={"namespace": namespace},
            query=(("dryRun", "All"), ("fieldManager", "runtimeclass-extender-check")),
            body=pod,
            timeout=timeout,
        )
    except ApiError as exc:
        # RBAC's refusal (rbac/authorizer: "User ... cannot create resource ..."), not an
        # admission plugin's, which answers 403 too (the RuntimeClass plugin's).
        if exc.status == 401 or (exc.status == 403 and " cannot create resource " in exc.message):
            raise UsageError(
                f"cannot create pods in namespace {namespace} (dry run): {exc.message}; "
                "the check needs what kubectl create --dry-run=server needs"
            ) from None
        return Admission(None, exc.message)
    if not isinstance(answer, dict):
        return Admission(None, "the API server answered something other than a pod")
    return Admission(answer)


async def _table(api: Any, name: str, timeout: Any) -> dict[str, Any] | str | None:
    """The pod admission table's spec; ``MISSING`` when its kind is served but it is not
    there; ``NOT_SERVED`` when the kind is not; None when it cannot be read (no right)."""
    try:
        answer = await request_json(api, "GET", TABLE_PATH, path_params={"name": name}, timeout=timeout)
    except ApiError as exc:
        if exc.status == 404:
            return MISSING if PLURAL in exc.message else NOT_SERVED
        return None
    spec = answer.get("spec") if isinstance(answer, dict) else None
    return spec if isinstance(spec, dict) else {}


def _entries(stored: dict[str, Any] | str | None) -> dict[str, Any] | None:
    """The table's entries as ``table_notes`` reads them."""
    if isinstance(stored, str):
        return {stored: {}}
    if stored is None:
        return None
    return entries_of({"spec": stored}) or {}


async def _placement(api: Any, namespace: str, timeout: Any) -> str:
    """Who places the pods, as the install's manifests say it on the extender's Namespace
    (its label)."""
    try:
        answer = await request_json(
            api, "GET", NAMESPACE_PATH, path_params={"name": namespace}, timeout=timeout
        )
    except ApiError:
        return PLACEMENT_RUNTIMECLASS_SCHEDULER
    metadata = answer.get("metadata") if isinstance(answer, dict) else None
    labels = (metadata or {}).get("labels") or {}
    if labels.get(PLACEMENT_LABEL) == PLACEMENT_DEFAULT_SCHEDULER:
        return PLACEMENT_DEFAULT_SCHEDULER
    return PLACEMENT_RUNTIMECLASS_SCHEDULER


async def _plugin(api: Any, namespace: str, state: ClusterState, timeout: Any) -> bool | None:
    """Whether the API server runs the RuntimeClass admission plugin: a dry-run pod of a
    class that does not exist (``extender.admission.runtimeclass_plugin``). Refused by
    the placement's guard, it met no plugin first (the plugin runs before any policy)."""
    name = f"runtimeclass-extender-probe-{secrets.token_hex(4)}"
    while name in state.runtime_classes:
        name = f"runtimeclass-extender-probe-{secrets.token_hex(4)}"
    got = await _dry_run(api, plugin_probe_pod(namespace, name), namespace, timeout)
    if got.pod is not None:
        return False
    if "is not in the pod admission table" in got.refusal:
        return False
    return plugin_runs(403, got.refusal, name)


async def _left_behind(api: Any, placement: str, namespace: str, timeout: Any) -> tuple[str, ...]:
    """What another placement installed that is still there: the default-scheduler
    placement's guard (inert elsewhere: no namespace carries the label its binding
    selects by), or the second scheduler's identity and rights (unused with the
    default-scheduler placement; its token Secret a credential nobody needs). Objects
    that cannot be read (no right) are not reported."""
    if placement == PLACEMENT_DEFAULT_SCHEDULER:
        paths = [path.format(namespace=namespace) for path in SECOND_SCHEDULER]
    else:
        paths = [GUARD_PATH]
    found = []
    for path in paths:
        try:
            await request_json(api, "GET", path, timeout=timeout)
        except ApiError:
            continue
        found.append(path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1])
    return tuple(found)


def table_notes(
    entries: dict[str, Any] | None, wanted: dict[str, Any], name: str, table_name: str
) -> list[str]:
    """Why the policies may have admitted a class's pod otherwise: its table entry."""
    if entries is None:
        return []
    if MISSING in entries:
        return [f"the PodAdmissionTable {table_name} is missing (is an extender leader running?)"]
    if NOT_SERVED in entries:
        # The webhook way has no table; the policies without their kind admit pods as
        # they came, and the extender's leader says so.
        return [
            "the API server does not serve PodAdmissionTables: if the pod admission policies are installed, "
            f"{MISSING_CRD_HINT}"
        ]
    if entries.get(name) != wanted.get(name):
        which = "missing" if name not in entries else "stale"
        return [
            f"its entry in the PodAdmissionTable {table_name} is {which} (is an extender leader running?)"
        ]
    return []


def unrouted_notes(item: Checked, namespace: str) -> list[str]:
    """Why a pod the pod webhook routes came back unrouted although its table entry is
    current: no pod admission of ours ran for it."""
    if item.got.pod is None or item.expected.pod is None:
        return []
    if item.got.pod["spec"].get("schedulerName") == item.expected.pod["spec"].get("schedulerName"):
        return []
    return [
        f"no pod admission of ours ran for this pod in namespace {namespace}: the API server "
        "does not run the MutatingAdmissionPolicy (its feature gate off), or no binding or "
        "webhook selects the namespace"
    ]


def _routing(args: argparse.Namespace) -> tuple[RoutingConfig, str]:
    policy = load_policy(args.policy_file)
    rules = ClassLabels(args.node_label_prefix, policy)
    # The label requirement as the table says the extender keeps the labels (_check).
    routing = RoutingConfig(scheduler_name=args.scheduler_name, node_rules=rules)
    return routing, args.node_label_prefix


def _to_json(item: Checked, label_prefix: str) -> dict[str, Any]:
    return {
        "runtimeClass": item.runtime_class,
        "expected": summary(item.expected, label_prefix=label_prefix) | {"refusal": item.expected.refusal},
        "got": summary(item.got, label_prefix=label_prefix) | {"refusal": item.got.refusal},
        "differences": item.differences,
    }


@guarded
def run_check_pod_admission(args: argparse.Namespace) -> int:
    if not args.namespace or args.namespace in NEVER_ROUTED_NAMESPACES:
        raise UsageError(
            f"--namespace {args.namespace!r}: pod admission leaves that namespace out; "
            "name one where workloads run"
        )
    routing, label_prefix = _routing(args)
    report = asyncio.run(_check(args, routing, label_prefix))
    checked = report.checked
    different = [item for item in checked if item.differences]
    plugin = {True: "runs", False: "does not run", None: "may or may not run (the probe could not tell)"}[
        report.plugin
    ]
    if args.output == "table":
        rows = []
        for item in checked:
            shown = summary(item.got, label_prefix=label_prefix)
            result = "ok" if not item.differences else "differs: " + "; ".join(item.differences)
            rows.append(
                [item.runtime_class, shown["schedulerName"], shown["overhead"], shown["nodeLabel"], result]
            )
        footer = (
            f"{len(checked)} RuntimeClasses: every probe pod admitted as it should be."
            if not different
            else f"{len(different)} of {len(checked)} RuntimeClasses admitted otherwise than they should be "
            "(docs/pod-webhook.md#check-that-the-policies-run)."
        )
        footer += f" The API server {plugin} the RuntimeClass admission plugin."
        if report.placement == PLACEMENT_DEFAULT_SCHEDULER:
            footer += (
                f" Placement: default-scheduler (namespace {args.extender_namespace} says so): the cluster's "
                "default scheduler places the pods, none is routed."
            )
        if checked:
            print_table(HEADER, rows, footer=footer)
        else:
            print_table(HEADER, [], headers=False, footer="No RuntimeClasses to check.")
    else:
        print_structured(
            {
                "namespace": args.namespace,
                "placement": report.placement,
                "runtimeClassAdmissionPlugin": report.plugin,
                "results": [_to_json(item, label_prefix) for item in checked],
            },
            args.output,
        )
    if report.left_behind and report.placement == PLACEMENT_DEFAULT_SCHEDULER:
        print(
            "warning: the second scheduler's identity and rights are left behind by a move to the "
            f"default-scheduler placement ({', '.join(report.left_behind)}): nothing uses them; delete them "
            "(docs/upgrading.md#moving-between-placements)",
            file=sys.stderr,
        )
    elif report.left_behind:
        print(
            "warning: the default-scheduler placement's guard (ValidatingAdmissionPolicy and binding "
            "runtimeclass-extender-pod-admission-required) is left behind by a move to another placement; it "
            "refuses no pod there, delete it: kubectl delete validatingadmissionpolicybinding,"
            "validatingadmissionpolicy runtimeclass-extender-pod-admission-required "
            "(docs/upgrading.md#moving-between-placements)",
            file=sys.stderr,
        )
    return EXIT_DIFFERENT if different else EXIT_AS_EXPECTED
