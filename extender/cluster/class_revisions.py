"""What of a RuntimeClass a decision reads, as a value, and a stable digest of it.

An edit of a class's labels, annotations (other than the node-selector-term one) or
``resourceVersion`` changes no decision, so nothing that follows a class should react
to it: the requeuer nudges pods only when what scheduling reads changed
(``scheduling_revision``), and the node labeller's events are written once per
revision of what decides the class's nodes (``ClassLabels.rules_key``), never again for
a metadata edit. ``revision_digest`` names such a revision in a way every process
agrees on (an annotation on a pod, an event's name).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Hashable

from policies.objects import RuntimeClassView

# The revision of a class that does not exist (never created, or deleted).
ABSENT: Hashable = ("absent",)


def scheduling_revision(runtime_class: RuntimeClassView | None) -> Hashable:
    """The part of a RuntimeClass that can change a scheduling decision."""
    if runtime_class is None:
        return ABSENT
    return (
        runtime_class.handler,
        tuple(sorted(runtime_class.node_selector.items())),
        runtime_class.tolerations,
        runtime_class.match_expressions,
        runtime_class.match_fields,
        runtime_class.selector_error,
    )


def revision_digest(revision: Hashable) -> str:
    """A short, stable name of a revision, the same in every process (``hash`` is salted
    per process; a revision's parts are strings, tuples and frozen dataclasses, whose
    ``repr`` is stable)."""
    # Interned: a digest is kept per pending pod (what it was tried against), and a
    # handful of revisions are shared by thousands of pods.
    return sys.intern(hashlib.sha256(repr(revision).encode()).hexdigest()[:16])
