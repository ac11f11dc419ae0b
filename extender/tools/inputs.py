"""What the operator commands read: the cluster (a file or a one-shot LIST), a pod file,
and the arguments that choose them and the output format."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import orjson
from pydantic import ValidationError

from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.file_source import load_cluster_file
from extender.cluster.objects import ObjectError, describe_validation_error
from extender.cluster.snapshot import list_cluster
from extender.cluster.state import ClusterState
from extender.documents import DocumentError, load_document
from extender.protocol import PodModel, check_pod_document
from extender.tools.output import (
    UsageError,
)
from policies.objects import PodView


def add_cluster_arguments(
    parser: argparse.ArgumentParser, *, with_pods: bool = False, policy: bool = True, title: str | None = None
) -> None:
    """--cluster-file, --kubeconfig and --context (and --policy-file with ``policy``);
    ``title`` replaces the group's heading."""
    what = "a cluster file with pods" if with_pods else "a cluster file"
    source = parser.add_argument_group(
        title or f"cluster ({what}, or else the live cluster of the kubeconfig)"
    )
    source.add_argument(
        "--cluster-file",
        metavar="PATH",
        help="Nodes, RuntimeClasses and Pods (kubectl get nodes,runtimeclasses,pods -A -o yaml)"
        if with_pods
        else "Nodes and RuntimeClasses (kubectl get nodes,runtimeclasses -o yaml)",
    )
    source.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig (default: $KUBECONFIG, then the in-cluster service account, then ~/.kube/config)",
    )
    source.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    if policy:
        parser.add_argument("--policy-file", metavar="PATH", help="policy file (default: the bundled policy)")


def add_output_argument(parser: argparse.ArgumentParser, *, wide: str = "more columns") -> None:
    """-o table|wide|json|yaml; ``wide`` says what -o wide adds."""
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml"),
        default="table",
        help=f"output format: table, wide (a table with {wide}, as kubectl's -o wide), json or yaml "
        "(default: table)",
    )


# Both report each class whose node-selector-term annotation is unusable, as ``serve``
# logs it: such a class fits no node, which the output alone does not say.


def read_cluster_file(path: str) -> ClusterState:
    return load_cluster_file(path, selector_errors=SelectorErrorLog())


def load_state(args: argparse.Namespace) -> ClusterState:
    if args.cluster_file:
        return read_cluster_file(args.cluster_file)
    return asyncio.run(
        list_cluster(kubeconfig=args.kubeconfig, context=args.context, selector_errors=SelectorErrorLog())
    )


def read_pod(path: str) -> PodView:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    try:
        document = load_document(text)
        check_pod_document(document)
    except (DocumentError, ObjectError) as exc:
        raise UsageError(f"{path}: {exc}") from None
    try:
        # Through JSON: YAML decodes timestamps to datetimes, which the strict model refuses.
        return PodModel.model_validate_json(orjson.dumps(document, default=str)).view()
    except ValidationError as exc:
        raise UsageError(f"{path}: malformed Pod: {describe_validation_error(exc, 'pod')}") from None
