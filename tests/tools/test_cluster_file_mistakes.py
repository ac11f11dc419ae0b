"""A cluster file with mistakes: every one at once, a line each in check's words (the
item, the object, the field, what is wrong), for every command that reads a cluster
file, ``serve`` included (it refuses to start, with no trace).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from extender.cli import main
from extender.cluster.file_source import MAX_MISTAKES_SHOWN
from extender.tools.commands import kubectl_main
from tests.support.docs import page, section
from tests.support.paths import REPO
from tests.tools.test_unreadable_paths import capture_directory

PROG = "runtimeclass-extender"
BIN = Path(sys.executable).parent


# Five mistakes (and good objects between them), as a hand-written cluster file has them.
FIVE_MISTAKES = """\
apiVersion: v1
kind: List
items:
- kind: Node
  metadata: {name: n1, labels: {ready: true}}
- {kind: Node, metadata: {name: n2}}
- kind: Node
  metadata: {name: n3}
  spec:
    taints: [{key: k, effect: Bogus}]
- {kind: RuntimeClass, metadata: {name: r1}, handler: 5}
- kind: RuntimeClass
  metadata: {name: r2}
  handler: runsc
  scheduling: {nodeselector: {a: b}, tolerations: [{operator: exists}]}
- {kind: RuntimeClass, metadata: {name: gvisor}, handler: runsc}
"""

FIVE_MISTAKES_SAID = [
    "document 0, item 0: node/n1: metadata.labels[ready]: Invalid value: true: must be a string",
    'document 0, item 2: node/n3: spec.taints[0].effect: Unsupported value: "Bogus": supported values: '
    '"NoSchedule", "PreferNoSchedule", "NoExecute"',
    "document 0, item 3: runtimeclass/r1: handler: Invalid value: 5: must be a string",
    "document 0, item 4: runtimeclass/r2: scheduling.nodeselector: unknown field (did you mean nodeSelector?)",
    'document 0, item 4: runtimeclass/r2: scheduling.tolerations[0].operator: Unsupported value: "exists": '
    'supported values: "Equal", "Exists", "Lt", "Gt" (did you mean "Exists"?)',
]

# Every command that reads a cluster file, with {path} where it goes.
READS_A_CLUSTER_FILE = {
    "serve": ["serve", "--port", "0", "--cluster-file", "{path}"],
    "filter": ["filter", str(REPO / "deploy/examples/filter-request.json"), "--cluster-file", "{path}"],
    "explain": ["explain", "gvisor", "--cluster-file", "{path}"],
    "classes": ["classes", "--cluster-file", "{path}"],
    "audit": ["audit", "--cluster-file", "{path}"],
    "replay": ["replay", "{captures}", "--cluster-file", "{path}"],
    "check": ["check", str(REPO / "deploy/examples/runtimeclasses.yaml"), "--cluster-file", "{path}"],
    "node-template": ["node-template", "--label", "a=b", "--cluster-file", "{path}"],
}


@pytest.mark.parametrize("command", list(READS_A_CLUSTER_FILE))
def test_every_mistake_of_a_cluster_file_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    """Before, the first mistake alone, in pydantic's words ("Node.metadata.labels.ready:
    Input should be a valid string"): five runs to fix five mistakes. serve refuses to
    start on them alike, with no trace."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(FIVE_MISTAKES)
    captures = capture_directory(tmp_path)
    argv = [
        w.replace("{path}", str(cluster)).replace("{captures}", str(captures))
        for w in READS_A_CLUSTER_FILE[command]
    ]
    status = main(argv)
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert err.splitlines() == [f"{PROG}: error: {cluster}: {said}" for said in FIVE_MISTAKES_SAID]
    assert "Input should" not in err and "Traceback" not in err


def test_the_kubectl_plugin_lists_them_alike(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(FIVE_MISTAKES)
    assert kubectl_main(["classes", "--cluster-file", str(cluster)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"kubectl runtimeclass: error: {cluster}: {said}" for said in FIVE_MISTAKES_SAID
    ]


def test_serve_refuses_a_cluster_file_with_mistakes_from_the_console(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(FIVE_MISTAKES)
    done = subprocess.run(
        [str(BIN / PROG), "serve", "--port", "0", "--cluster-file", str(cluster), "--log-format", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [f"{PROG}: error: {cluster}: {said}" for said in FIVE_MISTAKES_SAID]


def test_a_file_of_many_mistakes_shows_the_first_and_counts_the_rest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = tmp_path / "cluster.yaml"
    nodes = "".join(
        f"- {{kind: Node, metadata: {{name: n{i}, labels: {{ready: true}}}}}}\n" for i in range(100)
    )
    cluster.write_text(f"kind: List\nitems:\n{nodes}")
    assert main(["classes", "--cluster-file", str(cluster)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        *(
            f"{PROG}: error: {cluster}: document 0, item {i}: node/n{i}: metadata.labels[ready]: Invalid value: "
            "true: must be a string"
            for i in range(MAX_MISTAKES_SHOWN)
        ),
        f"{PROG}: error: {cluster}: and {100 - MAX_MISTAKES_SHOWN} more mistakes",
    ]


def test_check_md_shows_what_a_cluster_file_with_mistakes_prints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/check.md ("Cluster files are as strict"): the lines it shows, from the file
    they come from."""
    shown = [
        line.strip()
        for line in section(page("check.md"), "## Cluster files are as strict").splitlines()
        if line.startswith(f"    {PROG}: error: cluster.yaml: ")
    ]
    (tmp_path / "cluster.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {kind: Node, metadata: {name: n1, labels: {ready: true}}}\n"
        "- {kind: Node, metadata: {name: n2}}\n"
        "- {kind: RuntimeClass, metadata: {name: gvisor}, handler: runsc}\n"
        "- {kind: RuntimeClass, metadata: {name: gvisor-typo}, handler: runsc, scheduling: {nodeselector: {a: b}}}\n"
        "- {kind: RuntimeClass, metadata: {name: gvisor}, handler: runsc}\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["classes", "--cluster-file", "cluster.yaml"]) == 2
    assert capsys.readouterr().err.splitlines() == shown
    assert len(shown) == 3
