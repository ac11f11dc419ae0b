"""The ``check`` command: RuntimeClass manifests judged before they reach a cluster.

``runtimeclass-extender check FILE|DIR|- ...`` and ``kubectl runtimeclass check`` read
manifests (multi-document YAML or JSON, ``List``s, directories recursively: ``*.yaml``,
``*.yml``, ``*.json``, but for what the tree says is no manifest: kustomize patches,
Helm chart templates, data; ``-`` is standard input; empty input is bad input) and
judge every RuntimeClass in them twice, in the order the API server does on
``kubectl apply``:

1. What the API server itself would refuse, in the fields the extender reads: the
   object's types (``extender.cluster.objects``, the parser the watch uses) and
   ``extender.cluster.validation`` (unknown fields, enums, label and DNS syntax). These
   are bad input: ``error: FILE: document N: runtimeclass/NAME: FIELD: ...``.
2. What the validating webhook would answer: each class goes, as the CREATE
   AdmissionReview the API server would send, through the webhook's own ``review``
   (``extender.admission``), so ``check`` and the webhook cannot disagree. A denial
   (a malformed node-selector-term annotation) is ``error: FILE: document N:
   runtimeclass/NAME: ...``;
   the webhook's warnings (no node matches, untolerated taints, a handler no node
   reports) are ``Warning: ...`` lines, as kubectl shows them, but whole (the webhook
   shortens them to the 120 characters the API server asks for).

The node-dependent warnings need nodes: ``--cluster-file`` or ``--kubeconfig`` (one
LIST, as ``classes`` and ``audit`` do). Without either, only the checks that need no
node are made, and a note says so once.

Output: ``runtimeclass/NAME valid`` (or ``warned``, with warnings) on stdout for each
class the webhook would admit;
``Warning:``, ``error:`` and ``note:`` lines (other kinds skipped) on stderr, in input
order. ``-o json|yaml`` prints one document with a result per object instead.

Exit status: 2 when some input is bad (unreadable, not YAML, refused by step 1); else 1
when the webhook would deny some class (or, with ``--warnings-as-errors``, warn about
one); else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from extender.admission import API_VERSION, KIND, review
from extender.autoscaling.autoscalers import Found, class_warning, karpenter, unseen
from extender.autoscaling.finder import Forbidden, find_cluster_autoscaler
from extender.cluster.class_labels import ClassLabels
from extender.cluster.file_source import ClusterFileError, document_objects
from extender.cluster.objects import ObjectError, runtime_class_from_api
from extender.cluster.snapshot import ClusterUnavailable, client_timeout, connect_for_tool, describe_failure
from extender.cluster.state import ClusterState
from extender.cluster.validation import every_problem, object_reference
from extender.documents import DocumentError, load_document, load_documents
from extender.policy_file import load_policy
from extender.tools.images import GET_THE_IMAGE, UnservedImage, unserved_images
from extender.tools.inputs import STDIN, load_state, read_text
from extender.tools.installed import installed_in
from extender.tools.output import EXIT_USAGE, UsageError, guarded, print_structured
from policies.objects import RuntimeClassView

EXIT_VALID: Final = 0
EXIT_DENIED: Final = 1
MANIFEST_SUFFIXES: Final = (".yaml", ".yml", ".json")
STDIN_NAME: Final = "<stdin>"
NO_NODES_NOTE: Final = (
    "note: no --cluster-file or --kubeconfig: node checks skipped "
    "(selector matches, taints, runtime handlers); the other checks ran"
)

Result = Literal["valid", "warned", "denied", "invalid", "skipped"]

_RUNTIME_CLASS_KIND: Final = {"group": "node.k8s.io", "version": "v1", "kind": "RuntimeClass"}


@dataclass(slots=True)
class Finding:
    """The verdict on one object (or on a file that could not be read)."""

    source: str
    where: str
    object: str
    result: Result
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Why a skipped object or file was not judged ("not a RuntimeClass", "empty").
    reason: str = ""
    # The kind of an object of another kind (NOT_A_RUNTIME_CLASS), for the summary.
    kind: str = ""

    def to_json(self) -> dict[str, Any]:
        document = {
            "source": self.source,
            "location": self.where,
            "object": self.object,
            "result": self.result,
            "warnings": self.warnings,
            "errors": self.errors,
        }
        if self.result == "skipped":
            document["reason"] = self.reason
        return document


# --- reading ---------------------------------------------------------------------------

_SUFFIXES_SHOWN: Final = ", ".join("*" + suffix for suffix in MANIFEST_SUFFIXES)
# Input that holds nothing to check is an error: a CI pipeline that rendered nothing
# (kustomize build of an empty overlay piped in) must not pass.
EMPTY: Final = "empty: no Kubernetes objects to check"
EMPTY_DIRECTORY: Final = f"empty: no {_SUFFIXES_SHOWN} file in the directory"
EMPTY_FILES: Final = f"empty: its {_SUFFIXES_SHOWN} files hold no Kubernetes objects"


def _read(path: str) -> tuple[str | None, str | None]:
    """(text, None), or (None, why not) in the words of every file the commands read."""
    try:
        return read_text(path), None
    except UsageError as exc:
        return None, str(exc)


def directory_files(root: Path) -> list[Path]:
    """The manifests under ``root``: every ``*.yaml``, ``*.yml`` and ``*.json`` file,
    recursively, in sorted order."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)


# --- what a directory holds beside manifests ---------------------------------------------
#
# A repository's manifest directory holds files that are not objects to apply: the
# patches a kustomization applies to its resources, Helm chart templates (YAML only once
# rendered), and data (values files, dashboards). Each is skipped with a note when a
# directory is walked, so a whole directory can be checked as it is; a file named on
# the command line is always judged as a manifest.

KUSTOMIZATION_NAMES: Final = ("kustomization.yaml", "kustomization.yml", "Kustomization")
HELM_CHART: Final = "Chart.yaml"


@dataclass(frozen=True, slots=True)
class Survey:
    """The files of a directory tree that are not manifests, by what the tree says of
    them: kustomize patches (the file -> the kustomization that patches with it) and
    the ``templates/`` directories of Helm charts."""

    patches: dict[Path, Path]
    templates: tuple[Path, ...]

    def patched_by(self, file: Path) -> Path | None:
        return self.patches.get(file.resolve())

    def templates_of(self, file: Path) -> Path | None:
        return next((t for t in self.templates if t in file.parents), None)


def survey(root: Path) -> Survey:
    everything = [p for p in root.rglob("*") if p.is_file()]
    patches: dict[Path, Path] = {}
    for kustomization in (p for p in everything if p.name in KUSTOMIZATION_NAMES):
        for patch in kustomize_patches(kustomization):
            patches.setdefault(patch.resolve(), kustomization)
    charts = sorted(p.parent / "templates" for p in everything if p.name == HELM_CHART)
    return Survey(patches, tuple(charts))


def kustomize_patches(kustomization: Path) -> list[Path]:
    """The patch files a kustomization names (``patches`` and ``patchesJson6902``
    entries with a ``path``, and ``patchesStrategicMerge`` entries that are paths
    rather than inline patches). One that cannot be read names none: it is checked, and
    refused, as any other file."""
    try:
        document = load_document(kustomization.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, DocumentError):
        return []
    if not isinstance(document, dict):
        return []
    paths: list[str] = []
    for key in ("patches", "patchesJson6902"):
        entries = document.get(key)
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                paths.append(entry["path"])
    merges = document.get("patchesStrategicMerge")
    for entry in merges if isinstance(merges, list) else ():
        if isinstance(entry, str) and "\n" not in entry:
            paths.append(entry)
    return [kustomization.parent / path for path in paths]


def not_an_object(documents: list[Any]) -> str | None:
    """Why a walked file's documents are no Kubernetes objects at all, or None: a JSON
    patch (RFC 6902: a list of operations), or data without a ``kind`` (a values file,
    a dashboard, a schema)."""
    if all(isinstance(doc, list) and doc and all(_is_operation(op) for op in doc) for doc in documents):
        return "a JSON patch (RFC 6902), not an object"
    if all(isinstance(doc, dict) and "kind" not in doc for doc in documents):
        return "not a Kubernetes object: no kind"
    return None


def _is_operation(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("op"), str) and isinstance(value.get("path"), str)


# --- judging ---------------------------------------------------------------------------


def admission_review(obj: dict[str, Any], uid: str) -> bytes:
    """The CREATE AdmissionReview the API server would send the webhook for ``obj``
    (staging/src/k8s.io/api/admission/v1/types.go): the fields ``review`` reads."""
    name = obj.get("metadata", {}).get("name", "")
    request = {"uid": uid, "kind": _RUNTIME_CLASS_KIND, "operation": "CREATE", "name": name, "object": obj}
    # default=str: YAML decodes an unquoted timestamp to a datetime; the API has strings.
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "request": request}, default=str)


def judge(
    obj: dict[str, Any],
    source: str,
    where: str,
    state: ClusterState,
    *,
    node_checks: bool,
    more: Callable[[RuntimeClassView], list[str]] | None = None,
) -> Finding:
    """One RuntimeClass: first what the API server would refuse, then the webhook's answer
    (and ``more`` warnings about the class: the autoscalers')."""
    ref = object_reference(obj)
    # Every problem at once, as the API server lists its field errors: the types the
    # parsing model refuses, then what validation refuses in the fields it could read.
    if problems := every_problem(obj):
        errors = [f"{source}: {where}: {ref}: {problem}" for problem in problems]
        return Finding(source, where, ref, "invalid", errors=errors)
    try:
        view = runtime_class_from_api(obj)
    except ObjectError as exc:  # nothing above refused it: not expected, said all the same
        return Finding(source, where, ref, "invalid", errors=[f"{source}: {where}: {ref}: {exc}"])
    # Warnings whole: the webhook shortens its values to fit the API server's 120
    # characters, which cut names and taints mid-word on a terminal that has room.
    outcome = review(admission_review(obj, uid=f"check-{source}-{where}"), state, warning_limit=None)
    if not outcome.allowed:
        return Finding(source, where, ref, "denied", errors=[f"{source}: {where}: {ref}: {outcome.message}"])
    # Without nodes the review skips its node checks and says the cache is not synced:
    # true of the webhook, beside the point here (the note says it once instead).
    warnings = list(outcome.warnings) if node_checks else []
    if more is not None:
        warnings += more(view)
    return Finding(source, where, ref, "warned" if warnings else "valid", warnings=warnings)


Judge = Callable[[dict[str, Any], str, str], Finding]


def check_files(
    paths: Sequence[str],
    state: ClusterState,
    *,
    node_checks: bool,
    more: Callable[[RuntimeClassView], list[str]] | None = None,
) -> Iterator[Finding]:
    """A finding for every object of every input, in input order: files, directories
    (``check_directory``) and standard input."""

    def judged(obj: dict[str, Any], source: str, where: str) -> Finding:
        return judge(obj, source, where, state, node_checks=node_checks, more=more)

    for path in paths:
        if path == STDIN:
            yield from check_text(STDIN_NAME, sys.stdin.read(), judged)
        elif Path(path).is_dir():
            yield from check_directory(Path(path), judged)
        else:
            text, error = _read(path)
            if text is None:
                yield Finding(path, "", "", "invalid", errors=[str(error)])
            else:
                yield from check_text(path, text, judged)


def check_directory(root: Path, judged: Judge) -> Iterator[Finding]:
    """Every manifest under ``root``, but what the tree says is none (``survey``:
    kustomize patches, Helm chart templates) and files of no Kubernetes object
    (``not_an_object``), each skipped with a note. An empty file there is skipped too
    (the others are the input); a directory with nothing to check is an error."""
    files = directory_files(root)
    if not files:
        yield Finding(str(root), "", "", "invalid", errors=[f"{root}: {EMPTY_DIRECTORY}"])
        return
    tree = survey(root)
    found: list[Finding] = []
    skipped_templates: set[Path] = set()
    for file in files:
        if (kustomization := tree.patched_by(file)) is not None:
            found.append(
                Finding(str(file), "", "", "skipped", reason=f"a kustomize patch of {kustomization}")
            )
            continue
        if (templates := tree.templates_of(file)) is not None:
            # One note for the chart's templates, which are YAML once rendered only.
            if templates not in skipped_templates:
                skipped_templates.add(templates)
                count = sum(1 for f in files if templates in f.parents)
                reason = f"{count} Helm chart templates: check what helm template renders them into, with check -"
                found.append(Finding(str(templates), "", "", "skipped", reason=reason))
            continue
        text, error = _read(str(file))
        if text is None:
            found.append(Finding(str(file), "", "", "invalid", errors=[str(error)]))
        else:
            found.extend(check_text(str(file), text, judged, walked=True))
    if all(finding.reason == "empty" for finding in found):
        yield Finding(str(root), "", "", "invalid", errors=[f"{root}: {EMPTY_FILES}"])
        return
    yield from found


def check_text(source: str, text: str, judged: Judge, *, walked: bool = False) -> Iterator[Finding]:
    """A finding for every object of one file's text (``walked``: found in a directory)."""
    try:
        documents = load_documents(text)
    except DocumentError as exc:
        yield Finding(source, "", "", "invalid", errors=[f"{source}: {exc}"])
        return
    if not documents:
        if walked:
            yield Finding(source, "", "", "skipped", reason="empty")
        else:
            yield Finding(source, "", "", "invalid", errors=[f"{source}: {EMPTY}"])
        return
    if walked and (why := not_an_object(documents)) is not None:
        yield Finding(source, "", "", "skipped", reason=why)
        return
    try:
        for where, obj in document_objects(documents):
            if not isinstance(obj, dict):
                yield Finding(source, where, "", "invalid", errors=[f"{source}: {where}: expected an object"])
            elif obj.get("kind") != "RuntimeClass":
                yield _other_kind(obj, source, where, walked=walked)
            else:
                yield judged(obj, source, where)
    except ClusterFileError as exc:
        yield Finding(source, "", "", "invalid", errors=[f"{source}: {exc}"])


NOT_A_RUNTIME_CLASS: Final = "not a RuntimeClass"


def _other_kind(obj: dict[str, Any], source: str, where: str, *, walked: bool) -> Finding:
    """An object of another kind is skipped, but an install that names the extender's
    image without a registry, or under a placeholder registry, is warned about. Only
    where it is checked as rendered: in a directory walk it is a kustomize base, whose
    overlay may set the image (a note)."""
    ref = object_reference(obj)
    images = unserved_images(obj)
    if not images:
        kind = obj.get("kind")
        kind = kind if isinstance(kind, str) else ""
        return Finding(source, where, ref, "skipped", reason=NOT_A_RUNTIME_CLASS, kind=kind)
    if walked:
        image = images[0]
        if image.placeholder is None:
            why = f"its image {image.image} names no registry: an overlay must set it"
        else:
            why = f"its image {image.image} names the placeholder {image.placeholder}: an overlay must replace it"
        reason = f"{NOT_A_RUNTIME_CLASS}; {why} ({GET_THE_IMAGE})"
        return Finding(source, where, ref, "skipped", reason=reason)
    warnings = [f"{source}: {where}: {ref}: container {i.container}: {_unserved(i)}" for i in images]
    return Finding(source, where, ref, "warned", warnings=warnings)


def _unserved(image: UnservedImage) -> str:
    if image.placeholder is None:
        return (
            f"image {image.image} names no registry, and none serves it (docker.io/library/ holds Docker's "
            f"official images only): its pods would not start; build and push it, then name it ({GET_THE_IMAGE})"
        )
    return (
        f"image {image.image} names the placeholder {image.placeholder} where its registry belongs (a registry "
        f"host has a dot or a port, or is localhost): its pods would not start; replace {image.placeholder} "
        f"with the registry you pushed the image to ({GET_THE_IMAGE})"
    )


def skipped_summary(kinds: Counter[str]) -> str:
    """The one note for every object of another kind: how many, of which kinds (most
    first), so that the dozens of objects of a rendered install do not bury its warnings."""
    total = kinds.total()
    by_count = sorted(kinds.items(), key=lambda item: (-item[1], item[0]))
    counted = ", ".join(f"{count} {kind or '(no kind)'}" for kind, count in by_count)
    if total == 1:
        return f"note: skipped 1 object that is not a RuntimeClass: {counted}"
    return f"note: skipped {total} objects that are not RuntimeClasses: {counted}"


def exit_status(findings: Sequence[Finding], *, warnings_as_errors: bool) -> int:
    results = {finding.result for finding in findings}
    if "invalid" in results:
        return EXIT_USAGE
    if "denied" in results or (warnings_as_errors and "warned" in results):
        return EXIT_DENIED
    return EXIT_VALID


# --- the command -----------------------------------------------------------------------


def _load_nodes(args: argparse.Namespace) -> ClusterState | None:
    """The nodes to judge against: a cluster file, a live LIST, or none at all."""
    if args.cluster_file or args.kubeconfig or args.context:
        return load_state(args)
    return None


def _summarised(finding: Finding) -> bool:
    """Whether the finding is an object of another kind and nothing more: said in the
    one summary note (``skipped_summary``) rather than a note of its own."""
    return finding.result == "skipped" and finding.reason == NOT_A_RUNTIME_CLASS


def _print_lines(finding: Finding) -> None:
    if finding.result == "skipped":
        what = f"{finding.where}: {finding.object} " if finding.object else ""
        print(f"note: {finding.source}: {what}skipped ({finding.reason})", file=sys.stderr)
    for warning in finding.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    for error in finding.errors:
        print(f"error: {error}", file=sys.stderr)
    if finding.result in ("valid", "warned"):
        # The result, as -o json names it: a class the webhook warns about is admitted
        # with its warnings, and --warnings-as-errors fails it.
        print(f"{finding.object} {finding.result}", flush=True)
    sys.stderr.flush()


def _autoscalers(args: argparse.Namespace, state: ClusterState) -> Callable[[RuntimeClassView], list[str]]:
    """The live cluster's node autoscalers (extender.autoscaling.autoscalers), as a warning
    about each class they cannot see in its pods."""
    found: list[Found] = []
    if args.cluster_autoscaler_status:
        namespace, _, name = args.cluster_autoscaler_status.partition("/")
        try:
            autoscaler = asyncio.run(_find_cluster_autoscaler(args, namespace, name))
        except Forbidden:
            autoscaler = None
            print(
                f"note: cannot read ConfigMap {namespace}/{name}: cluster-autoscaler not looked for",
                file=sys.stderr,
            )
        if autoscaler is not None:
            found.append(autoscaler)
    if (karpenter_found := karpenter(state.nodes.values())) is not None:
        found.append(karpenter_found)
    rules = ClassLabels(args.node_label_prefix, load_policy(None))
    # How the classes' rules reach their pods: as the extender's table says, unless told.
    installed = installed_in(args)
    label_nodes = bool(args.label_nodes or installed.label_nodes)
    plugin = installed.plugin(args.runtimeclass_admission_plugin)

    def warnings(runtime_class: RuntimeClassView) -> list[str]:
        blind = unseen([runtime_class], rules, label_nodes=label_nodes, admission_plugin=plugin)
        return [class_warning(found, runtime_class, rules)] if found and blind else []

    return warnings


async def _find_cluster_autoscaler(args: argparse.Namespace, namespace: str, name: str) -> Found | None:
    connection = await connect_for_tool(args.kubeconfig, args.context)
    try:
        async with connection.api as api:
            return await find_cluster_autoscaler(
                api, namespace, name, timeout=client_timeout(args.request_timeout)
            )
    except (Forbidden, ClusterUnavailable):
        raise
    except Exception as exc:  # connection refused, TLS, DNS, timeouts: say where, and why
        raise ClusterUnavailable(
            f"cannot read ConfigMap {namespace}/{name} from {connection.host}: "
            f"{describe_failure(exc, args.request_timeout)}"
        ) from None


@guarded
def run_check(args: argparse.Namespace) -> int:
    if args.cluster_file and (args.kubeconfig or args.context):
        raise UsageError("give either --cluster-file or --kubeconfig/--context, not both")
    if args.paths.count(STDIN) > 1:
        raise UsageError("standard input (-) can be read only once")
    loaded = _load_nodes(args)
    node_checks = loaded is not None
    state = loaded if loaded is not None else ClusterState()
    if not node_checks:
        print(NO_NODES_NOTE, file=sys.stderr, flush=True)
    findings: list[Finding] = []
    skipped: Counter[str] = Counter()
    more = _autoscalers(args, state) if args.kubeconfig or args.context else None
    for finding in check_files(args.paths, state, node_checks=node_checks, more=more):
        findings.append(finding)
        if args.output is not None:
            continue
        if _summarised(finding):
            skipped[finding.kind] += 1
        else:
            _print_lines(finding)
    if skipped:
        print(skipped_summary(skipped), file=sys.stderr, flush=True)
    status = exit_status(findings, warnings_as_errors=args.warnings_as_errors)
    if args.output is not None:
        document = {
            "nodeChecks": node_checks,
            "exitStatus": status,
            "results": [finding.to_json() for finding in findings],
        }
        print_structured(document, args.output)
    return status
