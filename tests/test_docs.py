"""The documentation as a whole: the README's map reaches every page, every relative link
resolves (file and heading), every shell example runs the command in one form, and the
licence and changelog match what pyproject.toml declares.

Pages' own examples (commands and the output they show) are checked by the tests of the
features they document, which read them through ``tests/support/docs.py``; every shell
command that needs no cluster runs as written in tests/test_docs_run.py.
"""

from __future__ import annotations

import itertools
import re
import shlex
import tomllib
from pathlib import Path
from urllib.parse import unquote

import pytest

from extender import __version__
from extender.cli import build_parser, main
from extender.tools.commands import build_kubectl_parser
from tests.support.docs import INVOCATION, fenced_blocks, headings
from tests.support.paths import DOCS, README, REPO

CHANGELOG = REPO / "CHANGELOG.md"
LICENSE = REPO / "LICENSE"
PAGES = sorted(DOCS.glob("*.md"))
DOCUMENTS = [README, CHANGELOG, *PAGES]
SHELL_LANGUAGES = ("sh", "console", "bash", "shell")
PROGRAM = "runtimeclass-extender"


def _name(path: Path) -> str:
    return str(path.relative_to(REPO))


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (``-`` and ``_``
    kept), spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, title, _ in headings(path.read_text(encoding="utf-8")):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _without_code(text: str) -> str:
    """The text with fenced blocks and inline code removed: links inside them are examples."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def relative_links(path: Path) -> list[str]:
    targets = re.findall(r"\]\(([^)\s]+)\)", _without_code(path.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_slug_matches_githubs_anchors() -> None:
    assert slug("Settings of `serve`") == "settings-of-serve"
    assert slug("Expressive selectors (annotation)") == "expressive-selectors-annotation"
    assert slug("Pod pending: `didn't match RuntimeClass`") == "pod-pending-didnt-match-runtimeclass"


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for link in relative_links(path):
        file_part, _, anchor = link.partition("#")
        target = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and (target.suffix != ".md" or anchor not in anchors(target)):
            broken.append(f"{link}: no heading #{anchor} in {_name(target)}")
    assert not broken, broken


def test_the_link_check_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [bad](#nowhere) `[code](x.md)`\n")
    assert relative_links(page) == ["#title", "missing.md", "#nowhere"]
    assert "nowhere" not in anchors(page) and "title" in anchors(page)


def test_readme_maps_every_page() -> None:
    linked = {(README.parent / link.partition("#")[0]).resolve() for link in relative_links(README)}
    assert [_name(p) for p in PAGES if p.resolve() not in linked] == []
    assert LICENSE.resolve() in linked and CHANGELOG.resolve() in linked


def _shell_commands(block: str, language: str) -> list[list[str]]:
    """Each simple command of a shell example, as words (pipes, ``&&``, ``;`` and
    subshells split commands; ``console`` blocks hold commands only on ``$ `` lines)."""
    lines = block.replace("\\\n", " ").splitlines()
    if language == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    commands: list[list[str]] = []
    for line in lines:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in lexer:
            if token and set(token) <= set("();<>|&"):
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(token)
        if current:
            commands.append(current)
    return commands


def _program_commands(path: Path) -> list[list[str]]:
    """Every shell example in ``path`` that runs the program, as words (the program first)."""
    text = path.read_text(encoding="utf-8")
    found = []
    for language in SHELL_LANGUAGES:
        for block in fenced_blocks(text, language):
            for words in _shell_commands(block, language):
                words = list(itertools.dropwhile(lambda word: "=" in word, words))  # VAR=value prefixes
                if words and words[0].rsplit("/", 1)[-1] == PROGRAM:
                    found.append(words)
    return found


def _plugin_commands(path: Path) -> list[list[str]]:
    """Every shell example in ``path`` that runs the kubectl plugin, as its arguments."""
    text = path.read_text(encoding="utf-8")
    return [
        words[2:]
        for language in SHELL_LANGUAGES
        for block in fenced_blocks(text, language)
        for words in _shell_commands(block, language)
        if words[:2] == ["kubectl", "runtimeclass"]
    ]


def _program_calls(path: Path) -> list[str]:
    return [words[0] for words in _program_commands(path)]


@pytest.mark.parametrize("path", [README, *PAGES], ids=_name)
def test_every_shell_example_runs_the_command_in_one_form(path: Path) -> None:
    assert [call for call in _program_calls(path) if call != INVOCATION] == []


def test_the_invocation_check_finds_commands_in_every_position(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\nruntimeclass-extender serve --port 1 &\n"
        "cat x | .venv/bin/runtimeclass-extender explain -  # comment runtimeclass-extender\n"
        "kubectl -n runtimeclass-extender get pods && (cd d && bin/runtimeclass-extender audit)\n"
        "docker build -t r/runtimeclass-extender:1 . ; X=1 runtimeclass-extender \\\n  classes\n```\n"
        "```console\n$ runtimeclass-extender replay d\nruntimeclass-extender output line\n```\n"
    )
    assert _program_calls(page) == [
        "runtimeclass-extender",
        INVOCATION,
        "bin/runtimeclass-extender",
        "runtimeclass-extender",
        "runtimeclass-extender",
    ]


def test_docs_are_used_with_that_form() -> None:
    """The form is the one the quick start installs, and the docs run it."""
    assert INVOCATION in README.read_text(encoding="utf-8")
    assert sum(len(_program_calls(path)) for path in PAGES) >= 10


def test_license_is_the_apache_license_pyproject_declares() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = project["license"]
    declared = declared["text"] if isinstance(declared, dict) else declared
    assert declared == "Apache-2.0"
    text = LICENSE.read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text
    # The full text: all nine sections of the terms and the appendix.
    for heading in (
        "1. Definitions.",
        "4. Redistribution.",
        "9. Accepting Warranty or Additional Liability.",
    ):
        assert heading in text, heading
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text


def test_changelog_has_the_current_version_and_unreleased() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["version"] == __version__
    titles = [title for level, title, _ in headings(CHANGELOG.read_text(encoding="utf-8")) if level == 2]
    assert titles[0] == "Unreleased"
    assert any(title.startswith(f"{__version__} ") or title == __version__ for title in titles), titles


DOC_COMMANDS = [(path, words) for path in [README, *PAGES] for words in _program_commands(path)]


@pytest.mark.parametrize(
    ("path", "words"), DOC_COMMANDS, ids=[f"{_name(p)}: {' '.join(w[1:])}" for p, w in DOC_COMMANDS]
)
def test_every_documented_command_is_accepted(path: Path, words: list[str]) -> None:
    """Every documented command parses: its command and flags exist. Those that can run
    here (no cluster, no network) run as written in tests/test_docs_run.py."""
    build_parser().parse_args(words[1:])


def test_the_docs_show_commands() -> None:
    """The test above is parametrized over the examples: with none found it would run
    zero times and pass."""
    assert len(DOC_COMMANDS) >= 10


def test_cli_reports_the_version_pyproject_declares(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/reference.md: ``--version`` prints the version of pyproject.toml (as /readyz
    reports it, tests/http/test_app.py)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"{PROGRAM} {project['version']}\n"


PLUGIN_COMMANDS = [(path, args) for path in [README, *PAGES] for args in _plugin_commands(path)]


@pytest.mark.parametrize(
    ("path", "args"), PLUGIN_COMMANDS, ids=[f"{_name(p)}: {' '.join(a)}" for p, a in PLUGIN_COMMANDS]
)
def test_every_documented_plugin_command_parses(path: Path, args: list[str]) -> None:
    """``kubectl runtimeclass ...`` examples run the plugin executable: its commands and
    flags exist (they need a cluster, so they are parsed, not run)."""
    build_kubectl_parser().parse_args(args)


def test_the_docs_show_plugin_commands() -> None:
    """The test above is parametrized over the examples: with none found (a changed
    fence language, a parser that misses them) it would run zero times and pass."""
    assert len(PLUGIN_COMMANDS) >= 3, PLUGIN_COMMANDS
