"""The shell examples of the docs, read as a shell reads them, and run as a reader would.

A page's fenced blocks (with their line and section), each shell block's statements and
the simple commands in them (those inside ``$(...)`` and ``<(...)`` too), a ``console``
block's transcript (``$ command`` lines and the lines shown after each), the files a page
shows (a block opening with ``# my-overlay/kustomization.yaml`` is that file), and the
comparison of what a command printed with what the page shows.

The shell reading is small on purpose: quotes, ``\\`` line continuations, comments,
pipes and lists, subshells, command and process substitution, redirections and the
loop keywords, which is what the pages use. tests/test_docs_run.py says which commands
run here and runs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.docs import headings

SHELL_LANGUAGES = ("sh", "console", "bash", "shell")
# The prompt of a command in a ``console`` block; the lines up to the next one are what
# it printed.
PROMPT = "$ "
# A line of shown output that is only this stands for one or more lines left out (as
# docs/explain.md says of its tables: "`...` marks rows left out here").
ELLIPSIS = "..."

# Words that open and close a compound command, and words that only lead into the
# command after them (``until curl ...``, ``do cp ...``).
_OPENERS = frozenset({"for", "while", "until", "if", "case"})
_CLOSERS = frozenset({"done", "fi", "esac"})
_LEADING_KEYWORDS = frozenset({"do", "then", "else", "elif", "while", "until", "if", "!", "{", "time"})
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
# A file a page shows: a block whose first line is a comment naming a relative path.
_SHOWN_FILE = re.compile(r"# ((?:[\w.-]+/)*[\w.-]+\.(?:ya?ml|json))\n")


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: its language (the word after the fence), its body
    (without the fence's indentation, inside a list item), the line of its opening fence
    (1-based), that fence's indentation, and the heading it is under: its title and
    line (0 above the first)."""

    page: Path
    language: str
    body: str
    line: int
    indent: str
    section: str
    section_line: int


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the page ``path``, in order: a fence at the start of a line or
    indented inside a list item, closed by a fence of the same indentation (as
    ``tests/support/docs.py``'s ``fenced_blocks`` reads them)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    titles = {index: title for _, title, index in headings("".join(lines))}
    found = []
    section, section_line = "", 0
    opened: tuple[str, int, str] | None = None  # language, line index, indentation
    body: list[str] = []
    for index, line in enumerate(lines):
        if opened is None:
            if index in titles:
                section, section_line = titles[index], index + 1
            if fence := re.match(r"( *)```(.*)", line):
                opened, body = (fence.group(2).strip(), index, fence.group(1)), []
        elif line.startswith(opened[2] + "```"):
            language, start, indent = opened
            found.append(Block(path, language, "".join(body), start + 1, indent, section, section_line))
            opened = None
        else:
            body.append(line.removeprefix(opened[2]) if line.strip() else "\n")
    return found


def shown_file(body: str) -> str | None:
    """The path of the file a block's ``body`` is, when it opens with a comment naming
    one (``# my-overlay/kustomization.yaml``)."""
    match = _SHOWN_FILE.match(body)
    return match.group(1) if match else None


def shown_files(page_blocks: Iterable[Block]) -> dict[str, str]:
    """The files ``page_blocks`` show, by path: a later block of the same path replaces an
    earlier one, as it does for the reader who follows the page."""
    files = {}
    for block in page_blocks:
        if block.language not in SHELL_LANGUAGES and (name := shown_file(block.body)):
            files[name] = block.body
    return files


# --- statements and simple commands ------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """A simple command: its words as written (quotes kept), without the redirections,
    the keywords leading into it (``do``, ``until``) and the variable assignments before
    it; an assignment alone is a command of its own (``dir="$(mktemp -d)"``)."""

    words: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass(frozen=True)
class Statement:
    """One complete construct of a script (a line, or the lines of a loop, with their
    continuations) and every simple command in it."""

    text: str
    commands: tuple[Command, ...]


def statements(script: str) -> list[Statement]:
    """The statements of ``script``, in order; comment lines and blank lines are none."""
    found = []
    pending: list[str] = []
    for line in script.splitlines():
        pending.append(line)
        if line.endswith("\\"):
            continue
        text = "\n".join(pending)
        top, nested = _scan(text)
        depth = sum(w[0] in _OPENERS for w in top if w) - sum(w[0] in _CLOSERS for w in top if w)
        if depth > 0:
            continue
        pending = []
        commands = tuple(c for words in (*top, *nested) if (c := _command(words)) is not None)
        if commands:
            found.append(Statement(text, commands))
    assert not pending, f"an unfinished statement: {pending}"
    return found


def commands(script: str) -> list[Command]:
    """Every simple command of ``script``."""
    return [command for statement in statements(script) for command in statement.commands]


def _command(words: list[str]) -> Command | None:
    words = list(words)
    while words and words[0] in _LEADING_KEYWORDS:
        words.pop(0)
    if not words or words[0] in _CLOSERS or words == ["}"]:
        return None
    if not all(_ASSIGNMENT.match(word) for word in words):
        while _ASSIGNMENT.match(words[0]):
            words.pop(0)
    return Command(tuple(words))


def _scan(text: str) -> tuple[list[list[str]], list[list[str]]]:
    """The simple commands of ``text`` as words, and those of the substitutions in it."""
    top: list[list[str]] = []
    nested: list[list[str]] = []
    words: list[str] = []
    word = ""
    redirected = False  # the next word is a redirection's target, not an argument
    i = 0

    def end_word() -> None:
        nonlocal word, redirected
        if word:
            if redirected:
                redirected = False
            else:
                words.append(word)
            word = ""

    def end_command() -> None:
        end_word()
        if words:
            top.append(list(words))
            words.clear()

    while i < len(text):
        char = text[i]
        if text.startswith("\\\n", i):
            end_word()
            i += 2
        elif char == "\\":
            word += text[i : i + 2]
            i += 2
        elif char in " \t":
            end_word()
            i += 1
        elif char == "\n":
            end_command()
            i += 1
        elif char == "#" and not word:
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
        elif char == "'":
            end = text.index("'", i + 1)
            word += text[i : end + 1]
            i = end + 1
        elif char == '"':
            end = _closing_quote(text, i, nested)
            word += text[i : end + 1]
            i = end + 1
        elif text.startswith("$(", i) or (text.startswith("<(", i) and not word):
            end = _closing_paren(text, i + 1)
            nested.extend(_substitution(text[i + 2 : end]))
            word += text[i : end + 1]
            i = end + 1
        elif text.startswith("${", i):
            end = text.index("}", i)
            word += text[i : end + 1]
            i = end + 1
        elif char in "<>":
            if word.isdigit():  # a file descriptor: 2>&1
                word = ""
            end_word()
            i += 1
            while i < len(text) and text[i] in "<>&|":
                i += 1
            redirected = True
        elif char in "|&;()":
            end_command()
            i += 1
        else:
            word += char
            i += 1
    end_command()
    return top, nested


def _substitution(text: str) -> list[list[str]]:
    top, nested = _scan(text)
    return top + nested


def _closing_quote(text: str, start: int, nested: list[list[str]]) -> int:
    """The index of the ``"`` closing the one at ``start``; the command substitutions
    inside it go to ``nested``."""
    i = start + 1
    while text[i] != '"':
        if text[i] == "\\":
            i += 2
        elif text.startswith("$(", i):
            end = _closing_paren(text, i + 1)
            nested.extend(_substitution(text[i + 2 : end]))
            i = end + 1
        else:
            i += 1
    return i


def _closing_paren(text: str, start: int) -> int:
    """The index of the ``)`` closing the ``(`` at ``start``, quotes skipped."""
    depth = 0
    i = start
    while True:
        char = text[i]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        elif char == "'":
            i = text.index("'", i + 1)
        elif char == '"':
            i = _closing_quote(text, i, [])
        elif char == "\\":
            i += 1
        i += 1


# --- console transcripts -----------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """A command of a ``console`` block (its continuation lines joined as written) and the
    lines the block shows after it."""

    command: str
    shown: tuple[str, ...]


def transcript(body: str) -> list[Step]:
    """The steps of a ``console`` block: every ``$ `` line (with the lines it continues
    onto, when it ends with ``\\``), and the lines up to the next ``$ `` line. A block
    shows no output before its first command."""
    lines = body.splitlines()
    steps: list[Step] = []
    i = 0
    while i < len(lines):
        assert lines[i].startswith(PROMPT), f"console block shows output before any command: {lines[i]!r}"
        command = [lines[i][len(PROMPT) :]]
        i += 1
        while command[-1].endswith("\\") and i < len(lines):
            command.append(lines[i])
            i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith(PROMPT):
            shown.append(lines[i])
            i += 1
        steps.append(Step("\n".join(command), tuple(shown)))
    return steps


def output_matches(shown: Sequence[str], printed: Sequence[str]) -> bool:
    """Whether ``printed`` is what a page shows, line for line after trailing whitespace
    is stripped; a shown line ``...`` stands for one or more printed lines."""
    pattern = "".join(
        r"(?:[^\n]*\n)+" if line == ELLIPSIS else re.escape(line.rstrip()) + r"\n" for line in shown
    )
    return re.fullmatch(pattern, "".join(line.rstrip() + "\n" for line in printed)) is not None


# --- running -----------------------------------------------------------------------------

# Printed after each command of a script, on a line of its own, with the command's exit
# status; a line of output can hardly look like it.
MARKER = "@@docs-example-status@@"


def with_status_lines(commands: Iterable[str]) -> str:
    """A script of ``commands``, each followed by a line that prints a marker and its exit
    status, then restores that status for the next command (a page's ``echo $?``)."""
    lines = []
    for command in commands:
        lines.append(command)
        lines.append(f'__status=$?; printf "\\n{MARKER} %d\\n" "$__status"; (exit "$__status")')
    return "\n".join(lines) + "\n"


def split_by_status_lines(output: str) -> list[tuple[list[str], int]]:
    """What each command of a ``with_status_lines`` script printed, as lines, and its
    exit status; whatever follows the last marker (a shell that stopped early) is left
    out."""
    found = []
    current: list[str] = []
    for line in output.splitlines():
        if line.startswith(MARKER + " "):
            # The marker starts on a line of its own: drop the line break it added.
            if current and current[-1] == "":
                current.pop()
            found.append((current, int(line.split()[-1])))
            current = []
        else:
            current.append(line)
    return found
