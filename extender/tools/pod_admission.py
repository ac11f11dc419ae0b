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
from dataclasses import dataclass, replace
from typing import Any, Final

from extender.admission.pod_review import NEVER_ROUTED_NAMESPACES, RoutingConfig
from extender.admission.pod_table import (
    ADMITTED_LABEL,
    MISSING_CRD_HINT,
    PLURAL,
    TABLE_PATH,
    entries_of,
    table,
)
from extender.admission.probe import Admission, differences, expected_admission, probe_pod, summary
from extender.cluster.class_labels import ClassLabels
from extender.cluster.objects import ObjectError, runtime_class_from_api
from extender.cluster.snapshot import ClusterUnavailable, client_timeout, describe_failure
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
# The table's placement, beside its entries.
PLACEMENT: Final = "\0placement"
PODS: Final = "/api/v1/namespaces/{namespace}/pods"


@dataclass(frozen=True)
class Checked:
    runtime_class: str
    expected: Admission
    got: Admission
    differences: list[str]
    # Who places the pods, as the pod admission table says (runtimeclass-scheduler
    # where it says nothing, or there is none).
    placement: str = PLACEMENT_RUNTIMECLASS_SCHEDULER


async def _check(args: argparse.Namespace, routing: RoutingConfig, label_prefix: str) -> list[Checked]:
    # Imported here: kubernetes-asyncio takes about a second to import.
    from extender.kube.connect import KubeConfigError, connect

    try:
        # No --cluster-file here: the check creates pods through the API server.
        connection = await connect(kubeconfig=args.kubeconfig, context=args.context, cluster_file_help=False)
    except KubeConfigError as exc:
        raise ClusterUnavailable(str(exc)) from None
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
            entries = await _table_entries(api, args.pod_admission_table, timeout)
            placement = _placement(entries)
            if placement == PLACEMENT_DEFAULT_SCHEDULER:
                # The cluster's default scheduler places the pods: none routed, each
                # admitted one marked (extender.admission.pod_table, table_spec).
                routing = replace(routing, scheduler_name=None, class_labels=routing.node_rules)
            checked = []
            for name in names:
                pod = probe_pod(f"runtimeclass-extender-check-{secrets.token_hex(4)}", args.namespace, name)
                got = await _dry_run(api, pod, args.namespace, timeout)
                expected = expected_admission(pod, state, routing)
                if placement == PLACEMENT_DEFAULT_SCHEDULER and expected.pod is not None:
                    expected.pod["metadata"].setdefault("labels", {})[ADMITTED_LABEL] = "true"
                found = differences(expected, got, label_prefix=label_prefix)
                checked.append(Checked(name, expected, got, found, placement))
            if any(item.differences for item in checked):
                assert routing.node_rules is not None  # _routing sets it
                wanted = table(state.runtime_classes.values(), routing.class_labels, routing.node_rules)
                for item in checked:
                    if item.differences:
                        notes = table_notes(entries, wanted, item.runtime_class, args.pod_admission_table)
                        item.differences.extend(notes or unrouted_notes(item, args.namespace))
            return checked
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
        if exc.status in (401, 403) and "admission" not in exc.message.lower():
            raise UsageError(
                f"cannot create pods in namespace {namespace} (dry run): {exc.message}; "
                "the check needs what kubectl create --dry-run=server needs"
            ) from None
        return Admission(None, exc.message)
    if not isinstance(answer, dict):
        return Admission(None, "the API server answered something other than a pod")
    return Admission(answer)


def _placement(entries: dict[str, Any] | None) -> str:
    """Who places the pods, as the table read by ``_table_entries`` says."""
    found = (entries or {}).get(PLACEMENT)
    return PLACEMENT_DEFAULT_SCHEDULER if found == "DefaultScheduler" else PLACEMENT_RUNTIMECLASS_SCHEDULER


async def _table_entries(api: Any, name: str, timeout: Any) -> dict[str, Any] | None:
    """The pod admission table's entries; ``{MISSING}`` when its kind is served but it is
    not there; None when it cannot be read (no such kind: the webhook way; no right)."""
    try:
        answer = await request_json(api, "GET", TABLE_PATH, path_params={"name": name}, timeout=timeout)
    except ApiError as exc:
        if exc.status == 404 and PLURAL in exc.message:
            return {MISSING: {}}
        if exc.status == 404:
            return {NOT_SERVED: {}}
        return None
    found: dict[str, Any] = entries_of(answer) or {}
    spec = answer.get("spec") if isinstance(answer, dict) else None
    if isinstance(spec, dict) and spec.get("placement"):
        found[PLACEMENT] = spec["placement"]
    return found


def table_notes(entries: dict[str, Any] | None, wanted: dict[str, Any], name: str, table_name: str) -> list[str]:
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
    if {k: v for k, v in entries.items() if k != PLACEMENT}.get(name) != wanted.get(name):
        which = "missing" if name not in entries else "stale"
        return [f"its entry in the PodAdmissionTable {table_name} is {which} (is an extender leader running?)"]
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
    labels = rules if args.label_nodes else None
    routing = RoutingConfig(scheduler_name=args.scheduler_name, class_labels=labels, node_rules=rules)
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
    checked = asyncio.run(_check(args, routing, label_prefix))
    different = [item for item in checked if item.differences]
    if args.output == "table":
        rows = []
        for item in checked:
            shown = summary(item.got, label_prefix=label_prefix)
            result = "ok" if not item.differences else "differs: " + "; ".join(item.differences)
            rows.append(
                [item.runtime_class, shown["schedulerName"], shown["overhead"], shown["nodeLabel"], result]
            )
        footer = (
            f"{len(checked)} RuntimeClasses: every probe pod admitted as the pod webhook would admit it."
            if not different
            else f"{len(different)} of {len(checked)} RuntimeClasses admitted otherwise than the pod webhook "
            "would admit them (docs/pod-webhook.md#check-that-the-policies-run)."
        )
        if checked and checked[0].placement == PLACEMENT_DEFAULT_SCHEDULER:
            footer += (
                " Placement: default-scheduler (the pod admission table says so): the cluster's default "
                "scheduler places the pods, none is routed."
            )
        if checked:
            print_table(HEADER, rows, footer=footer)
        else:
            print_table(HEADER, [], headers=False, footer="No RuntimeClasses to check.")
    else:
        placement = checked[0].placement if checked else PLACEMENT_RUNTIMECLASS_SCHEDULER
        print_structured(
            {
                "namespace": args.namespace,
                "placement": placement,
                "results": [_to_json(item, label_prefix) for item in checked],
            },
            args.output,
        )
    return EXIT_DIFFERENT if different else EXIT_AS_EXPECTED
