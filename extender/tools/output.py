"""What the operator commands print: kubectl-style tables, JSON/YAML, and error lines.

A problem the user can fix is a ``UsageError``: one line on stderr and exit status 2
(``EXIT_USAGE``), never a trace (a cluster file with several mistakes: one line each). Every command of ``runtimeclass-extender`` and of the
kubectl plugin ends that way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import yaml

from extender.capture.format import CaptureFormatError
from extender.cluster.file_source import ClusterFileError
from extender.cluster.snapshot import ClusterUnavailable
from extender.explain import Explanation
from extender.logs import setup_command_logging
from policies.objects import NodeView, PodView, RuntimeClassView
from policies.registry import PolicyError
from policies.tolerations import FILTERED_EFFECTS, tolerated_by_any

EXIT_USAGE = 2


class UsageError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


def print_error(prog: str, message: object) -> int:
    """``PROG: error: MESSAGE`` on stderr; a message of several lines (a cluster file's
    mistakes, one a line) gets the prefix on each, so every line reads alone."""
    for line in str(message).splitlines() or [""]:
        print(f"{prog}: error: {line}", file=sys.stderr)
    return EXIT_USAGE


Runner = Callable[[argparse.Namespace], int]


def guarded(run: Runner) -> Runner:
    """Every operator command's wrapper: warnings as one line each on stderr, and the
    errors a user can fix as one line on stderr with exit status 2, never a trace."""

    def command(args: argparse.Namespace) -> int:
        prog = getattr(args, "prog", "runtimeclass-extender")
        setup_command_logging(prog)
        try:
            return run(args)
        except (UsageError, ClusterFileError, PolicyError, ClusterUnavailable, CaptureFormatError) as exc:
            return print_error(prog, exc)

    return command


def print_structured(value: Any, output: str) -> None:
    if output == "json":
        sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(yaml.safe_dump(value, sort_keys=False, allow_unicode=True))
    sys.stdout.flush()


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, headers: bool = True) -> str:
    """kubectl's plain table: upper-case headers, columns padded, three spaces apart.

    Without ``headers`` (--no-headers) the header line is left out, and the columns are
    as wide as they would be with it, as kubectl's are.
    """
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows] if headers else rows:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("   ".join(cells).rstrip())
    return "".join(line + "\n" for line in lines)


def print_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, headers: bool = True, footer: str | None = None
) -> None:
    """The table on stdout and its summary ``footer`` on stderr, as kubectl prints
    ``No resources found``: a pipe (``| grep``, ``| wc -l``) sees only rows."""
    sys.stdout.write(format_table(header, rows, headers=headers))
    sys.stdout.flush()
    if footer is not None:
        print(footer, file=sys.stderr)


def print_names(names: Iterable[str]) -> None:
    """``-o name``: one ``kind/name`` per line, as kubectl prints them."""
    sys.stdout.write("".join(name + "\n" for name in names))
    sys.stdout.flush()


Table = tuple[list[str], list[list[str]]]


def explanation_table(explanation: Explanation, *, wide_nodes: Mapping[str, NodeView] | None = None) -> Table:
    """Header and rows: one row per node (its filter reason), one more row per further
    failing predicate, naming the node again (so ``grep NODE`` finds all of its rows; FITS
    is left empty there, so each node is counted once).

    With ``wide_nodes`` (``-o wide``), three more columns: the failing PREDICATE, the
    node's labels under the keys the RuntimeClass selects on (SELECTOR), and how each of
    its NoSchedule/NoExecute taints is tolerated (TOLERATIONS).
    """
    wide = wide_nodes is not None
    rc = explanation.runtime_class
    rows: list[list[str]] = []
    for node in explanation.nodes:
        extra: list[str] = []
        if wide_nodes is not None:
            view = wide_nodes.get(node.node)
            extra = [
                node.failures[0].predicate if node.failures else "",
                _selector_labels(rc, view),
                _taint_tolerations(explanation.pod, rc, view),
            ]
        if node.fits:
            rows.append([node.node, "yes", "", "", *extra])
            continue
        first, *rest = node.failures
        rows.append([node.node, "no", first.reason, first.detail, *extra])
        rows.extend(
            [node.node, "", f.reason, f.detail, *([f.predicate, "", ""] if wide else [])] for f in rest
        )
    header = ["NODE", "FITS", "REASON", "DETAIL", *(["PREDICATE", "SELECTOR", "TOLERATIONS"] if wide else [])]
    return header, rows


def _selector_labels(rc: RuntimeClassView | None, node: NodeView | None) -> str:
    """The node's values of the labels the class selects on (nodeSelector and annotation keys)."""
    if rc is None or node is None:
        return "<none>"
    keys = dict.fromkeys([*sorted(rc.node_selector), *(r.key for r in rc.match_expressions or ())])
    return ",".join(f"{key}={node.labels.get(key, '<absent>')}" for key in keys) or "<none>"


def _taint_tolerations(pod: PodView, rc: RuntimeClassView | None, node: NodeView | None) -> str:
    """Each taint that filters, and whose toleration lets the pod past it (as the
    TaintToleration predicate judges: NoExecute only by the pod's own)."""
    if node is None:
        return ""
    class_tolerations = rc.tolerations if rc is not None else ()
    parts = []
    for taint in node.taints:
        if taint.effect not in FILTERED_EFFECTS:
            continue
        if tolerated_by_any(taint, pod.tolerations):
            by = "by pod"
        elif taint.effect == "NoSchedule" and tolerated_by_any(taint, class_tolerations):
            by = "by RuntimeClass"
        else:
            by = "untolerated"
        parts.append(f"{taint} {by}")
    return ", ".join(parts) or "<no taints>"
