"""What the operator commands read: the cluster (a file or a one-shot LIST), a pod file.
The arguments that choose them are ``extender.tools.arguments``."""

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
from extender.documents import DocumentError, load_document, read_failure
from extender.protocol import PodModel, check_pod_document
from extender.tools.output import UsageError
from policies.objects import PodView

# Both report each class whose node-selector-term annotation is unusable, as ``serve``
# logs it: such a class fits no node, which the output alone does not say.


def read_cluster_file(path: str) -> ClusterState:
    return load_cluster_file(path, selector_errors=SelectorErrorLog())


def load_state(args: argparse.Namespace) -> ClusterState:
    if args.cluster_file:
        return read_cluster_file(args.cluster_file)
    return asyncio.run(
        list_cluster(
            kubeconfig=args.kubeconfig,
            context=args.context,
            selector_errors=SelectorErrorLog(),
            request_timeout=args.request_timeout,
        )
    )


STDIN = "-"


def read_bytes(path: str) -> bytes:
    """The bytes of a file the user names (``-``: standard input). Raises UsageError in
    the words of every file the commands read, a cluster file's too:
    ``PATH: no such file or directory``, ``PATH: is a directory: give a file``
    (``extender.documents.read_failure``)."""
    try:
        return sys.stdin.buffer.read() if path == STDIN else Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: {read_failure(exc)}") from None


def read_text(path: str) -> str:
    """``read_bytes``, as UTF-8 text."""
    try:
        return sys.stdin.read() if path == STDIN else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: {read_failure(exc)}") from None


def empty_input(path: str, expected: str) -> UsageError:
    """A file (or standard input) that holds nothing where one object was expected:
    ``PATH: the file is empty: expected a Pod``, not ``expected a Pod object, got null``."""
    where = "standard input is empty" if path == STDIN else f"{path}: the file is empty"
    return UsageError(f"{where}: expected {expected}")


def read_pod(path: str) -> PodView:
    text = read_text(path)
    try:
        document = load_document(text)
        if document is None:  # nothing, blank lines or comments only
            raise empty_input(path, "a Pod (YAML or JSON, as kubectl get pod NAME -o yaml prints it)")
        check_pod_document(document)
    except (DocumentError, ObjectError) as exc:
        raise UsageError(f"{path}: {exc}") from None
    try:
        # Through JSON: YAML decodes timestamps to datetimes, which the strict model refuses.
        return PodModel.model_validate_json(orjson.dumps(document, default=str)).view()
    except ValidationError as exc:
        raise UsageError(f"{path}: malformed Pod: {describe_validation_error(exc, 'pod')}") from None
