"""Reading the documentation the tests check: pages, their sections and fenced blocks.

The docs show commands and what they print; tests read them from the pages, so a page
and the program cannot drift apart unnoticed. One copy of the parsing lives here.
"""

from __future__ import annotations

import re

from tests.support.paths import DOCS, README

# The one form every example uses to run the command (README "Quick start" says so).
INVOCATION = ".venv/bin/runtimeclass-extender"


def page(name: str) -> str:
    """The text of ``docs/<name>`` (``README.md`` for that name)."""
    path = README if name == "README.md" else DOCS / name
    return path.read_text(encoding="utf-8")


def headings(text: str) -> list[tuple[int, str, int]]:
    """Every Markdown heading outside fenced blocks: (level, title, line index)."""
    found = []
    fenced = False
    for index, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(#{1,6}) (.+)", line)):
            found.append((len(match.group(1)), match.group(2).strip(), index))
    return found


def section(text: str, heading: str) -> str:
    """The body under the Markdown heading ``heading`` (e.g. ``"## Quick start"``), up to
    the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    title = heading[level:].strip()
    lines = text.splitlines(keepends=True)
    found = headings(text)
    starts = [index for lvl, name, index in found if lvl == level and name == title]
    assert starts, f"no heading {heading!r}"
    end = next((index for lvl, _, index in found if index > starts[0] and lvl <= level), len(lines))
    return "".join(lines[starts[0] + 1 : end])


def fenced_blocks(text: str, language: str) -> list[str]:
    """The bodies of the fenced blocks of ``language`` (```` ```sh ````, ...), in order,
    those indented inside a list item too, each without the fence's indentation (as
    CommonMark strips it from the block's lines)."""
    found = []
    for match in re.finditer(rf"^( *)```{language}\n(.*?)^\1```", text, flags=re.MULTILINE | re.DOTALL):
        indent = match.group(1)
        lines = match.group(2).splitlines(keepends=True)
        found.append("".join(line.removeprefix(indent) if line.strip() else "\n" for line in lines))
    return found


def block_after(text: str, command: str, language: str) -> str:
    """The body of the first ``language`` block that follows the line showing ``command``:
    the output a page shows for that command."""
    after = text[text.index(command + "\n") :]
    return after.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def shown_log_line(text: str, logger: str) -> str:
    """The first log line a page shows (in a ``text`` block) from ``logger``."""
    for block in fenced_blocks(text, "text"):
        for line in block.splitlines():
            if re.match(rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} [A-Z]+ {re.escape(logger)}: ", line):
                return line
    raise AssertionError(f"no log line of {logger} shown")


def log_line_shape(line: str) -> tuple[str, str, str, tuple[str, ...]]:
    """A text log line without its values: level, logger, the message with numbers
    as ``N``, and the names of its extras in order. A page's example and a real line
    have the same shape."""
    match = re.match(r"\S+ \S+ ([A-Z]+) ([\w.]+): (.*)", line)
    assert match, line
    level, logger, rest = match.groups()
    keys = tuple(re.findall(r"(?:^|\s)(\w+)=", rest))
    message = re.split(r"\s\w+=", rest, maxsplit=1)[0]
    return level, logger, re.sub(r"\d+", "N", message), keys
