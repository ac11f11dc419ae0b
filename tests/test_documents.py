"""extender.documents: JSON-or-YAML text, and errors that fit on one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from extender.documents import DocumentError, load_document, load_documents
from tests.support.paths import REPO


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "not: [valid",
            "not valid YAML (line 1, column 12: expected ',' or ']', but got '<stream end>')",
            id="flow",
        ),
        pytest.param(
            "a: 1\nkind: Config: broken\n",
            "not valid YAML (line 2, column 13: mapping values are not allowed here)",
            id="mapping",
        ),
        pytest.param(
            "a: 1\n---\nb: 2\n",
            "not valid YAML (line 2, column 1: expected a single document in the stream, but found another document)",
            id="two-documents",
        ),
        pytest.param(b"kind: \xc3\x28\n", "not valid YAML: not UTF-8 text (", id="not-utf8"),
    ],
)
def test_errors_are_one_line_with_the_position(text: str | bytes, expected: str) -> None:
    with pytest.raises(DocumentError) as caught:
        load_document(text)
    message = str(caught.value)
    assert message.startswith(expected)
    assert "\n" not in message


def test_the_error_keeps_its_parts_for_callers_with_their_own_wording() -> None:
    with pytest.raises(DocumentError) as caught:
        load_document("a: 1\nb: [\n", what="JSON or YAML")
    error = caught.value
    assert (error.line, error.what) == (3, "JSON or YAML")
    assert str(error).startswith("not valid JSON or YAML (line 3, column 1: ")


def test_json_and_yaml_flow_style_both_decode() -> None:
    assert load_document('{"a": [1, 2]}') == {"a": [1, 2]}
    # Not JSON (unquoted keys), but YAML flow style: the YAML parser has the last word.
    assert load_document("{a: [1, 2]}") == {"a": [1, 2]}
    assert load_document(b'["x"]') == ["x"]
    assert load_document("") is None


def test_a_stream_drops_empty_documents() -> None:
    assert load_documents("---\na: 1\n---\n---\nb: 2\n") == [{"a": 1}, {"b": 2}]
    assert load_documents('{"kind": "List"}') == [{"kind": "List"}]


def test_nesting_beyond_the_parser_is_an_error_not_a_crash() -> None:
    with pytest.raises(DocumentError):
        load_document("a: " + "[" * 100_000)


# A stack overflow in libyaml's C composer kills the interpreter, so each case runs in
# a child process: a crash is then this test failing, not the test run ending.
@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: " + "[" * 300_000, id="flow-sequences"),
        pytest.param("a: " + "{b: " * 300_000, id="flow-mappings"),
        pytest.param("- " * 300_000 + "x\n", id="block-sequences-on-one-line"),
    ],
)
def test_deep_nesting_in_a_multi_document_file_is_an_error_not_a_crash(text: str) -> None:
    code = (
        "import sys\n"
        "from extender.documents import DocumentError, load_documents\n"
        "try:\n"
        "    load_documents(sys.stdin.read())\n"
        "except DocumentError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "not valid YAML: nested too deeply"), done.stderr


def test_the_file_loader_decodes_as_pyyaml_does() -> None:
    # Anchors, aliases, YAML 1.1 scalars, several documents: libyaml's events under
    # PyYAML's composer give exactly what PyYAML's own safe loader gives.
    text = (
        "a: &x {b: 1, c: [on, off, ~, 0x1f, 1_000, 2.5e3, .inf]}\nd: *x\n"
        "e: 2020-01-01\n---\n- !!str 1\n- ? complex\n  : key\n"
    )
    assert load_documents(text) == list(yaml.load_all(text, Loader=yaml.SafeLoader))
    example = (REPO / "deploy" / "examples" / "cluster.yaml").read_text(encoding="utf-8")
    assert load_documents(example) == [
        doc for doc in yaml.load_all(example, Loader=yaml.SafeLoader) if doc is not None
    ]
