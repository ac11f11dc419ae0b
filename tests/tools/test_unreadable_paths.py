"""A path that is no file, where a command reads one: said in words (``PATH: is a
directory: give a file``, ``PATH: no such file or directory``), not Python's
``[Errno 21] Is a directory: 'PATH'``, for every command and every path it reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extender.capture.format import CAPTURE_API_VERSION, CAPTURE_KIND
from extender.cli import main
from tests.support.paths import EXAMPLE_CLUSTER, REPO

PROG = "runtimeclass-extender"
CLUSTER = ["--cluster-file", str(EXAMPLE_CLUSTER)]


# Every command line that names a file, with {path} where it goes; the prefix the
# command puts before the path.
READS_A_FILE = {
    "serve --cluster-file": (["serve", "--port", "0", "--cluster-file", "{path}"], ""),
    "serve --config": (["serve", "--config", "{path}"], "config file "),
    "filter REQUEST": (["filter", "{path}", *CLUSTER], ""),
    "filter --cluster-file": (
        ["filter", str(REPO / "deploy/examples/filter-request.json"), "--cluster-file", "{path}"],
        "",
    ),
    "explain --cluster-file": (["explain", "gvisor", "--cluster-file", "{path}"], ""),
    "explain --pod": (["explain", "--pod", "{path}", *CLUSTER], ""),
    "explain --policy-file": (["explain", "gvisor", *CLUSTER, "--policy-file", "{path}"], ""),
    "classes --cluster-file": (["classes", "--cluster-file", "{path}"], ""),
    "audit --cluster-file": (["audit", "--cluster-file", "{path}"], ""),
    "replay --cluster-file": (["replay", "{captures}", "--cluster-file", "{path}"], ""),
    "check --cluster-file": (
        ["check", str(REPO / "deploy/examples/runtimeclasses.yaml"), "--cluster-file", "{path}"],
        "",
    ),
    "node-template --node": (["node-template", "--node", "{path}", *CLUSTER], ""),
    "node-template --cluster-file": (["node-template", "--label", "a=b", "--cluster-file", "{path}"], ""),
}


def capture_directory(tmp_path: Path) -> Path:
    """A capture directory with one capture replay can read."""
    directory = tmp_path / "captures"
    directory.mkdir()
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"runtimeClassName": "gvisor"}}
    capture = {
        "apiVersion": CAPTURE_API_VERSION,
        "kind": CAPTURE_KIND,
        "request": {"Pod": pod, "Nodes": None, "NodeNames": ["n1"]},
        "response": {"NodeNames": ["n1"]},
        "state": {"runtimeClassName": "gvisor", "runtimeClass": None, "nodes": {"n1": {"name": "n1"}}},
    }
    (directory / "capture-1.json").write_text(json.dumps(capture))
    return directory


@pytest.mark.parametrize("case", list(READS_A_FILE))
@pytest.mark.parametrize("given", ["directory", "missing"])
def test_a_path_that_is_no_file_is_said_in_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str, given: str
) -> None:
    """Not "[Errno 21] Is a directory: 'PATH'" or "[Errno 2] No such file or directory"."""
    argv, prefix = READS_A_FILE[case]
    path = tmp_path / "a-directory" if given == "directory" else tmp_path / "absent.yaml"
    if given == "directory":
        path.mkdir()
    captures = capture_directory(tmp_path)
    words = [w.replace("{path}", str(path)).replace("{captures}", str(captures)) for w in argv]
    status = main(words)
    out, err = capsys.readouterr()
    reason = "is a directory: give a file" if given == "directory" else "no such file or directory"
    assert (status, out) == (2, "")
    assert err == f"{PROG}: error: {prefix}{path}: {reason}\n"
    assert "Errno" not in err


def test_check_of_a_path_that_is_not_there(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """check walks a directory; one that is not there is no such file or directory."""
    status = main(["check", str(tmp_path / "nonexist") + "/"])
    err = capsys.readouterr().err.splitlines()
    assert status == 2
    assert err[1:] == [f"error: {tmp_path / 'nonexist'}/: no such file or directory"]


def test_replay_of_a_directory_that_is_not_there(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status = main(["replay", str(tmp_path / "nonexist")])
    assert status == 2
    assert (
        capsys.readouterr().err
        == f"{PROG}: error: capture directory {tmp_path / 'nonexist'}: no such file or directory\n"
    )
