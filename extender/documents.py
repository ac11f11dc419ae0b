"""Decoding JSON-or-YAML text, with errors that fit on one line.

Every file an operator hands the extender (cluster file, policy file, ``--config``,
``explain --pod``, kubeconfig) and the node-selector-term annotation is JSON or YAML.
They are all decoded here, so they all fail alike: ``DocumentError`` says
``not valid YAML (line 2, column 3: <problem>)`` instead of PyYAML's multi-line
message with a source snippet, which would break the one-line error of the CLI and
the one-event-one-line rule of the logs.

JSON is tried first for text that looks like it (orjson is an order of magnitude faster
than any YAML loader on a large ``kubectl get -o json`` dump); YAML flow style also
starts with ``{``, so a JSON failure falls through to the YAML parser, which then has
the last word. For the large multi-document files (``load_documents``: cluster files)
libyaml's scanner and parser are used where installed, for the same reason, but with
PyYAML's Python composer on top (``_LOADER``): libyaml's own composer recurses in C once
per nesting level, and text nested a few hundred thousand levels deep (``a: [[[[...``)
overflows the C stack and kills the process, where the Python composer ends in a
RecursionError we report. It costs about 10% over libyaml's composer (3 MB cluster
file: 2.2 s against 2.0 s; PyYAML's pure-Python loader: 7.2 s). A text libyaml refuses
is parsed again by PyYAML's own parser, whose messages and positions are the more
precise. Single documents (``load_document``) are small and always get PyYAML's parser.

Before the text, the file: ``read_failure`` says why a file the operator named could
not be read, in words (``no such file or directory``, ``is a directory: give a
file``) rather than Python's ``[Errno 21] Is a directory: 'PATH'``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import orjson
import yaml


def _c_events_loader() -> type[Any] | None:
    """libyaml's event source under PyYAML's composer, constructor and resolver."""
    try:
        from yaml._yaml import CParser
    except ImportError:  # PyYAML built without libyaml
        return None
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    class CEventsSafeLoader(CParser, Composer, SafeConstructor, Resolver):
        # CParser defines its own (C) node methods; take Composer's for each of them.
        get_node = Composer.get_node
        check_node = Composer.check_node
        get_single_node = Composer.get_single_node
        compose_document = Composer.compose_document
        compose_node = Composer.compose_node
        compose_scalar_node = Composer.compose_scalar_node
        compose_sequence_node = Composer.compose_sequence_node
        compose_mapping_node = Composer.compose_mapping_node

        def __init__(self, stream: Any) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return CEventsSafeLoader


_LOADER: type[Any] = _c_events_loader() or yaml.SafeLoader


class DocumentError(ValueError):
    """Text that is not valid JSON or YAML; ``str()`` is one line.

    ``line`` and ``column`` are 1-based, None when the parser gave no position (bytes
    that are not UTF-8 text, nesting too deep).
    """

    def __init__(
        self, problem: str, *, line: int | None = None, column: int | None = None, what: str = "YAML"
    ) -> None:
        self.problem = problem
        self.line = line
        self.column = column
        self.what = what
        super().__init__(self.problem)

    def __str__(self) -> str:
        if self.line is None:
            return f"not valid {self.what}: {self.problem}"
        where = f"line {self.line}" if self.column is None else f"line {self.line}, column {self.column}"
        return f"not valid {self.what} ({where}: {self.problem})"


def read_failure(exc: OSError | UnicodeDecodeError, *, want: Literal["file", "directory"] = "file") -> str:
    """Why a path the operator named could not be read (``want``: what it should be),
    in words and without the errno code, for ``PATH: <this>``: ``no such file or
    directory``, ``is a directory: give a file``, ``cannot read: permission denied``."""
    if isinstance(exc, UnicodeDecodeError):
        return f"cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, FileNotFoundError):
        return "no such file or directory"
    if isinstance(exc, IsADirectoryError):
        return "is a directory: give a file"
    if isinstance(exc, NotADirectoryError):
        if want == "directory":
            return "not a directory: give a directory"
        return "no such file: a part of its path is a file, not a directory"
    if isinstance(exc, PermissionError):
        return "cannot read: permission denied"
    return f"cannot read: {_os_reason(exc)}"


def write_failure(exc: OSError) -> str:
    """Why a directory the operator named to write into could not be made or used, in
    the words of ``read_failure``: ``is a file: give a directory``, ``cannot write:
    permission denied``."""
    if isinstance(exc, FileExistsError):
        return "is a file: give a directory"
    if isinstance(exc, NotADirectoryError):
        return "a part of its path is a file, not a directory"
    if isinstance(exc, PermissionError):
        return "cannot write: permission denied"
    return f"cannot write: {_os_reason(exc)}"


def _os_reason(exc: OSError) -> str:
    """The OS's words for ``exc`` without its errno code, lower-cased to follow a colon."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason[:1].lower()}{reason[1:]}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _error(exc: yaml.YAMLError, what: str) -> DocumentError:
    if isinstance(exc, yaml.reader.ReaderError):
        # Bytes that are not text: there is no line to point at, only an offset.
        return DocumentError(f"not UTF-8 text ({exc.reason} at byte {exc.position})", what=what)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = _one_line(exc.problem or exc.context or "cannot parse")
        if exc.problem and exc.context and not exc.context.startswith("while "):
            # "expected a single document in the stream, but found another document"
            problem = f"{_one_line(exc.context)}, {problem}"
        if mark is not None:
            return DocumentError(problem, line=mark.line + 1, column=mark.column + 1, what=what)
        return DocumentError(problem, what=what)
    return DocumentError(_one_line(str(exc)) or "cannot parse", what=what)


def _precise_error(exc: yaml.YAMLError, parse_again: Callable[[], object], what: str) -> DocumentError:
    """The error as PyYAML's pure-Python parser words it: libyaml's marks can point
    past the end of a one-line text ("line 2, column 1") and its wording is vaguer
    ("did not find expected node content"). Only the failing text is parsed again,
    so the fast loader keeps the common case."""
    if _LOADER is yaml.SafeLoader:
        return _error(exc, what)
    try:
        parse_again()
    except yaml.YAMLError as again:
        return _error(again, what)
    except RecursionError:
        return DocumentError("nested too deeply", what=what)
    return _error(exc, what)


def _json(text: str | bytes) -> tuple[bool, Any]:
    stripped = text.lstrip()
    first = stripped[:1]
    if first not in ("{", "[", b"{", b"["):
        return False, None
    try:
        return True, orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return False, None


def load_documents(text: str | bytes, *, what: str = "YAML") -> list[Any]:
    """Every document of a (multi-document) YAML stream or one JSON value; empty
    documents are dropped. Raises DocumentError. For files the operator provides (a
    cluster dump), not for text from the API or a request."""
    is_json, value = _json(text)
    if is_json:
        return [value]
    try:
        return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc is not None]
    except yaml.YAMLError as exc:
        raise _precise_error(exc, lambda: list(yaml.load_all(text, Loader=yaml.SafeLoader)), what) from None
    except RecursionError:
        raise DocumentError("nested too deeply", what=what) from None


def load_document(text: str | bytes, *, what: str = "YAML") -> Any:
    """The one document of ``text`` (None for an empty one). Raises DocumentError,
    also for a stream of several documents."""
    is_json, value = _json(text)
    if is_json:
        return value
    try:
        # PyYAML's own parser: these documents are small (an annotation, a policy, a
        # kubeconfig), and its recursion ends in RecursionError where libyaml's C
        # recursion can exhaust the stack on text nested deeply on purpose.
        return yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _error(exc, what) from None
    except RecursionError:
        raise DocumentError("nested too deeply", what=what) from None
