"""What the operator commands print: kubectl-style tables, JSON/YAML, and error lines.

A problem the user can fix is a ``UsageError``: one line on stderr and exit status 2
(``EXIT_USAGE``), never a trace. Every command of ``runtimeclass-extender`` and of the
kubectl plugin ends that way.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import orjson
import yaml

from extender.explain import Explanation

EXIT_USAGE = 2


class UsageError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


def print_error(prog: str, message: object) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def print_structured(value: Any, output: str) -> None:
    if output == "json":
        sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(yaml.safe_dump(value, sort_keys=False, allow_unicode=True))
    sys.stdout.flush()


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """kubectl's plain table: upper-case headers, columns padded, three spaces apart."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def explanation_table(explanation: Explanation) -> str:
    """One row per node (its filter reason), one more row per further failing predicate."""
    rows: list[list[str]] = []
    for node in explanation.nodes:
        if node.fits:
            rows.append([node.node, "yes", "", ""])
            continue
        first, *rest = node.failures
        rows.append([node.node, "no", first.reason, first.detail])
        rows.extend(["", "", f.reason, f.detail] for f in rest)
    return format_table(["NODE", "FITS", "REASON", "DETAIL"], rows) + "\n" + explanation.summary + "\n"
