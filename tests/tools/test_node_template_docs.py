"""docs/autoscaling.md, run as written: its ``node-template`` transcript against the
RuntimeClasses of deploy/examples (standard output and standard error merged, in order),
and its sentence for a template that claims a class its nodes cannot run."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.docs import fenced_blocks
from tests.support.paths import DOCS, EXAMPLES, REPO

PAGE = DOCS / "autoscaling.md"
BIN = Path(sys.executable).parent


def _run(words: list[str]) -> subprocess.CompletedProcess[str]:
    words[0] = str(BIN / Path(words[0]).name)
    return subprocess.run(
        words, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=60
    )


def test_the_node_template_transcript_is_what_the_command_prints() -> None:
    """Each ``$`` command of the page's transcript, and the lines it shows after it."""
    (block,) = fenced_blocks(PAGE.read_text(encoding="utf-8"), "console")
    commands = [chunk.splitlines() for chunk in ("\n" + block).split("\n$ ")[1:]]
    assert len(commands) == 2
    for command, *expected in commands:
        assert command.startswith(".venv/bin/runtimeclass-extender node-template --cluster-file deploy/examples/")
        done = _run(shlex.split(command))
        assert done.returncode == 0
        assert done.stdout.splitlines() == expected


def test_the_claim_sentence_is_what_the_command_prints(tmp_path: Path) -> None:
    node = tmp_path / "node.yaml"
    node.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": "template",
                    "labels": {"runtimeclass.node-restriction.kubernetes.io/kata-containers": "true"},
                },
            }
        )
    )
    done = _run(
        [
            ".venv/bin/runtimeclass-extender",
            "node-template",
            "--cluster-file",
            str(EXAMPLES / "runtimeclasses.yaml"),
            "--node",
            str(node),
        ]
    )
    assert done.returncode == 1
    (shown,) = [
        line.strip()
        for line in PAGE.read_text(encoding="utf-8").splitlines()
        if "must not carry" in line and line.startswith("    ")
    ]
    assert shown in done.stdout.splitlines()
