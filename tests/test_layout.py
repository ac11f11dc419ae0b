"""The layering import-linter cannot state: only extender.http and extender.cli may
import aiohttp's web framework (import-linter's contracts name no external
subpackages). The other contracts are in pyproject.toml and run as ``lint-imports``."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.paths import REPO

ALLOWED = ("extender/http/", "extender/cli.py")


def _imports_aiohttp_web(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "aiohttp"
            and any(alias.name == "web" for alias in node.names)
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiohttp.web"):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith("aiohttp.web") for a in node.names):
            return True
    return False


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (REPO / "extender").rglob("*.py") if not str(p.relative_to(REPO)).startswith(ALLOWED)),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_only_http_and_cli_import_aiohttp_web(path: Path) -> None:
    assert not _imports_aiohttp_web(path), f"{path.relative_to(REPO)} imports aiohttp.web"


def test_the_check_sees_an_import() -> None:
    assert _imports_aiohttp_web(REPO / "extender" / "http" / "app.py")


# The tests' own layout (docs/development.md): helpers only in tests/support/, fixtures
# registered once in tests/conftest.py, every test folder a package (so two folders may
# hold a test module of the same name, and tests/http/ never shadows the stdlib's http).
TEST_MODULES = sorted((REPO / "tests").rglob("*.py"))


@pytest.mark.parametrize("path", TEST_MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_test_imports_conftest_or_registers_plugins(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert "conftest" not in (node.module or ""), f"{path.name} imports from conftest"
        if isinstance(node, ast.Assign) and path.name != "conftest.py":
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            assert "pytest_plugins" not in names, f"{path.name} sets pytest_plugins"


def test_every_test_folder_is_a_package() -> None:
    folders = {p.parent for p in TEST_MODULES}
    assert [f for f in folders if not (f / "__init__.py").is_file()] == []


def test_every_test_data_path_is_inside_the_repository() -> None:
    """A fresh clone has everything the tests read (nothing skipped for data kept beside it)."""
    constants = {name: value for name, value in vars(paths).items() if isinstance(value, Path)}
    assert "KUBE_SCHEDULER_FIXTURES" in constants
    for name, path in constants.items():
        assert path.is_relative_to(REPO), f"{name} = {path} is outside {REPO}"
        assert path.exists(), f"{name} = {path} is missing"
    # The captured requests come with the README that says how they were captured.
    assert (paths.KUBE_SCHEDULER_FIXTURES / "README.md").is_file()


def test_the_server_loads_no_kubernetes_client_until_it_needs_one() -> None:
    """Importing serve's wiring loads none of kubernetes-asyncio: its election alone pulls
    in the whole generated API client (about 35 MB resident), and a serve without
    --leader-elect (a cluster file, or a live cluster) must not pay for it."""
    code = (
        "import sys, extender.http.serve\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes_asyncio'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]", done.stdout[:500]


# A docstring's pointer to a page's section: docs/<page>.md ("<its heading>").
SECTION_POINTER = re.compile(r'docs/([\w-]+\.md) \("([^"]+)"')


def test_every_pointer_of_the_code_to_a_docs_section_names_a_heading_there() -> None:
    """The leader's modules pointed to a heading "Leader actors" that did not exist."""
    missing = []
    for path in sorted((REPO / "extender").rglob("*.py")):
        for page, heading in SECTION_POINTER.findall(" ".join(path.read_text(encoding="utf-8").split())):
            text = (REPO / "docs" / page).read_text(encoding="utf-8")
            if not re.search(rf"^#+ {re.escape(heading)}\s*$", text, re.MULTILINE):
                missing.append(f"{path.relative_to(REPO)}: docs/{page} ({heading})")
    assert missing == []


def test_no_module_of_the_leader_package_is_over_400_lines() -> None:
    """Each a job of its own (the queue of keys, its backoff, the refusal, the admission
    of writes, the results): the queue was 542 lines of two jobs."""
    long = {
        str(path.relative_to(REPO)): lines
        for path in sorted((REPO / "extender" / "leader").glob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}
