"""The docs that run: every shell command of README.md and docs/*.md that needs no cluster
and no network runs here as written, and what it prints is compared with what the page
shows, so a page cannot drift from the program unnoticed.

Every simple command of every fenced shell block (``sh``, ``console``, ``bash``,
``shell``) is classified by ``RULES``, a table of (pattern, class, reason) read top to
bottom, the first match deciding, into one of three classes:

- **runs here**: the program on files of the repository, ``kubectl kustomize``, ``helm
  template``, ``openssl``, ``promtool``, and the shell glue around them;
- **needs a cluster or the network**: not run here (tests/real/ runs some against a real
  control plane: docs/upgrading.md's, in tests/real/test_placement_moves.py);
- **long-running by design**: ``serve``, the benchmarks, the developer's own suite.

A command no rule matches fails ``test_every_command_is_classified``: a new kind of
command is classified on purpose, not run or skipped by accident.

How the commands run:

- In a copy of the repository (its files, without the hidden ones: .git, the virtual
  environment, caches), made for each test in its ``tmp_path``, as its working
  directory: commands that write (``> rules.yaml``, ``openssl ... -out``) write there,
  never into the repository. ``HOME`` and ``TMPDIR`` are in ``tmp_path`` too.
- ``.venv/bin/`` (the one form the docs run the program in) is the directory of the
  Python running the tests: the same virtual environment, wherever it is.
- A file a page shows before the command, as a block opening with a comment naming it
  (``# my-overlay/kustomization.yaml``), is written there first, as the reader would.
- A ``console`` block shows ``$ command`` lines, each followed by what it prints. The
  ``console`` blocks under one heading are one terminal session (one shell: a variable
  or a file one command makes is there for the next), run when every command in it
  runs here. Each command's standard output and standard error, merged in the order
  written (Python unbuffered, as on a terminal), must be the lines shown, after trailing
  whitespace is stripped; a shown line ``...`` stands for one or more lines left out.
  ``$ echo $?`` shows the exit status of the command before it.
- An ``sh`` block runs its statements that run here, as one script with ``pipefail``,
  when all of it runs here or some of it that is more than shell glue does. Each must
  exit 0, or 1 where 1 is the program's answer (misplaced pods, changed decisions,
  warnings as errors). A page shows output in a ``console`` block; where it still shows
  a command's output in a block right after its ``sh`` block (``SHOWN_BESIDE``), that
  output is compared in the same way.

A tool that is not installed (kubectl, helm, openssl, promtool) skips the test that
needs it, except under CI (``CI`` set), which installs them: there it fails.
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.doc_examples import (
    ELLIPSIS,
    SHELL_LANGUAGES,
    Block,
    Command,
    Statement,
    Step,
    blocks,
    commands,
    output_matches,
    shown_file,
    shown_files,
    split_by_status_lines,
    statements,
    transcript,
    with_status_lines,
)
from tests.support.paths import DOCS, README, REPO

PAGES = [README, *sorted(DOCS.glob("*.md"))]
BIN = Path(sys.executable).parent
# Far above what any example takes (a few seconds): reached only when one hangs, and
# then the test fails.
TIMEOUT_SECONDS = 120

RUNS = "runs here"
REMOTE = "needs a cluster or the network"
LONG = "long-running by design"
GLUE = "shell glue: variables, loops and text tools around the commands"

CLI = r"\.venv/bin/runtimeclass-extender"
OFFLINE = "(explain|classes|filter|replay|audit|node-template|check)"  # with --cluster-file
# (pattern, class, reason): the first pattern that matches the start of a command's text
# (its words as written, joined by spaces) classifies it.
RULES: list[tuple[str, str, str]] = [
    # The program.
    (rf"{CLI}( \S+)* (--help|-h|--version)( |$)", RUNS, "prints its help or its version"),
    (rf"{CLI} serve\b", LONG, "serves until stopped (tests/test_quickstart.py runs the README's)"),
    (rf"{CLI} check-pod-admission\b", REMOTE, "creates dry-run pods through the API server"),
    (rf"{CLI} .*--(kubeconfig|context|url)\b", REMOTE, "reads a live cluster, or asks a running extender"),
    (rf"{CLI} replay captures\b", REMOTE, "captures are what an extender serving a cluster wrote"),
    (rf"{CLI} \S+ .*--cluster-file nodes\.yaml\b", REMOTE, "nodes.yaml is what kubectl get nodes wrote"),
    (rf"{CLI} {OFFLINE} .*--cluster-file ", RUNS, "decides against a cluster file"),
    (rf"{CLI} (check|replay) ", RUNS, "local files (check skips node checks; replay: the captured state)"),
    (rf"{CLI} (explain|classes|audit|node-template)\b", REMOTE, "reads the live cluster (no --cluster-file)"),
    # Python.
    (r"\.venv/bin/python bench/", LONG, "a benchmark: minutes each, measured by hand into BENCHMARKS.md"),
    (r"\.venv/bin/python deploy/components/monitoring/generate_dashboard\.py", RUNS, "builds the dashboard"),
    (r"\.venv/bin/python -c ", RUNS, "a one-line script on local files"),
    (r"python3 -c 'while True: pass'", LONG, "a busy neighbour for the flaky-test hunt, until killed"),
    (r"\.venv/bin/(pytest|ruff|mypy|lint-imports)\b", LONG, "the developer's own suite"),
    (r"(python3 -m venv|python3 -m pip install|\.venv/bin/pip install)\b", REMOTE, "installs from PyPI"),
    (r"(uv|go install|setup-envtest)\b", REMOTE, "downloads tools or the control plane's binaries"),
    # Kubernetes, Helm, certificates, Prometheus.
    (r"kubectl kustomize\b", RUNS, "renders local manifests"),
    (r"(xargs( -\S+)* )?kubectl\b", REMOTE, "talks to the cluster (kubectl runtimeclass, the plugin, too)"),
    (r"helm (template|lint)\b", RUNS, "renders or lints the chart of the repository"),
    (r"helm (install|upgrade|uninstall|pull)\b", REMOTE, "the cluster, or the chart's registry"),
    (r"openssl (req|x509)\b", RUNS, "makes keys and certificates in the working directory"),
    (r"promtool check rules\b", RUNS, "checks a local rule file"),
    # Servers, registries, cloud services.
    (r"curl\b", REMOTE, "asks a server: the cluster's, or an extender kept running"),
    (r"(docker|aws|gh|cosign|crane)\b", REMOTE, "a registry or a cloud service"),
    # Shell glue: an assignment alone, a loop's header, the tools around the commands.
    (r"[A-Za-z_]\w*=", RUNS, GLUE),
    (r"for \w+ in\b", RUNS, GLUE),
    (r"(echo|printf|diff|sed|grep|cut|head|ls|mktemp|seq|sleep)( |$)", RUNS, GLUE),
    (r"(cd|cp|find|rm|kill|wait|export)( |$)", RUNS, GLUE),
]

# Console sessions that hold commands that run here among others that do not, run as
# written elsewhere (with what cannot be the same on two runs mapped back to the page).
RUN_ELSEWHERE = {
    ("capture-replay.md", "Try it"): "tests/capture/test_capture_replay_docs.py",
}

# Runnable commands whose output a page shows in a block right after their ``sh`` block
# rather than in a ``console`` block. It is compared all the same (test_sh_block_runs);
# the form stays because the test named reads the page in it: when that test reads a
# ``console`` block, the pair becomes one and its entry goes.
SHOWN_BESIDE = {
    (
        "audit.md",
        ".venv/bin/runtimeclass-extender audit --cluster-file deploy/examples/cluster-with-pods.yaml",
    ): "tests/tools/test_audit_command.py",
    (
        "audit.md",
        ".venv/bin/runtimeclass-extender audit --cluster-file deploy/examples/cluster-with-pods.yaml -n vm -o json",
    ): "tests/tools/test_audit_command.py",
    (
        "explain.md",
        ".venv/bin/runtimeclass-extender explain gvisor --cluster-file deploy/examples/cluster.yaml",
    ): "tests/tools/test_explain_command.py",
    (
        "explain.md",
        ".venv/bin/runtimeclass-extender explain gvisor --cluster-file deploy/examples/cluster.yaml -o wide",
    ): "tests/tools/test_explain_command.py",
    (
        "explain.md",
        ".venv/bin/runtimeclass-extender classes --cluster-file deploy/examples/cluster.yaml",
    ): "tests/tools/test_explain_command.py",
    (
        "explain.md",
        ".venv/bin/runtimeclass-extender classes --cluster-file deploy/examples/cluster.yaml -o wide",
    ): "tests/tools/test_explain_command.py",
    (
        "predicates.md",
        ".venv/bin/runtimeclass-extender filter deploy/examples/filter-request-gvisor-gpu.json"
        " --cluster-file deploy/examples/cluster.yaml",
    ): "tests/cluster/test_annotations.py",
}

# Run by the shell itself: no program to find on PATH.
BUILTINS = frozenset({"echo", "printf", "cd", "export", "kill", "wait", "for"})
OUTPUT_LANGUAGES = frozenset({"", "text", "json", "yaml"})


def classify(command: Command) -> tuple[str, str, str] | None:
    """The rule that classifies ``command``: the first whose pattern matches."""
    return next((rule for rule in RULES if re.match(rule[0], command.text)), None)


def runs_here(command: Command) -> bool:
    rule = classify(command)
    return rule is not None and rule[1] == RUNS


def is_glue(command: Command) -> bool:
    rule = classify(command)
    return rule is not None and rule[2] == GLUE


def _name(path: Path) -> str:
    return str(path.relative_to(REPO))


# --- what the docs hold ------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    """The ``console`` blocks under one heading of a page: one terminal session."""

    page: Path
    section: str
    blocks: tuple[Block, ...]
    files: dict[str, str]  # the files the page shows before its first block

    @property
    def steps(self) -> list[Step]:
        return [step for block in self.blocks for step in transcript(block.body)]

    @property
    def commands(self) -> list[Command]:
        return [command for step in self.steps for command in commands(step.command)]

    @property
    def runs(self) -> bool:
        return all(runs_here(command) for command in self.commands)

    @property
    def id(self) -> str:
        return f"{_name(self.page)}:{self.blocks[0].line}"


@dataclass(frozen=True)
class Script:
    """An ``sh`` block: the statements of it that run here."""

    block: Block
    files: dict[str, str]

    @property
    def statements(self) -> list[Statement]:
        return [s for s in statements(self.block.body) if all(runs_here(c) for c in s.commands)]

    @property
    def runs(self) -> bool:
        """Whether the block runs: all of it runs here, or some of it that is more than
        shell glue does (a variable alone is not worth running)."""
        here = self.statements
        whole = len(here) == len(statements(self.block.body))
        return whole or any(not is_glue(c) for s in here for c in s.commands)

    @property
    def shown(self) -> list[str] | None:
        """The lines of the output block right after this one (blank lines between), as
        a page shows a command's output outside a ``console`` block; None without one."""
        lines = self.block.page.read_text(encoding="utf-8").splitlines()
        end = self.block.line + len(self.block.body.splitlines())  # the closing fence
        rest = [line.removeprefix(self.block.indent) for line in lines[end + 1 :]]
        while rest and not rest[0].strip():
            rest.pop(0)
        if rest and rest[0].startswith("```"):
            body = list(itertools.takewhile(lambda line: not line.startswith("```"), rest[1:]))
            output = rest[0][3:].strip() in OUTPUT_LANGUAGES and not shown_file("\n".join(body) + "\n")
            return body if output else None
        indented = list(itertools.takewhile(lambda line: line.startswith("    ") or not line.strip(), rest))
        while indented and not indented[-1].strip():
            indented.pop()
        return [line.removeprefix("    ") for line in indented] or None

    @property
    def id(self) -> str:
        return f"{_name(self.block.page)}:{self.block.line}"


def _shell_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page) if block.language in SHELL_LANGUAGES]


def _before(page_blocks: list[Block], block: Block) -> dict[str, str]:
    return shown_files(b for b in page_blocks if b.line < block.line)


def _sessions() -> list[Session]:
    found: list[Session] = []
    for page in PAGES:
        page_blocks = blocks(page)
        by_section: dict[int, list[Block]] = {}
        for block in page_blocks:
            if block.language == "console":
                by_section.setdefault(block.section_line, []).append(block)
        for console in by_section.values():
            found.append(Session(page, console[0].section, tuple(console), _before(page_blocks, console[0])))
    return found


def _scripts() -> list[Script]:
    found: list[Script] = []
    for page in PAGES:
        page_blocks = blocks(page)
        for block in page_blocks:
            if block.language in SHELL_LANGUAGES and block.language != "console":
                found.append(Script(block, _before(page_blocks, block)))
    return found


def _all_commands() -> list[tuple[Block, Command]]:
    found: list[tuple[Block, Command]] = []
    for block in _shell_blocks():
        if block.language == "console":
            script = "\n".join(step.command for step in transcript(block.body))
        else:
            script = block.body
        found.extend((block, command) for command in commands(script))
    return found


SESSIONS = [session for session in _sessions() if session.runs]
SCRIPTS = [script for script in _scripts() if script.runs]


# --- running -----------------------------------------------------------------------------


def _require(programs: set[str]) -> None:
    """Skip without these programs on PATH, except under CI, which installs them: fail."""
    missing = sorted(program for program in programs if shutil.which(program) is None)
    if missing:
        message = f"not on PATH: {', '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI installs them, so there they must be", pytrace=False)
        pytest.skip(message)


def _programs(found: list[Command]) -> set[str]:
    """The programs ``found`` run from PATH (the shell, and not the virtual environment's)."""
    return {"bash"} | {
        command.words[0]
        for command in found
        if command.words[0] not in BUILTINS
        and not command.words[0].startswith(".venv/bin/")
        and not re.match(r"[A-Za-z_]\w*=", command.words[0])
    }


def _here(text: str) -> str:
    """``text`` with ``.venv/bin/`` as the directory of the Python running the tests."""
    return re.sub(r"(?<![\w./-])\.venv/bin/", lambda _: f"{shlex.quote(str(BIN))}/", text)


def _workspace(tmp_path: Path, files: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A copy of the repository in ``tmp_path`` with the files a page shows, and the
    environment to run in it."""
    root = tmp_path / "repository"
    root.mkdir()
    for entry in sorted(REPO.iterdir()):
        if entry.name.startswith(".") or entry.name.endswith(".egg-info"):
            continue
        if entry.is_dir():
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(entry, root / entry.name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(entry, root / entry.name)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    (tmp_path / "home").mkdir()
    (tmp_path / "tmp").mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RUNTIMECLASS_EXTENDER_", "KUBECONFIG", "XDG_", "HELM_"))
    }
    env.update(
        HOME=str(tmp_path / "home"),
        TMPDIR=str(tmp_path / "tmp"),
        PYTHONUNBUFFERED="1",
        COLUMNS="80",  # argparse wraps its help to the terminal's width: 80 where none
    )
    return root, env


def _run(script: str, cwd: Path, env: dict[str, str]) -> str:
    """What ``script`` printed, standard error merged into standard output."""
    process = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        # End the shell and whatever it started: the session it leads.
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"still running after {TIMEOUT_SECONDS} s:\n{script}\n{output}")
    return output


# --- the classification ------------------------------------------------------------------


def test_every_command_is_classified() -> None:
    unclassified = [
        f"{_name(block.page)}:{block.line}: {command.text}"
        for block, command in _all_commands()
        if classify(command) is None
    ]
    assert unclassified == [], "add a rule to RULES for each:\n" + "\n".join(unclassified)


def test_the_rules_classify_as_the_docs_need() -> None:
    """Some commands of each kind, and the order of the rules for the program."""

    def rule(text: str) -> str:
        found = classify(commands(text)[0])
        assert found is not None, text
        return found[1]

    cli = ".venv/bin/runtimeclass-extender"
    assert rule(f"{cli} serve --help") == RUNS
    assert rule(f"{cli} serve --cluster-file deploy/examples/cluster.yaml") == LONG
    assert rule(f"{cli} explain gvisor --cluster-file deploy/examples/cluster.yaml") == RUNS
    assert rule(f"{cli} explain gvisor") == REMOTE
    assert rule(f"{cli} check deploy/ --kubeconfig k") == REMOTE
    assert rule(f"{cli} check -") == RUNS
    assert rule(f"{cli} replay captures/ --cluster-file edited-cluster.yaml") == REMOTE
    assert rule(f'{cli} replay "$dir/captures"') == RUNS
    assert rule("kubectl kustomize deploy/overlays/tls") == RUNS
    assert rule("kubectl runtimeclass explain gvisor") == REMOTE
    assert rule("helm template r deploy/helm/runtimeclass-extender") == RUNS
    assert rule("helm upgrade --install r deploy/helm/runtimeclass-extender") == REMOTE
    assert rule(".venv/bin/python bench/filter_bench.py --quick") == LONG
    assert rule('dir="$(mktemp -d)"') == RUNS
    assert rule("curl -s http://127.0.0.1:8888/filter") == rule("uv pip compile x") == REMOTE


def test_shell_reading_finds_commands_in_every_position() -> None:
    script = (
        "# a comment line\n"
        'dir="$(mktemp -d)" && X=1 .venv/bin/runtimeclass-extender check - <in.yaml >"$dir/out" 2>&1 &\n'
        "until curl -sf http://h/readyz; do sleep 0.2; done\n"
        "openssl x509 -req -in a.csr \\\n  -extfile <(printf 'x=(y)\\n')   # a trailing comment (z)\n"
        "for f in $(cd d && find . -type f); do\n"
        "  cp \"$f\" 'e/$f' | head -c 40; echo\n"
        "done\n"
        "(cd deploy; kubectl get pods -o jsonpath='{.items[0]}')\n"
    )
    found = statements(script)
    assert [statement.text.splitlines()[0] for statement in found] == [
        'dir="$(mktemp -d)" && X=1 .venv/bin/runtimeclass-extender check - <in.yaml >"$dir/out" 2>&1 &',
        "until curl -sf http://h/readyz; do sleep 0.2; done",
        "openssl x509 -req -in a.csr \\",
        "for f in $(cd d && find . -type f); do",
        "(cd deploy; kubectl get pods -o jsonpath='{.items[0]}')",
    ]
    assert [[command.text for command in statement.commands] for statement in found] == [
        ['dir="$(mktemp -d)"', ".venv/bin/runtimeclass-extender check -", "mktemp -d"],
        ["curl -sf http://h/readyz", "sleep 0.2"],
        ["openssl x509 -req -in a.csr -extfile <(printf 'x=(y)\\n')", "printf 'x=(y)\\n'"],
        [
            "for f in $(cd d && find . -type f)",
            "cp \"$f\" 'e/$f'",
            "head -c 40",
            "echo",
            "cd d",
            "find . -type f",
        ],
        ["cd deploy", "kubectl get pods -o jsonpath='{.items[0]}'"],
    ]


def test_a_console_block_is_commands_and_what_they_print() -> None:
    body = "$ a \\\n    --b\nout 1\n\n$ echo $?\n0\n$ c\n"
    assert transcript(body) == [Step("a \\\n    --b", ("out 1", "")), Step("echo $?", ("0",)), Step("c", ())]
    with pytest.raises(AssertionError, match="output before any command"):
        transcript("out\n$ a\n")


def test_shown_output_matches_line_for_line_with_rows_left_out() -> None:
    assert output_matches(["a", "b  "], ["a  ", "b"])
    assert not output_matches(["a", "b"], ["a", "b", "c"])
    assert output_matches(["a", ELLIPSIS], ["a", "b", "c"])
    assert output_matches(["a", ELLIPSIS, "z"], ["a", "b", "z"])
    assert not output_matches(["a", ELLIPSIS], ["a"])  # "..." leaves out one line or more
    assert not output_matches(["a.c"], ["abc"])
    assert output_matches([], [])


def test_the_docs_run_examples_of_each_form() -> None:
    """The tests below are parametrized over what the docs hold: with none found (a
    changed fence, a parser that misses them) they would run zero times and pass."""
    steps = [step for session in SESSIONS for step in session.steps]
    assert len(SESSIONS) >= 3 and len(steps) >= 10, [session.id for session in SESSIONS]
    assert len(SCRIPTS) >= 8, [script.id for script in SCRIPTS]
    program = [c for s in SCRIPTS for st in s.statements for c in st.commands if re.match(CLI, c.text)]
    assert len(program) >= 6, program


def test_console_sessions_not_run_here_are_run_elsewhere() -> None:
    """A terminal session with a command that cannot run here is not run: the commands
    in it that could may need what that one made. Where it holds commands that run here
    other than glue, another test runs it as written."""
    not_run = {
        (session.page.name, session.section)
        for session in _sessions()
        if not session.runs and any(runs_here(c) and not is_glue(c) for c in session.commands)
    }
    assert not_run == set(RUN_ELSEWHERE)
    for (page, _), test in RUN_ELSEWHERE.items():
        assert page in (REPO / test).read_text(encoding="utf-8"), test


def test_outputs_of_commands_that_run_here_are_shown_in_console_blocks() -> None:
    """A page that shows what a runnable command prints shows it in a ``console`` block
    (the command, then its output); ``SHOWN_BESIDE`` lists the ones still shown in a block
    after their ``sh`` block, with the test that reads them in that form."""
    beside = {(script.block.page.name, script.block.body.strip()) for script in SCRIPTS if script.shown}
    assert beside == set(SHOWN_BESIDE)
    for (page, _), test in SHOWN_BESIDE.items():
        assert page in (REPO / test).read_text(encoding="utf-8"), test


# --- the examples, run -------------------------------------------------------------------


@pytest.mark.parametrize("session", SESSIONS, ids=lambda session: session.id)
def test_console_session_prints_what_the_page_shows(session: Session, tmp_path: Path) -> None:
    _require(_programs(session.commands))
    root, env = _workspace(tmp_path, session.files)
    steps = session.steps
    output = _run(with_status_lines(_here(step.command) for step in steps), root, env)
    printed = split_by_status_lines(output)
    assert len(printed) == len(steps), output
    differences = []
    for step, (lines, _) in zip(steps, printed, strict=True):
        if not output_matches(step.shown, lines):
            diff = difflib.unified_diff(step.shown, lines, "shown", "printed", lineterm="")
            differences.append(f"$ {step.command}\n" + "\n".join(diff))
    assert not differences, "\n\n".join(differences)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda script: script.id)
def test_sh_block_runs(script: Script, tmp_path: Path) -> None:
    statements = script.statements
    _require(_programs([command for statement in statements for command in statement.commands]))
    root, env = _workspace(tmp_path, script.files)
    source = "set -o pipefail\n" + with_status_lines(_here(statement.text) for statement in statements)
    output = _run(source, root, env)
    printed = split_by_status_lines(output)
    assert len(printed) == len(statements), output
    failed = []
    for statement, (lines, status) in zip(statements, printed, strict=True):
        answers = {0, 1} if any(re.match(CLI, c.text) for c in statement.commands) else {0}
        if status not in answers:
            failed.append(f"{statement.text}\nexit status {status}:\n" + "\n".join(lines[-40:]))
    assert not failed, "\n\n".join(failed)
    shown = script.shown
    if shown is not None:  # the output of its one command, in the block after it
        assert len(printed) == 1, "output shown after several commands: show each in a console block"
        ((lines, _),) = printed
        diff = "\n".join(difflib.unified_diff(shown, lines, "shown", "printed", lineterm=""))
        assert output_matches(shown, lines), f"{script.block.body}{diff}"
